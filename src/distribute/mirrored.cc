// MirroredStrategy: a copy of every variable per replica, gradients summed across replicas in buckets
// that start reducing while backward is still running, and one update per step written to every copy.
// Thread-safety: each replica thread uses only its own Aggregator and communicator rank. The optimizer's
// shared state changes inside merge_call (slots, and updates after a plain apply_gradients), on the
// replica that reduces a bucket (its variables' elements and slots, announced steps only; no other
// replica touches them until the bucket's ready flag says so), or on the last replica to finish an
// announced step (the step count; see Aggregator::finish_step for why no replica can read it early).
#include <algorithm>
#include <cstring>
#include <atomic>
#include <map>
#include <mutex>

#include "autograd/sum_in_order.h"
#include "distribute/devices.h"
#include "strata/distribute/strategies.h"

namespace strata::distribute {

CrossDeviceOps CrossDeviceOps::from_name(const std::string& name) {
  if (name == "nccl") {
    STRATA_THROW(Unavailable, "cross-device ops 'nccl' needs the CUDA build and GPU replicas; on CPU replicas use "
                              "'ring', 'tree' or 'reduction_to_one_device'");
  }
  return {comm::all_reduce_algorithm_from_string(name)};
}


// ---- reduction to one buffer, done inline by the replicas (ReductionToOneDevice on CPU replicas)

// The buckets of one gradient plan as all replicas share them: every replica's gradient of every source
// (a pointer into its own bucket, or into the gradient itself when Optimizer::minimize announced that it
// goes unchanged to apply_gradients), one result buffer per bucket, and per bucket how many replicas have
// filled theirs this step and which step's sum the result holds. The last replica to fill bucket k sums
// every replica's gradients of it (in replica order) on its own thread, at once, while the others go on
// with backward; when every replica announced its optimizer it updates the bucket's variables instead of
// writing a sum. No helper threads.
struct MirroredStrategy::SharedPlan {
  SharedPlan(int replicas, std::vector<Variable> plan_sources, std::vector<std::vector<size_t>> members,
             std::vector<int64_t> source_offset, const std::vector<int64_t>& sizes)
      : sources(std::move(plan_sources)),
        bucket_sources(std::move(members)),
        offset(std::move(source_offset)),
        parts(static_cast<size_t>(replicas), std::vector<const float*>(sources.size(), nullptr)),
        held(static_cast<size_t>(replicas), std::vector<Tensor>(sources.size())),
        appliers(static_cast<size_t>(replicas), nullptr),
        any_defined(sources.size(), 0),
        updated(sizes.size(), 0),
        arrived(sizes.size()),
        ready(sizes.size()) {
    for (int64_t size : sizes) results.push_back(Tensor::empty({size}));
    for (auto& r : ready) r.store(0);
    for (auto& a : arrived) a.store(0);
  }
  const std::vector<Variable> sources;
  const std::vector<std::vector<size_t>> bucket_sources;  // [bucket]: its sources
  const std::vector<int64_t> offset;                      // [source]: where in its bucket's result
  // Written by replica r alone before it arrives at the source's bucket; read by the bucket's summer.
  std::vector<std::vector<const float*>> parts;  // [replica][source]: the gradient, or nullptr (undefined)
  std::vector<std::vector<Tensor>> held;         // [replica][source]: an announced gradient, kept alive
  std::vector<GradientApplier*> appliers;        // [replica]: the announced applier of this step, or nullptr
  // Written by the bucket's summer before it publishes ready[k]; read after waiting for it.
  std::vector<Tensor> results;
  std::vector<char> any_defined;  // [source]: some replica has a gradient for it
  std::vector<char> updated;      // [bucket]: the summer updated its variables (results[k] is unused)
  std::vector<std::atomic<int>> arrived;
  std::vector<std::atomic<uint64_t>> ready;  // the step whose sum (or update) bucket k holds
};

MirroredStrategy::SharedPlan& MirroredStrategy::shared_plan(const std::vector<uint64_t>& ids,
                                                            const std::function<std::unique_ptr<SharedPlan>()>& make) {
  std::lock_guard<std::mutex> lock(shared_plans_mutex_);
  auto& slot = shared_plans_[ids];
  if (!slot) slot = make();
  return *slot;
}

// ---- one replica per gradient bucket plan

// Reduces one replica's gradients. For each list of sources it is given, it plans buckets once (in
// reverse source order, about bucket_bytes each). Each step, as the tape reports each gradient, it
// copies it into its bucket (ring/tree, or a plain tape call whose gradients the caller may still
// change) or just records it (announced by Optimizer::minimize), and starts the bucket's reduction when
// the bucket is full. apply_gradients waits for the buckets of the matching tape call (or reduces now),
// then either ends the step (the variables were updated during backward) or updates them once.
class MirroredStrategy::Aggregator final : public GradientAggregator {
 public:
  // comm: the replica's rank for ring/tree all-reduce; nullptr: reduction to one buffer, inline.
  Aggregator(MirroredStrategy& strategy, int replica, comm::Communicator* comm)
      : strategy_(strategy), replica_(replica), comm_(comm) {}

