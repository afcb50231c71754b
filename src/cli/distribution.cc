// The job's distribution strategy and learning-rate scaling, and the warnings about replicas and memory
// (see distribution.h). Thread-safety: free functions of their arguments.
#include "cli/distribution.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/device_memory.h"
#include "strata/distribute/local_sgd.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/strategies.h"
#include "strata/error.h"
#include "strata/parallel/pipeline_strategy.h"
#include "strata/parallel/tensor_parallel_strategy.h"
#include "strata/ps/parameter_server_strategy.h"
#include "strata/threading.h"

namespace strata::cli {

namespace {

void check_choice(const std::string& value, const std::vector<std::string>& choices, const std::string& where,
                  const char* what) {
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return;
  std::ostringstream list;
  for (const auto& c : choices) list << (list.tellp() > 0 ? ", " : "") << c;
  STRATA_THROW(InvalidArgument, where << ": unknown " << what << " '" << value << "'; choose one of " << list.str());
}

std::string format_rate(double lr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", lr);
  return buf;
}

}  // namespace

void check_strategy_name(const std::string& name, const std::string& where) {
  check_choice(name,
               {"one_device", "mirrored", "central_storage", "multi_worker_mirrored", "parameter_server", "pipeline",
                "tensor_parallel", "local_sgd"},
               where, "strategy");
}

void check_cross_device_ops(const std::string& name, const std::string& where) {
  check_choice(name, {"ring", "tree", "reduction_to_one_device", "nccl"}, where, "cross-device ops");
}

void check_strategy_device(const std::string& device, const std::string& strategy, const std::string& where) {
  STRATA_CHECK(
      device == "cpu" || strategy == "one_device" || strategy == "mirrored" || strategy == "multi_worker_mirrored",
      InvalidArgument,
      where << device
            << ": only strategies one_device, mirrored and multi_worker_mirrored train on GPUs (this job's "
               "strategy is "
            << strategy << "); the other strategies run CPU replicas");
  STRATA_CHECK(device == "cpu" || device == "gpu" || strategy == "one_device", InvalidArgument,
               where << device << ": strategy " << strategy
                     << " takes device gpu (mirrored: GPUs 0 to replicas-1; multi_worker_mirrored: each worker's own "
                        "GPU), not one GPU by index");
}

void check_lr_scaling(const std::string& rule, const std::string& where) {
  check_choice(rule, {"none", "linear"}, where, "lr_scaling rule");
}

void check_pipeline_schedule(const std::string& name, const std::string& where) {
  check_choice(name, {"gpipe", "1f1b", "interleaved", "zb-h1"}, where, "pipeline schedule");
}

void check_outer_step(const std::string& name, const std::string& where) {
  check_choice(name, {"none", "nesterov"}, where, "outer step");
}

void check_device_name(const std::string& name, const std::string& where) {
  bool ok = name == "cpu" || name == "gpu";
  if (!ok && name.rfind("gpu:", 0) == 0 && name.size() > 4 && name.size() <= 10) {
    ok = std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; });
  }
  STRATA_CHECK(ok, InvalidArgument, where << ": unknown device '" << name << "'; choose cpu, gpu or gpu:N");
}

