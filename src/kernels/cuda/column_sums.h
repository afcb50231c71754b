// Per-channel sums of a channels-last tensor on a GPU: x viewed as [M, C] summed over M by the reduction kernel of
// batch_norm_kernels.h (one coalesced read of x, a deterministic two-level tree), which batch norm shares. The
// convolution's bias gradient uses it: cuDNN's own reductions over the [M, C, 1, 1] view walk M serially (measured on
// an H200: 15 ms for cudnnConvolutionBackwardBias at M = 43,264, C = 32), and a cuBLAS gemv with ones (the previous
// path) has only C = 16 output rows to spread over the GPU at ResNet's shapes.
// Thread-safety: safe to call concurrently (per-thread cuBLAS handles).
#pragma once

#include "strata/tensor.h"

namespace strata::kernels::cuda {

// alpha * x.sum over every axis but the last: float32 [C] on x's device. x is float32 with at least one element
// per channel row (M >= 1) and at most 2^31 - 1 channels. Nothing waits for the stream.
Tensor column_sums(const Tensor& x, float alpha = 1.0f);

}  // namespace strata::kernels::cuda
