// MultiWorkerMirroredStrategy (strata/distribute/multi_worker.h): the workers joined as a worker group
// (cluster::WorkerGroup: coordination service, heartbeats, a gloo, mpi or nccl communicator; elastic membership
// epochs on top), the chief's initial values broadcast to every worker, and the gradient aggregator over the workers'
// communicator. GPU workers differ only in the replica's device and the communicator (nccl).
// Thread-safety: one driving thread; the heartbeat thread only aborts the communicator (Communicator::abort may be
// called from any thread).
#include "strata/distribute/multi_worker.h"

#include "core/device_memory.h"
#include "distribute/all_reduce_aggregator.h"
#include "distribute/devices.h"
#include "distribute/elastic_group.h"
#include "distribute/elastic_step_runner.h"
#include "distribute/replica_collectives.h"
#include "strata/comm/hierarchical.h"
#include "strata/comm/nccl.h"
#include "strata/distribute/strategies.h"
#include "strata/trace.h"

namespace strata::distribute {

namespace {
constexpr const char* kName = "MultiWorkerMirroredStrategy";

void check_implementation(const std::string& implementation) {
  STRATA_CHECK(
      implementation == "auto" || implementation == "ring" || implementation == "mpi" || implementation == "nccl",
      InvalidArgument,
      kName << ": unknown communication implementation '" << implementation << "'; choices: auto, ring, mpi, nccl");
}

// CommunicationOptions::gradient_compression as the communicator's option.
comm::Compression gradient_compression(const std::string& name) {
  if (name == "bf16") return comm::Compression::kBFloat16;
  STRATA_CHECK(name == "none", InvalidArgument,
               kName << ": unknown gradient_compression '" << name << "'; choices: none, bf16");
  return comm::Compression::kNone;
}

// The worker's replica devices: `local_replicas` CPUs, or its one GPU (options.implementation then "nccl"). The GPU
// rules are checked here, before the base class is made: the options first, then the GPU itself (Unavailable naming
// the build or how many GPUs are visible).
std::vector<std::string> replica_devices(const cluster::TaskInfo& task, CommunicationOptions& options,
                                         int local_replicas, const ElasticOptions& elastic) {
  STRATA_CHECK(options.device == "cpu" || options.device == "gpu", InvalidArgument,
               kName << ": unknown device '" << options.device << "'; choices: cpu, gpu");
  check_implementation(options.implementation);
  const bool gpu = options.device == "gpu" || options.implementation == "nccl";
  if (!gpu) return MirroredStrategy::cpu_devices(local_replicas);
  STRATA_CHECK(options.implementation == "auto" || options.implementation == "nccl", InvalidArgument,
               kName << ": communication '" << options.implementation
                     << "' all-reduces host tensors; GPU workers use 'nccl' (or 'auto')");
  STRATA_CHECK(local_replicas == 1, InvalidArgument,
               kName << ": GPU workers run one replica each (one GPU per worker), not " << local_replicas);
  STRATA_CHECK(elastic.min_workers == 0, InvalidArgument,
               kName << ": elastic training regroups on gloo (CPU workers); GPU workers on nccl are not elastic");
  STRATA_CHECK(options.gradient_compression == "none", InvalidArgument,
               kName << ": gradient_compression '" << options.gradient_compression
                     << "' is for gloo; NCCL reduces the float32 gradients as they are");
  options.implementation = "nccl";
  options.device = "gpu";
  const int visible = strata::detail::cuda_device_count();
  int64_t local = task.local_rank.value_or(task.id_in_cluster.value_or(0));
  if (!task.local_rank && visible > 0) local %= visible;
  const std::string device = "/gpu:" + std::to_string(local);
  return detail::checked_devices(kName, {device}, /*gpus_allowed=*/true);
}
}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(CommunicationOptions options)
    : MultiWorkerMirroredStrategy(cluster::resolve_cluster_from_environment(), std::move(options)) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const cluster::TaskInfo& task, CommunicationOptions options,
                                                         int local_replicas, ElasticOptions elastic)
    : Strategy(replica_devices(task, options, local_replicas, elastic)),
      task_(task),
      options_(std::move(options)),
      on_gpu_(options_.implementation == "nccl"),
      elastic_options_(elastic) {
  (void)gradient_compression(options_.gradient_compression);  // checked now, used by make_aggregators
  STRATA_CHECK(options_.bytes_per_pack > 0, InvalidArgument, kName << ": bytes_per_pack must be > 0");
  STRATA_CHECK(
      options_.timeout.count() > 0 && options_.heartbeat_timeout.count() > 0 && options_.heartbeat_interval.count() > 0,
      InvalidArgument, kName << ": timeouts and the heartbeat interval must be positive");
  STRATA_CHECK(task_.id_in_cluster.has_value() && task_.task_type != "evaluator", InvalidArgument,
               kName << " runs on the chief and the workers; this process is task " << task_.name());
  num_workers_ = static_cast<int>(task_.num_workers);
  worker_index_ = static_cast<int>(*task_.id_in_cluster);
  if (elastic_options_.min_workers != 0) {
    STRATA_CHECK(elastic_options_.min_workers >= 1 && elastic_options_.min_workers <= num_workers_, InvalidArgument,
                 kName << ": elastic min_workers " << elastic_options_.min_workers << " must be in [1, " << num_workers_
                       << "] (the job's workers)");
    STRATA_CHECK(local_replicas == 1, InvalidArgument,
                 kName << ": elastic training runs one replica per worker, not " << local_replicas);
    STRATA_CHECK(options_.implementation != "mpi" && task_.source != cluster::Source::kMpi, InvalidArgument,
                 kName << ": elastic training regroups through the coordination service, on gloo; MPI cannot lose "
                          "a rank and go on");
    STRATA_CHECK(options_.gradient_compression == "none", InvalidArgument,
                 kName << ": elastic training carries the job's metric sums with the float32 gradients (the survivors "
                          "of a lost worker go on from them); gradient_compression '"
                       << options_.gradient_compression << "' sends none");
  }
  if (num_workers_ > 1) {
    connect();
  } else if (on_gpu_) {  // a single GPU worker: an NCCL group of one, the path of several
    comm_ = comm::make_nccl_communicator(
        comm::make_in_memory_store(), 0, 1,
        {.timeout = options_.timeout, .prefix = "mwms", .device = replica_device(0).index});
  }
  if (comm_) {  // (none yet for a restarted elastic worker: it joins later)
    if (num_local_replicas() == 1) {
      replica_comms_ = {comm_};
    } else {
      std::vector<std::shared_ptr<comm::Communicator>> local;
      for (int r = 0; r < num_local_replicas(); ++r) local.push_back(local_communicator(r));
      replica_comms_ = comm::make_hierarchical_group(std::move(local), comm_);
    }
  }
  make_aggregators();
}

