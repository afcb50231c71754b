// Internal: the device lists strategies accept. CPU replicas only until the CUDA build brings GPU kernels.
// Thread-safety: plain functions.
#pragma once

#include <string>
#include <vector>

namespace strata::distribute::detail {

// "/cpu:N" passes; "/gpu:N" is Unavailable (needs the CUDA build); anything else InvalidArgument.
void check_cpu_device(const std::string& strategy, const std::string& device);
// Each device checked, none listed twice; empty means {"/cpu:0"}.
std::vector<std::string> checked_devices(const std::string& strategy, std::vector<std::string> devices);

}  // namespace strata::distribute::detail
