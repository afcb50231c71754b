// Strategy's machinery shared by every strategy: replica threads, the merge barrier, scopes, the
// current-strategy and replica-context lookups, cross-replica reduce/gather and the loss helpers.
// Thread-safety: one driving thread per strategy; replica threads meet only in run_replicas and
// merge_call, both under Impl's mutexes.
#include "strata/distribute/strategy.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "distribute/devices.h"
#include "distribute/replica_collectives.h"
#include "kernels/kernels.h"
#include "strata/gradient_tape.h"
#include "strata/ops.h"
#include "strata/random.h"
#include "strata/threading.h"
#include "strata/trace.h"

namespace strata::distribute {

namespace {
thread_local ReplicaContext* t_context = nullptr;
thread_local std::vector<Strategy*> t_scopes;
std::atomic<uint64_t> g_next_id{1};
std::mutex g_registry_mutex;
std::unordered_map<uint64_t, Strategy*> g_registry;  // live strategies by id
constexpr auto kMergeTimeout = std::chrono::minutes(5);

// Raised in replicas that were waiting when another replica failed; run rethrows the original instead.
struct ReplicaStopped : Error {
  ReplicaStopped() : Error("stopped because another replica failed") {}
};

bool is_stopped(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const ReplicaStopped&) {
    return true;
  } catch (...) {
    return false;
  }
}

std::string what(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown error";
  }
}

// Sets (and restores) this thread's replica context.
class ScopedContext {
 public:
  explicit ScopedContext(ReplicaContext* context) : previous_(t_context) { t_context = context; }
  ~ScopedContext() { t_context = previous_; }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  ReplicaContext* previous_;
};

class DefaultStrategy final : public Strategy {
 public:
  DefaultStrategy() : Strategy({"/cpu:0"}, 1) {}
  std::string name() const override { return "DefaultStrategy"; }
  Variable create_variable(const Tensor& initial_value, const VariableOptions& options) override {
    return Variable(initial_value, options.trainable, options.name);
  }
};
}  // namespace

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "SUM" : "MEAN"; }

// ---- Impl: replica threads and the merge barrier

class Strategy::Impl {
 public:
  Impl(Strategy& strategy, std::vector<std::shared_ptr<comm::Communicator>> comms)
      : strategy_(strategy), comms_(std::move(comms)) {
    STRATA_CHECK(
        static_cast<int>(comms_.size()) == strategy.num_local_replicas(), Error,
        "the local group has " << comms_.size() << " ranks for " << strategy.num_local_replicas() << " replicas");
    for (int r = 0; r < strategy.num_local_replicas(); ++r)
      contexts_.push_back(std::unique_ptr<ReplicaContext>(new ReplicaContext(strategy, r)));
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    job_cv_.notify_all();
    for (auto& t : threads_) t.join();
    // An in-process NCCL group (MirroredStrategy over GPUs) is torn down by every rank at once, each on a thread of
    // its own, as it was made: NCCL's finalize may wait for the other ranks of the group, and one thread releasing
    // them in turn would then wait out each rank's timeout.
    if (comms_.size() > 1 && comms_[0]->backend() == "nccl") {
      std::vector<std::thread> ranks;
      for (auto& comm : comms_) ranks.emplace_back([&comm] { comm.reset(); });
      for (auto& t : ranks) t.join();
    }
  }

  ReplicaContext& context(int replica) { return *contexts_[static_cast<size_t>(replica)]; }
  const std::shared_ptr<comm::Communicator>& communicator(int replica) const { return comms_[static_cast<size_t>(replica)]; }

  void run(const std::function<void(int)>& fn) {
    const int n = strategy_.num_local_replicas();
    STRATA_CHECK(!broken_, Error,
                 strategy_.name() << ": a replica failed in an earlier run, so its replicas may be out of step; "
                                     "make a new strategy");
    if (threads_.empty()) {
      for (int r = 0; r < n; ++r) threads_.emplace_back([this, r] { replica_loop(r); });
    }
    std::unique_lock<std::mutex> lock(mutex_);
    {
      std::lock_guard<std::mutex> merge_lock(merge_mutex_);
      arrived_ = 0;
      aborted_ = false;
    }
    errors_.assign(static_cast<size_t>(n), nullptr);
    first_failure_ = -1;
    job_ = &fn;
    done_ = 0;
    ++job_generation_;
    job_cv_.notify_all();
    done_cv_.wait(lock, [&] { return done_ == n; });
    job_ = nullptr;
    if (first_failure_ >= 0) {
      broken_ = true;
      std::rethrow_exception(errors_[static_cast<size_t>(first_failure_)]);
    }
  }