void MultiWorkerMirroredStrategy::make_aggregators() {
  aggregators_.clear();
  // One CPU replica: the optimizer updates directly. (A single GPU worker reduces through its group of one.)
  if (num_replicas_in_sync() == 1 && !on_gpu_) return;
  std::function<bool()> vote;
  if (elastic_) vote = [this] { return commit_step(true); };
  for (int r = 0; r < num_local_replicas(); ++r) {
    aggregators_.push_back(std::make_unique<detail::AllReduceAggregator>(
        *this, r, communicator(r), options_.bytes_per_pack,
        [this](const Variable& v) {
          STRATA_CHECK(
              v.owner() == id() && v.num_components() == num_local_replicas(), InvalidArgument,
              name() << ".apply_gradients: variable '" << v.name() << "' was not created inside this strategy's scope");
        },
        gradient_compression(options_.gradient_compression), vote));
  }
}

bool MultiWorkerMirroredStrategy::commit_step(bool ok) {
  STRATA_CHECK(elastic_ != nullptr, InvalidArgument, kName << ": commit_step is for elastic training");
  if (voted_) return last_vote_;
  voted_ = true;
  last_vote_ = elastic_->should_commit(ok);
  return last_vote_;
}

const MembershipChange& MultiWorkerMirroredStrategy::regroup() {
  STRATA_CHECK(elastic_ != nullptr, InvalidArgument, kName << ": regroup is for elastic training");
  {
    trace::Span span("membership", "membership change");
    comm_ = elastic_->regroup();
  }
  last_change_ = elastic_->last_change();
  last_change_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_started_).count();
  if (trace::recording()) {
    std::string what = "membership epoch " + std::to_string(last_change_.epoch) + ":";
    for (const std::string& t : last_change_.left) what += " " + t + " left";
    for (const std::string& t : last_change_.joined) what += " " + t + " joined";
    trace::instant("membership", what);
  }
  took_new_group();
  if (on_change_) on_change_(last_change_);
  return last_change_;
}