  void expect_apply(GradientApplier& applier, const std::vector<Variable>& sources) override {
    if (!inline_reduce()) return;  // ring and tree reduce on their own threads: nothing to update early
    // Every replica announces (Model::fit's step), so the slots are made once while all of them wait.
    if (!applier.prepared(sources)) strategy_.merge_call(replica_, [&] { applier.prepare(sources); });
    expected_applier_ = &applier;
    expected_ids_ = ids_of(sources);
  }

  void begin_gradients(const std::vector<Variable>& sources) override {
    std::vector<uint64_t> ids = ids_of(sources);
    const bool announced = expected_applier_ != nullptr && ids == expected_ids_;
    GradientApplier* applier = announced ? expected_applier_ : nullptr;
    expected_applier_ = nullptr;
    expected_ids_.clear();
    auto [it, inserted] = plans_.try_emplace(std::move(ids));
    if (inserted) make_plan(it->second, sources);
    call_ = &it->second;
    Plan& p = *call_;
    if (inline_reduce() && p.shared == nullptr)
      p.shared = &strategy_.shared_plan(it->first, [&] { return make_shared_plan(p, sources); });
    ++p.step;
    p.pending = p.members;
    p.next_launch = 0;
    p.works.assign(p.buckets.size(), nullptr);
    p.local.assign(sources.size(), nullptr);
    p.defined.assign(sources.size(), false);
    p.announced = announced;
    if (inline_reduce()) {
      // The previous step of this plan is over for every replica (this one waited for all its buckets).
      SharedPlan& sh = *p.shared;
      sh.appliers[static_cast<size_t>(replica_)] = applier;
      for (Tensor& t : sh.held[static_cast<size_t>(replica_)]) t = Tensor();
    }
  }

  void gradient_ready(size_t index, const Tensor& grad) override {
    Plan& p = *call_;
    const int b = p.bucket_of[index];
    if (b < 0) return;
    const int64_t n = p.numel[index];
    const float* part = nullptr;
    if (grad.defined()) {
      STRATA_CHECK(grad.dtype() == DType::kFloat32 && grad.numel() == n, InvalidArgument,
                   strategy_.name() << ": gradient " << index << " is " << dtype_name(grad.dtype()) << grad.shape_str()
                                    << "; its variable has " << n << " float32 elements");
      p.local[index] = grad.data<float>();
      p.defined[index] = true;
      if (p.announced) {
        p.shared->held[static_cast<size_t>(replica_)][index] = grad;  // read in place by the bucket's summer
        part = grad.data<float>();
      } else {
        float* dst = p.buckets[static_cast<size_t>(b)].data<float>() + p.offset[index];
        std::memcpy(dst, grad.data<float>(), static_cast<size_t>(n) * sizeof(float));
        part = dst;
      }
    } else if (!inline_reduce()) {
      float* dst = p.buckets[static_cast<size_t>(b)].data<float>() + p.offset[index];
      std::fill(dst, dst + n, 0.0f);
    }
    if (inline_reduce()) p.shared->parts[static_cast<size_t>(replica_)][index] = part;
    --p.pending[static_cast<size_t>(b)];
    while (p.next_launch < p.buckets.size() && p.pending[p.next_launch] == 0) {
      if (inline_reduce()) {
        arrive(p, p.next_launch);
      } else {
        p.works[p.next_launch] = comm_->all_reduce({p.buckets[p.next_launch]}, comm::ReduceOp::kSum);
      }
      ++p.next_launch;
    }
  }

