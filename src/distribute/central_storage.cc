// CentralStorageStrategy: one copy of every variable on the host; replicas compute on it in parallel, their
// gradients are summed through the strategy's communicator (AllReduceAggregator) and the one copy is updated once
// per step.
// Thread-safety: see all_reduce_aggregator.h; the step ends in merge_call, so no replica reads a variable while
// it changes.
#include "distribute/all_reduce_aggregator.h"
#include "distribute/devices.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/strategies.h"

namespace strata::distribute {

CentralStorageStrategy::CentralStorageStrategy(std::vector<std::string> devices, int threads_per_replica)
    : Strategy(detail::checked_devices("CentralStorageStrategy", std::move(devices)), threads_per_replica) {
  if (num_replicas_in_sync() > 1) {
    for (int r = 0; r < num_replicas_in_sync(); ++r) {
      aggregators_.push_back(std::make_unique<detail::AllReduceAggregator>(
          *this, r, communicator(r), kBucketBytes, [this](const Variable& v) {
            STRATA_CHECK(v.owner() == id(), InvalidArgument,
                         name() << ".apply_gradients: variable '" << v.name()
                                << "' was not created inside this strategy's scope");
          }));
    }
  }
}

CentralStorageStrategy::~CentralStorageStrategy() = default;

Variable CentralStorageStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  return make_distributed_variable({initial_value}, options, id());
}

GradientAggregator* CentralStorageStrategy::aggregator(int replica) {
  return aggregators_.empty() ? nullptr : aggregators_[static_cast<size_t>(replica)].get();
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, int replicas, const std::string& cross_device_ops) {
  STRATA_CHECK(replicas >= 1, InvalidArgument, "replicas must be >= 1, got " << replicas);
  if (name == "one_device" || name == "default") return std::make_unique<OneDeviceStrategy>("/cpu:0");
  if (name == "mirrored") {
    return std::make_unique<MirroredStrategy>(MirroredStrategy::cpu_devices(replicas),
                                              MirroredOptions{.cross_device_ops = CrossDeviceOps::from_name(cross_device_ops)});
  }
  if (name == "central_storage") {
    return std::make_unique<CentralStorageStrategy>(MirroredStrategy::cpu_devices(replicas));
  }
  if (name == "multi_worker_mirrored") {  // `replicas` per worker
    return std::make_unique<MultiWorkerMirroredStrategy>(
        cluster::resolve_cluster_from_environment(),
        CommunicationOptions{.implementation = cross_device_ops == kDefaultCrossDeviceOps ? "auto" : cross_device_ops},
        replicas);
  }
  STRATA_THROW(InvalidArgument, "unknown strategy '" << name
                                                     << "'; choose one of one_device, mirrored, central_storage, "
                                                        "multi_worker_mirrored");
}

}  // namespace strata::distribute
