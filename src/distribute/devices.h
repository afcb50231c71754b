// Internal: the device lists strategies accept, and the Device a replica's device string names. OneDeviceStrategy
// and MirroredStrategy take "/gpu:N" in a CUDA build with a GPU N visible (MultiWorkerMirroredStrategy picks its one
// GPU itself); the other strategies of several replicas keep to CPU replicas. Thread-safety: plain functions.
#pragma once

#include <string>
#include <vector>

#include "strata/device.h"

namespace strata::distribute::detail {

// "/cpu:N" passes; "/gpu:N" is Unavailable (CPU replicas only); anything else InvalidArgument.
void check_cpu_device(const std::string& strategy, const std::string& device);
// "/gpu:N" passes when this build has CUDA and N < the visible CUDA devices; otherwise Unavailable naming the build
// or the count. "/cpu:N" passes; anything else is InvalidArgument.
void check_gpu_or_cpu_device(const std::string& strategy, const std::string& device);
// Each device checked (check_cpu_device, or check_gpu_or_cpu_device when `gpus_allowed`: then first that they are all
// CPUs or all GPUs, InvalidArgument naming one of each), none listed twice; empty means {"/cpu:0"}.
std::vector<std::string> checked_devices(const std::string& strategy, std::vector<std::string> devices,
                                         bool gpus_allowed = false);
// Whether `device` spells a GPU ("/gpu:N" or "/GPU:N").
bool is_gpu_device(const std::string& device);
// The Device a checked device string names: "/gpu:N" (or "/GPU:N") is Device::cuda(N); "/cpu:N" the host.
Device device_of(const std::string& device);

}  // namespace strata::distribute::detail
