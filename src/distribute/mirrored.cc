// MirroredStrategy: a copy of every variable per replica; gradients summed across replicas through the
// strategy's communicator by each replica's AllReduceAggregator (buckets that start reducing while backward is
// still running), and one update per step written to every copy.
// Thread-safety: each replica thread uses only its own aggregator and communicator rank; see
// all_reduce_aggregator.h for who updates what when.
#include <algorithm>

#include "distribute/all_reduce_aggregator.h"
#include "distribute/devices.h"
#include "strata/distribute/strategies.h"
#include "strata/threading.h"

namespace strata::distribute {

CrossDeviceOps CrossDeviceOps::from_name(const std::string& name) {
  if (name == "nccl") {
    STRATA_THROW(Unavailable, "cross-device ops 'nccl' needs the CUDA build and GPU replicas; on CPU replicas use "
                              "'ring', 'tree' or 'reduction_to_one_device'");
  }
  return {comm::all_reduce_algorithm_from_string(name)};
}

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
    : Strategy(detail::checked_devices("MirroredStrategy",
                                       devices.empty() ? cpu_devices(default_cpu_replicas()) : std::move(devices)),
               options.threads_per_replica,
               options.cross_device_ops.algorithm),
      options_(options) {
  STRATA_CHECK(options_.cross_device_ops.bucket_bytes > 0, InvalidArgument,
               "MirroredStrategy: bucket_bytes must be > 0");
  const int n = num_replicas_in_sync();
  if (n > 1) {
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
  std::vector<Tensor> components = {initial_value};
  for (int r = 1; r < num_replicas_in_sync(); ++r) components.push_back(initial_value.clone());
  return make_distributed_variable(std::move(components), options, id());
}

GradientAggregator* MirroredStrategy::aggregator(int replica) {
  return aggregators_.empty() ? nullptr : aggregators_[static_cast<size_t>(replica)].get();
}

}  // namespace strata::distribute
