// The few device kernels the cuDNN-based kernels need beside cuDNN: average pooling that excludes padding when the
// padding is not symmetric (Keras's SAME with an odd total pads one more at the end; cuDNN pads both sides alike, and the divisor
// of an excluded-padding average depends on both). Raw pointers and a stream, so nvcc sees no strata header.
// Built only with STRATA_WITH_CUDA. Thread-safety: each call only queues work on the given stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strata::kernels::cuda {

// NHWC average pooling with explicit (possibly asymmetric) padding, averaging over the window's cells inside the
// input; every window holds at least one (pad_top < pool_h and pad_left < pool_w).
struct AvgPoolShape {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input
  int64_t oh = 0, ow = 0;              // output
  int64_t pool_h = 1, pool_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0;  // the cells before the input; those after follow from oh and ow
};
// y [n, oh, ow, c] from x [n, h, w, c].
cudaError_t avg_pool_exclude_padding(const AvgPoolShape& s, const float* x, float* y, cudaStream_t stream);
// dx [n, h, w, c] from dy [n, oh, ow, c]: each input cell gathers dy / count of every window that holds it.
cudaError_t avg_pool_exclude_padding_backward(const AvgPoolShape& s, const float* dy, float* dx, cudaStream_t stream);

}  // namespace strata::kernels::cuda
