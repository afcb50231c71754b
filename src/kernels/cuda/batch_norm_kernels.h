// Device kernels for per-channel work on a channels-last tensor viewed as [M, C] (row-major, C contiguous): the
// per-channel sums (column_sums.h, the convolution's bias gradient) and batch norm's training, inference and
// backward passes (batch_norm.cc). cuDNN walked the [M, C, 1, 1] view serially and cuBLAS gemv with ones needs
// extra passes for the centred sums, so these are hand-written: a reduction reads [M, C] once, coalesced, with a
// 2-D grid of row chunks x channel groups; each block reduces its chunk in a fixed tree and writes one partial sum
// per channel, and a second tiny kernel adds the partials of each channel in a fixed tree (in double). The grid
// depends only on (M, C), so results are the same bits on every run. Normalisation and dx are one elementwise pass.
// Raw pointers and a stream, so nvcc sees no strata header. Built only with STRATA_WITH_CUDA.
// Thread-safety: each call only queues work on the given stream; the caller owns every buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace strata::kernels::cuda {

// Floats of device scratch that any call below needs for an [m, c] input (m >= 1, c >= 1).
size_t channel_scratch_floats(int64_t m, int64_t c);

// out[c] = alpha * sum over rows of x[m, c].
cudaError_t channel_sums(const float* x, int64_t m, int64_t c, float alpha, float* out, float* scratch,
                         cudaStream_t stream);

// Training: mean = sum(x) / m; variance = sum((x - mean)^2) / m (two passes, biased);
// y = (x - mean) * gamma / sqrt(variance + epsilon) + beta.
cudaError_t batch_norm_training_rows(const float* x, const float* gamma, const float* beta, int64_t m, int64_t c,
                                     float epsilon, float* y, float* mean, float* variance, float* scratch,
                                     cudaStream_t stream);

// Inference: y = (x - mean) * gamma / sqrt(variance + epsilon) + beta with the given statistics.
cudaError_t batch_norm_inference_rows(const float* x, const float* gamma, const float* beta, const float* mean,
                                      const float* variance, int64_t m, int64_t c, float epsilon, float* y,
                                      float* scratch, cudaStream_t stream);

// Backward through the batch statistics: with rstd = 1 / sqrt(variance + epsilon) and xhat = (x - mean) * rstd,
// dbeta = sum(dy), dgamma = sum(dy * xhat), dx = gamma * rstd * (dy - (dbeta + xhat * dgamma) / m).
cudaError_t batch_norm_backward_rows(const float* x, const float* dy, const float* mean, const float* variance,
                                     const float* gamma, int64_t m, int64_t c, float epsilon, float* dx, float* dgamma,
                                     float* dbeta, float* scratch, cudaStream_t stream);

}  // namespace strata::kernels::cuda
