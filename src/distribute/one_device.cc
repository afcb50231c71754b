// OneDeviceStrategy: one replica on the calling thread; variables are made on its device and owned by it.
// Thread-safety: as Strategy (one driving thread).
#include "distribute/devices.h"
#include "strata/distribute/strategies.h"

namespace strata::distribute {

OneDeviceStrategy::OneDeviceStrategy(const std::string& device)
    : Strategy(detail::checked_devices("OneDeviceStrategy", {device})) {}

Variable OneDeviceStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  return make_distributed_variable({initial_value}, options, id());
}

}  // namespace strata::distribute
