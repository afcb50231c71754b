// ParameterServerStrategy (strata/ps/parameter_server_strategy.h): the cluster's tasks read from TF_CONFIG, a ps
// task's server, the chief's clients and coordinator, and the ps checkpoints.
// Thread-safety: as the header; stop_ guards the join() / stop() hand-off.
#include "strata/ps/parameter_server_strategy.h"

#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>

#include "distribute/devices.h"
#include "ps/ps_checkpoint.h"
#include "ps/worker_client.h"
#include "strata/cluster/job_credentials.h"
#include "strata/error.h"
#include "strata/optim/optimizer.h"

namespace strata::ps {

struct ParameterServerStrategy::Stop {
  std::mutex mu;
  std::condition_variable cv;
  bool stopped = false;
};

OptimizerSpec optimizer_spec_of(const optim::Optimizer& optimizer) {
  // What the ps is sent is the optimizer's config (optim's registry, Keras's get_config) in the ps's wire form; the
  // ps makes the shard's optimizer back from it with optim::from_config.
  const optim::OptimizerConfig& config = optimizer.config();
  const std::string& name = config.name;
  STRATA_CHECK(config.learning_rate.is_constant(), InvalidArgument,
               "ParameterServerStrategy: the ps applies updates at a constant learning rate; optimizer '"
                   << name << "' has a schedule");
  STRATA_CHECK(!config.clipnorm && !config.clipvalue && !config.global_clipnorm && !config.weight_decay,
               InvalidArgument,
               "ParameterServerStrategy: the ps does not clip gradients or decay weights; optimizer '"
                   << name << "' asks for clipnorm, clipvalue, global_clipnorm or weight_decay");
  STRATA_CHECK(name == "sgd" || name == "adam" || name == "adagrad", InvalidArgument,
               "ParameterServerStrategy: the ps applies sgd, adam or adagrad updates, not '" << name << "'");
  auto hyperparameter = [&](const char* key) {
    const auto it = config.hyperparameters.find(key);
    STRATA_CHECK(it != config.hyperparameters.end(), InvalidArgument,
                 "ParameterServerStrategy: optimizer '" << name << "' has no " << key << " in its config");
    return it->second;
  };
  OptimizerSpec spec;
  spec.name = name;
  spec.learning_rate = optimizer.learning_rate();
  if (name == "sgd") {
    STRATA_CHECK(hyperparameter("nesterov") == 0.0, InvalidArgument,
                 "ParameterServerStrategy: the ps applies SGD with plain momentum, not nesterov");
    spec.momentum = hyperparameter("momentum");
  } else if (name == "adam") {
    STRATA_CHECK(hyperparameter("amsgrad") == 0.0, InvalidArgument,
                 "ParameterServerStrategy: the ps applies Adam without amsgrad");
    spec.beta_1 = hyperparameter("beta_1");
    spec.beta_2 = hyperparameter("beta_2");
    spec.epsilon = hyperparameter("epsilon");
  } else {
    spec.initial_accumulator = hyperparameter("initial_accumulator_value");
    spec.epsilon = hyperparameter("epsilon");
  }
  return spec;
}

namespace {
std::vector<std::string> job_addresses(const cluster::TaskInfo& task, const std::string& job) {
  const auto it = task.cluster.jobs.find(job);
  return it == task.cluster.jobs.end() ? std::vector<std::string>{} : it->second;
}
}  // namespace

std::optional<CommittedPsCheckpoint> committed_ps_checkpoint(const std::string& checkpoint_dir) {
  const auto manifest = detail::read_ps_manifest(checkpoint_dir);
  if (!manifest) return std::nullopt;
  return CommittedPsCheckpoint{
      .checkpoint = manifest->checkpoint,
      .position = {.step = manifest->step, .epochs_done = manifest->epochs_done, .step_in_epoch = manifest->step_in_epoch},
      .job_id = manifest->job_id};
}

ParameterServerStrategy::ParameterServerStrategy(const cluster::TaskInfo& task, ParameterServerStrategyOptions options)
    : Strategy(distribute::detail::checked_devices("ParameterServerStrategy", {"/cpu:0"})),
      task_(task),
      options_(std::move(options)),
      worker_addresses_(job_addresses(task, "worker")),
      ps_addresses_(job_addresses(task, "ps")),
      stop_(std::make_unique<Stop>()) {
  const std::string cluster = task.cluster.to_json();
  STRATA_CHECK(task.cluster.num_tasks("chief") == 1, InvalidArgument,
               "ParameterServerStrategy needs a cluster with a chief (it coordinates the job), got " << cluster);
  STRATA_CHECK(!worker_addresses_.empty(), InvalidArgument,
               "ParameterServerStrategy needs at least one worker task, got " << cluster);
  STRATA_CHECK(!ps_addresses_.empty(), InvalidArgument,
               "ParameterServerStrategy needs at least one ps task, got " << cluster);
  for (const std::string& a : worker_addresses_) {
    STRATA_CHECK(!a.empty(), InvalidArgument,
                 "ParameterServerStrategy needs every task's address (TF_CONFIG); mpirun and torchrun do not give them");
  }
  STRATA_CHECK(task.task_type == "chief" || task.task_type == "worker" || task.task_type == "ps", InvalidArgument,
               "ParameterServerStrategy: task " << task.name() << " is neither the chief, a worker nor a ps");
  STRATA_CHECK(options_.checkpoint_every_steps >= 0, InvalidArgument,
               "ParameterServerStrategy: checkpoint_every_steps must not be negative");
  STRATA_CHECK(options_.ps_timeout.count() > 0, InvalidArgument, "ParameterServerStrategy: ps_timeout must be positive");
  // TensorFlow's tutorial partitioner: variables of at least 256 KiB split over up to every ps, smaller ones whole.
  partitioner_ = options_.partitioner ? options_.partitioner
                                      : std::make_shared<MinSizePartitioner>(MinSizePartitioner::Options{
                                            .min_shard_bytes = 256 << 10,
                                            .max_shards = static_cast<int64_t>(ps_addresses_.size())});
  if (!options_.checkpoint_dir.empty()) {
    if (const auto committed = committed_ps_checkpoint(options_.checkpoint_dir)) {
      committed_checkpoint_ = committed->checkpoint;
      committed_position_ = committed->position;
    }
  }
  if (task.task_type == "ps") {
    server_ = std::make_unique<ParameterServer>();
    server_->start(task.address,
                   {.checkpoint_directory = options_.checkpoint_dir.empty() ? "" : ps_checkpoint_dir(task.task_index),
                    .restore_checkpoint = committed_checkpoint_,
                    .max_message_bytes = options_.max_message_bytes,
                    .replicas = replicating() ? ps_addresses_ : std::vector<std::string>{},
                    .replica_index = task.task_index,
                    // A forward must end well within the pushing client's deadline, so the primary can still answer.
                    .replica_timeout = std::min<std::chrono::milliseconds>(options_.ps_timeout / 4, std::chrono::seconds(10))});
  }
}

ParameterServerStrategy::~ParameterServerStrategy() {
  stop();
  coordinator_.reset();  // its dispatchers first: they call the workers
  if (server_) server_->stop();
}

Variable ParameterServerStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  return make_distributed_variable({initial_value}, options, id());
}

