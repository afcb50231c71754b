// What strata knows about its devices: each CUDA device's memory bookkeeping (bytes of live tensors, the peak, the
// pool's reservation), the devices themselves (name, compute capability, memory) and the CUDA versions, for
// `strata info`, benches and a program that sizes its batches. Without CUDA in the build there are no CUDA devices:
// cuda_device_count() is 0 and asking about one raises Unavailable.
// Thread-safety: every function is safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "strata/device.h"

namespace strata {

// One device's memory, as strata's allocator counts it (PyTorch's torch.cuda.memory_stats, in short).
struct MemoryStats {
  size_t in_use = 0;              // bytes of live allocations, as requested
  size_t peak = 0;                // the most in_use has been since the process started or reset_peak_memory_stats
  int64_t allocations = 0;        // live allocations
  int64_t total_allocations = 0;  // allocations made so far
  size_t reserved = 0;            // bytes the device's memory pool holds from the driver: in use plus cached
};

// The bookkeeping of CUDA device `device`. InvalidArgument for the host (host memory is not counted); Unavailable
// when the build has no CUDA or the device does not exist.
MemoryStats memory_stats(Device device);
// Sets the peak of `device` to what is in use now.
void reset_peak_memory_stats(Device device);
// Hands the cached (freed, unused) blocks of `device`'s pool back to the driver, after the device's queued work;
// other processes then see that memory as free. Tensors still alive keep theirs.
void empty_cache(Device device);

// Whether this build has CUDA support (STRATA_WITH_CUDA).
bool built_with_cuda();
// CUDA devices visible to this process: 0 without CUDA in the build, without a driver, or without a GPU.
int cuda_device_count();
// Why cuda_device_count() is 0 in a CUDA build ("" when devices are visible or the build has no CUDA).
std::string cuda_unavailable_reason();

struct CudaVersions {
  int driver = 0;   // the newest CUDA the installed driver supports, as 1000 * major + 10 * minor; 0: no driver
  int runtime = 0;  // the CUDA runtime strata was built and linked with, same encoding
};
// Unavailable without CUDA in the build.
CudaVersions cuda_versions();

struct CudaDeviceInfo {
  int index = 0;
  std::string name;                 // "NVIDIA H200"
  int major = 0, minor = 0;         // compute capability
  int multiprocessors = 0;
  size_t total_memory = 0;          // bytes
  size_t free_memory = 0;           // bytes free on the device now (all processes)
};
// Unavailable without CUDA in the build or when `index` is not a visible device.
CudaDeviceInfo cuda_device_info(int index);

}  // namespace strata