  void merge_call(const std::function<void()>& fn) {
    const int n = strategy_.num_local_replicas();
    std::unique_lock<std::mutex> lock(merge_mutex_);
    if (aborted_) throw ReplicaStopped();
    const uint64_t generation = merge_generation_;
    if (++arrived_ < n) {
      const bool woke = merge_cv_.wait_for(lock, kMergeTimeout, [&] { return merge_generation_ != generation || aborted_; });
      if (!woke) {
        STRATA_THROW(Timeout, strategy_.name() << ": merge_call waited " << n - arrived_
                                               << " replica(s) for 5 minutes; a replica is stuck or skipped it");
      }
      if (merge_generation_ == generation) throw ReplicaStopped();
      if (merge_error_) std::rethrow_exception(merge_error_);
      return;
    }
    // The last replica to arrive runs fn for everyone, with every core of the strategy.
    arrived_ = 0;
    lock.unlock();
    std::exception_ptr error;
    try {
      ScopedNumThreads all_cores(n * strategy_.threads_per_replica());
      fn();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    merge_error_ = error;
    ++merge_generation_;
    merge_cv_.notify_all();
    if (error) std::rethrow_exception(error);
  }

 private:
  void replica_loop(int replica) {
    set_num_threads(strategy_.threads_per_replica());
    trace::name_thread("replica " + std::to_string(replica));
    default_generator() = Generator(0x5eed, static_cast<uint64_t>(replica) + 1);  // distinct dropout masks per replica
    ScopedReplica as_replica(replica, strategy_.id());
    ScopedGradientAggregator aggregator(strategy_.aggregator(replica));
    ScopedContext context(&this->context(replica));
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        job_cv_.wait(lock, [&] { return stopping_ || job_generation_ != seen; });
        if (stopping_) return;
        seen = job_generation_;
        job = job_;
      }
      std::exception_ptr error;
      try {
        (*job)(replica);
      } catch (...) {
        error = std::current_exception();
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (first_failure_ < 0) first_failure_ = replica;  // the cause; later failures are its consequences
        }
        if (!is_stopped(error)) strategy_.on_replica_failure("replica " + std::to_string(replica) + " failed: " + what(error));
        std::lock_guard<std::mutex> merge_lock(merge_mutex_);
        aborted_ = true;
        merge_cv_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      errors_[static_cast<size_t>(replica)] = error;
      if (++done_ == strategy_.num_local_replicas()) done_cv_.notify_all();
    }
  }

  Strategy& strategy_;
  std::vector<std::shared_ptr<comm::Communicator>> comms_;  // one rank per replica (released by ~Impl)
  std::vector<std::unique_ptr<ReplicaContext>> contexts_;
  std::vector<std::thread> threads_;
  // The job handed to the replica threads.
  std::mutex mutex_;
  std::condition_variable job_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t job_generation_ = 0;
  int done_ = 0;
  bool stopping_ = false;
  bool broken_ = false;
  std::vector<std::exception_ptr> errors_;
  int first_failure_ = -1;  // the replica that failed first in this run
  // merge_call's barrier.
  std::mutex merge_mutex_;
  std::condition_variable merge_cv_;
  int arrived_ = 0;
  uint64_t merge_generation_ = 0;
  bool aborted_ = false;
  std::exception_ptr merge_error_;
};

// ---- Strategy

Strategy::Strategy(std::vector<std::string> devices, int threads_per_replica, comm::AllReduceAlgorithm algorithm)
    : Strategy(std::move(devices), threads_per_replica,
               [algorithm](int replicas) { return comm::make_local_group(replicas, {.algorithm = algorithm}); }) {}

