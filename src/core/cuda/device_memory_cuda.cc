// CUDA device memory through the CUDA runtime (built only with STRATA_WITH_CUDA): allocations, frees and copies
// are queued on the device's stream (core/cuda/cuda_context.h). Thread-safety: the runtime calls are thread-safe.
#include <algorithm>

#include "core/cuda/cuda_context.h"
#include "core/device_memory.h"
#include "strata/error.h"

namespace strata::detail {

int cuda_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

void* cuda_alloc(size_t nbytes, int index) {
  cudaStream_t s = cuda::stream(index);
  void* p = nullptr;
  cuda::check(cudaMallocAsync(&p, std::max<size_t>(nbytes, 1), s), "cudaMallocAsync");
  return p;
}

void cuda_free(void* p, int index) {
  // A free runs in no exception context (a Storage's destructor): an error here has nowhere to go but the next call.
  cudaFreeAsync(p, cuda::stream(index));
}

void cuda_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                              : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  const int device = src_device.is_cpu() ? dst_device.index : src_device.index;
  cudaStream_t s = cuda::stream(device);
  if (!src_device.is_cpu() && !dst_device.is_cpu() && src_device.index != dst_device.index) {
    cuda::synchronize(dst_device.index);  // the destination's earlier work on its buffer comes first
    cuda::check(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, s), "cudaMemcpyPeerAsync");
  } else {
    cuda::check(cudaMemcpyAsync(dst, src, nbytes, kind, s), "cudaMemcpyAsync");
  }
  // The host sees the bytes (device to host), and may reuse its buffer (host to device), once the call returns.
  cuda::synchronize(device);
}

}  // namespace strata::detail