StrategySpec resolve_strategy(const StrategySpec& from_job, const StrategyFlags& flags) {
  StrategySpec spec = from_job;
  if (!flags.strategy.empty()) {
    check_strategy_name(flags.strategy, "--strategy");
    if (flags.strategy != from_job.name) {
      // The file's replicas / cross_device_ops were chosen for its own strategy; its device is kept (checked below).
      spec = StrategySpec{.name = flags.strategy, .device = from_job.device};
      if (flags.strategy == "mirrored" || flags.strategy == "central_storage") spec.replicas = from_job.replicas;
      if (flags.strategy == "mirrored") spec.cross_device_ops = from_job.cross_device_ops;
    }
  }
  if (!flags.device.empty()) {
    check_device_name(flags.device, "--device");
    spec.device = flags.device;
  }
  check_strategy_device(spec.device, spec.name, flags.device.empty() ? "device: " : "--device ");
  if (flags.replicas) {
    const int replicas = *flags.replicas;
    STRATA_CHECK(replicas > 0, InvalidArgument, "--replicas: must be a positive integer, got " << replicas);
    STRATA_CHECK(spec.name != "one_device" || replicas == 1, InvalidArgument,
                 "--replicas " << replicas
                               << ": one_device has one replica; use --strategy mirrored or "
                                  "central_storage for more");
    STRATA_CHECK(spec.name != "parameter_server" || replicas == 1, InvalidArgument,
                 "--replicas " << replicas
                               << ": each parameter_server worker is one replica (add workers with "
                                  "`strata launch --workers N`)");
    STRATA_CHECK(spec.name != "pipeline" || replicas == 1, InvalidArgument,
                 "--replicas " << replicas
                               << ": a pipeline is one replica cut into stages (use --stages); for replicas of the "
                                  "pipeline, run it on several workers under `strata launch --workers N`");
    STRATA_CHECK(spec.name != "tensor_parallel" || replicas == 1, InvalidArgument,
                 "--replicas " << replicas << ": tensor_parallel is one replica split over ranks (use --tp)");
    spec.replicas = replicas;
  }
  // A bound in seconds for the strategies whose workers are processes that meet and run collectives.
  const auto cross_worker_seconds = [&](const char* flag, const std::optional<double>& value,
                                        const std::vector<std::string>& strategies, const char* what, double& into) {
    if (!value) return;
    STRATA_CHECK(std::isfinite(*value) && *value > 0, InvalidArgument,
                 flag << ": must be a positive number of seconds, got " << *value);
    std::string names;
    for (size_t i = 0; i < strategies.size(); ++i) {
      names += (i == 0 ? "" : i + 1 == strategies.size() ? " and " : ", ") + strategies[i];
    }
    STRATA_CHECK(std::find(strategies.begin(), strategies.end(), spec.name) != strategies.end(), InvalidArgument,
                 flag << " " << *value << ": only " << names << " " << what << " (this job's strategy is "
                      << spec.name << ")");
    into = *value;
  };
  cross_worker_seconds("--collective-timeout", flags.collective_timeout_seconds,
                       {"multi_worker_mirrored", "pipeline", "local_sgd"}, "run collectives across processes",
                       spec.collective_timeout_seconds);
  cross_worker_seconds("--rendezvous-timeout", flags.rendezvous_timeout_seconds,
                       {"multi_worker_mirrored", "pipeline", "local_sgd", "parameter_server"},
                       "meet the other workers at start-up", spec.rendezvous_timeout_seconds);
  if (!flags.gradient_compression.empty()) {
    check_choice(flags.gradient_compression, {"none", "bf16"}, "--gradient-compression", "gradient compression");
    STRATA_CHECK(spec.name == "multi_worker_mirrored" || flags.gradient_compression == "none", InvalidArgument,
                 "--gradient-compression " << flags.gradient_compression
                                           << ": only multi_worker_mirrored sends gradients between processes (this "
                                              "job's strategy is "
                                           << spec.name << ")");
    spec.gradient_compression = flags.gradient_compression;
  }
  if (flags.bytes_per_pack) {
    STRATA_CHECK(*flags.bytes_per_pack >= 1, InvalidArgument,
                 "--bytes-per-pack: must be a positive number of bytes, got " << *flags.bytes_per_pack);
    STRATA_CHECK(spec.name == "multi_worker_mirrored", InvalidArgument,
                 "--bytes-per-pack " << *flags.bytes_per_pack
                                     << ": only multi_worker_mirrored all-reduces gradients in buckets (this job's "
                                        "strategy is "
                                     << spec.name << ")");
    spec.bytes_per_pack = *flags.bytes_per_pack;
  }
  if (flags.max_staleness) {
    STRATA_CHECK(*flags.max_staleness >= 0, InvalidArgument,
                 "--max-staleness: must be 0 (synchronous rounds) or more steps, got " << *flags.max_staleness);
    STRATA_CHECK(spec.name == "parameter_server", InvalidArgument,
                 "--max-staleness " << *flags.max_staleness
                                    << ": only parameter_server workers run steps on their own (this job's strategy is "
                                    << spec.name << ")");
    spec.max_staleness = flags.max_staleness;
  }
  if (flags.no_ps_backups) {
    STRATA_CHECK(spec.name == "parameter_server", InvalidArgument,
                 "--no-ps-backups: only parameter_server keeps variables on ps tasks (this job's strategy is "
                     << spec.name << ")");
    spec.ps_backups = false;
  }
  const auto pipeline_flag = [&](const char* flag, const std::optional<int>& value, int& into) {
    if (!value) return;
    STRATA_CHECK(*value >= 1, InvalidArgument, flag << ": must be a positive integer, got " << *value);
    STRATA_CHECK(spec.name == "pipeline", InvalidArgument,
                 flag << " " << *value
                      << ": only the pipeline strategy cuts the model into stages (this job's "
                         "strategy is "
                      << spec.name << ")");
    into = *value;
  };
  pipeline_flag("--stages", flags.stages, spec.pipeline_stages);
  pipeline_flag("--micro-batches", flags.micro_batches, spec.pipeline_micro_batches);
  pipeline_flag("--chunks", flags.chunks, spec.pipeline_chunks);
  if (!flags.schedule.empty()) {
    check_pipeline_schedule(flags.schedule, "--schedule");
    STRATA_CHECK(spec.name == "pipeline", InvalidArgument,
                 "--schedule " << flags.schedule
                               << ": only the pipeline strategy runs a schedule (this job's "
                                  "strategy is "
                               << spec.name << ")");
    spec.pipeline_schedule = flags.schedule;
  }
  if (flags.recompute) {
    STRATA_CHECK(spec.name == "pipeline", InvalidArgument,
                 "--recompute: only the pipeline strategy keeps activations between stages' passes (this job's "
                 "strategy is "
                     << spec.name << ")");
    spec.pipeline_recompute = true;
  }
  if (flags.tp) {
    STRATA_CHECK(*flags.tp >= 1, InvalidArgument, "--tp: must be a positive number of ranks, got " << *flags.tp);
    STRATA_CHECK(spec.name == "tensor_parallel", InvalidArgument,
                 "--tp " << *flags.tp
                         << ": only the tensor_parallel strategy splits layers over ranks (this job's strategy is "
                         << spec.name << "; use --strategy tensor_parallel)");
    spec.tensor_parallel = *flags.tp;
  }
  if (flags.sync_every) {
    STRATA_CHECK(*flags.sync_every >= 1, InvalidArgument,
                 "--sync-every: must be a positive number of steps, got " << *flags.sync_every);
    STRATA_CHECK(spec.name == "local_sgd", InvalidArgument,
                 "--sync-every " << *flags.sync_every
                                 << ": only local_sgd takes local steps between weight averages (this job's strategy is "
                                 << spec.name << ")");
    spec.sync_every = *flags.sync_every;
  }
  if (!flags.outer_step.empty()) {
    check_outer_step(flags.outer_step, "--outer-step");
    STRATA_CHECK(spec.name == "local_sgd", InvalidArgument,
                 "--outer-step " << flags.outer_step
                                 << ": only local_sgd averages weights (this job's strategy is " << spec.name << ")");
    spec.outer_step = flags.outer_step;
  }
  if (!flags.cross_device_ops.empty()) {
    check_cross_device_ops(flags.cross_device_ops, "--cross-device-ops");
    STRATA_CHECK(spec.name == "mirrored", InvalidArgument,
                 "--cross-device-ops " << flags.cross_device_ops << ": only the mirrored strategy all-reduces "
                                       << "gradients (this job's strategy is " << spec.name << ")");
    spec.cross_device_ops = flags.cross_device_ops;
  }
  if (spec.name == "mirrored") {  // NCCL all-reduces GPU tensors only, and GPU replicas reduce with nothing else
    STRATA_CHECK(spec.cross_device_ops != "nccl" || spec.device != "cpu", InvalidArgument,
                 "cross-device ops nccl: all-reduces across GPU replicas; add --device gpu (the default ops on GPUs)");
    STRATA_CHECK(spec.device == "cpu" || spec.cross_device_ops == "nccl" ||
                     spec.cross_device_ops == distribute::kDefaultCrossDeviceOps,
                 InvalidArgument,
                 "cross-device ops " << spec.cross_device_ops
                                     << ": GPU replicas all-reduce with nccl; ring and tree are for CPU replicas");
  }
  return spec;
}