Strategy::Strategy(std::vector<std::string> devices, int threads_per_replica, LocalGroupFactory make_group)
    : devices_(std::move(devices)), id_(g_next_id.fetch_add(1)) {
  STRATA_CHECK(!devices_.empty(), InvalidArgument, "a strategy needs at least one device");
  const int n = static_cast<int>(devices_.size());
  threads_per_replica_ = threads_per_replica > 0 ? threads_per_replica : std::max(1, num_threads() / n);
  impl_ = std::make_unique<Impl>(*this, make_group(n));
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  g_registry[id_] = this;
}

Strategy::~Strategy() {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  g_registry.erase(id_);
}

Strategy* find_strategy(uint64_t id) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  const auto it = g_registry.find(id);
  return it == g_registry.end() ? nullptr : it->second;
}

Strategy::Scope::Scope(Strategy& strategy) : strategy_(strategy) {
  for (const Strategy* s : t_scopes) {
    STRATA_CHECK(s == &strategy, InvalidArgument,
                 "entering the scope of " << strategy.name() << " inside the scope of another strategy ("
                                          << s->name() << "); mixing strategies is not supported");
  }
  STRATA_CHECK(t_context == nullptr, InvalidArgument, strategy.name() << ".scope() cannot be entered inside run()");
  creator_ = std::make_unique<ScopedVariableCreator>(
      [&strategy](const Tensor& initial, const VariableOptions& options, const auto&) {
        return strategy.create_variable(initial, options);
      },
      strategy.replica_device(0));
  t_scopes.push_back(&strategy);
}

Strategy::Scope::~Scope() {
  creator_.reset();
  if (!t_scopes.empty()) t_scopes.pop_back();
}

Device Strategy::replica_device(int replica) const {
  STRATA_CHECK(replica >= 0 && replica < num_local_replicas(), InvalidArgument,
               name() << ": no replica " << replica << " (" << num_local_replicas() << " local replicas)");
  return detail::device_of(devices_[static_cast<size_t>(replica)]);
}

GradientAggregator* Strategy::aggregator(int) { return nullptr; }
void Strategy::on_replica_failure(const std::string& reason) {
  impl_->communicator(0)->abort(name() + ": " + reason);  // one rank aborts the whole group
}
comm::Communicator& Strategy::communicator(int replica) const { return *impl_->communicator(replica); }
std::shared_ptr<comm::Communicator> Strategy::local_communicator(int replica) const {
  return impl_->communicator(replica);
}

void Strategy::run_replicas(const std::function<void(int)>& fn) {
  STRATA_CHECK(t_context == nullptr, InvalidArgument,
               name() << ".run was called inside a replica; call it from the thread that drives the strategy");
  if (!uses_replica_threads()) {
    const bool is_default = this == &default_strategy();
    ScopedReplica as_replica(0, is_default ? 0 : id_);
    ScopedGradientAggregator aggregator(this->aggregator(0));
    ScopedContext context(&impl_->context(0));
    fn(0);
    return;
  }
  impl_->run(fn);
}

void Strategy::merge_call(int replica, const std::function<void()>& fn) {
  STRATA_CHECK(t_context != nullptr && &t_context->strategy() == this && t_context->local_replica_id() == replica,
               InvalidArgument, name() << ": merge_call belongs on the thread of replica " << replica);
  if (!uses_replica_threads()) {
    fn();
    return;
  }
  impl_->merge_call(fn);
}

