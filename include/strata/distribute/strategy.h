// Strategy: the base of every distribution strategy (tf.distribute.Strategy), the replica context,
// and the loss helpers of custom training loops.
//
//   distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
//   Sequential model;  optim::SGD sgd;
//   {
//     auto scope = strategy.scope();          // variables made now are mirrored, one copy per replica
//     model = Sequential({nn::Dense(64, "relu"), nn::Dense(10)});
//     model.build_for({1, 784});
//   }
//   auto step = [&](const data::Element& batch) {
//     GradientTape tape;
//     Variable per_example = loss_fn.call(batch[1], model(Variable(batch[0]), true));
//     Variable loss = distribute::compute_average_loss(per_example, global_batch);
//     sgd.apply_gradients(tape.gradient(loss, model.trainable_variables()), model.trainable_variables());
//     return loss.value();
//   };
//   auto dist = strategy.experimental_distribute_dataset(train);
//   auto it = dist.make_iterator();
//   while (auto batch = it.next())
//     Tensor loss = strategy.reduce(distribute::ReduceOp::kSum, strategy.run(step, *batch));
//
// Variables made inside scope() go through the strategy's variable creator; a model built outside and
// run inside is an InvalidArgument naming a variable. Layers must be built (their variables made) before
// run: replicas share the model object and only read it. Inside run each replica is a thread (or the
// calling thread when there is one replica) with its own share of the cores; there
// get_replica_context() says which replica it is, and Optimizer::apply_gradients reduces the gradients
// across replicas through the strategy (SUM: scale the loss by the global batch, as compute_average_loss
// does). An error in one replica stops all of them and is rethrown by run.
//
// Thread-safety: one thread drives a strategy (scope, run, reduce); replicas run on their own threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/aggregation.h"
#include "strata/comm/local.h"
#include "strata/distribute/input.h"
#include "strata/distribute/training_program.h"
#include "strata/distribute/values.h"
#include "strata/tensor.h"
#include "strata/variable.h"

namespace strata::distribute {

class Strategy;

// What a replica can ask while run() is executing it (tf.distribute.ReplicaContext).
class ReplicaContext {
 public:
  // This replica's id among all the replicas in sync (across workers: worker index x local replicas + local id).
  int replica_id_in_sync_group() const;
  int num_replicas_in_sync() const;
  // This replica's index among the replicas of this process.
  int local_replica_id() const { return replica_; }
  Strategy& strategy() const { return strategy_; }
  // Sum or mean of `value` over the replicas; every replica must call it, in the same order.
  Tensor all_reduce(ReduceOp op, const Tensor& value);
  double all_reduce(ReduceOp op, double value);
  // Waits for every replica, runs `fn` once (on one of the replica threads, with all the strategy's
  // cores), then lets them all go on: TF's merge_call, for work that must happen once per step.
  void merge_call(const std::function<void(Strategy&)>& fn);

 private:
  friend class Strategy;
  ReplicaContext(Strategy& strategy, int replica) : strategy_(strategy), replica_(replica) {}
  Strategy& strategy_;
  int replica_;
};

// The context of the replica running on this thread, or nullptr (cross-replica context).
ReplicaContext* get_replica_context();
bool in_cross_replica_context();
// The strategy of this replica, else of the innermost scope on this thread, else the default strategy.
Strategy& get_strategy();
// Whether a non-default strategy is current (a scope is open, or this thread is one of its replicas).
bool has_strategy();
// The live strategy with this id (Strategy::id(), Variable::owner()), or nullptr.
Strategy* find_strategy(uint64_t id);

class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  // "MirroredStrategy", ...
  virtual std::string name() const = 0;
  // Replicas in sync across the job: the replicas of this process times the workers.
  int num_replicas_in_sync() const { return num_local_replicas() * num_workers(); }
  // Replicas of this process, one per device (threads of it when more than one).
  int num_local_replicas() const { return static_cast<int>(devices_.size()); }
  // Processes that train together (MultiWorkerMirroredStrategy), and this one's index among them; 1 and 0 for the
  // strategies of one machine.
  virtual int num_workers() const { return 1; }
  virtual int worker_index() const { return 0; }
  // Whether this process writes what the job writes once (checkpoints, logs): worker 0.
  virtual bool is_chief() const { return worker_index() == 0; }
  // One device string per local replica ("/cpu:0", ...).
  const std::vector<std::string>& devices() const { return devices_; }
  // The Device local replica `replica` computes on: Device::cuda(N) for "/gpu:N", else the host. Its variables live
  // there, and fit/evaluate/predict copy each batch there before the step.
  Device replica_device(int replica) const;
  // Intra-op threads each replica's kernels use.
  int threads_per_replica() const { return threads_per_replica_; }
  // Process-unique id; variables this strategy makes carry it (Variable::owner()).
  uint64_t id() const { return id_; }

