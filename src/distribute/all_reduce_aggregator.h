// AllReduceAggregator: the gradient-aggregation seam (strata/aggregation.h) of the strategies whose replicas sum
// their gradients with a GradientReducer over the strategy's communicator (Mirrored, CentralStorage).
//
// The tape's gradients go into the reducer's buckets as backward reports them. A plain apply_gradients waits for
// the sums, and the last replica to arrive updates the variables once (with every core) in merge_call while the
// others wait. Inside Optimizer::minimize (every replica announces with expect_apply, and the optimizer updates
// element by element) the variables are updated during backward instead: bucket k belongs to local replica
// k mod (this process's replicas), which updates that bucket's variables (every local copy) as soon as its sum is
// in (with one replica per process, as across workers, each process updates all of its own); apply_gradients then
// updates the rest of its buckets and ends the step in merge_call, so no replica reads a variable of the next step
// before its owner wrote it. Whether every replica announced is itself summed in each bucket (the reducer's
// vote), so all replicas take the same path from the same bits. The step's collectives are tagged with the
// optimizer's iterations() (Communicator::set_step), so that a collective timeout says which step each rank was in.
// A GPU replica's buckets are on its GPU (GradientReducer's device) and it never updates during backward: the sums
// are applied in merge_call, where the optimizer updates the first copy on its GPU and copies it to the others.
// Thread-safety: one per replica thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "distribute/gradient_reducer.h"
#include "strata/aggregation.h"
#include "strata/distribute/strategy.h"

namespace strata::distribute::detail {

class AllReduceAggregator final : public GradientAggregator {
 public:
  // `check_variable` throws when apply_gradients is handed a variable the strategy does not own.
  // `compression`: how the gradient buckets travel (comm::AllReduceOptions::compression).
  // `commit_vote` (elastic training): asked once every sum is in, before any variable changes; when it says no
  // (the step did not complete on every worker) apply_gradients throws StepDiscarded and updates nothing. With it
  // no variable is updated during backward.
  AllReduceAggregator(Strategy& strategy, int replica, comm::Communicator& comm, int64_t bytes_per_pack,
                      std::function<void(const Variable&)> check_variable,
                      comm::Compression compression = comm::Compression::kNone,
                      std::function<bool()> commit_vote = nullptr);

  void expect_apply(GradientApplier& applier, const std::vector<Variable>& sources) override;
  void begin_gradients(const std::vector<Variable>& sources) override;
  void gradient_ready(size_t index, const Tensor& grad) override;
  void end_gradients(const std::vector<Tensor>& grads) override;
  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                       GradientApplier& applier) override;

 private:
  // Updates this replica's buckets, in order, as far as their sums are in.
  void update_owned_buckets();

  Strategy& strategy_;
  comm::Communicator& comm_;  // the reducer's: tagged with the step
  const int replica_;         // this local replica
  const int local_replicas_;  // replicas sharing this process's variables: they share the early updates out
  const int voters_;          // ranks of the communicator: all of them must vote for early updates
  const bool on_host_;        // a CPU replica (a GPU replica's buckets stay on its GPU: no updates during backward)
  GradientReducer reducer_;
  std::function<void(const Variable&)> check_variable_;
  std::function<bool()> commit_vote_;
  // Announced by expect_apply for the next tape call.
  GradientApplier* expected_applier_ = nullptr;
  std::vector<uint64_t> expected_ids_;
  // The tape call in progress (or last ended): its sources, and the applier that updates during backward.
  std::vector<Variable> sources_;
  GradientApplier* early_applier_ = nullptr;
  size_t next_owned_ = 0;                     // the next bucket of this replica to update early
  SumWithGradients* side_request_ = nullptr;  // the numbers riding with the tape call in progress (or last ended)
  // The step the next gradient call belongs to: the applier's iterations() when announced or applied, else the
  // last applied step + 1; -1 until an applier said.
  int64_t step_ = -1;
};

}  // namespace strata::distribute::detail
