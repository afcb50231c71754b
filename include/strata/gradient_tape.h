// GradientTape: records ops on Variables and computes gradients, like tf.GradientTape.
//
//   GradientTape tape;                      // recording starts
//   Variable loss = mean(square(matmul(x, w) - y));
//   auto grads = tape.gradient(loss, {w});  // d loss / d w
//
// While a tape is alive and recording on this thread, an op whose input is watched (a trainable
// Variable, when watch_accessed_variables is on; anything passed to `watch`; or the result of another
// recorded op) records how to send the gradient back. `gradient(target, sources)` starts from ones
// shaped like target (so a non-scalar target is differentiated as its sum) and returns one Tensor per
// source: undefined when the source does not influence the target, or zeros with
// UnconnectedGradients::kZero. A non-persistent tape may compute gradients once.
//
// Thread-safety: a tape records ops of the thread that made it; use one tape per thread (replica).
#pragma once

#include <unordered_set>
#include <vector>

#include "strata/variable.h"

namespace strata {

enum class UnconnectedGradients { kNone, kZero };

struct GradientTapeOptions {
  bool persistent = false;
  bool watch_accessed_variables = true;
};

class GradientTape {
 public:
  explicit GradientTape(GradientTapeOptions options = {});
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  // Records ops that take `v` as input even if it is not trainable.
  void watch(const Variable& v);
  std::vector<Tensor> gradient(const Variable& target, const std::vector<Variable>& sources,
                               UnconnectedGradients unconnected = UnconnectedGradients::kNone);
  // Gradient with an explicit seed (output_gradients in TensorFlow), shaped like target.
  std::vector<Tensor> gradient(const Variable& target, const std::vector<Variable>& sources, const Tensor& seed,
                               UnconnectedGradients unconnected = UnconnectedGradients::kNone);

  // Pauses recording on this tape while the returned guard lives (tape.stop_recording()).
  class Pause {
   public:
    explicit Pause(GradientTape& tape);
    ~Pause();
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    GradientTape& tape_;
  };
  Pause stop_recording() { return Pause(*this); }

  // --- used by the op recorder ---
  bool recording() const { return recording_; }
  bool watches(const detail::Node* node) const;
  // True when some live tape on this thread is recording and would watch `v`.
  static bool any_watches(const Variable& v);
  static bool any_recording();

 private:
  GradientTapeOptions options_;
  bool recording_ = true;
  bool used_ = false;
  std::unordered_set<const detail::Node*> watched_;
  std::vector<Variable> watched_alive_;  // keeps watched nodes (and their addresses) alive
};

// Pauses every tape of this thread while alive (like tf.stop_gradient for a whole block).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;
};

}  // namespace strata
