// CUDA device memory through the CUDA runtime (built only with STRATA_WITH_CUDA).
// Thread-safety: the runtime calls are thread-safe; each call selects its device first.
#include <cuda_runtime_api.h>

#include "core/device_memory.h"
#include "strata/error.h"

namespace strata::detail {

namespace {
void check_cuda(cudaError_t status, const char* what) {
  STRATA_CHECK(status == cudaSuccess, Unavailable, what << " failed: " << cudaGetErrorString(status));
}
}  // namespace

int cuda_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

void* cuda_alloc(size_t nbytes, int index) {
  STRATA_CHECK(index >= 0 && index < cuda_count(), Unavailable,
               "cuda:" << index << " does not exist (" << cuda_count() << " CUDA devices visible)");
  check_cuda(cudaSetDevice(index), "cudaSetDevice");
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, std::max<size_t>(nbytes, 1)), "cudaMalloc");
  return p;
}

void cuda_free(void* p, int index) {
  cudaSetDevice(index);
  cudaFree(p);
}

void cuda_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                              : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  check_cuda(cudaSetDevice(src_device.is_cpu() ? dst_device.index : src_device.index), "cudaSetDevice");
  check_cuda(cudaMemcpy(dst, src, nbytes, kind), "cudaMemcpy");
}

}  // namespace strata::detail
