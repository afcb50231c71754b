// OneDeviceStrategy: one replica on the calling thread; variables are made on its device ("/cpu:0", or "/gpu:N" in a
// CUDA build with that GPU visible) and owned by it. A variable's initial value is made on the host (the same
// generator draws as on the CPU, so CPU and GPU runs start from the same weights) and copied to the device.
// Thread-safety: as Strategy (one driving thread).
#include "distribute/devices.h"
#include "strata/distribute/strategies.h"

namespace strata::distribute {

OneDeviceStrategy::OneDeviceStrategy(const std::string& device)
    : Strategy(detail::checked_devices("OneDeviceStrategy", {device}, /*gpus_allowed=*/true)) {}

Variable OneDeviceStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  const Device device = replica_device(0);
  const Tensor placed = initial_value.device() == device ? initial_value : initial_value.to(device);
  return make_distributed_variable({placed}, options, id());
}

}  // namespace strata::distribute
