// MirroredStrategy: a copy of every variable per replica, gradients summed across replicas in buckets
// that start reducing while backward is still running, and the same update applied to each copy.
// Thread-safety: each replica thread uses only its own Aggregator and communicator rank; the optimizer's
// shared state changes inside merge_call (slots) or on the last replica to finish a step's update (the
// step count; see Aggregator::finish_step for why no replica can read it early).
#include <algorithm>
#include <cstring>
#include <atomic>
#include <map>
#include <mutex>

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

// The buckets of one gradient plan as all replicas share them: each replica's local buffers, one result
// buffer per bucket, and per bucket how many replicas have filled theirs this step and which step's sum
// the result holds. The last replica to fill bucket k sums every replica's bucket k (in replica order)
// into results[k] on its own thread, at once, while the others go on with backward; no helper threads.
struct MirroredStrategy::SharedPlan {
  SharedPlan(int replicas, const std::vector<int64_t>& sizes)
      : locals(static_cast<size_t>(replicas)), arrived(sizes.size()), ready(sizes.size()) {
    for (int64_t size : sizes) results.push_back(Tensor::empty({size}));
    for (auto& r : ready) r.store(0);
    for (auto& a : arrived) a.store(0);
  }
  std::vector<std::vector<const float*>> locals;  // [replica][bucket]
  std::vector<Tensor> results;
  std::vector<std::atomic<int>> arrived;
  std::vector<std::atomic<uint64_t>> ready;  // the step whose sum results[k] holds
};

MirroredStrategy::SharedPlan& MirroredStrategy::shared_plan(const std::vector<uint64_t>& ids, int replica,
                                                            const std::vector<Tensor>& local_buckets) {
  std::lock_guard<std::mutex> lock(shared_plans_mutex_);
  auto& slot = shared_plans_[ids];
  if (!slot) {
    std::vector<int64_t> sizes;
    for (const Tensor& b : local_buckets) sizes.push_back(b.numel());
    slot = std::make_unique<SharedPlan>(num_replicas_in_sync(), sizes);
  }
  auto& mine = slot->locals[static_cast<size_t>(replica)];
  mine.clear();
  for (const Tensor& b : local_buckets) mine.push_back(b.data<float>());
  return *slot;
}

// ---- one replica per gradient bucket plan

// Reduces one replica's gradients. For each list of sources it is given, it plans buckets once (in
// reverse source order, about bucket_bytes each); each step it copies every gradient into its bucket as
// the tape reports it and starts the bucket's all-reduce when the bucket is full. apply_gradients waits
// for the buckets of the matching tape call (or reduces now), then updates this replica's components.
class MirroredStrategy::Aggregator final : public GradientAggregator {
 public:
  // comm: the replica's rank for ring/tree all-reduce; nullptr: reduction to one buffer, inline.
  Aggregator(MirroredStrategy& strategy, int replica, comm::Communicator* comm)
      : strategy_(strategy), replica_(replica), comm_(comm) {}

  void begin_gradients(const std::vector<Variable>& sources) override {
    std::vector<uint64_t> ids;
    ids.reserve(sources.size());
    for (const Variable& v : sources) ids.push_back(v.id());
    auto [it, inserted] = plans_.try_emplace(std::move(ids));
    if (inserted) make_plan(it->second, sources);
    call_ = &it->second;
    if (inline_reduce() && call_->shared == nullptr)
      call_->shared = &strategy_.shared_plan(it->first, replica_, call_->buckets);
    ++call_->step;
    call_->pending = call_->members;
    call_->next_launch = 0;
    call_->works.assign(call_->buckets.size(), nullptr);
    call_->local.assign(sources.size(), nullptr);
    call_->defined.assign(sources.size(), false);
  }

  void gradient_ready(size_t index, const Tensor& grad) override {
    Plan& p = *call_;
    const int b = p.bucket_of[index];
    if (b < 0) return;
    float* dst = p.buckets[static_cast<size_t>(b)].data<float>() + p.offset[index];
    const int64_t n = p.numel[index];
    if (grad.defined()) {
      STRATA_CHECK(grad.dtype() == DType::kFloat32 && grad.numel() == n, InvalidArgument,
                   strategy_.name() << ": gradient " << index << " is " << dtype_name(grad.dtype()) << grad.shape_str()
                                    << "; its variable has " << n << " float32 elements");
      std::memcpy(dst, grad.data<float>(), static_cast<size_t>(n) * sizeof(float));
      p.local[index] = grad.data<float>();
      p.defined[index] = true;
    } else {
      std::fill(dst, dst + n, 0.0f);
    }
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
      begin_gradients(vars);
      for (size_t i = 0; i < grads.size(); ++i) gradient_ready(i, grads[i]);
      end_gradients(grads);
      p = last_;
    }
    last_ = nullptr;
    for (auto& w : p->works) {
      if (w) w->wait();
    }
    if (inline_reduce()) wait_for_sums(*p);
    const std::vector<Tensor>& sums = inline_reduce() ? p->shared->results : p->buckets;
    std::vector<Tensor> reduced(vars.size());
    for (size_t i = 0; i < vars.size(); ++i) {
      if (!p->defined[i]) continue;
      reduced[i] = sums[static_cast<size_t>(p->bucket_of[i])]
                       .slice(p->offset[i], p->offset[i] + p->numel[i])
                       .reshape(vars[i].shape());
    }
    if (!applier.prepared(vars)) strategy_.merge_call(replica_, [&] { applier.prepare(vars); });
    applier.update(reduced, vars, replica_);
    finish_step(applier);
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
    // Inline reduction: the buckets all replicas share, and this replica's count of calls of this plan.
    SharedPlan* shared = nullptr;
    uint64_t step = 0;
  };

  bool inline_reduce() const { return comm_ == nullptr; }

  // The last replica to finish its update ends the step (counts it), and nobody waits for it: a barrier
  // here cost every step a wake-up. No replica can read the count too early: its next update first
  // waits for the next step's sums, which need the last replica's next gradients, made after this.
  void finish_step(GradientApplier& applier) {
    const int n = strategy_.num_replicas_in_sync();
    if (strategy_.finished_updates_.fetch_add(1, std::memory_order_acq_rel) + 1 < n) return;
    strategy_.finished_updates_.store(0, std::memory_order_relaxed);
    applier.finish();
  }

  // This replica has filled bucket k; the last of the replicas to do so sums them all, here and now.
  void arrive(Plan& p, size_t k) {
    SharedPlan& sh = *p.shared;
    if (sh.arrived[k].fetch_add(1, std::memory_order_acq_rel) + 1 < strategy_.num_replicas_in_sync()) return;
    sh.arrived[k].store(0, std::memory_order_relaxed);
    float* dst = sh.results[k].data<float>();
    const int64_t n = sh.results[k].numel();
    // Replica order, as the ring's: ((b0 + b1) + b2) + ...; the first two in one pass over dst.
    const float* first = sh.locals[0][k];
    if (sh.locals.size() == 1) {
      std::copy(first, first + n, dst);
    } else {
      const float* second = sh.locals[1][k];
      for (int64_t e = 0; e < n; ++e) dst[e] = first[e] + second[e];
    }
    for (size_t r = 2; r < sh.locals.size(); ++r) {
      const float* src = sh.locals[r][k];
      for (int64_t e = 0; e < n; ++e) dst[e] += src[e];
    }
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
