// ParameterServerStrategy (tf.distribute.ParameterServerStrategy): asynchronous data parallelism over a cluster of
// a chief, workers and parameter servers (TF_CONFIG with "chief", "worker" and "ps" jobs). Every task runs the same
// program; what the strategy does depends on the task:
//
//   auto strategy = ps::ParameterServerStrategy(cluster::resolve_cluster_from_environment());
//   if (strategy.task_type() == "ps") strategy.join();        // serves variables until the process is stopped
//   auto scope = strategy.scope();
//   Sequential model(...);  model.compile(...);  model.build_for({1, 28, 28, 1});
//   model.fit(my_input(strategy.task_index()), {.epochs = 5, .steps_per_epoch = 938});
//
// - On a ps task the constructor starts a ParameterServer on the task's address, writing its checkpoints under
//   `checkpoint_dir`/ps-<index> (restored first from the checkpoint the job last committed there: a restarted ps
//   goes on from its last checkpoint).
// - On the chief, Model::fit puts the model's trainable variables on the ps tasks (sharded by the partitioner) and
//   schedules steps_per_epoch training steps per epoch through a ClusterCoordinator onto the workers; the loss and
//   metrics are those of the steps it got back; at each epoch's end the chief's model takes the ps values (so
//   validation, callbacks and evaluate see the trained weights). `checkpoint_dir`: the ps shards are saved there at
//   each epoch's end (and every checkpoint_every_steps steps); a checkpoint counts once the chief has committed its
//   manifest, after every ps wrote it whole (src/ps/ps_checkpoint.h).
// - On a worker task, Model::fit serves the training step (ps::RemoteTrainer on a ps::WorkerServer at the task's
//   address) on the dataset given to it, which is this worker's input, until the chief's fit ends; then it returns
//   an empty History.
// The chief's model and the workers' must be the same architecture compiled with the same loss, metrics and
// optimizer (SGD with momentum, Adam or Adagrad at a constant learning rate: the ps applies the updates).
//
// Failures: a worker lost is rescheduled around by the coordinator (its step re-run elsewhere, applied once). With
// 2 or more ps tasks each shard has a backup on another ps: a lost ps's shards are taken over by their backups with
// every acknowledged push, and the ps restarted by `strata launch --max-restarts` copies them back as their backup.
// With one ps (or replicate_shards off) a ps call waits up to ps_timeout for an unreachable ps (one restarted comes
// back from its checkpoint) and then fails naming the ps task.
//
// Within a process the strategy is one replica on the calling thread (like OneDeviceStrategy): num_workers() is 1,
// since the workers never meet in a collective; num_worker_tasks() counts them.
// Thread-safety: as Strategy (one driving thread); join() and stop() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/cluster/cluster_resolver.h"
#include "strata/cluster/worker_group.h"
#include "strata/distribute/strategy.h"
#include "strata/error.h"
#include "strata/optim/optimizer.h"
#include "strata/ps/cluster_coordinator.h"
#include "strata/ps/partitioner.h"
#include "strata/ps/server.h"

