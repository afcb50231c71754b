// Per-thread, per-device library handles (library_handles.h). Thread-safety: everything here is thread_local.
#include "kernels/cuda/library_handles.h"

#include <vector>

#include "core/cuda/cuda_context.h"
#include "strata/error.h"

namespace strata::kernels::cuda {

void check_cublas(cublasStatus_t status, const char* what) {
  STRATA_CHECK(status == CUBLAS_STATUS_SUCCESS, Unavailable,
               what << " failed: " << cublasGetStatusName(status) << " (" << cublasGetStatusString(status) << ")");
}

void check_cudnn(cudnnStatus_t status, const char* what) {
  STRATA_CHECK(status == CUDNN_STATUS_SUCCESS, Unavailable, what << " failed: " << cudnnGetErrorString(status));
}

namespace {

struct ThreadHandles {
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublaslt = nullptr;
  cudnnHandle_t cudnn = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The calling thread's handles of `device`. They are never destroyed: a thread's handles outlive it, since the
// destruction order of thread_locals against the CUDA context at exit is not ours to choose.
ThreadHandles& handles(int device) {
  thread_local std::vector<ThreadHandles> per_device;
  if (per_device.size() <= static_cast<size_t>(device)) per_device.resize(device + 1);
  return per_device[device];
}

}  // namespace

cublasHandle_t cublas_handle(int device) {
  ThreadHandles& h = handles(device);
  cudaStream_t stream = detail::cuda::stream(device);
  if (h.cublas == nullptr) {
    check_cublas(cublasCreate(&h.cublas), "cublasCreate");
    check_cublas(cublasSetStream(h.cublas, stream), "cublasSetStream");
    // float32 stays float32: TF32 tensor cores only where a caller asks (as PyTorch's default since 1.12).
    check_cublas(cublasSetMathMode(h.cublas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  return h.cublas;
}

cublasLtHandle_t cublaslt_handle(int device) {
  ThreadHandles& h = handles(device);
  detail::cuda::set_device(device);
  if (h.cublaslt == nullptr) check_cublas(cublasLtCreate(&h.cublaslt), "cublasLtCreate");
  return h.cublaslt;
}

cudnnHandle_t cudnn_handle(int device) {
  ThreadHandles& h = handles(device);
  cudaStream_t stream = detail::cuda::stream(device);
  if (h.cudnn == nullptr) {
    check_cudnn(cudnnCreate(&h.cudnn), "cudnnCreate");
    check_cudnn(cudnnSetStream(h.cudnn, stream), "cudnnSetStream");
  }
  return h.cudnn;
}

void* workspace(int device, size_t nbytes) {
  ThreadHandles& h = handles(device);
  if (nbytes <= h.workspace_bytes) return h.workspace;
  cudaStream_t stream = detail::cuda::stream(device);
  if (h.workspace != nullptr) detail::cuda::check(cudaFreeAsync(h.workspace, stream), "cudaFreeAsync");
  h.workspace = nullptr;
  h.workspace_bytes = 0;
  detail::cuda::check(cudaMallocAsync(&h.workspace, nbytes, stream), "cudaMallocAsync");
  h.workspace_bytes = nbytes;
  return h.workspace;
}

}  // namespace strata::kernels::cuda
