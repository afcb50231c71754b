// The device lists strategies accept (see devices.h).
// Thread-safety: plain functions.
#include "distribute/devices.h"

#include "strata/error.h"

namespace strata::distribute::detail {

void check_cpu_device(const std::string& strategy, const std::string& device) {
  if (device.rfind("/gpu:", 0) == 0 || device.rfind("/GPU:", 0) == 0) {
    STRATA_THROW(Unavailable, strategy << ": device '" << device
                                       << "' needs the CUDA build with GPU kernels; use \"/cpu:N\" devices");
  }
  STRATA_CHECK(device.rfind("/cpu:", 0) == 0 || device.rfind("/CPU:", 0) == 0, InvalidArgument,
               strategy << ": unknown device '" << device << "' (expected \"/cpu:N\" or \"/gpu:N\")");
}

std::vector<std::string> checked_devices(const std::string& strategy, std::vector<std::string> devices) {
  if (devices.empty()) devices = {"/cpu:0"};
  for (size_t i = 0; i < devices.size(); ++i) {
    check_cpu_device(strategy, devices[i]);
    for (size_t j = 0; j < i; ++j) {
      STRATA_CHECK(devices[i] != devices[j], InvalidArgument,
                   strategy << ": device '" << devices[i] << "' is listed twice; each replica needs its own device");
    }
  }
  return devices;
}

}  // namespace strata::distribute::detail