void MultiWorkerMirroredStrategy::joined(double state_seconds, int64_t state_bytes) {
  last_change_.state_seconds = state_seconds;
  last_change_.state_bytes = state_bytes;
  if (on_change_) on_change_(last_change_);
}

bool MultiWorkerMirroredStrategy::joining() const { return elastic_ != nullptr && elastic_->joining(); }
bool MultiWorkerMirroredStrategy::join_pending() const { return elastic_ != nullptr && elastic_->join_pending(); }

const MembershipChange& MultiWorkerMirroredStrategy::join() {
  STRATA_CHECK(joining(), InvalidArgument, kName << ": join is for a restarted worker of an elastic job");
  comm_ = elastic_->join();
  last_change_ = elastic_->last_change();
  return took_new_group();
}

const MembershipChange& MultiWorkerMirroredStrategy::admit_joiners() {
  STRATA_CHECK(join_pending(), InvalidArgument, kName << ": no worker waits to join");
  comm_ = elastic_->admit();
  last_change_ = elastic_->last_change();
  return took_new_group();
}

const MembershipChange& MultiWorkerMirroredStrategy::took_new_group() {
  num_workers_ = elastic_->size();
  worker_index_ = elastic_->rank();
  replica_comms_ = {comm_};
  make_aggregators();
  return last_change_;
}

cluster::WorkerGroupOptions worker_group_options(const CommunicationOptions& options, std::string prefix,
                                                 const std::string& strategy) {
  cluster::WorkerGroupOptions group{.backend = options.implementation == "ring"   ? std::string("gloo")
                                               : options.implementation == "mpi"  ? std::string("mpi")
                                               : options.implementation == "nccl" ? std::string("nccl")
                                                                                  : std::string("auto"),
                                    .timeout = options.timeout,
                                    .rendezvous_timeout = options.rendezvous_timeout,
                                    .heartbeat_timeout = options.heartbeat_timeout,
                                    .heartbeat_interval = options.heartbeat_interval,
                                    .prefix = std::move(prefix),
                                    .fingerprint = options.fingerprint};
  if (options.on_blocked_by_lost_task) {
    group.on_blocked_by_lost_task = [blocked = options.on_blocked_by_lost_task, strategy](const std::string& reason) {
      blocked(strategy + ": " + reason);
    };
  }
  return group;
}

