// The device lists strategies accept (see devices.h).
// Thread-safety: plain functions (cuda_device_count asks the CUDA runtime, which is thread-safe).
#include "distribute/devices.h"

#include <algorithm>
#include <cctype>

#include "core/device_memory.h"
#include "strata/error.h"

namespace strata::distribute::detail {

namespace {
bool is_gpu(const std::string& device) { return device.rfind("/gpu:", 0) == 0 || device.rfind("/GPU:", 0) == 0; }
bool is_cpu(const std::string& device) { return device.rfind("/cpu:", 0) == 0 || device.rfind("/CPU:", 0) == 0; }

// N of "/gpu:N" or "/cpu:N"; InvalidArgument unless N is a non-negative decimal number.
int index_of(const std::string& strategy, const std::string& device) {
  const std::string digits = device.substr(5);
  bool ok = !digits.empty() && digits.size() <= 6;
  for (char c : digits) ok = ok && std::isdigit(static_cast<unsigned char>(c));
  STRATA_CHECK(ok, InvalidArgument,
               strategy << ": device '" << device << "' needs an index, e.g. \"" << device.substr(0, 5) << "0\"");
  return std::stoi(digits);
}
}  // namespace

void check_cpu_device(const std::string& strategy, const std::string& device) {
  if (is_gpu(device)) {
    STRATA_THROW(Unavailable, strategy << ": device '" << device
                                       << "' is not supported: this strategy runs CPU replicas only (GPU "
                                          "replicas: OneDeviceStrategy(\"/gpu:N\")); use \"/cpu:N\" devices");
  }
  STRATA_CHECK(is_cpu(device), InvalidArgument,
               strategy << ": unknown device '" << device << "' (expected \"/cpu:N\" or \"/gpu:N\")");
}

void check_gpu_or_cpu_device(const std::string& strategy, const std::string& device) {
  if (!is_gpu(device)) {
    check_cpu_device(strategy, device);
    return;
  }
  const int index = index_of(strategy, device);
#ifdef STRATA_WITH_CUDA
  const int count = strata::detail::cuda_device_count();
  STRATA_CHECK(index < count, Unavailable,
               strategy << ": device '" << device << "' is not there: " << count << " CUDA device"
                        << (count == 1 ? "" : "s") << " visible"
                        << (count == 0 ? " (no GPU, or the driver is missing; check nvidia-smi and "
                                         "CUDA_VISIBLE_DEVICES)"
                                       : ""));
#else
  STRATA_THROW(Unavailable, strategy << ": device '" << device << "' (index " << index
                                     << ") needs a build of strata with CUDA (cmake -DSTRATA_WITH_CUDA=ON); this "
                                        "build runs on the CPU only");
#endif
}

std::vector<std::string> checked_devices(const std::string& strategy, std::vector<std::string> devices,
                                         bool gpus_allowed) {
  if (devices.empty()) devices = {"/cpu:0"};
  if (gpus_allowed) {  // before each device's check: a CPU-only build mixing them hears about the mix first
    const auto gpu = std::find_if(devices.begin(), devices.end(), is_gpu);
    const auto cpu = std::find_if(devices.begin(), devices.end(), is_cpu);
    STRATA_CHECK(gpu == devices.end() || cpu == devices.end(), InvalidArgument,
                 strategy << ": devices '" << *cpu << "' and '" << *gpu
                          << "' mix the CPU and a GPU; the replicas of one strategy are all \"/cpu:N\" or all "
                             "\"/gpu:N\"");
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    if (gpus_allowed) {
      check_gpu_or_cpu_device(strategy, devices[i]);
    } else {
      check_cpu_device(strategy, devices[i]);
    }
    for (size_t j = 0; j < i; ++j) {
      STRATA_CHECK(devices[i] != devices[j], InvalidArgument,
                   strategy << ": device '" << devices[i] << "' is listed twice; each replica needs its own device");
    }
  }
  return devices;
}

bool is_gpu_device(const std::string& device) { return is_gpu(device); }

Device device_of(const std::string& device) {
  if (!is_gpu(device)) return Device::cpu();
  return Device::cuda(index_of("device", device));
}

}  // namespace strata::distribute::detail