namespace {
// Elastic training as `strata launch --min-workers M` asks its tasks: STRATA_ELASTIC_MIN_WORKERS=M.
distribute::ElasticOptions elastic_from_environment() {
  const char* value = std::getenv("STRATA_ELASTIC_MIN_WORKERS");
  if (value == nullptr || *value == '\0') return {};
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  STRATA_CHECK(*end == '\0' && n >= 1 && n <= 1 << 20, InvalidArgument,
               "STRATA_ELASTIC_MIN_WORKERS: must be a positive integer, got '" << value << "'");
  return {.min_workers = static_cast<int>(n)};
}
}  // namespace

std::unique_ptr<distribute::Strategy> make_job_strategy(const StrategySpec& spec,
                                                        std::map<std::string, std::string> fingerprint,
                                                        int64_t max_message_bytes) {
  check_strategy_name(spec.name, "strategy");
  int replicas = spec.replicas;
  if (replicas <= 0) {
    replicas = spec.name == "one_device" || spec.name == "multi_worker_mirrored"
                   ? 1
                   : distribute::MirroredStrategy::default_cpu_replicas();
  }
  distribute::CommunicationOptions communication;  // across worker processes
  if (spec.collective_timeout_seconds > 0) {
    communication.timeout = std::chrono::milliseconds(static_cast<int64_t>(spec.collective_timeout_seconds * 1000));
  }
  if (spec.rendezvous_timeout_seconds > 0) {
    communication.rendezvous_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(spec.rendezvous_timeout_seconds * 1000));
  }
  communication.gradient_compression = spec.gradient_compression;
  communication.fingerprint = fingerprint;
  // A collective blocked on a lost worker cannot be cancelled: the command ends, naming the lost task.
  communication.on_blocked_by_lost_task = [](const std::string& reason) {
    std::fflush(stdout);
    std::fprintf(stderr, "strata: error: %s; a collective is still waiting for it, so this process exits\n",
                 reason.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  };
  if (spec.bytes_per_pack > 0) communication.bytes_per_pack = spec.bytes_per_pack;
  if (spec.name == "multi_worker_mirrored") {  // replicas: per worker (one unless --replicas says more)
    if (spec.device != "cpu") communication.device = "gpu";  // one GPU per worker, on nccl
    auto strategy = std::make_unique<distribute::MultiWorkerMirroredStrategy>(
        cluster::resolve_cluster_from_environment(), communication, replicas, elastic_from_environment());
    strategy->set_on_membership_change([](const distribute::MembershipChange& change) {
      std::string left;
      for (const std::string& t : change.left) left += (left.empty() ? "" : ", ") + t;
      std::string joined;
      for (const std::string& t : change.joined) joined += (joined.empty() ? "" : ", ") + t;
      if (!joined.empty()) {
        std::printf("membership: %s joined; %zu workers (membership epoch %lld), connected in %.2f s, state sent "
                    "in %.2f s (%.1f MB)\n",
                    joined.c_str(), change.members.size(), static_cast<long long>(change.epoch), change.seconds,
                    change.state_seconds, static_cast<double>(change.state_bytes) / 1e6);
      } else {
        std::printf("membership: %s left; %zu %s (membership epoch %lld), regrouped in %.2f s\n",
                    left.empty() ? "no task" : left.c_str(), change.members.size(),
                    change.members.size() == 1 ? "worker goes on" : "workers go on",
                    static_cast<long long>(change.epoch), change.seconds);
      }
      std::fflush(stdout);
    });
    return strategy;
  }
  if (spec.name == "parameter_server") {
    ps::ParameterServerStrategyOptions options;
    options.checkpoint_dir = spec.ps_checkpoint_dir;
    options.checkpoint_every_steps = spec.ps_checkpoint_every_steps;
    options.resume = spec.ps_resume;
    options.fingerprint = fingerprint;
    options.max_message_bytes = max_message_bytes;
    options.rendezvous_timeout = communication.rendezvous_timeout;
    options.coordinator.max_staleness = spec.max_staleness;
    options.replicate_shards = spec.ps_backups;
    return std::make_unique<ps::ParameterServerStrategy>(cluster::resolve_cluster_from_environment(), options);
  }
  if (spec.name == "pipeline") {
    return std::make_unique<parallel::PipelineStrategy>(
        parallel::PipelineStrategyOptions{.stages = spec.pipeline_stages,
                                          .micro_batches = spec.pipeline_micro_batches,
                                          .schedule = spec.pipeline_schedule,
                                          .chunks = spec.pipeline_chunks,
                                          .recompute = spec.pipeline_recompute},
        cluster::resolve_cluster_from_environment(), communication);  // under `strata launch`: a replica per worker
  }
  if (spec.name == "tensor_parallel") {
    return std::make_unique<parallel::TensorParallelStrategy>(
        parallel::TensorParallelStrategyOptions{.tp = spec.tensor_parallel});
  }
  if (spec.name == "local_sgd") {  // under `strata launch`: a replica per worker, weights averaged every sync_every
    return std::make_unique<distribute::LocalSGDStrategy>(
        distribute::LocalSGDOptions{.sync_every = spec.sync_every, .outer_nesterov = spec.outer_step == "nesterov"},
        cluster::resolve_cluster_from_environment(), communication);
  }
  if (spec.name == "mirrored" && spec.device != "cpu") {  // GPUs 0 .. replicas-1, every visible GPU by default
    const int gpus = spec.replicas > 0 ? spec.replicas : strata::detail::cuda_device_count();
    std::vector<std::string> devices;
    // (No GPU visible, or no CUDA in this build: "/gpu:0" alone, so that the strategy says which.)
    for (int i = 0; i < std::max(gpus, 1); ++i) devices.push_back("/gpu:" + std::to_string(i));
    return std::make_unique<distribute::MirroredStrategy>(
        std::move(devices),
        distribute::MirroredOptions{.cross_device_ops = distribute::CrossDeviceOps::from_name(spec.cross_device_ops)});
  }
  if (spec.name == "one_device" && spec.device != "cpu") {  // "gpu" is GPU 0
    check_device_name(spec.device, "device");
    const std::string index = spec.device == "gpu" ? "0" : spec.device.substr(4);
    return std::make_unique<distribute::OneDeviceStrategy>("/gpu:" + index);
  }
  return distribute::make_strategy(spec.name, replicas, spec.cross_device_ops);
}

