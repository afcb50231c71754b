// The gradient-aggregation seam: how a distribution strategy's replica context sees gradients.
//
// The layering (docs/architecture.md) keeps `nn` and `optim` below `distribute`: they never include it. Instead, while a replica
// runs, the strategy installs a GradientAggregator on the replica's thread, and
//   - GradientTape::gradient reports each source's gradient the moment it is final (backward order),
//     so a strategy can start reducing a bucket of gradients while backward goes on (PyTorch DDP,
//     Horovod's tensor fusion);
//   - Optimizer::apply_gradients hands its gradients and a GradientApplier to the aggregator, which
//     reduces them across replicas and runs the update once per step (TF's merge_call): it writes every
//     component of a mirrored variable, so all copies stay equal and the optimizer keeps one set of slots;
//   - Optimizer::minimize first announces (expect_apply) that the tape's gradients will be applied
//     unchanged, so an aggregator may update each variable as soon as its gradient is reduced, while
//     backward goes on elsewhere (the update overlaps backward, and no reduced copy is kept).
// Without an installed aggregator both behave as on one device.
//
// Thread-safety: the installed aggregator is per thread (one per replica thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "strata/variable.h"

namespace strata {

// How an optimizer updates variables, in three parts that an aggregator schedules.
class GradientApplier {
 public:
  virtual ~GradientApplier();
  // Whether prepare() has nothing left to do for `vars` (it only reads state).
  virtual bool prepared(const std::vector<Variable>& vars) const = 0;
  // Makes per-variable state (slots). Runs on one thread while no update runs.
  virtual void prepare(const std::vector<Variable>& vars) = 0;
  // Updates each variable (every component of it) with its reduced gradient; undefined gradients are
  // skipped. Runs once per step, on one thread.
  virtual void update(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) = 0;
  // Whether a variable's update needs nothing but its own gradient's elements (no clipping by a norm),
  // so that update_summed may run per variable before the other gradients are reduced.
  virtual bool elementwise() const = 0;
  // Updates every component of `var` (prepared) with the gradient parts[0] + parts[1] + ... added in
  // that order; a null part counts as zeros (at least one is not null). Only when elementwise().
  // Calls for different variables of a step may run at the same time on different threads.
  virtual void update_summed(const Variable& var, const std::vector<const float*>& parts) = 0;
  // Ends the step (counts it). Runs on one thread after every update of the step.
  virtual void finish() = 0;
  // The steps ended so far (Optimizer::iterations()), or -1 when unknown (the default). An aggregator tags the
  // step's collectives with it (Communicator::set_step), so that a collective timeout names the step.
  virtual int64_t iterations() const;
};

class GradientAggregator {
 public:
  virtual ~GradientAggregator();
  // Optimizer::minimize: the next gradient call on this thread has `sources` and its gradients go
  // unchanged to apply_gradients with `applier`, which lives until then. Default: nothing.
  virtual void expect_apply(GradientApplier& applier, const std::vector<Variable>& sources);
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
