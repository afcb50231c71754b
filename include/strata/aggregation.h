// The gradient-aggregation seam: how a distribution strategy's replica context sees gradients.
//
// DESIGN.md keeps `nn` and `optim` below `distribute`: they never include it. Instead, while a replica
// runs, the strategy installs a GradientAggregator on the replica's thread, and
//   - GradientTape::gradient reports each source's gradient the moment it is final (backward order),
//     so a strategy can start reducing a bucket of gradients while backward goes on (PyTorch DDP,
//     Horovod's tensor fusion);
//   - Optimizer::apply_gradients hands its gradients and a GradientApplier to the aggregator, which
//     reduces them across replicas and decides where the update runs: once (variables stored once,
//     CentralStorage) or on each replica's own component (mirrored variables) — TF's merge_call.
// Without an installed aggregator both behave as on one device.
//
// Thread-safety: the installed aggregator is per thread (one per replica thread).
#pragma once

#include <cstddef>
#include <vector>

#include "strata/variable.h"

namespace strata {

// How an optimizer updates variables, in three parts that an aggregator schedules.
class GradientApplier {
 public:
  virtual ~GradientApplier();
  // Whether prepare() has nothing left to do for `vars` (it only reads state).
  virtual bool prepared(const std::vector<Variable>& vars) const = 0;
  // Makes per-variable state (slots for every component). Runs on one thread while no update runs.
  virtual void prepare(const std::vector<Variable>& vars) = 0;
  // Updates component `component` of each variable with its (reduced) gradient; undefined gradients
  // are skipped. Calls for different components may run at the same time on different threads.
  virtual void update(const std::vector<Tensor>& grads, const std::vector<Variable>& vars, int component) = 0;
  // Ends the step (counts it). Runs on one thread after every update of the step.
  virtual void finish() = 0;
};

class GradientAggregator {
 public:
  virtual ~GradientAggregator();
  // GradientTape::gradient brackets each call with begin/end and reports every source (index into
  // `sources`) exactly once, as soon as its gradient is final; `grad` may be undefined (unconnected).
  virtual void begin_gradients(const std::vector<Variable>& sources);
  virtual void gradient_ready(size_t index, const Tensor& grad);
  virtual void end_gradients(const std::vector<Tensor>& grads);
  // Optimizer::apply_gradients on a replica: reduce `grads` (same order as `vars`) across the replicas
  // and run `applier` (prepare if needed, update, finish) as the strategy's variables require.
  virtual void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                               GradientApplier& applier) = 0;
};

// The aggregator installed on the calling thread, or nullptr.
GradientAggregator* current_gradient_aggregator();

// Installs `aggregator` on the calling thread until destroyed (restoring the previous one).
class ScopedGradientAggregator {
 public:
  explicit ScopedGradientAggregator(GradientAggregator* aggregator);
  ~ScopedGradientAggregator();
  ScopedGradientAggregator(const ScopedGradientAggregator&) = delete;
  ScopedGradientAggregator& operator=(const ScopedGradientAggregator&) = delete;

 private:
  GradientAggregator* previous_;
};

}  // namespace strata
