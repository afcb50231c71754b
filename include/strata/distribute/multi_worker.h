// MultiWorkerMirroredStrategy (tf.distribute.MultiWorkerMirroredStrategy): synchronous training across processes
// and machines. Every worker process holds a copy of every variable; each step every worker computes its share of
// the global batch and the gradients are all-reduced across the workers (in buckets that start while backward is
// still running), so that all copies take the same update.
//
//   // one process per worker, each with its TF_CONFIG (or under mpirun / torchrun)
//   distribute::MultiWorkerMirroredStrategy strategy;          // resolves the cluster from the environment
//   const int64_t global_batch = 64 * strategy.num_replicas_in_sync();
//   auto scope = strategy.scope();                             // variables: the chief's initial values everywhere
//   ... model.compile(...); model.fit(train.batch(global_batch), ...);   // only the chief should write files
//
// A worker is one replica by default (TensorFlow's behaviour for CPU workers), or `local_replicas` threads;
// num_replicas_in_sync() is workers × local replicas, replica_id_in_sync_group() id_in_cluster × local replicas +
// the local replica. Gradients are reduced hierarchically: within the worker, then across the workers
// (strata/comm/hierarchical.h). How each worker reads the data follows the dataset's AutoShardPolicy
// (strata/distribute/input.h): under DATA (AUTO's choice without files to split, e.g. IDX) every worker reads the
// same global batches and trains on its replicas' part of each, so N workers compute exactly what one process with
// the same global batch would (the equivalence the tests check); under FILE each worker reads its own files and
// its share of the global batch, and shards of unequal size never deadlock.
//
// Communication (CommunicationOptions) goes through a worker group (strata/cluster/worker_group.h): "auto" picks the
// mpi backend under mpirun and gloo otherwise; gloo connects through the job's coordination service, which the chief
// (worker 0 without a chief, rank 0 under torchrun) serves on its own TF_CONFIG address. Every task sends heartbeats;
// a task silent for the heartbeat timeout is declared lost, and every other worker's pending collective then fails at
// once with an error naming it, instead of waiting for the collective timeout; a collective already blocked inside
// Gloo on the lost peer cannot be interrupted, so if the strategy still exists 1 s later
// CommunicationOptions::on_blocked_by_lost_task is called (the strata CLI prints that error and exits with status 1,
// as TensorFlow's workers end when a peer is lost). A worker killed outright is usually noticed at
// once (its connections close). A worker that never comes ends the others' start-up with a Timeout naming it.
// After any such failure the strategy is unusable: restart the job (BackupAndRestore resumes it where the last
// checkpoint stood) — unless training is elastic (ElasticOptions, `strata launch --min-workers`): then every step
// commits on every worker or on none, and the survivors of a lost worker regroup and run the discarded step again
// on the same global batch, and a restarted worker rejoins at a step boundary (src/distribute/elastic_group.h,
// docs/cluster.md).
//
// GPU workers (CommunicationOptions::device "gpu", or implementation "nccl"): one replica per worker on
// "/gpu:<local index>" (the task's local rank, else its id_in_cluster modulo the visible GPUs), variables there, and
// the workers' communicator the nccl backend through the worker group's store (a single worker: an NCCL group of one,
// so that one GPU runs the path of several). "auto" picks nccl for GPU workers; 'ring' and 'mpi' on GPUs, several local
// replicas, elastic training and bf16 compression with nccl are InvalidArgument; without the CUDA build or the GPU it
// is Unavailable saying which (the build, or how many GPUs are visible).
//
// Thread-safety: as Strategy (one driving thread per process).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strata/cluster/cluster_resolver.h"
#include "strata/cluster/worker_group.h"
#include "strata/distribute/strategy.h"