const std::vector<std::shared_ptr<ParameterServerClient>>& ParameterServerStrategy::servers() {
  if (servers_.empty()) {
    for (const std::string& a : ps_addresses_) {
      servers_.push_back(std::make_shared<ParameterServerClient>(a, options_.ps_timeout, task_.name()));
    }
    if (replicating()) ParameterServerClient::link_replicas(servers_);
  }
  return servers_;
}

ClusterCoordinator& ParameterServerStrategy::coordinator() {
  STRATA_CHECK(is_chief(), InvalidArgument,
               "ParameterServerStrategy: only the chief coordinates; this is " << task_.name());
  if (!coordinator_) coordinator_ = std::make_unique<ClusterCoordinator>(worker_addresses_, options_.coordinator);
  return *coordinator_;
}

std::string ParameterServerStrategy::describe_ps(const std::string& address) const {
  for (size_t i = 0; i < ps_addresses_.size(); ++i) {
    if (ps_addresses_[i] == address) return "ps:" + std::to_string(i) + " (" + address + ")";
  }
  return address;
}

std::string ParameterServerStrategy::ps_checkpoint_dir(int64_t index) const {
  STRATA_CHECK(!options_.checkpoint_dir.empty(), InvalidArgument,
               "ParameterServerStrategy: no checkpoint_dir to save the ps shards in");
  return detail::ps_checkpoint_directory(options_.checkpoint_dir, index).string();
}

int64_t ParameterServerStrategy::save_ps_checkpoint(const PsJobPosition& at) {
  STRATA_CHECK(is_chief(), InvalidArgument, "ParameterServerStrategy: the chief saves the ps shards, not " << task_.name());
  STRATA_CHECK(!options_.checkpoint_dir.empty(), InvalidArgument,
               "ParameterServerStrategy: no checkpoint_dir to save the ps shards in");
  const int64_t number = committed_checkpoint_ + 1;
  detail::PsCheckpointManifest manifest{.checkpoint = number,
                                        .step = at.step,
                                        .job_id = cluster::process_job_credentials()->job_id(),
                                        .epochs_done = at.epochs_done,
                                        .step_in_epoch = at.step_in_epoch};
  const auto& clients = servers();
  for (size_t i = 0; i < clients.size(); ++i) {
    manifest.ps_shards.push_back(on_ps(i, "saving the shards of", [&] { return clients[i]->save(number, committed_checkpoint_); }));
  }
  detail::commit_ps_manifest(options_.checkpoint_dir, manifest);  // only now does checkpoint `number` count
  committed_checkpoint_ = number;
  committed_position_ = at;
  int64_t shards = 0;
  for (int64_t n : manifest.ps_shards) shards += n;
  return shards;
}

