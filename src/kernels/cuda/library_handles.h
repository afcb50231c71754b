// The cuBLAS, cuBLASLt and cuDNN handles of the calling thread for one device, each bound to that device's stream
// (core/cuda/cuda_context.h), plus a scratch workspace for cuBLASLt and cuDNN. Built only with STRATA_WITH_CUDA.
// Thread-safety: handles are per (thread, device), as both libraries advise, so any thread may ask; a handle must
// not be handed to another thread.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>

namespace strata::kernels::cuda {

// Throw Unavailable naming `what` and the library's message unless the status is success.
void check_cublas(cublasStatus_t status, const char* what);
void check_cudnn(cudnnStatus_t status, const char* what);

cublasHandle_t cublas_handle(int device);
cublasLtHandle_t cublaslt_handle(int device);
cudnnHandle_t cudnn_handle(int device);
// A device buffer of at least `nbytes` for library workspaces, owned by the calling thread and reused by its next
// call (work queued on the stream before a larger one is asked for finishes first: the old buffer is freed in order).
void* workspace(int device, size_t nbytes);

}  // namespace strata::kernels::cuda
