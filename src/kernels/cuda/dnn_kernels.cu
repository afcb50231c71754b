// Device kernels beside cuDNN (dnn_kernels.h): one thread per output element, in grid-stride loops, on the given
// stream. Average pooling's backward gathers (each input cell sums the windows that hold it), so it writes every
// element once, needs no zeroing and no atomics, and gives the same bits on every run.
// Thread-safety: each call only queues work on the given stream.
#include <algorithm>

#include "kernels/cuda/dnn_kernels.h"

namespace strata::kernels::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t total) {
  return static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t{1} << 20));
}

// The cells of window (o, q) inside the input: rows [h_lo, h_hi), columns [w_lo, w_hi).
struct Window {
  int64_t h_lo, h_hi, w_lo, w_hi;
};

__device__ Window window_of(const AvgPoolShape& s, int64_t o, int64_t q) {
  const int64_t h0 = o * s.stride_h - s.pad_top;
  const int64_t w0 = q * s.stride_w - s.pad_left;
  return {h0 > 0 ? h0 : 0, h0 + s.pool_h < s.h ? h0 + s.pool_h : s.h, w0 > 0 ? w0 : 0,
          w0 + s.pool_w < s.w ? w0 + s.pool_w : s.w};
}

__global__ void avg_pool_kernel(AvgPoolShape s, const float* x, float* y) {
  const int64_t total = s.n * s.oh * s.ow * s.c;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ci = i % s.c;
    int64_t t = i / s.c;
    const int64_t q = t % s.ow;
    t /= s.ow;
    const int64_t o = t % s.oh;
    const int64_t ni = t / s.oh;
    const Window win = window_of(s, o, q);
    const float* img = x + ni * s.h * s.w * s.c + ci;
    float sum = 0.0f;
    for (int64_t r = win.h_lo; r < win.h_hi; ++r) {
      for (int64_t col = win.w_lo; col < win.w_hi; ++col) sum += img[(r * s.w + col) * s.c];
    }
    y[i] = sum / static_cast<float>((win.h_hi - win.h_lo) * (win.w_hi - win.w_lo));
  }
}

__global__ void avg_pool_backward_kernel(AvgPoolShape s, const float* dy, float* dx) {
  const int64_t total = s.n * s.h * s.w * s.c;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ci = i % s.c;
    int64_t t = i / s.c;
    const int64_t col = t % s.w;
    t /= s.w;
    const int64_t row = t % s.h;
    const int64_t ni = t / s.h;
    // Window o holds row when o * stride - pad_top <= row < o * stride - pad_top + pool.
    const int64_t a = row + s.pad_top - s.pool_h + 1;
    const int64_t o_lo = a <= 0 ? 0 : (a + s.stride_h - 1) / s.stride_h;
    const int64_t o_end = (row + s.pad_top) / s.stride_h + 1 < s.oh ? (row + s.pad_top) / s.stride_h + 1 : s.oh;
    const int64_t b = col + s.pad_left - s.pool_w + 1;
    const int64_t q_lo = b <= 0 ? 0 : (b + s.stride_w - 1) / s.stride_w;
    const int64_t q_end = (col + s.pad_left) / s.stride_w + 1 < s.ow ? (col + s.pad_left) / s.stride_w + 1 : s.ow;
    const float* g = dy + ni * s.oh * s.ow * s.c + ci;
    float sum = 0.0f;
    for (int64_t o = o_lo; o < o_end; ++o) {
      for (int64_t q = q_lo; q < q_end; ++q) {
        const Window win = window_of(s, o, q);
        sum += g[(o * s.ow + q) * s.c] / static_cast<float>((win.h_hi - win.h_lo) * (win.w_hi - win.w_lo));
      }
    }
    dx[i] = sum;
  }
}

}  // namespace

cudaError_t avg_pool_exclude_padding(const AvgPoolShape& s, const float* x, float* y, cudaStream_t stream) {
  const int64_t total = s.n * s.oh * s.ow * s.c;
  if (total == 0) return cudaSuccess;
  avg_pool_kernel<<<blocks_for(total), kThreads, 0, stream>>>(s, x, y);
  return cudaGetLastError();
}

cudaError_t avg_pool_exclude_padding_backward(const AvgPoolShape& s, const float* dy, float* dx, cudaStream_t stream) {
  const int64_t total = s.n * s.h * s.w * s.c;
  if (total == 0) return cudaSuccess;
  avg_pool_backward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(s, dy, dx);
  return cudaGetLastError();
}

}  // namespace strata::kernels::cuda