std::string strategy_line(const distribute::Strategy& strategy, int64_t global_batch) {
  const int n = strategy.num_replicas_in_sync(), threads = strategy.threads_per_replica();
  std::ostringstream out;
  if (const auto* servers = dynamic_cast<const ps::ParameterServerStrategy*>(&strategy)) {
    out << "strategy: ParameterServerStrategy, " << servers->task().name() << " of " << servers->num_worker_tasks()
        << (servers->num_worker_tasks() == 1 ? " worker" : " workers") << " and " << servers->num_ps() << " ps, ";
    const std::optional<int64_t> staleness = servers->options().coordinator.max_staleness;
    if (!staleness)
      out << "asynchronous steps";
    else if (*staleness == 0)
      out << "synchronous rounds of one step per worker";
    else
      out << "steps at most " << *staleness << " ahead of the slowest worker";
    out << " (batch " << global_batch << " a step)";
    if (servers->replicating()) out << ", each shard on 2 ps (a primary and its backup)";
    return out.str();
  }
  if (const auto* pipeline = dynamic_cast<const parallel::PipelineStrategy*>(&strategy)) {
    const int64_t m = pipeline->schedule().micro_batches, workers = pipeline->num_workers();
    out << "strategy: " << pipeline->describe() << ", global batch " << global_batch << " (";
    if (workers > 1) {
      out << global_batch / workers << (global_batch % workers == 0 ? "" : " or more") << " per worker, ";
    }
    out << global_batch / (workers * m) << (global_batch % (workers * m) == 0 ? "" : " or more") << " per micro-batch)";
    return out.str();
  }
  if (const auto* tensor = dynamic_cast<const parallel::TensorParallelStrategy*>(&strategy)) {
    out << "strategy: " << tensor->describe() << ", global batch " << global_batch << " (whole on every rank)";
    return out.str();
  }
  if (const auto* mw = dynamic_cast<const distribute::MultiWorkerMirroredStrategy*>(&strategy); mw && mw->joining()) {
    out << "strategy: " << mw->name() << ", " << mw->task().name()
        << " restarted: it joins the running job at a step boundary (global batch " << global_batch << ")";
    return out.str();
  }
  out << "strategy: " << strategy.name() << ", " << n << (n == 1 ? " replica (" : " replicas (") << threads
      << (threads == 1 ? " thread" : " threads") << (n == 1 ? ")" : " each)");
  if (const Device device = strategy.replica_device(0); !device.is_cpu()) out << " on " << device.str();
  if (const auto* mirrored = dynamic_cast<const distribute::MirroredStrategy*>(&strategy);
      mirrored && (n > 1 || mirrored->cross_device_ops().nccl)) {
    const distribute::CrossDeviceOps& ops = mirrored->cross_device_ops();
    out << ", " << (ops.nccl ? std::string("nccl") : comm::to_string(ops.algorithm)) << " all-reduce";
  }
  if (const auto* mw = dynamic_cast<const distribute::MultiWorkerMirroredStrategy*>(&strategy)) {
    out << ", worker " << mw->worker_index() << " of " << mw->num_workers();
    if (mw->num_local_replicas() > 1) out << " with " << mw->num_local_replicas() << " replicas each";
    if (mw->num_workers() > 1 || mw->backend() == "nccl") out << " (" << mw->backend() << ")";
    if (mw->num_workers() > 1 && mw->communication_options().gradient_compression != "none") {
      out << ", " << mw->communication_options().gradient_compression << " gradients on the wire";
    }
  }
  if (const auto* local = dynamic_cast<const distribute::LocalSGDStrategy*>(&strategy)) {
    out << ", worker " << local->worker_index() << " of " << local->num_workers();
    if (local->num_workers() > 1) out << " (" << local->backend() << ")";
    out << ", weights averaged every " << local->options().sync_every << " steps";
    if (local->options().outer_nesterov) out << " with DiLoCo's outer Nesterov step";
  }
  out << ", global batch " << global_batch;
  if (n > 1) {
    const int64_t per = (global_batch + n - 1) / n;
    out << " (" << per << (global_batch % n == 0 ? "" : " or fewer") << " per replica)";
  }
  return out.str();
}