namespace strata::ps {

namespace detail {
class WorkerClient;
}

struct ParameterServerStrategyOptions {
  // How each variable is split over the ps tasks; null: MinSizePartitioner({256 KiB, max_shards = number of ps
  // tasks}), TensorFlow's tutorial choice (a variable of one shard is placed round-robin, see create_model_variables).
  std::shared_ptr<const Partitioner> partitioner;
  // The chief's coordinator (failure detection, bounds on retries).
  CoordinatorOptions coordinator;
  // Every call to a ps waits this long for it (a ps restarting within it is waited for), then fails naming it.
  std::chrono::milliseconds ps_timeout = std::chrono::seconds(30);
  // Each ps task checkpoints under <checkpoint_dir>/ps-<index> and restores the job's last committed checkpoint
  // when it starts; the chief asks for the saves and commits them. "": none.
  std::string checkpoint_dir;
  // The chief also saves the ps shards every this many steps (0: at each epoch's end only).
  int64_t checkpoint_every_steps = 0;
  // The chief continues the job from checkpoint_dir's committed checkpoint: every ps rolled back to it, fit from
  // where it was written. (A job whose ps tasks all restarted from it continues from it without being asked.)
  bool resume = false;
  // With 2 or more ps tasks, each shard has a backup on the next ps, which takes over when its primary is lost, with
  // every acknowledged push (src/ps/replication.h). false: one copy of each shard (a lost ps waits for its restart
  // and its checkpoint).
  bool replicate_shards = true;
  // During fit the chief and the workers form a worker group without a communicator (cluster::WorkerGroupOptions,
  // when the cluster names a coordinator address, as TF_CONFIG does): heartbeats, so that a worker whose chief is gone
  // stops naming it instead of serving forever, and `fingerprint`, compared at its rendezvous (what must agree across
  // the tasks; empty: nothing). A task silent for heartbeat_timeout is declared lost.
  std::map<std::string, std::string> fingerprint;
  std::chrono::milliseconds heartbeat_timeout = std::chrono::seconds(10);
  // How long a worker waits for the chief's fit to start serving the group (0: 60 s), saying every 10 s that it
  // waits.
  std::chrono::milliseconds rendezvous_timeout{0};
  // Cap on every message a ps or worker task takes (0: any size). `strata train` gives the job's largest variable
  // plus 1 MiB: no shard, gradient or step message of the job is larger.
  int64_t max_message_bytes = 0;
};

// Where a parameter-server job stood between two steps: what its checkpoint manifest records, so that a rolled-back
// or restarted chief continues from there.
struct PsJobPosition {
  int64_t step = 0;           // training steps done
  int64_t epochs_done = 0;    // the chief's fit: epochs completed
  int64_t step_in_epoch = 0;  // and steps done in the next one
};

// The last parameter-server checkpoint committed under a job's checkpoint_dir: its number, where the job stood, and
// the id of the job that wrote it (cluster::JobCredentials::job_id; "": a job without a secret).
struct CommittedPsCheckpoint {
  int64_t checkpoint = 0;
  PsJobPosition position;
  std::string job_id;
};
// None when `checkpoint_dir` holds no committed checkpoint; DataCorrupt naming a damaged manifest.
std::optional<CommittedPsCheckpoint> committed_ps_checkpoint(const std::string& checkpoint_dir);

// The ps's update for `optimizer` (the job's, as compiled on the chief): its config (optim::OptimizerConfig, which
// the ps turns back into an optimizer with optim::from_config) as the ps's OptimizerSpec. The ps applies SGD with
// momentum, Adam or Adagrad at a constant learning rate and without clipping or weight decay; InvalidArgument naming
// what it cannot apply.
OptimizerSpec optimizer_spec_of(const optim::Optimizer& optimizer);

class ParameterServerStrategy final : public distribute::Strategy {
 public:
  // `task`: a TF_CONFIG cluster with one chief, at least one worker and one ps (InvalidArgument naming what is
  // missing). On a ps task this starts its server (Unavailable when it cannot listen on the task's address).
  explicit ParameterServerStrategy(const cluster::TaskInfo& task, ParameterServerStrategyOptions options = {});
  ~ParameterServerStrategy() override;

  std::string name() const override { return "ParameterServerStrategy"; }
  // The chief's and each worker's local copy (one replica, as OneDeviceStrategy); fit puts them on the ps.
  Variable create_variable(const Tensor& initial_value, const VariableOptions& options) override;
  bool is_chief() const override { return task_.task_type == "chief"; }
  // Model::fit's steps: on the chief, scheduled onto the workers; on a worker, served for the chief until its fit
  // ends (src/ps/step_runners.h).
  std::unique_ptr<distribute::StepRunner> make_step_runner(distribute::TrainingProgram& program) override;

