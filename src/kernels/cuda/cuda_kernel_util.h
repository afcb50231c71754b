// Helpers shared by the CUDA kernels of this folder (matrix products, elementwise, reductions, softmax, shape ops):
// the stream of a tensor's device, stream-ordered zero fills and scratch buffers, and the size checks the 32-bit
// library interfaces need. Built only with STRATA_WITH_CUDA. Thread-safety: pure functions; what they queue goes on
// the device's one stream (core/cuda/cuda_context.h), in call order.
#pragma once

#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>

#include "core/cuda/cuda_context.h"
#include "strata/error.h"
#include "strata/tensor.h"

namespace strata::kernels::cuda {

// The stream every kernel on `t`'s device is queued on (makes that device current).
inline cudaStream_t stream_of(const Tensor& t) { return detail::cuda::stream(t.device().index); }

// A new tensor on `device` with every byte zero, queued on the device's stream (no host round trip).
inline Tensor zeros_on(const Shape& shape, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  if (t.nbytes() > 0) {
    detail::cuda::check(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), detail::cuda::stream(device.index)),
                        "cudaMemsetAsync");
  }
  return t;
}

// Scratch device memory of `nbytes` (at least 1) for a library call on `device`: freed, in stream order, when the
// returned tensor goes, so the kernels queued before that free are done with it.
inline Tensor scratch(size_t nbytes, Device device) {
  return Tensor::empty({static_cast<int64_t>(nbytes > 0 ? nbytes : 1)}, DType::kUInt8, device);
}

// Throws InvalidArgument naming `op` unless `v` fits a 32-bit int (cuDNN's and some cuBLAS interfaces take int).
inline int to_int(int64_t v, const char* op, const char* what) {
  STRATA_CHECK(v >= 0 && v <= INT_MAX, InvalidArgument,
               op << ": " << what << " " << v << " is too large for the GPU library's 32-bit sizes");
  return static_cast<int>(v);
}

}  // namespace strata::kernels::cuda
