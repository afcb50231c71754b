// strata/device_stats.h in a build without CUDA: there are no CUDA devices, and asking about one says so. (A CUDA
// build defines these in core/cuda/device_memory_cuda.cc.) Thread-safety: pure functions.
#include "strata/device_stats.h"

#include "strata/error.h"

namespace strata {

#ifndef STRATA_WITH_CUDA
namespace {
[[noreturn]] void no_cuda(const std::string& what) {
  STRATA_THROW(Unavailable, what << ": this build of strata has no CUDA support (configure with -DSTRATA_WITH_CUDA=ON)");
}
void check_device(Device device, const char* op) {
  STRATA_CHECK(!device.is_cpu(), InvalidArgument,
               op << ": host memory is not counted; memory_stats covers CUDA devices (cuda:0, ...)");
  no_cuda(std::string(op) + "(" + device.str() + ")");
}
}  // namespace

MemoryStats memory_stats(Device device) {
  check_device(device, "memory_stats");
  return {};
}
void reset_peak_memory_stats(Device device) { check_device(device, "reset_peak_memory_stats"); }
void empty_cache(Device device) { check_device(device, "empty_cache"); }
bool built_with_cuda() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return ""; }
CudaVersions cuda_versions() { no_cuda("cuda_versions"); }
CudaDeviceInfo cuda_device_info(int index) { no_cuda("cuda_device_info(" + std::to_string(index) + ")"); }
#endif

}  // namespace strata