  void end_gradients(const std::vector<Tensor>&) override {
    STRATA_CHECK(call_->next_launch == call_->buckets.size(), Error,
                 strategy_.name() << ": a gradient bucket was never filled (a source was not reported)");
    last_ = call_;
    call_ = nullptr;
  }

  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                       GradientApplier& applier) override {
    for (const Variable& v : vars) {
      STRATA_CHECK(v.owner() == strategy_.id() && v.num_components() == strategy_.num_replicas_in_sync(),
                   InvalidArgument,
                   strategy_.name() << ".apply_gradients: variable '" << v.name()
                                    << "' is not mirrored by this strategy; create it inside strategy.scope()");
    }
    Plan* p = matching_call(grads, vars);
    if (p == nullptr) {  // not the gradients the tape just reported (or no tape): reduce them now
      expected_applier_ = nullptr;
      begin_gradients(vars);
      for (size_t i = 0; i < grads.size(); ++i) gradient_ready(i, grads[i]);
      end_gradients(grads);
      p = last_;
    }
    last_ = nullptr;
    for (auto& w : p->works) {
      if (w) w->wait();
    }
    if (inline_reduce()) {
      wait_for_sums(*p);
      // Every replica announced, so the summers already updated every variable: only the count is left.
      if (!p->buckets.empty() && p->shared->updated[0]) {
        finish_step(applier);
        return;
      }
    }
    const std::vector<Tensor>& sums = inline_reduce() ? p->shared->results : p->buckets;
    std::vector<Tensor> reduced(vars.size());
    for (size_t i = 0; i < vars.size(); ++i) {
      const bool defined = inline_reduce() ? p->shared->any_defined[i] != 0 : p->defined[i];
      if (!defined || p->bucket_of[i] < 0) continue;
      reduced[i] = sums[static_cast<size_t>(p->bucket_of[i])]
                       .slice(p->offset[i], p->offset[i] + p->numel[i])
                       .reshape(vars[i].shape());
    }
    // The last replica to get here updates every copy (with all the cores) while the others wait, so
    // that no replica reads its copy while it changes.
    strategy_.merge_call(replica_, [&] {
      if (!applier.prepared(vars)) applier.prepare(vars);
      applier.update(reduced, vars);
      applier.finish();
    });
  }

 private:
  struct Plan {
    std::vector<int> bucket_of;       // per source: its bucket, or -1 (not a variable of this strategy)
    std::vector<int64_t> offset, numel;
    std::vector<Tensor> buckets;      // flat float32 buffers, launched in index order
    std::vector<int> members;         // sources per bucket
    // This call's progress.
    std::vector<int> pending;
    size_t next_launch = 0;
    std::vector<std::shared_ptr<comm::Work>> works;
    std::vector<const float*> local;  // the reported gradients' data, to match apply_gradients' arguments
    std::vector<bool> defined;
    bool announced = false;  // Optimizer::minimize's call: gradients are read in place, not copied
    // Inline reduction: the buckets all replicas share, and this replica's count of calls of this plan.
    SharedPlan* shared = nullptr;
    uint64_t step = 0;
  };

  bool inline_reduce() const { return comm_ == nullptr; }