std::string replicas_warning(int replicas, unsigned cores) {
  if (replicas <= 0 || cores == 0 || static_cast<unsigned>(replicas) <= cores) return "";
  std::ostringstream out;
  out << "more replicas (" << replicas << ") than CPU cores (" << cores
      << "): replicas are threads and will take turns on the cores; training runs, slower than with " << cores;
  return out.str();
}

namespace {
int64_t activation_elements(const nn::Layer& layer) {
  if (!layer.layers().empty()) {
    int64_t total = 0;
    for (const auto& sub : layer.layers()) total += activation_elements(*sub);
    return total;
  }
  const Shape& shape = layer.output_shape();
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= std::max<int64_t>(shape[i], 0);  // [0] is the batch (-1)
  return n;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}
}  // namespace

int64_t activation_bytes(const nn::Layer& model, int64_t global_batch) {
  constexpr int64_t kBytesPerElement = 4;  // float32
  constexpr int64_t kCopies = 3;           // forward value, gradient, workspace
  return activation_elements(model) * global_batch * kBytesPerElement * kCopies;
}

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {  // "MemAvailable:   24046584 kB"
    long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &kib) == 1) return static_cast<int64_t>(kib) * 1024;
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

std::string batch_memory_warning(int64_t needed, int64_t available, int64_t global_batch) {
  if (available <= 0 || needed <= available) return "";
  std::ostringstream out;
  out << "global batch " << global_batch << ": its activations need about " << gib(needed) << " (estimate) but "
      << gib(available) << " of memory is available; expect swapping or an out-of-memory kill (lower batch_size)";
  return out.str();
}