void MultiWorkerMirroredStrategy::connect() {
  cluster::WorkerGroupOptions group = worker_group_options(options_, "mwms");
  if (on_gpu_) group.device = replica_device(0).index;
  // Elastic: no communicator of the group's own, and no handler for lost tasks: a member's collective on a killed
  // peer fails by itself (its connections close), one on a stopped peer at the collective timeout, and the survivors
  // regroup. Aborting the communicator would close this member's own connections under a running collective, which
  // then could only time out.
  group.without_communicator = elastic_options_.min_workers != 0;
  group_ = cluster::WorkerGroup::init(task_, std::move(group));
  if (elastic_options_.min_workers != 0) {
    elastic_ = std::make_unique<detail::ElasticGroup>(
        group_->client(), group_->member_tasks(), task_.name(),
        detail::ElasticGroup::Options{.min_workers = elastic_options_.min_workers,
                                      .timeout = options_.timeout,
                                      .heartbeat_timeout = options_.heartbeat_timeout,
                                      .hostname = group_->hostname(),
                                      .backend = group_->backend()});
    comm_ = elastic_->start();
    if (!comm_) num_workers_ = 1;  // a restarted worker: alone until it joins (Model::fit joins)
    return;
  }
  comm_ = group_->shared_communicator();
}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() = default;

std::string MultiWorkerMirroredStrategy::backend() const { return comm_ ? comm_->backend() : "local"; }

comm::Communicator& MultiWorkerMirroredStrategy::communicator(int replica) const {
  return replica_comms_.empty() ? Strategy::communicator(replica) : *replica_comms_[static_cast<size_t>(replica)];
}

std::vector<double> MultiWorkerMirroredStrategy::sum_across_workers(const std::vector<double>& values) const {
  if (!comm_) return values;
  return detail::all_reduce_numbers(*comm_, values, detail::exchange_device(*comm_, replica_device(0)));
}

void MultiWorkerMirroredStrategy::broadcast_from_chief(const std::vector<Tensor>& tensors) const {
  if (!comm_ || tensors.empty()) return;
  const Device on = detail::exchange_device(*comm_, replica_device(0));
  std::vector<Tensor> there;  // (nccl: each tensor through the GPU, and back into the caller's tensor)
  for (const Tensor& t : tensors) there.push_back(t.device() == on || on.is_cpu() ? t : t.to(on));
  comm_->broadcast(there, 0)->wait();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (there[i].raw_data() == tensors[i].raw_data()) continue;
    Tensor back = tensors[i];  // shares the caller's storage
    back.copy_(there[i]);
  }
}

std::vector<std::string> MultiWorkerMirroredStrategy::all_gather_across_workers(const std::string& bytes) const {
  if (!comm_) return {bytes};
  return detail::all_gather_bytes(*comm_, bytes, detail::exchange_device(*comm_, replica_device(0)));
}

Variable MultiWorkerMirroredStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  // (A GPU worker's copy on its GPU, from the host value the creator drew, as OneDeviceStrategy's.)
  const Device device = replica_device(0);
  Tensor value = on_gpu_ && initial_value.device() != device ? initial_value.to(device) : initial_value.clone();
  if (comm_) {
    STRATA_CHECK(
        value.dtype() == DType::kFloat32 || value.dtype() == DType::kBFloat16 || value.dtype() == DType::kInt64,
        InvalidArgument,
        name() << ": variable '" << options.name << "' is " << dtype_name(value.dtype())
               << "; variables across workers are float32, bfloat16 or int64");
    comm_->broadcast({value}, 0)->wait();  // the chief's initial value everywhere
  }
  std::vector<Tensor> components = {value};
  for (int r = 1; r < num_local_replicas(); ++r) components.push_back(value.clone());
  return make_distributed_variable(std::move(components), options, id());
}

GradientAggregator* MultiWorkerMirroredStrategy::aggregator(int replica) {
  return aggregators_.empty() ? nullptr : aggregators_[static_cast<size_t>(replica)].get();
}

void MultiWorkerMirroredStrategy::on_replica_failure(const std::string& reason) {
  if (comm_) comm_->abort(name() + ": " + reason);
  Strategy::on_replica_failure(reason);
}

std::unique_ptr<StepRunner> MultiWorkerMirroredStrategy::make_step_runner(TrainingProgram& program) {
  if (elastic()) return std::make_unique<ElasticStepRunner>(*this, program);
  return std::make_unique<ReplicaStepRunner>(*this, program);
}

}  // namespace strata::distribute