void Strategy::on_each_replica(const char* what, int values, const std::function<void(int)>& fn) const {
  STRATA_CHECK(t_context == nullptr, InvalidArgument,
               name() << "." << what << " belongs to the cross-replica context; inside run use "
                                        "get_replica_context()->all_reduce");
  STRATA_CHECK(values == num_local_replicas(), InvalidArgument,
               name() << "." << what << ": " << values << " values for " << num_local_replicas()
                      << (num_workers() > 1 ? " local replicas" : " replicas"));
  if (!uses_replica_threads()) {
    fn(0);
    return;
  }
  impl_->run(fn);
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int> axis) const {
  STRATA_CHECK(value.num_replicas() > 0, InvalidArgument, name() << ".reduce: no values");
  NoGradGuard no_grad;
  if (axis) {
    const Tensor all = gather(value, *axis);
    const int rank = static_cast<int>(all.rank());
    const int ax = *axis < 0 ? *axis + rank : *axis;
    Tensor total = kernels::sum(all, {ax});
    if (op == ReduceOp::kMean) total = kernels::affine(total, 1.0f / static_cast<float>(std::max<int64_t>(all.dim(ax), 1)), 0.0f);
    return total;
  }
  // Checked here, so that a mistake in the values does not fail the replicas (which would end the strategy).
  for (int r = 0; r < value.num_replicas(); ++r) {
    STRATA_CHECK(value[r].defined() && value[r].dtype() == value[0].dtype() &&
                     (value[r].dtype() == DType::kFloat32 || value[r].dtype() == DType::kBFloat16 ||
                      value[r].dtype() == DType::kInt64),
                 InvalidArgument,
                 name() << ".reduce: replica " << r << " gave "
                        << (value[r].defined() ? dtype_name(value[r].dtype()) : std::string("an undefined tensor"))
                        << "; reduce takes float32, bfloat16 or int64, the same on every replica");
    STRATA_CHECK(value[r].shape() == value[0].shape(), ShapeError,
                 name() << ".reduce: replica " << r << " gave " << value[r].shape_str() << ", replica 0 "
                        << value[0].shape_str());
  }
  Tensor result;
  on_each_replica("reduce", value.num_replicas(), [&](int r) {
    comm::Communicator& comm = communicator(r);
    Tensor total = detail::all_reduce_tensor(comm, op, value[r], detail::exchange_device(comm, replica_device(r)));
    if (r == 0) result = std::move(total);
  });
  return result;
}

double Strategy::reduce(ReduceOp op, const PerReplica<double>& value) const {
  STRATA_CHECK(value.num_replicas() > 0, InvalidArgument, name() << ".reduce: no values");
  double result = 0;
  on_each_replica("reduce", value.num_replicas(), [&](int r) {
    comm::Communicator& comm = communicator(r);
    const double total =
        detail::all_reduce_number(comm, op, value[r], detail::exchange_device(comm, replica_device(r)));
    if (r == 0) result = total;
  });
  return result;
}

Tensor Strategy::gather(const PerReplica<Tensor>& value, int axis) const {
  STRATA_CHECK(value.num_replicas() > 0, InvalidArgument, name() << ".gather: no values");
  if (value.num_replicas() == 1 && num_replicas_in_sync() == 1) return value[0];
  // Checked here, so that a mistake in the values does not fail the replicas (which would end the strategy).
  const int rank = value[0].defined() ? value[0].rank() : 0;
  const int ax = axis < 0 ? axis + rank : axis;
  STRATA_CHECK(rank > 0 && ax >= 0 && ax < rank, InvalidArgument,
               name() << ".gather: axis " << axis << " does not fit replica 0's value "
                      << (value[0].defined() ? value[0].shape_str() : std::string("(undefined)")));
  for (int r = 1; r < value.num_replicas(); ++r) {
    bool fits = value[r].defined() && value[r].rank() == rank && value[r].dtype() == value[0].dtype();
    for (int d = 0; fits && d < rank; ++d) fits = d == ax || value[r].dim(d) == value[0].dim(d);
    STRATA_CHECK(fits, ShapeError,
                 name() << ".gather along axis " << axis << ": replica " << r << " gave "
                        << (value[r].defined() ? dtype_name(value[r].dtype()) + value[r].shape_str() : "undefined")
                        << ", replica 0 " << dtype_name(value[0].dtype()) << value[0].shape_str());
  }
  Tensor result;
  on_each_replica("gather", value.num_replicas(), [&](int r) {
    comm::Communicator& comm = communicator(r);
    Tensor all = detail::all_gather_tensor(comm, value[r], axis, detail::exchange_device(comm, replica_device(r)));
    if (r == 0) result = std::move(all);
  });
  return result;
}

std::vector<double> Strategy::sum_across_workers(const std::vector<double>& values) const {
  STRATA_CHECK(num_workers() == 1, Unavailable, name() << " spans workers but does not say how to sum across them");
  return values;
}