namespace strata::distribute {

// tf.distribute.experimental.CommunicationOptions.
struct CommunicationOptions {
  // "auto" (nccl on GPU workers; else mpi under mpirun, gloo otherwise), "ring" (gloo's ring all-reduce), "mpi",
  // "nccl" (GPU workers: it implies device "gpu").
  std::string implementation = "auto";
  // The worker's replica: "cpu" (local_replicas threads on the host), or "gpu" (one replica on the worker's GPU).
  std::string device = "cpu";
  // Gradients are all-reduced in buckets of about this many bytes (PyTorch DDP's default cap, 25 MiB).
  int64_t bytes_per_pack = 25 << 20;
  // How gradient buckets travel between the workers: "none" (float32), or "bf16" (PyTorch's bf16_compress_hook:
  // every worker's float32 bucket is rounded to bfloat16, all-reduced with bfloat16 on the wire — each pairwise sum
  // computed in float32 and rounded back — then widened to float32 for the optimizer). Half the bytes on the wire,
  // at about 3 significant digits per gradient element, so for links that are slower than the workers' compute.
  // The replicas inside one worker reduce in float32 either way. Anything else is InvalidArgument.
  std::string gradient_compression = "none";
  // Bound on every collective (TensorFlow's timeout_seconds).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Bound on start-up, every worker reaching the others (0: 60 s, or `timeout` if shorter); while it waits, the
  // rendezvous says every 10 s whom it waits for and where (cluster::WorkerGroupOptions).
  std::chrono::milliseconds rendezvous_timeout{0};
  // A task silent this long is declared lost (TensorFlow's default: 10 s); heartbeats go every interval.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(1)};
  // Called, on a background thread, when a task was declared lost and a second later this process is still blocked
  // in a collective waiting for it: Gloo cannot cancel a receive, so the error cannot reach the caller. The library
  // does nothing more (it never ends the process); a program decides (the strata CLI says why and exits 1). The
  // argument names the lost task and why it was declared lost. Not called once the strategy is destroyed.
  std::function<void(const std::string& reason)> on_blocked_by_lost_task;
  // What must agree across the workers, compared at the rendezvous (cluster::WorkerGroupOptions::fingerprint).
  std::map<std::string, std::string> fingerprint;
};

// The worker group a strategy spanning processes makes from `options` (implementation "ring" is backend gloo),
// its communicator's keys under `prefix`; a blocked-by-lost-task report names `strategy`.
cluster::WorkerGroupOptions worker_group_options(const CommunicationOptions& options, std::string prefix,
                                                 const std::string& strategy = "MultiWorkerMirroredStrategy");

// Elastic training (strata launch --min-workers): when a worker is lost the survivors go on without restarting.
struct ElasticOptions {
  int min_workers = 0;  // 0: not elastic; else the fewest workers the job goes on with (at least 1)
};

// A step that did not commit on every member of an elastic group (a member failed or was lost during it): nothing
// of it was applied anywhere; the group regroups and the step runs again.
class StepDiscarded : public Unavailable {
 public:
  using Unavailable::Unavailable;
};

// One change of an elastic group's members.
struct MembershipChange {
  int64_t epoch = 0;              // the membership epoch it started (0: the job's start)
  std::vector<std::string> left;    // the tasks that are not members any more
  std::vector<std::string> joined;  // the tasks that joined
  std::vector<std::string> members;
  // A loss: from the start of the discarded step to the new group's communicator. A join: from the request (the
  // joiner) or the admission (a member) to the new group's communicator.
  double seconds = 0;
  // A join: sending the joiner the chief's state (weights, optimizer state, input position), and its bytes.
  double state_seconds = 0;
  int64_t state_bytes = 0;
};

namespace detail {
class ElasticGroup;
}

class MultiWorkerMirroredStrategy final : public Strategy {
 public:
  // The cluster from the environment (TF_CONFIG, mpirun or torchrun; none: a single worker).
  explicit MultiWorkerMirroredStrategy(CommunicationOptions options = {});
  // The cluster as given, with `local_replicas` CPU replicas per worker (threads, each with its share of the
  // cores; every worker must have as many); blocks until every worker has connected (Timeout naming those that
  // did not).
  MultiWorkerMirroredStrategy(const cluster::TaskInfo& task, CommunicationOptions options, int local_replicas = 1,
                              ElasticOptions elastic = {});
  ~MultiWorkerMirroredStrategy() override;

  std::string name() const override { return "MultiWorkerMirroredStrategy"; }
  int num_workers() const override { return num_workers_; }
  int worker_index() const override { return worker_index_; }
  const cluster::TaskInfo& task() const { return task_; }
  const CommunicationOptions& communication_options() const { return options_; }
  // The backend the workers' communicator runs on: "gloo", "mpi", "nccl" (GPU workers, even a single one), or
  // "local" for a single CPU worker.
  std::string backend() const;