  // While alive: variables made on this thread go through this strategy, and get_strategy() returns it.
  class Scope {
   public:
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    friend class Strategy;
    explicit Scope(Strategy& strategy);
    Strategy& strategy_;
    std::unique_ptr<ScopedVariableCreator> creator_;
  };
  [[nodiscard]] Scope scope() { return Scope(*this); }

  // Runs fn on every replica. PerReplica arguments give each replica its own value; other arguments are
  // shared. Returns PerReplica<result> (nothing for void).
  template <class F, class... Args>
  auto run(F&& fn, const Args&... args);

  // Reduces per-replica values (one per replica) to one: the element-wise sum or mean over replicas (axis
  // nullopt), or, with an axis, the sum or mean over that axis of the values concatenated along it (tf
  // semantics). Cross-replica context only (inside run, use ReplicaContext::all_reduce); each replica adds its
  // value through its communicator, in replica order.
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int> axis = std::nullopt) const;
  double reduce(ReduceOp op, const PerReplica<double>& value) const;
  // The per-replica tensors concatenated along `axis` in replica order (gathered through the communicator).
  Tensor gather(const PerReplica<Tensor>& value, int axis = 0) const;
  // Element-wise sums over the workers of `values` (e.g. metric states); `values` itself with one worker.
  // Driving thread, between runs; every worker calls it at the same point with the same length.
  virtual std::vector<double> sum_across_workers(const std::vector<double>& values) const;
  // Overwrites `tensors` (float32, bfloat16 or int64; the same shapes on every worker) with the chief's, in
  // place; nothing with one worker. Driving thread, between runs; every worker calls it at the same point.
  virtual void broadcast_from_chief(const std::vector<Tensor>& tensors) const;
  // Every worker's `bytes` (any lengths), in worker order; {bytes} with one worker. Driving thread, between runs;
  // every worker calls it at the same point.
  virtual std::vector<std::string> all_gather_across_workers(const std::string& bytes) const;

  // Global batches split across replicas (see strata/distribute/input.h).
  DistributedDataset experimental_distribute_dataset(const data::Dataset& dataset) const;
  DistributedDataset distribute_datasets_from_function(
      const std::function<data::Dataset(const InputContext&)>& dataset_fn) const;

  // ---- the extension point for Model::fit (strata/distribute/training_program.h)
  // What runs fit's training steps of `program` under this strategy (made once per fit). The default steps every
  // local replica in sync (ReplicaStepRunner).
  virtual std::unique_ptr<StepRunner> make_step_runner(TrainingProgram& program);
  // Called by a program's train_step in this strategy's replica context: a step this strategy runs its own way (a
  // pipeline's stages), returning the loss; nullopt (the default) lets the program step as usual. So a custom loop's
  // strategy.run([&](auto& b) { return model.train_step(b); }, batch) steps as fit does.
  virtual std::optional<double> run_train_step(TrainingProgram& program, const data::Element& batch);

  // ---- for Model::fit and the strategies
  // Runs fn(replica) on every replica's thread with its replica context, and waits; rethrows the first
  // error after stopping the others.
  void run_replicas(const std::function<void(int replica)>& fn);
  // How this strategy makes a model variable (the creator scope() installs).
  virtual Variable create_variable(const Tensor& initial_value, const VariableOptions& options) = 0;
  // Waits for all replicas and runs fn once (see ReplicaContext::merge_call). Replica threads only.
  void merge_call(int replica, const std::function<void()>& fn);

 private:
  friend class ReplicaContext;
  // Runs fn(replica) on every replica (on this thread when there is one) for a cross-replica `what` of
  // `values` per-replica values; InvalidArgument inside run or for a count other than the replicas'.
  void on_each_replica(const char* what, int values, const std::function<void(int)>& fn) const;

 protected:
  // `devices`: one per replica. `threads_per_replica` 0: the constructing thread's num_threads() split
  // evenly (at least 1 each). The replicas exchange tensors through a local communicator group that runs
  // `all_reduce` with `algorithm`.
  Strategy(std::vector<std::string> devices, int threads_per_replica = 0,
           comm::AllReduceAlgorithm algorithm = comm::AllReduceAlgorithm::kRing);
  // The local replicas' group, rank r for replica r, made by `make_group(replicas)` instead of the shared-memory
  // group (MirroredStrategy over GPUs: an in-process NCCL group, one rank per GPU).
  using LocalGroupFactory = std::function<std::vector<std::shared_ptr<comm::Communicator>>(int replicas)>;
  Strategy(std::vector<std::string> devices, int threads_per_replica, LocalGroupFactory make_group);
  // Local replica `replica`'s end of the group every exchange between the replicas goes through (the only
  // channel: gradients, ReplicaContext::all_reduce, reduce and gather). Used on that replica's thread. The
  // default is the local group of this process's replicas.
  virtual comm::Communicator& communicator(int replica) const;
  // The local group's communicator of local replica `replica` (what communicator() returns unless overridden), for
  // a strategy that builds on it.
  std::shared_ptr<comm::Communicator> local_communicator(int replica) const;
  // The aggregator replica `replica` installs (nullptr: none; the optimizer updates directly).
  virtual GradientAggregator* aggregator(int replica);
  // A replica failed with `reason`: wake the others from whatever they wait on. The default aborts the
  // replicas' communicator group; an override calls it too.
  virtual void on_replica_failure(const std::string& reason);
  // Whether replicas run as threads of this strategy (else on the calling thread, one replica).
  bool uses_replica_threads() const { return num_local_replicas() > 1; }

 private:
  class Impl;
  std::vector<std::string> devices_;
  int threads_per_replica_;
  uint64_t id_;
  std::unique_ptr<Impl> impl_;
};

