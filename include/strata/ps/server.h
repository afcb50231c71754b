// A parameter server (`ps` task) and its client: the gRPC service of src/ps/proto/parameter_server.proto. The
// server holds variable shards (float32) and applies each gradient pushed to it at once with the shard's own
// optimizer (SGD with momentum, Adam, Adagrad), its slots kept beside the shard; a push names its step, and a step
// applied before is dropped, so a step re-run after a lost worker is applied once (a shard remembers its last
// ParameterServer::kStepWindow step ids, so memory and checkpoints stay bounded).
//
//   ps::ParameterServer server;
//   server.start("127.0.0.1:0");                      // port 0: the OS picks; server.port() says which
//   ps::ParameterServerClient ps("127.0.0.1:" + std::to_string(server.port()));
//   ps.create("dense/kernel:0", initial, {.name = "adam", .learning_rate = 1e-3});
//   ps.push("dense/kernel:0", grad, "worker:1/step:17");   // true: applied; false: a repeat, dropped
//   Tensor w = ps.pull("dense/kernel:0");
//   Tensor rows = ps.pull_rows("embedding:0", {3, 17});    // an embedding lookup: rows 3 and 17
//
// save(n) and restore(n) write and read checkpoint n of every shard of a ps (value, optimizer slots and step count,
// the step ids applied) under the checkpoint directory the ps was started with, so a restarted ps continues where
// the last save stood. A caller names a number, never a path (src/ps/ps_checkpoint.h has the layout).
// Synchronous rounds (max_staleness = 0, strata/ps/sync_round.h): a push that names a round is summed with the
// round's other pushes to that shard; the push that brings the round to `round.size` distinct step ids applies their
// mean as one update before it returns (a repeated step id is dropped as ever). A round pending at a save is not in
// the save (its pushes are taken again after a restore).
// A sparse push (push_rows) updates as a dense gradient that is zero outside its rows would (for Adam every
// slot decays, as in TensorFlow's non-lazy sparse update). Errors: NotFound-like InvalidArgument naming an unknown
// shard, a shape or row that does not fit, a shard created again with another shape or optimizer; Unavailable
// naming the address when the server cannot be reached within the client's timeout; Timeout when a server that was
// reached does not answer within it (the status mapping of every strata RPC, src/cluster/rpc_status.h).
// Thread-safety: a server serves any number of clients at once (one lock per shard); a client may be used from
// many threads at once. A call cut off by UNAVAILABLE (a ps that died mid-call) is made again with backoff within the
// timeout, except a push without a step id (applying it twice would not be dropped).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/ps/sync_round.h"
#include "strata/tensor.h"

namespace strata::ps {

// The optimizer a shard is updated with (the job's, as on the workers): the wire form of its optim::OptimizerConfig
// (optimizer_spec_of makes it; the ps makes the shard's optimizer back with optim::from_config).
struct OptimizerSpec {
  std::string name = "sgd";  // "sgd", "adam", "adagrad"
  double learning_rate = 0.01;
  double momentum = 0.0;             // sgd
  double beta_1 = 0.9;               // adam
  double beta_2 = 0.999;             // adam
  double epsilon = 1e-7;             // adam, adagrad
  double initial_accumulator = 0.1;  // adagrad
};

class ParameterServer {
 public:
  // How many step ids a shard remembers by default to drop repeats. A repeat comes from a step re-run after a lost
  // worker, soon after the original, so a window of the most recent ids suffices and keeps memory and checkpoints
  // bounded over a long job: a shard keeps its last `step_window` applied ids (in order, also across save/restore)
  // and forgets older ones, so a repeat of a step more than `step_window` updates old is applied again.
  static constexpr int64_t kStepWindow = 100000;

