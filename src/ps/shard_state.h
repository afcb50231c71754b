// One variable shard of a parameter server, without gRPC: its value, its own optimizer (so its slots live beside
// it), and what makes a push count once. A push applies its gradient at once (asynchronous training) unless its step
// id was applied before (within the window of the last `step_window` ids, see ParameterServer::kStepWindow) or, when
// it names a synchronous round, is summed into the round's pending gradient; the push that brings the round to its
// size distinct step ids applies their mean as one update. A sparse push (rows given) updates as a dense gradient
// that is zero outside its rows would; an asynchronous one is scattered into a dense buffer made once per shard.
// A push may name the learning rate to apply at (the chief's, which ReduceLROnPlateau lowers): the shard's optimizer
// takes it and keeps it, so a later push naming none, a save and a copy for a backup use the rate last applied.
// src/ps/server.cc serves these over gRPC; tests/ps/shard_state_test.cc tests them directly.
// Errors: InvalidArgument, with the same messages the ps has always sent ("Push <name>: ..."), and no location: the
// server sends them to its clients as they are.
// Thread-safety: every method may be called from any thread at once; one mutex per shard orders them.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "strata/optim/optimizer.h"
#include "strata/ps/sync_round.h"
#include "strata/tensor.h"
#include "strata/variable.h"

namespace strata::ps {

class ShardState {
 public:
  // Shard `name` with value `initial` (float32, rank >= 1; used as given, not copied), updated by `optimizer`.
  // `optimizer_key` identifies the optimizer for create-again checks and saves (the server keeps its serialized
  // spec there); `step_window` >= 1 is how many applied step ids it remembers.
  ShardState(std::string name, const Tensor& initial, std::shared_ptr<optim::Optimizer> optimizer,
             std::string optimizer_key, int64_t step_window);
  ShardState(const ShardState&) = delete;
  ShardState& operator=(const ShardState&) = delete;

  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  const std::string& optimizer_key() const { return optimizer_key_; }

  struct PushResult {
    bool taken = false;   // applied, or summed into its round; false: a repeat, dropped
    int64_t applied = 0;  // pushes applied by this one: 1 at once, a round's size when it completed the round
    int64_t version = 0;  // updates applied to the shard so far
  };
  // Applies `gradient` (float32, the shard's shape; with `rows`, [rows.size(), ...] for those rows of axis 0,
  // repeated rows adding up) as the push of step `step_id` ("" never repeats) in `round` (undefined: none), at
  // `learning_rate` (> 0: that rate, which the shard keeps as its own from then on; 0: the shard's own rate; a
  // round applies at the rate its pushes name).
  // InvalidArgument when a round's push has no step id or a negative size, when the gradient or a row does not fit
  // the shard, when the round's size or learning rate differs from its earlier pushes', or when the learning rate is
  // negative or not finite. A repeat is dropped before its shape is checked. `gradient` is read before push returns
  // (a round keeps a copy).
  PushResult push(const Tensor& gradient, std::span<const int64_t> rows, const std::string& step_id,
                  const SyncRound& round = {}, double learning_rate = 0);

  struct Pulled {
    Tensor value;  // a copy: the whole shard, or the rows asked for, in that order
    int64_t version = 0;
  };
  // The shard (`rows` empty) or rows `rows` of it; InvalidArgument naming a row outside [0, rows).
  Pulled pull(std::span<const int64_t> rows) const;
  // The shard's value becomes a copy of `value` (float32, the shard's shape; else InvalidArgument); its optimizer's
  // slots and step count, its learning rate, version and step ids stay as they are, and a round pending keeps its
  // sum (the chief writing weights back once training ended: EarlyStopping's restore_best_weights).
  void assign(const Tensor& value);

  // What a checkpoint holds of the shard, passed to save()'s callback under the shard's lock (nothing is copied).
  struct Saved {
    const Tensor& value;
    std::vector<std::pair<std::string, Tensor>> optimizer_state;  // optim::Optimizer::state of the shard
    int64_t version = 0;
    const std::deque<std::string>& applied_steps;  // oldest first
    double learning_rate = 0;  // the rate the shard applies pushes at now (its optimizer spec's, or the last pushed)
  };
  void save(const std::function<void(const Saved&)>& write) const;
  // Takes back what save() gave (on a shard just made): the version, the step ids (oldest first) and the optimizer's
  // state. InvalidArgument (from optim::Optimizer::load_state) when the state does not fit the optimizer.
  void restore(int64_t version, const std::vector<std::string>& applied_steps,
               const std::vector<std::pair<std::string, Tensor>>& optimizer_state);

  // Step ids remembered to drop repeats (at most step_window).
  int64_t steps_remembered() const;
  // Updates applied to the shard so far (restored with it from a checkpoint).
  int64_t version() const;
  // The rate the shard applies pushes at now.
  double learning_rate() const;

 private:
  // The pushes of one synchronous round taken so far: their gradients summed, their step ids, and the rate they name.
  struct PendingRound {
    int64_t size = 0;
    double learning_rate = 0;
    Tensor sum;
    std::unordered_set<std::string> steps;
  };

  // Applies `gradient` as one update taking steps `steps`, at `learning_rate` when it is > 0 (kept as the shard's
  // rate). REQUIRES: mu_ held.
  void apply(const Tensor& gradient, const std::unordered_set<std::string>& steps, double learning_rate);
  // Remembers `step` as applied, forgetting the oldest ids past the window. REQUIRES: mu_ held.
  void remember(const std::string& step);
  // Whether `step` was applied or waits in `round`'s sum. REQUIRES: mu_ held.
  bool taken(const std::string& step, int64_t round) const;
  // Sums `grad` (dense, the shard's shape) into round `round` as step `step`'s push; the push that completes the
  // round applies its mean at the round's `learning_rate`. Returns the pushes applied. REQUIRES: mu_ held.
  int64_t add_to_round(const SyncRound& round, const std::string& step, Tensor grad, bool borrowed,
                       double learning_rate);

  const std::string name_;
  const Shape shape_;
  const std::string optimizer_key_;
  const int64_t step_window_;
  mutable std::mutex mu_;
  Variable var_;                                 // guarded by mu_ (its value)
  std::shared_ptr<optim::Optimizer> optimizer_;  // guarded by mu_
  // The most recent step_window_ step ids applied, oldest first in step_order_ (the same ids as applied_steps_): an
  // older id is forgotten, so a repeat of it would be applied again. Guarded by mu_.
  std::unordered_set<std::string> applied_steps_;
  std::deque<std::string> step_order_;
  std::map<int64_t, PendingRound> rounds_;  // by round id; a round leaves once applied (not saved). Guarded by mu_.
  int64_t version_ = 0;                     // guarded by mu_
  // The dense gradient an asynchronous sparse push is scattered into, zero between pushes: made once, not per push
  // (a fresh shard-sized buffer per push, freed on the gRPC threads' many heaps, fragmented them until a ps of a
  // 64 MB shard held gigabytes). Guarded by mu_.
  Tensor sparse_gradient_;
};

}  // namespace strata::ps