int64_t warmup_steps(const LrScalingSpec& spec, int64_t steps_per_epoch) {
  if (spec.warmup_epochs <= 0 || steps_per_epoch <= 0) return 0;
  return static_cast<int64_t>(std::ceil(spec.warmup_epochs * static_cast<double>(steps_per_epoch) - 1e-9));
}

optim::LearningRate scaled_learning_rate(const LrScalingSpec& spec, float base_lr, int64_t global_batch,
                                         int64_t steps_per_epoch) {
  check_lr_scaling(spec.rule, "lr_scaling");
  if (spec.rule == "none") return base_lr;
  const float scaled = optim::scale_lr(base_lr, global_batch, spec.base_batch_size);
  const int64_t warmup = warmup_steps(spec, steps_per_epoch);
  if (warmup == 0) return scaled;
  return optim::linear_warmup(optim::constant(scaled), warmup, base_lr);
}

std::string learning_rate_line(const LrScalingSpec& spec, float base_lr, int64_t global_batch,
                               int64_t steps_per_epoch) {
  if (spec.rule == "none") return "";
  const float scaled = optim::scale_lr(base_lr, global_batch, spec.base_batch_size);
  std::ostringstream out;
  out << "learning rate: " << format_rate(base_lr) << " -> " << format_rate(scaled) << " (linear scaling: global batch "
      << global_batch << " / base " << spec.base_batch_size << ")";
  const int64_t warmup = warmup_steps(spec, steps_per_epoch);
  if (warmup > 0) {
    out << ", warmup " << format_rate(spec.warmup_epochs) << (spec.warmup_epochs == 1 ? " epoch (" : " epochs (")
        << warmup << " steps) from " << format_rate(base_lr);
  }
  return out.str();
}

}  // namespace strata::cli