  const cluster::TaskInfo& task() const { return task_; }
  const std::string& task_type() const { return task_.task_type; }
  int64_t task_index() const { return task_.task_index; }
  int64_t num_worker_tasks() const { return static_cast<int64_t>(worker_addresses_.size()); }
  int64_t num_ps() const { return static_cast<int64_t>(ps_addresses_.size()); }
  // Whether each shard has a backup (replicate_shards, with 2 or more ps tasks).
  bool replicating() const { return options_.replicate_shards && ps_addresses_.size() >= 2; }
  const std::vector<std::string>& worker_addresses() const { return worker_addresses_; }
  const std::vector<std::string>& ps_addresses() const { return ps_addresses_; }
  const Partitioner& partitioner() const { return *partitioner_; }
  const ParameterServerStrategyOptions& options() const { return options_; }
  // Clients of every ps task, in task order (made on first use).
  const std::vector<std::shared_ptr<ParameterServerClient>>& servers();
  // The chief's coordinator over the workers (made on first use). InvalidArgument on another task.
  ClusterCoordinator& coordinator();
  // "ps:1 (127.0.0.1:2224)" for a ps address; the address itself when it is not one.
  std::string describe_ps(const std::string& address) const;
  // The directory the shards of ps `index` are saved in: <checkpoint_dir>/ps-<index>. REQUIRES: a checkpoint_dir.
  std::string ps_checkpoint_dir(int64_t index) const;
  // Chief: has every ps save its shards as the next checkpoint (each under its own directory), then commits the
  // checkpoint's manifest, recording `at` (where the job stood) and the job's id; returns the shards saved. A ps that
  // fails leaves the last committed checkpoint the job's.
  int64_t save_ps_checkpoint(const PsJobPosition& at);
  // The number of the checkpoint the job last committed (0: none).
  int64_t committed_checkpoint() const { return committed_checkpoint_; }
  // Where the job stood at that checkpoint (all zeros: none committed).
  const PsJobPosition& committed_position() const { return committed_position_; }
  // Chief: every ps's Stats, asked of all at once, in task order.
  std::vector<ParameterServerClient::Stats> ps_stats();
  // Chief: has every ps load the committed checkpoint (a ps restarted from it only lifts its fence), then, with
  // replication, back up the others' shards again. InvalidArgument when none was committed.
  void restore_ps_checkpoint();
  // Chief: the steps rolled back after a ps lost the job's state, and how many times, over the job (for reports).
  int64_t steps_rolled_back() const { return steps_rolled_back_; }
  int64_t rollbacks() const { return rollbacks_; }
  void count_rollback(int64_t steps) {
    steps_rolled_back_ += steps;
    ++rollbacks_;
  }

  // Chief: calls `function` once on every worker task at once (not through the coordinator's queue), each call
  // bounded by `timeout`; returns "worker:<i> (<address>): <why>" for each worker that did not answer.
  std::vector<std::string> run_on_every_worker(const std::string& function, std::chrono::milliseconds timeout);

  // Chief: waits until every worker task answers a liveness call, at most `timeout` in all; returns
  // "worker:<i> (<address>): <why>" for each that did not (fit then trains without it until it comes up).
  std::vector<std::string> wait_for_workers(std::chrono::milliseconds timeout);

  // ps task: blocks until stop() (or the process ends) while the server serves. InvalidArgument on another task.
  void join();
  void stop();
  // ps task: its server (for counts in tests and reports); nullptr elsewhere.
  ParameterServer* server() const { return server_.get(); }
  // Chief or worker, during fit: the group of the chief and the workers (see the options), or null when the cluster
  // names no coordinator address. Blocks until this task reached the group's service (its rendezvous timeout).
  std::unique_ptr<cluster::WorkerGroup> join_worker_group() const;

 private:
  // Runs `call` against every worker task at once; "worker:<i> (<address>): <why>" for each call that returned a
  // non-empty why.
  std::vector<std::string> on_every_worker(const std::function<std::string(detail::WorkerClient&)>& call) const;
  // call() against ps `index`; a ps down (Unavailable) or silent (Timeout) is named by its task: "<what> ps:1 (...)".
  template <class Call>
  auto on_ps(size_t index, const std::string& what, Call call) -> decltype(call()) {
    try {
      return call();
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnavailable && e.code() != ErrorCode::kDeadlineExceeded) throw;
      STRATA_THROW_CODE(e.code(), what << " " << describe_ps(ps_addresses_[index]) << ": " << e.what());
    }
  }

  cluster::TaskInfo task_;
  ParameterServerStrategyOptions options_;
  std::shared_ptr<const Partitioner> partitioner_;
  std::vector<std::string> worker_addresses_;
  std::vector<std::string> ps_addresses_;
  std::vector<std::shared_ptr<ParameterServerClient>> servers_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
  std::unique_ptr<ParameterServer> server_;
  int64_t committed_checkpoint_ = 0;  // the manifest's number under checkpoint_dir (ps tasks: the one restored)
  PsJobPosition committed_position_;
  int64_t steps_rolled_back_ = 0, rollbacks_ = 0;
  struct Stop;
  std::unique_ptr<Stop> stop_;
};

}  // namespace strata::ps
