// Operands of the GPU's products and convolutions in the calling thread's compute precision (mixed precision,
// kernels/compute_precision.h): float32 tensors as they are, or bfloat16 copies of them. Shared by matmul.cc,
// dense.cu and conv.cc. Built only with STRATA_WITH_CUDA. Thread-safety: reads the calling thread's precision; a copy
// is queued on the tensor's device stream.
#pragma once

#include "kernels/compute_precision.h"
#include "strata/tensor.h"

namespace strata::kernels::cuda {

// The dtype the calling thread's products and convolutions read their operands in: float32, or bfloat16 under
// ComputePrecision::kBFloat16.
inline DType operand_dtype() {
  return compute_precision() == ComputePrecision::kBFloat16 ? DType::kBFloat16 : DType::kFloat32;
}

// `t` (float32, on a GPU) as such a product or convolution reads it: t itself under kFloat32; under kBFloat16 a
// bfloat16 copy from the device's caching allocator, rounded to nearest even as the host's BFloat16 and the CPU
// kernels' oneDNN reorders round (Tensor::to, queued on the device's stream), freed in stream order when dropped.
inline Tensor compute_operand(const Tensor& t) {
  return operand_dtype() == DType::kFloat32 ? t : t.to(operand_dtype());
}

}  // namespace strata::kernels::cuda