  // Makes the variable on every worker with the chief's `initial_value` (broadcast), so that workers start
  // equal whatever their seeds. Every worker must create the same variables in the same order.
  Variable create_variable(const Tensor& initial_value, const VariableOptions& options) override;
  comm::Communicator& communicator(int replica) const override;
  std::vector<double> sum_across_workers(const std::vector<double>& values) const override;
  void broadcast_from_chief(const std::vector<Tensor>& tensors) const override;
  std::vector<std::string> all_gather_across_workers(const std::string& bytes) const override;
  // Elastic training steps through ElasticStepRunner (every step commits everywhere or nowhere); otherwise the
  // replicas step in sync.
  std::unique_ptr<StepRunner> make_step_runner(TrainingProgram& program) override;

  // ---- elastic training (ElasticOptions): how Model::fit drives a step that must commit everywhere or nowhere
  bool elastic() const { return elastic_ != nullptr; }
  // Before each attempt of a step.
  void begin_step() {
    voted_ = false;
    step_started_ = std::chrono::steady_clock::now();
  }
  // This worker's vote on the step in progress (once per attempt; a second call returns the first's outcome):
  // true when it commits on every member. The gradient aggregator votes ok once the sums are in; Model::fit votes
  // failed when the attempt threw before that.
  bool commit_step(bool ok);
  // After a discarded step: agrees with the survivors on the next membership epoch and connects its communicator;
  // num_workers() and worker_index() are then the new group's. Unavailable when fewer than min_workers remain or
  // this worker was declared lost.
  const MembershipChange& regroup();
  // A worker restarted while the job runs (the launcher's --max-restarts) starts outside the group: joining() until
  // join(), which asks to join and returns once the members admitted it at a step boundary (its communicator
  // connected; Model::fit then takes the chief's weights, optimizer state and input position).
  bool joining() const;
  const MembershipChange& join();
  // Whether the last committed step asks the members to admit a joiner; admit_joiners() does (every member calls
  // it after that step, then sends the state to the joiner: Model::fit does both).
  bool join_pending() const;
  const MembershipChange& admit_joiners();
  // After a join or an admission, once the state was sent: records what that took and reports the change.
  void joined(double state_seconds, int64_t state_bytes);
  // Called after each regroup, and after each join and admission once the state was sent (e.g. to print it); from
  // the driving thread.
  void set_on_membership_change(std::function<void(const MembershipChange&)> fn) { on_change_ = std::move(fn); }

 protected:
  GradientAggregator* aggregator(int replica) override;
  void on_replica_failure(const std::string& reason) override;

 private:
  void connect();

  cluster::TaskInfo task_;
  CommunicationOptions options_;
  bool on_gpu_ = false;  // one replica on a GPU, the workers on nccl
  int num_workers_ = 1;
  int worker_index_ = 0;
  // The worker group (coordination service, client, heartbeats, communicator); null for a single worker.
  std::unique_ptr<cluster::WorkerGroup> group_;
  // Across the workers, one rank per worker (null for a single worker); replaced by an elastic regroup.
  std::shared_ptr<comm::Communicator> comm_;
  // One rank per replica of the job, for each local replica: comm_ itself with one local replica, else the local
  // group and comm_ as one hierarchical group (empty for a single worker: the local group serves).
  std::vector<std::shared_ptr<comm::Communicator>> replica_comms_;
  std::vector<std::unique_ptr<GradientAggregator>> aggregators_;
  // Elastic: the group's members and votes (null when not elastic).
  ElasticOptions elastic_options_;
  std::unique_ptr<detail::ElasticGroup> elastic_;
  bool voted_ = false, last_vote_ = false;
  std::chrono::steady_clock::time_point step_started_;  // of the attempt in progress (begin_step)
  MembershipChange last_change_;
  std::function<void(const MembershipChange&)> on_change_;
  // The gradient aggregators over replica_comms_ (rebuilt after a regroup).
  void make_aggregators();
  // After the elastic group changed (comm_ and last_change_ set): rank, size, aggregators.
  const MembershipChange& took_new_group();
};

}  // namespace strata::distribute