void Strategy::broadcast_from_chief(const std::vector<Tensor>&) const {
  STRATA_CHECK(num_workers() == 1, Unavailable, name() << " spans workers but does not say how to broadcast to them");
}

std::vector<std::string> Strategy::all_gather_across_workers(const std::string& bytes) const {
  STRATA_CHECK(num_workers() == 1, Unavailable, name() << " spans workers but does not say how to gather from them");
  return {bytes};
}

DistributedDataset Strategy::experimental_distribute_dataset(const data::Dataset& dataset) const {
  return DistributedDataset(*this, dataset);
}

DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<data::Dataset(const InputContext&)>& dataset_fn) const {
  const InputContext context{.num_input_pipelines = num_workers(), .input_pipeline_id = worker_index(),
                             .num_replicas_in_sync = num_replicas_in_sync()};
  return DistributedDataset(*this, dataset_fn(context), num_local_replicas());
}

// ---- replica context

int ReplicaContext::num_replicas_in_sync() const { return strategy_.num_replicas_in_sync(); }
int ReplicaContext::replica_id_in_sync_group() const {
  return strategy_.worker_index() * strategy_.num_local_replicas() + replica_;
}

Tensor ReplicaContext::all_reduce(ReduceOp op, const Tensor& value) {
  comm::Communicator& comm = strategy_.communicator(replica_);
  return detail::all_reduce_tensor(comm, op, value, detail::exchange_device(comm, strategy_.replica_device(replica_)));
}

double ReplicaContext::all_reduce(ReduceOp op, double value) {
  comm::Communicator& comm = strategy_.communicator(replica_);
  return detail::all_reduce_number(comm, op, value, detail::exchange_device(comm, strategy_.replica_device(replica_)));
}

void ReplicaContext::merge_call(const std::function<void(Strategy&)>& fn) {
  strategy_.merge_call(replica_, [&] { fn(strategy_); });
}

ReplicaContext* get_replica_context() { return t_context; }
bool in_cross_replica_context() { return t_context == nullptr; }

Strategy& default_strategy() {
  static DefaultStrategy strategy;
  return strategy;
}

Strategy& get_strategy() {
  if (t_context) return t_context->strategy();
  if (!t_scopes.empty()) return *t_scopes.back();
  return default_strategy();
}

bool has_strategy() { return &get_strategy() != &default_strategy(); }

// ---- loss helpers

namespace {
thread_local SumWithGradients* t_sum_with_gradients = nullptr;
}  // namespace

SumWithGradients::SumWithGradients(std::vector<double> values)
    : values_(std::move(values)), previous_(t_sum_with_gradients) {
  t_sum_with_gradients = this;
}

SumWithGradients::~SumWithGradients() { t_sum_with_gradients = previous_; }

SumWithGradients* SumWithGradients::current() { return t_sum_with_gradients; }

Variable compute_average_loss(const Variable& per_example_loss, int64_t global_batch_size, const Tensor& sample_weight) {
  STRATA_CHECK(per_example_loss.defined(), InvalidArgument, "compute_average_loss: undefined per-example loss");
  STRATA_CHECK(global_batch_size >= 0, InvalidArgument,
               "compute_average_loss: global_batch_size must be >= 0, got " << global_batch_size);
  Variable weighted = per_example_loss;
  if (sample_weight.defined()) weighted = mul(per_example_loss, Variable(sample_weight));
  if (global_batch_size == 0) {
    const int64_t rows = per_example_loss.shape().empty() ? 1 : per_example_loss.shape()[0];
    global_batch_size = rows * get_strategy().num_replicas_in_sync();
  }
  STRATA_CHECK(global_batch_size > 0, InvalidArgument,
               "compute_average_loss: the global batch is empty; pass global_batch_size");
  return affine(sum(weighted), 1.0f / static_cast<float>(global_batch_size));
}

Variable scale_regularization_loss(const Variable& regularization_loss) {
  return affine(regularization_loss, 1.0f / static_cast<float>(get_strategy().num_replicas_in_sync()));
}

}  // namespace strata::distribute