std::vector<ParameterServerClient::Stats> ParameterServerStrategy::ps_stats() {
  const auto& clients = servers();
  std::vector<std::future<ParameterServerClient::Stats>> calls;
  for (size_t i = 0; i < clients.size(); ++i) {
    calls.push_back(std::async(std::launch::async, [&, i] {
      return on_ps(i, "asking for the state of", [&] { return clients[i]->stats(); });
    }));
  }
  std::vector<ParameterServerClient::Stats> stats;
  for (auto& c : calls) stats.push_back(c.get());
  return stats;
}

void ParameterServerStrategy::restore_ps_checkpoint() {
  STRATA_CHECK(committed_checkpoint_ > 0, InvalidArgument,
               "ParameterServerStrategy: no committed ps checkpoint to restore under '" << options_.checkpoint_dir << "'");
  const auto& clients = servers();
  for (size_t i = 0; i < clients.size(); ++i) {
    on_ps(i, "restoring checkpoint " + std::to_string(committed_checkpoint_) + " on",
          [&] { return clients[i]->restore(committed_checkpoint_); });
  }
  // Restored, each shard has one copy: every ps backs up its peers' shards again, once all hold the checkpoint.
  if (replicating()) {
    for (size_t i = 0; i < clients.size(); ++i) {
      on_ps(i, "backing up the shards of the others on", [&] { return clients[i]->rebackup(); });
    }
  }
}

std::vector<std::string> ParameterServerStrategy::on_every_worker(
    const std::function<std::string(detail::WorkerClient&)>& call) const {
  std::vector<std::future<std::string>> calls;
  for (size_t i = 0; i < worker_addresses_.size(); ++i) {
    calls.push_back(std::async(std::launch::async, [&, i] {
      detail::WorkerClient client(worker_addresses_[i], options_.coordinator.keepalive,
                                  options_.coordinator.probe_max_backoff);
      const std::string why = call(client);
      return why.empty() ? why : "worker:" + std::to_string(i) + " (" + worker_addresses_[i] + "): " + why;
    }));
  }
  std::vector<std::string> failed;
  for (auto& c : calls) {
    if (std::string why = c.get(); !why.empty()) failed.push_back(std::move(why));
  }
  return failed;
}

std::vector<std::string> ParameterServerStrategy::run_on_every_worker(const std::string& function,
                                                                     std::chrono::milliseconds timeout) {
  STRATA_CHECK(is_chief(), InvalidArgument, "ParameterServerStrategy: only the chief calls the workers");
  return on_every_worker([&](detail::WorkerClient& client) -> std::string {
    const detail::WorkerClient::Outcome out = client.run(function, /*step_id=*/-1, "", timeout);
    if (out.kind == detail::WorkerClient::Outcome::kLost) return out.lost_reason;
    if (out.kind == detail::WorkerClient::Outcome::kFunctionError) {
      try {
        std::rethrow_exception(out.error);
      } catch (const std::exception& e) {
        return e.what();
      }
    }
    return "";
  });
}

std::vector<std::string> ParameterServerStrategy::wait_for_workers(std::chrono::milliseconds timeout) {
  STRATA_CHECK(is_chief(), InvalidArgument, "ParameterServerStrategy: only the chief waits for the workers");
  return on_every_worker([&](detail::WorkerClient& client) {
    std::string why;
    return client.ping(timeout, &why) ? std::string() : why;
  });
}

void ParameterServerStrategy::join() {
  STRATA_CHECK(server_ != nullptr, InvalidArgument,
               "ParameterServerStrategy::join serves a ps task's variables; this is " << task_.name());
  std::unique_lock lock(stop_->mu);
  stop_->cv.wait(lock, [&] { return stop_->stopped; });
}

void ParameterServerStrategy::stop() {
  {
    std::lock_guard lock(stop_->mu);
    stop_->stopped = true;
  }
  stop_->cv.notify_all();
}

std::unique_ptr<cluster::WorkerGroup> ParameterServerStrategy::join_worker_group() const {
  if (task_.coordinator_address.empty() || task_.task_type == "ps") return nullptr;
  return cluster::WorkerGroup::init(task_, {.rendezvous_timeout = options_.rendezvous_timeout,
                                            .heartbeat_timeout = options_.heartbeat_timeout,
                                            .prefix = "ps",
                                            .without_communicator = true,
                                            .fingerprint = options_.fingerprint});
}

}  // namespace strata::ps
