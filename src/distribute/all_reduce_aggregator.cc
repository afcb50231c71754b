// AllReduceAggregator (all_reduce_aggregator.h): the tape's gradients into the reducer, and the optimizer's update
// once per step, in merge_call or bucket by bucket during backward.
// Thread-safety: one per replica thread; updates during backward touch only the replica's own buckets' variables
// (and their slots), which no other replica reads until the step ends in merge_call.
#include "distribute/all_reduce_aggregator.h"

#include "strata/distribute/multi_worker.h"
#include "strata/error.h"
#include "strata/trace.h"

namespace strata::distribute::detail {

AllReduceAggregator::AllReduceAggregator(Strategy& strategy, int replica, comm::Communicator& comm,
                                         int64_t bytes_per_pack, std::function<void(const Variable&)> check_variable,
                                         comm::Compression compression, std::function<bool()> commit_vote)
    : strategy_(strategy),
      comm_(comm),
      replica_(replica),
      local_replicas_(strategy.num_local_replicas()),
      voters_(comm.size()),
      on_host_(strategy.replica_device(replica).is_cpu()),
      reducer_(
          comm, strategy.name(), bytes_per_pack,
          [id = strategy.id()](const Variable& v) {
            return v.is_model_variable() && v.owner() == id && v.dtype() == DType::kFloat32;
          },
          compression, comm::kDefaultTimeout, strategy.replica_device(replica)),
      check_variable_(std::move(check_variable)),
      commit_vote_(std::move(commit_vote)) {}

void AllReduceAggregator::expect_apply(GradientApplier& applier, const std::vector<Variable>& sources) {
  // Every replica announces (Model::fit's step), so the slots are made once while all of them wait.
  if (!applier.prepared(sources)) strategy_.merge_call(replica_, [&] { applier.prepare(sources); });
  expected_applier_ = &applier;
  expected_ids_ = ids_of(sources);
  step_ = applier.iterations();
}

void AllReduceAggregator::begin_gradients(const std::vector<Variable>& sources) {
  // (On a GPU replica the sums stay on the GPU and the optimizer updates there, all variables at once: no updates
  // during backward, which read the sums through host pointers.)
  const bool announced = expected_applier_ != nullptr && expected_applier_->elementwise() &&
                         expected_ids_ == ids_of(sources) && !commit_vote_ && on_host_;
  early_applier_ = announced ? expected_applier_ : nullptr;
  expected_applier_ = nullptr;
  expected_ids_.clear();
  sources_ = sources;
  next_owned_ = static_cast<size_t>(replica_);
  comm_.set_step(step_);  // the buckets' all-reduces are issued during backward
  // Numbers to sum with this call's gradients (SumWithGradients), when they can ride in an uncompressed bucket.
  side_request_ = SumWithGradients::current();
  if (side_request_ != nullptr && (reducer_.compressed() || side_request_->values().empty())) side_request_ = nullptr;
  reducer_.begin(sources, announced ? 1.0f : 0.0f,
                 side_request_ != nullptr ? side_request_->values() : std::vector<double>{});
}

void AllReduceAggregator::gradient_ready(size_t index, const Tensor& grad) {
  reducer_.add(index, grad);
  if (early_applier_ != nullptr) update_owned_buckets();
}

void AllReduceAggregator::end_gradients(const std::vector<Tensor>&) { reducer_.end(); }

void AllReduceAggregator::update_owned_buckets() {
  const size_t buckets = reducer_.num_buckets();
  for (; next_owned_ < buckets; next_owned_ += static_cast<size_t>(local_replicas_)) {
    if (!reducer_.poll(next_owned_)) return;
    // Every bucket carries the same vote: if one replica did not announce, nobody updates early.
    if (reducer_.votes(next_owned_) != static_cast<float>(voters_)) {
      early_applier_ = nullptr;
      return;
    }
    trace::Span span("compute", "optimizer");
    for (size_t i : reducer_.members(next_owned_)) {
      const Variable& var = sources_[i];
      const Tensor sum = reducer_.reduced(i, var.shape());
      if (sum.defined()) early_applier_->update_summed(var, {sum.data<float>()});
    }
  }
}

void AllReduceAggregator::apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                                          GradientApplier& applier) {
  for (const Variable& v : vars) check_variable_(v);
  step_ = applier.iterations();
  if (!reducer_.matches(grads, vars)) {  // not the gradients the tape just reported (or no tape): reduce them now
    early_applier_ = nullptr;
    expected_applier_ = nullptr;
    side_request_ = nullptr;  // its values rode in the call this one replaces: the requester sums another way
    comm_.set_step(step_);
    reducer_.reduce(grads, vars);
  }
  if (step_ >= 0) ++step_;  // the next gradient call's, unless an applier says otherwise
  {
    trace::Span span("comm", "gradient wait");
    reducer_.wait_all();
  }
  if (commit_vote_ && !commit_vote_()) {
    early_applier_ = nullptr;
    side_request_ = nullptr;
    STRATA_THROW(StepDiscarded, strategy_.name() << ": step " << step_ - 1
                                                 << " did not complete on every worker; nothing of it was applied");
  }
  if (side_request_ != nullptr && side_request_ == SumWithGradients::current())
    side_request_->deliver(reducer_.side_sums());
  side_request_ = nullptr;
  if (early_applier_ != nullptr && reducer_.num_buckets() > 0 && reducer_.votes(0) == static_cast<float>(voters_)) {
    update_owned_buckets();  // every sum is in now: the rest of this replica's buckets
    early_applier_ = nullptr;
    strategy_.merge_call(replica_, [&] { applier.finish(); });
    return;
  }
  early_applier_ = nullptr;
  std::vector<Tensor> reduced(vars.size());
  for (size_t i = 0; i < vars.size(); ++i) reduced[i] = reducer_.reduced(i, vars[i].shape());
  // The last replica to get here updates every copy (with all the cores) while the others wait, so that no
  // replica reads its copy while it changes.
  strategy_.merge_call(replica_, [&] {
    trace::Span span("compute", "optimizer");
    if (!applier.prepared(vars)) applier.prepare(vars);
    applier.update(reduced, vars);
    applier.finish();
  });
}

}  // namespace strata::distribute::detail
