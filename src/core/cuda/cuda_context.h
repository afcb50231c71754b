// The CUDA runtime as strata uses it: one stream per device for the whole process, on which every kernel, copy,
// allocation and free of that device is queued in order (so a buffer freed after the kernels that read it is
// safe to reuse, as with PyTorch's current stream), and CUDA's errors turned into strata's.
// Built only with STRATA_WITH_CUDA. Thread-safety: every function is safe from any thread; each device's stream is
// created once, on first use, and lives as long as the process.
#pragma once

#include <cuda_runtime_api.h>

namespace strata::detail::cuda {

// Throws Unavailable naming `what` and CUDA's message unless `status` is cudaSuccess (clearing the last error).
void check(cudaError_t status, const char* what);
// Makes `device` current on the calling thread; throws Unavailable naming the device count when it does not exist.
void set_device(int device);
// The stream of `device` (non-blocking: it does not wait for the legacy default stream). Makes `device` current.
cudaStream_t stream(int device);
// Waits until everything queued on `device`'s stream has finished; an earlier kernel's error surfaces here.
void synchronize(int device);

}  // namespace strata::detail::cuda