// The strategy in effect when no scope is open: one replica on the calling thread, plain variables.
Strategy& default_strategy();

// A few numbers summed over every replica of the job with the gradients instead of by a collective of their own
// (Model::fit's metric states for its logs: on Gloo each collective a step adds costs milliseconds). While one is
// alive on a replica's thread, that replica's next gradient all-reduce through the strategy's aggregator carries
// `values` too, and sums() holds their sums over the replicas afterwards (to ~1e-7 relative: float32 adds; integers
// below 2^24 exact: enough for logs, not for checkpoints); sums() stays empty where that could not
// be done (no aggregator, compressed gradients, gradients that did not come from the tape), and the caller sums
// another way. Every replica asks with as many values. Thread-safety: one per thread, scoped (they nest).
class SumWithGradients {
 public:
  explicit SumWithGradients(std::vector<double> values);
  ~SumWithGradients();
  SumWithGradients(const SumWithGradients&) = delete;
  SumWithGradients& operator=(const SumWithGradients&) = delete;
  const std::vector<double>& sums() const { return sums_; }

  // For aggregators: the request open on this thread (nullptr: none), its values, and handing it the sums.
  static SumWithGradients* current();
  const std::vector<double>& values() const { return values_; }
  void deliver(std::vector<double> sums) { sums_ = std::move(sums); }

 private:
  std::vector<double> values_, sums_;
  SumWithGradients* previous_;
};

// sum(per_example_loss * sample_weight) / global_batch_size (tf.nn.compute_average_loss); a global batch
// of 0 means per-replica rows × replicas in sync. Summed over replicas this is the global batch's mean.
Variable compute_average_loss(const Variable& per_example_loss, int64_t global_batch_size = 0,
                              const Tensor& sample_weight = {});
// regularization_loss / replicas in sync (tf.nn.scale_regularization_loss).
Variable scale_regularization_loss(const Variable& regularization_loss);

// ---- run's unpacking
namespace detail {
template <class A>
const auto& replica_arg(const A& arg, int replica) {
  if constexpr (is_per_replica<A>::value) {
    return arg[replica];
  } else {
    return arg;
  }
}
}  // namespace detail

template <class F, class... Args>
auto Strategy::run(F&& fn, const Args&... args) {
  using R = std::invoke_result_t<F&, decltype(detail::replica_arg(args, 0))...>;
  if constexpr (std::is_void_v<R>) {
    run_replicas([&]([[maybe_unused]] int r) { fn(detail::replica_arg(args, r)...); });
  } else {
    using V = std::decay_t<R>;
    std::vector<std::optional<V>> results(static_cast<size_t>(num_local_replicas()));
    run_replicas([&](int r) { results[static_cast<size_t>(r)].emplace(fn(detail::replica_arg(args, r)...)); });
    std::vector<V> values;
    values.reserve(results.size());
    for (auto& v : results) values.push_back(std::move(*v));
    return PerReplica<V>(std::move(values));
  }
}

}  // namespace strata::distribute
