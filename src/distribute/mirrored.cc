// MirroredStrategy: a copy of every variable per replica (on its GPU for GPU replicas); gradients summed across
// replicas through the strategy's communicator by each replica's AllReduceAggregator (buckets that start reducing
// while backward is still running), and one update per step written to every copy. CPU replicas exchange through the
// shared-memory local group, GPU replicas through an in-process NCCL group: only the group and the buckets' device
// differ.
// Thread-safety: each replica thread uses only its own aggregator and communicator rank; see
// all_reduce_aggregator.h for who updates what when.
#include <algorithm>

#include "distribute/all_reduce_aggregator.h"
#include "distribute/devices.h"
#include "strata/comm/nccl.h"
#include "strata/distribute/strategies.h"
#include "strata/threading.h"

namespace strata::distribute {

CrossDeviceOps CrossDeviceOps::from_name(const std::string& name) {
  if (name == "nccl") return nccl_all_reduce();
  return {comm::all_reduce_algorithm_from_string(name)};
}

namespace {
constexpr const char* kName = "MirroredStrategy";

// The devices checked (all CPUs or all GPUs, the GPUs there), and the cross-device ops checked against them.
std::vector<std::string> checked_mirrored_devices(std::vector<std::string> devices, MirroredOptions& options) {
  // The ops first (they do not depend on whether the GPUs are there), then the devices.
  CrossDeviceOps& ops = options.cross_device_ops;
  if (!devices.empty() && detail::is_gpu_device(devices[0])) {
    STRATA_CHECK(ops.nccl || ops.algorithm == comm::AllReduceAlgorithm::kReduceToOne, InvalidArgument,
                 kName << ": GPU replicas (" << devices[0] << ", ...) all-reduce with cross-device ops 'nccl' (the "
                       << "gradients stay on the GPUs); 'ring' and 'tree' are for CPU replicas");
    ops.nccl = true;  // the default ops on GPUs, as TensorFlow's
  } else {
    STRATA_CHECK(!ops.nccl, InvalidArgument,
                 kName << ": cross-device ops 'nccl' needs GPU replicas (\"/gpu:N\"); device '"
                       << (devices.empty() ? std::string("/cpu:0") : devices[0])
                       << "' is a CPU: use 'reduction_to_one_device', 'ring' or 'tree'");
  }
  return detail::checked_devices(kName, std::move(devices), /*gpus_allowed=*/true);
}

std::function<std::vector<std::shared_ptr<comm::Communicator>>(int)> local_group(
    const std::vector<std::string>& devices, const CrossDeviceOps& ops) {
  if (!ops.nccl) {
    return [algorithm = ops.algorithm](int replicas) {
      return comm::make_local_group(replicas, {.algorithm = algorithm});
    };
  }
  std::vector<int> gpus;
  for (const std::string& d : devices) gpus.push_back(detail::device_of(d).index);
  return [gpus](int) { return comm::make_nccl_local_group(gpus, {.prefix = "mirrored"}); };
}
}  // namespace

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

int MirroredStrategy::default_cpu_replicas() { return std::max(1, num_threads()); }

MirroredStrategy::MirroredStrategy(std::vector<std::string> devices, MirroredOptions options)
    : MirroredStrategy(
          checked_mirrored_devices(devices.empty() ? cpu_devices(default_cpu_replicas()) : std::move(devices), options),
          options, 0) {}

MirroredStrategy::MirroredStrategy(std::vector<std::string> checked, const MirroredOptions& options, int)
    : Strategy(checked, options.threads_per_replica, local_group(checked, options.cross_device_ops)),
      options_(options),
      on_gpus_(options.cross_device_ops.nccl) {
  STRATA_CHECK(options_.cross_device_ops.bucket_bytes > 0, InvalidArgument,
               "MirroredStrategy: bucket_bytes must be > 0");
  const int n = num_replicas_in_sync();
  if (n > 1 || on_gpus_) {  // (one GPU replica too: it runs the path of several, on a group of one)
    for (int r = 0; r < n; ++r) {
      aggregators_.push_back(std::make_unique<detail::AllReduceAggregator>(
          *this, r, communicator(r), options_.cross_device_ops.bucket_bytes, [this](const Variable& v) {
            STRATA_CHECK(v.owner() == id() && v.num_components() == num_replicas_in_sync(), InvalidArgument,
                         name() << ".apply_gradients: variable '" << v.name()
                                << "' is not mirrored by this strategy; create it inside strategy.scope()");
          }));
    }
  }
}

MirroredStrategy::~MirroredStrategy() = default;

Variable MirroredStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  std::vector<Tensor> components;
  if (on_gpus_) {  // each replica's copy on its GPU, from the same host value (as OneDeviceStrategy's)
    for (int r = 0; r < num_replicas_in_sync(); ++r) {
      const Device device = replica_device(r);
      components.push_back(initial_value.device() == device ? initial_value.clone() : initial_value.to(device));
    }
    return make_distributed_variable(std::move(components), options, id());
  }
  components.push_back(initial_value);
  for (int r = 1; r < num_replicas_in_sync(); ++r) components.push_back(initial_value.clone());
  return make_distributed_variable(std::move(components), options, id());
}

void MirroredStrategy::on_replica_failure(const std::string& reason) {
  if (on_gpus_) {
    for (int r = 1; r < num_local_replicas(); ++r) local_communicator(r)->abort(name() + ": " + reason);
  }
  Strategy::on_replica_failure(reason);  // rank 0's
}

GradientAggregator* MirroredStrategy::aggregator(int replica) {
  return aggregators_.empty() ? nullptr : aggregators_[static_cast<size_t>(replica)].get();
}

}  // namespace strata::distribute