  // The plan every replica shares, from this replica's (all replicas plan the same sources alike).
  std::unique_ptr<SharedPlan> make_shared_plan(const Plan& p, const std::vector<Variable>& sources) const {
    std::vector<std::vector<size_t>> members(p.buckets.size());
    for (size_t i = 0; i < sources.size(); ++i) {
      if (p.bucket_of[i] >= 0) members[static_cast<size_t>(p.bucket_of[i])].push_back(i);
    }
    std::vector<int64_t> sizes;
    for (const Tensor& b : p.buckets) sizes.push_back(b.numel());
    return std::make_unique<SharedPlan>(strategy_.num_replicas_in_sync(), sources, std::move(members), p.offset,
                                        sizes);
  }

  // A step whose variables were updated during backward ends when the last replica gets here (it
  // counts the step), and nobody waits for it: a barrier here cost every step a wake-up. No replica
  // can read the count too early: its next update needs the last replica's next gradients, made after.
  void finish_step(GradientApplier& applier) {
    const int n = strategy_.num_replicas_in_sync();
    if (strategy_.finished_updates_.fetch_add(1, std::memory_order_acq_rel) + 1 < n) return;
    strategy_.finished_updates_.store(0, std::memory_order_relaxed);
    applier.finish();
  }

  // This replica has filled bucket k; the last of the replicas to do so reduces it, here and now: it
  // updates the bucket's variables if every replica announced an elementwise optimizer, else sums.
  void arrive(Plan& p, size_t k) {
    SharedPlan& sh = *p.shared;
    const size_t replicas = sh.parts.size();
    if (sh.arrived[k].fetch_add(1, std::memory_order_acq_rel) + 1 < static_cast<int>(replicas)) return;
    sh.arrived[k].store(0, std::memory_order_relaxed);
    GradientApplier* applier = sh.appliers[static_cast<size_t>(replica_)];
    bool update = applier != nullptr && applier->elementwise();
    for (GradientApplier* a : sh.appliers) update = update && a != nullptr;
    std::vector<const float*> parts(replicas);
    for (size_t i : sh.bucket_sources[k]) {
      bool any = false;
      for (size_t r = 0; r < replicas; ++r) {
        parts[r] = sh.parts[r][i];
        any = any || parts[r] != nullptr;
      }
      sh.any_defined[i] = any ? 1 : 0;
      if (update) {
        if (any) applier->update_summed(sh.sources[i], parts);
      } else {
        float* dst = sh.results[k].data<float>() + sh.offset[i];
        strata::detail::sum_in_order(parts, 0, sh.sources[i].component(0).numel(), dst);
      }
    }
    sh.updated[k] = update ? 1 : 0;
    sh.ready[k].store(p.step, std::memory_order_release);
    sh.ready[k].notify_all();
  }

  void wait_for_sums(const Plan& p) {
    for (auto& ready : p.shared->ready) {
      for (uint64_t v = ready.load(std::memory_order_acquire); v != p.step; v = ready.load(std::memory_order_acquire)) {
        if (strategy_.aborted_.load()) {
          STRATA_THROW(Error, strategy_.name() << ": stopped waiting for gradients because another replica failed");
        }
        ready.wait(v, std::memory_order_acquire);
      }
    }
  }

  void make_plan(Plan& p, const std::vector<Variable>& sources) {
    const size_t n = sources.size();
    p.bucket_of.assign(n, -1);
    p.offset.assign(n, 0);
    p.numel.assign(n, 0);
    const int64_t cap = std::max<int64_t>(strategy_.cross_device_ops().bucket_bytes / 4, 1);
    int64_t filled = 0;
    std::vector<int64_t> sizes;
    for (size_t k = n; k-- > 0;) {  // backward produces the last layers' gradients first
      const Variable& v = sources[k];
      if (!v.is_model_variable() || v.owner() != strategy_.id() || v.dtype() != DType::kFloat32) continue;
      const int64_t numel = v.component(0).numel();
      if (sizes.empty() || (filled > 0 && filled + numel > cap)) {
        sizes.push_back(0);
        p.members.push_back(0);
        filled = 0;
      }
      p.bucket_of[k] = static_cast<int>(sizes.size()) - 1;
      p.offset[k] = filled;
      p.numel[k] = numel;
      filled += numel;
      sizes.back() = filled;
      ++p.members.back();
    }
    for (int64_t size : sizes) p.buckets.push_back(Tensor::empty({size}));
  }