  // InvalidArgument when `step_window` < 1.
  explicit ParameterServer(int64_t step_window = kStepWindow);
  ~ParameterServer();  // stops
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  struct StartOptions {
    // Where this ps writes and reads its checkpoints (ckpt-<n>/ directories); "": none (Save and Restore are
    // refused with FAILED_PRECONDITION).
    std::string checkpoint_directory;
    // > 0: first loads checkpoint n from checkpoint_directory (as ParameterServerClient::restore), so that a
    // restarted ps answers its first call with its last checkpoint's values. 0: starts empty.
    int64_t restore_checkpoint = 0;
    // Caps every request (0: any size): a larger one is refused (RESOURCE_EXHAUSTED) before it is read whole.
    // ParameterServerStrategy gives the job's largest variable plus a margin.
    int64_t max_message_bytes = 0;
    // Replication (src/ps/replication.h): every ps task's address in task order (2 or more; empty: none) and this
    // ps's index among them. Each shard created here is backed up on the next ps. Before it listens, the ps asks
    // every other ps for the shards they share (a restarted ps takes its place again as their backup); when any
    // come, restore_checkpoint is not loaded (the live copies are newer).
    std::vector<std::string> replicas;
    int64_t replica_index = 0;
    // Bounds each call to another ps (a forwarded push waits this long for a restarted backup to listen).
    std::chrono::milliseconds replica_timeout = std::chrono::seconds(10);
  };
  // Serves on `address` ("host:port"; port 0: the OS picks; an empty host binds 127.0.0.1). Unavailable naming the
  // address when it cannot listen there; InvalidArgument or DataCorrupt when the checkpoint to restore is missing
  // or damaged.
  void start(const std::string& address, const StartOptions& options);
  void start(const std::string& address) { start(address, StartOptions{}); }
  int port() const;
  // Shards start() restored from the checkpoint.
  int64_t shards_restored() const;
  // Shards start() copied from the other ps tasks (as their backup).
  int64_t shards_resynced() const;
  void stop();
  // How many pushes were applied (a round's pushes count once their round is applied) and how many dropped as
  // repeats, over every shard (for tests and reports).
  int64_t pushes_applied() const;
  int64_t pushes_dropped() const;
  // Step ids remembered to drop repeats, over every shard (at most step_window per shard).
  int64_t steps_remembered() const;
  // Rows sent by pulls (a whole pull counts every row of its shard) and rows of gradients applied by pushes (a dense
  // push counts every row), over every shard: what steps move, for tests and reports.
  int64_t rows_pulled() const;
  int64_t rows_pushed() const;
  // Shards this ps took over from a lost primary, and pushes it applied as a backup.
  int64_t takeovers() const;
  int64_t pushes_replicated() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class ParameterServerClient {
 public:
  // `timeout` bounds every call (and reaching the server). `caller` names this task ("worker:1") in the ps's
  // refusals of its pushes.
  explicit ParameterServerClient(const std::string& address,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                 const std::string& caller = "");
  ~ParameterServerClient();

  // Creates shard `name` (float32 `initial`); false when it existed already with the same shape and optimizer.
  // `replace`: a shard of that name is replaced by the new one (its value, slots and step ids gone).
  bool create(const std::string& name, const Tensor& initial, const OptimizerSpec& optimizer, bool replace = false);
  // Shard `name` takes `value` (float32, its shape) as its value and keeps its optimizer's slots and step count, its
  // learning rate, update count and step ids; on the shard's primary, which passes it to the backup as it does a
  // push. A shard the ps does not hold is created from `value` with `optimizer`. InvalidArgument-like errors (as
  // create) for another shape or optimizer (the learning rate aside). The chief writing weights back once training
  // ended (EarlyStopping's restore_best_weights).
  void assign(const std::string& name, const Tensor& value, const OptimizerSpec& optimizer);
  Tensor pull(const std::string& name);
  // Rows `rows` of the shard (axis 0), in that order: [rows.size(), ...].
  Tensor pull_rows(const std::string& name, const std::vector<int64_t>& rows);
  // Applies `gradient` (the shard's shape); false when `step_id` was applied before ("" never repeats; a step more
  // than the ps's step window of updates old is forgotten and applied again). With a `round`, the gradient joins the
  // round's sum (it needs a step id; false when the step is in the round already) and the round's mean is applied
  // once it is complete; InvalidArgument when the round's size disagrees with its others, and when the gradient holds
  // NaN or an infinity ("worker:1 pushed NaN (...) into model/var_4/part_0 (push step:256)"; the shard keeps its value).
  // `learning_rate` > 0: the update is applied at that rate, which the shard keeps as its own from then on (the
  // chief's rate, lowered by ReduceLROnPlateau); 0: at the shard's own rate. A round's pushes name the same.
  bool push(const std::string& name, const Tensor& gradient, const std::string& step_id = "",
            const SyncRound& round = {}, double learning_rate = 0);
  // Applies the gradient of rows `rows` ([rows.size(), ...]; the other rows' gradient is zero); `round` and
  // `learning_rate` as push.
  bool push_rows(const std::string& name, const std::vector<int64_t>& rows, const Tensor& gradient,
                 const std::string& step_id = "", const SyncRound& round = {}, double learning_rate = 0);
  // Saves every shard the ps serves (its primaries; a backup is saved by its primary) as checkpoint `checkpoint`
  // (>= 1) under the ps's checkpoint directory (one
  // safetensors file per shard, with the optimizer's slots and step count and the step ids applied; the checkpoint
  // renamed into place whole); removes the ps's other checkpoints but `keep` (0: none). Returns how many shards.
  // InvalidArgument when the ps has no checkpoint directory.
  int64_t save(int64_t checkpoint, int64_t keep = 0);
  // Loads every shard of checkpoint `checkpoint` in place of every shard held (backups held for other ps go too: they
  // are of a newer state than the checkpoint; a restored shard has no backup until its backup's ps restarts);
  // returns how many. A ps fenced at that checkpoint (Stats::fenced_at) only lifts its fence: it holds it already.
  // InvalidArgument when the ps has no such checkpoint; DataCorrupt naming a damaged file.
  int64_t restore(int64_t checkpoint);
  // A ps of a replicated job, after every ps was restored from a checkpoint (which leaves shards without backups):
  // takes the backups of the other ps's shards again, as a restarted ps does; returns how many. FailedPrecondition
  // on a ps without replication.
  int64_t rebackup();
  // What the ps holds and has done since it started (a restarted ps counts from its restart).
  struct Stats {
    int64_t shards = 0;   // primaries and backups
    int64_t backups = 0;  // of those, backups
    int64_t pushes_applied = 0;
    int64_t pushes_dropped = 0;
    int64_t takeovers = 0;          // shards it took over from a lost primary
    int64_t pushes_replicated = 0;  // pushes it applied as a backup
    // > 0: the ps restarted from that checkpoint and refuses pulls, pushes and saves (FailedPrecondition) until
    // restore() of the same number: it holds an older state than the job acknowledged.
    int64_t fenced_at = 0;
    struct Shard {
      std::string name;
      int64_t updates = 0;  // updates applied (a synchronous round's counts once), checkpointed with the shard
      bool backup = false;
      int64_t takeovers = 0;  // times this ps took it over from a lost primary
    };
    std::vector<Shard> shard_status;  // every shard held, by name
  };
  Stats stats();
  const std::string& address() const;

  // Links the clients of every ps task of one job (in task order; 2 or more, else nothing), for shard replication
  // (ParameterServer::StartOptions::replicas): a call for a shard goes to its primary now, wherever it moved, and a
  // call that finds the primary gone has its backup take over and goes there. A linked client no longer waits for
  // an unreachable ps that has a backup of the shard. The clients must outlive their use.
  static void link_replicas(const std::vector<std::shared_ptr<ParameterServerClient>>& clients);

 private:
  struct Replicas;
  // push (rows null) and push_rows.
  bool push_request(const std::string& name, const std::vector<int64_t>* rows, const Tensor& gradient,
                    const std::string& step_id, const SyncRound& round, double learning_rate);
  // create (keep_state false) and assign (replace and keep_state true).
  bool create_request(const std::string& name, const Tensor& initial, const OptimizerSpec& optimizer, bool replace,
                      bool keep_state);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::ps