  // The tape call whose gradients these are (same variables, same tensors), if it is the last one.
  Plan* matching_call(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) const {
    if (last_ == nullptr || last_->bucket_of.size() != vars.size()) return nullptr;
    for (size_t i = 0; i < vars.size(); ++i) {
      const bool defined = grads[i].defined();
      if (defined != last_->defined[i]) return nullptr;
      if (defined && grads[i].data<float>() != last_->local[i]) return nullptr;
    }
    const auto it = plans_.find(ids_of(vars));
    return it != plans_.end() && &it->second == last_ ? last_ : nullptr;
  }

  static std::vector<uint64_t> ids_of(const std::vector<Variable>& vars) {
    std::vector<uint64_t> ids;
    ids.reserve(vars.size());
    for (const Variable& v : vars) ids.push_back(v.id());
    return ids;
  }

  MirroredStrategy& strategy_;
  int replica_;
  comm::Communicator* comm_;
  std::map<std::vector<uint64_t>, Plan> plans_;
  Plan* call_ = nullptr;  // the tape call in progress
  Plan* last_ = nullptr;  // the last finished tape call, until apply_gradients consumes it
  // Announced by expect_apply for the next tape call.
  GradientApplier* expected_applier_ = nullptr;
  std::vector<uint64_t> expected_ids_;
};

// ---- MirroredStrategy

std::vector<std::string> MirroredStrategy::cpu_devices(int n) {
  STRATA_CHECK(n >= 1, InvalidArgument, "MirroredStrategy: replicas must be >= 1, got " << n);
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("/cpu:" + std::to_string(i));
  return devices;
}

std::unique_ptr<MirroredStrategy> MirroredStrategy::cpu_replicas(int n, MirroredOptions options) {
  return std::make_unique<MirroredStrategy>(cpu_devices(n), options);
}

MirroredStrategy::MirroredStrategy(std::vector<std::string> devices, MirroredOptions options)
    : Strategy(detail::checked_devices("MirroredStrategy", std::move(devices)), options.threads_per_replica),
      options_(options) {
  STRATA_CHECK(options_.cross_device_ops.bucket_bytes > 0, InvalidArgument,
               "MirroredStrategy: bucket_bytes must be > 0");
  const int n = num_replicas_in_sync();
  if (n > 1) {
    if (options_.cross_device_ops.algorithm != comm::AllReduceAlgorithm::kReduceToOne)
      comms_ = comm::make_local_group(n, {.algorithm = options_.cross_device_ops.algorithm});
    for (int r = 0; r < n; ++r)
      aggregators_.push_back(std::make_unique<Aggregator>(*this, r, comms_.empty() ? nullptr : comms_[r].get()));
  }
}

MirroredStrategy::~MirroredStrategy() = default;

Variable MirroredStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  std::vector<Tensor> components = {initial_value};
  for (int r = 1; r < num_replicas_in_sync(); ++r) components.push_back(initial_value.clone());
  return make_distributed_variable(std::move(components), options, id());
}

GradientAggregator* MirroredStrategy::aggregator(int replica) {
  return aggregators_.empty() ? nullptr : aggregators_[static_cast<size_t>(replica)].get();
}

void MirroredStrategy::on_replica_failure(const std::string& reason) {
  if (!comms_.empty()) comms_[0]->abort(name() + ": " + reason);  // one rank aborts the whole group
  aborted_.store(true);
  std::lock_guard<std::mutex> lock(shared_plans_mutex_);
  for (auto& [ids, plan] : shared_plans_) {
    for (auto& ready : plan->ready) {
      ready.fetch_add(uint64_t{1} << 62);  // no step has this number: waiters wake, see aborted_ and stop
      ready.notify_all();
    }
  }
}

}  // namespace strata::distribute
