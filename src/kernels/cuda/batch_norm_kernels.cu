// Per-channel reductions and batch norm passes over [M, C] rows (batch_norm_kernels.h).
//
// Reduction: a block of 256 threads covers W channels (W the power of two >= C, at most 32) and 256 / W rows per
// sweep, so a warp reads 32 consecutive floats (whole rows when C <= 16, a 128-byte run of one row otherwise). Block
// (g, j) sweeps its chunk of rows for channel group g, each thread adding its rows in order; the block then adds
// its threads' sums per channel in a fixed tree in shared memory and writes one partial per channel. A second kernel
// adds each channel's chunk partials (at most 1024) in double, up to 256 threads per channel then a fixed tree, and
// derives what the caller wants from the totals. The chunking depends only on (M, C): the same bits on every run.
// Elementwise passes are one thread per element in grid-stride loops (32-bit indices when the tensor allows).
// Thread-safety: each call only queues work on the given stream.
#include <algorithm>
#include <climits>

#include "kernels/cuda/batch_norm_kernels.h"

namespace strata::kernels::cuda {

namespace {

constexpr int kThreads = 256;
// At most this many reduction blocks (over both grid axes, where the channels allow): enough to keep every SM of an
// H200 streaming, few enough that the partials are a small fraction of the input.
constexpr int64_t kMaxBlocks = 1024;
// Each thread adds at least this many rows before the grid grows.
constexpr int64_t kMinRowsPerThread = 4;

struct Plan {
  int w_log2 = 0;      // channels per block: 1 << w_log2
  int64_t chunk = 0;   // rows per block, a multiple of the rows per sweep
  int64_t groups = 0;  // channel groups (grid x)
  int64_t chunks = 0;  // row chunks (grid y)
};

Plan plan_for(int64_t m, int64_t c) {
  Plan p;
  while ((int64_t{1} << p.w_log2) < c && p.w_log2 < 5) ++p.w_log2;
  const int64_t w = int64_t{1} << p.w_log2;
  const int64_t rows = kThreads / w;
  p.groups = (c + w - 1) / w;
  const int64_t max_chunks = std::clamp<int64_t>(kMaxBlocks / p.groups, 1, 65535);
  const int64_t wanted = (m + kMinRowsPerThread * rows - 1) / (kMinRowsPerThread * rows);
  const int64_t chunks = std::clamp<int64_t>(wanted, 1, max_chunks);
  const int64_t per_chunk = (m + chunks - 1) / chunks;
  p.chunk = (per_chunk + rows - 1) / rows * rows;
  p.chunks = (m + p.chunk - 1) / p.chunk;
  return p;
}

// Loaders: set up for one channel, then add row element i's contribution(s) to acc.
struct SumLoad {
  static constexpr int kSums = 1;
  const float* x;
  __device__ void begin(int64_t) {}
  __device__ void operator()(int64_t i, float* acc) const { acc[0] += x[i]; }
};

struct CenteredSquareLoad {
  static constexpr int kSums = 1;
  const float* x;
  const float* mean;
  float mu = 0.0f;
  __device__ void begin(int64_t ch) { mu = mean[ch]; }
  __device__ void operator()(int64_t i, float* acc) const {
    const float d = x[i] - mu;
    acc[0] += d * d;
  }
};

// sum(dy) and sum(dy * (x - mean)).
struct BackwardLoad {
  static constexpr int kSums = 2;
  const float* x;
  const float* dy;
  const float* mean;
  float mu = 0.0f;
  __device__ void begin(int64_t ch) { mu = mean[ch]; }
  __device__ void operator()(int64_t i, float* acc) const {
    const float g = dy[i];
    acc[0] += g;
    acc[1] += g * (x[i] - mu);
  }
};

// partials[(chunk * K + k) * c + ch]: sum k of block (group, chunk)'s rows for channel ch.
template <class Load>
__global__ void __launch_bounds__(kThreads)
    partial_sums_kernel(Load load, int64_t m, int64_t c, int w_log2, int64_t chunk, float* partials) {
  constexpr int K = Load::kSums;
  __shared__ float sh[K][kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & ((1 << w_log2) - 1);
  const int r = tid >> w_log2;
  const int rows = kThreads >> w_log2;
  const int64_t ch = (int64_t{blockIdx.x} << w_log2) + lane;
  const int64_t begin = int64_t{blockIdx.y} * chunk;
  const int64_t end = begin + chunk < m ? begin + chunk : m;
  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  if (ch < c) {
    load.begin(ch);
    const int64_t step = rows * c;
    int64_t i = (begin + r) * c + ch;
#pragma unroll 4
    for (int64_t row = begin + r; row < end; row += rows, i += step) load(i, acc);
  }
#pragma unroll
  for (int k = 0; k < K; ++k) sh[k][tid] = acc[k];
  __syncthreads();
  for (int s = rows / 2; s > 0; s >>= 1) {
    if (r < s) {
#pragma unroll
      for (int k = 0; k < K; ++k) sh[k][tid] += sh[k][tid + (s << w_log2)];
    }
    __syncthreads();
  }
  if (r == 0 && ch < c) {
#pragma unroll
    for (int k = 0; k < K; ++k) partials[(int64_t{blockIdx.y} * K + k) * c + ch] = sh[k][tid];
  }
}

// The chunk partials of each channel added up: T = 1 << t_log2 threads per channel (T >= chunks where chunks <= 256)
// each add chunks t, t + T, ... in order, then a fixed tree in shared memory (double); `finish` gets the K totals.
template <int K, class Finish>
__global__ void __launch_bounds__(kThreads)
    finish_kernel(const float* partials, int64_t chunks, int64_t c, int t_log2, Finish finish) {
  __shared__ double sh[K][kThreads];
  const int tid = static_cast<int>(threadIdx.x);
  const int t = tid & ((1 << t_log2) - 1);
  const int64_t ch = int64_t{blockIdx.x} * (kThreads >> t_log2) + (tid >> t_log2);
  double acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0;
  if (ch < c) {
    for (int64_t j = t; j < chunks; j += int64_t{1} << t_log2) {
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] += partials[(j * K + k) * c + ch];
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) sh[k][tid] = acc[k];
  __syncthreads();
  for (int s = (1 << t_log2) / 2; s > 0; s >>= 1) {
    if (t < s) {
#pragma unroll
      for (int k = 0; k < K; ++k) sh[k][tid] += sh[k][tid + s];
    }
    __syncthreads();
  }
  if (t == 0 && ch < c) {
    double total[K];
#pragma unroll
    for (int k = 0; k < K; ++k) total[k] = sh[k][tid];
    finish(ch, total);
  }
}

// out = alpha * sum.
struct SumsFinish {
  static constexpr int kSums = 1;
  double alpha;
  float* out;
  __device__ void operator()(int64_t ch, const double* total) const { out[ch] = static_cast<float>(total[0] * alpha); }
};

// variance = sum / m (biased); scale = gamma / sqrt(variance + epsilon).
struct VarianceFinish {
  static constexpr int kSums = 1;
  int64_t m;
  const float* gamma;
  float epsilon;
  float* variance;
  float* scale;
  __device__ void operator()(int64_t ch, const double* total) const {
    const float v = static_cast<float>(total[0] / static_cast<double>(m));
    variance[ch] = v;
    scale[ch] = gamma[ch] / sqrtf(v + epsilon);
  }
};

// From sum(dy) and sum(dy * (x - mean)): dbeta, dgamma, and dx's coefficients coef[ch] = gamma * rstd,
// coef[c + ch] = dbeta / m, coef[2c + ch] = rstd * dgamma / m.
struct BackwardFinish {
  static constexpr int kSums = 2;
  int64_t m, c;
  const float* variance;
  const float* gamma;
  float epsilon;
  float* dgamma;
  float* dbeta;
  float* coef;
  __device__ void operator()(int64_t ch, const double* total) const {
    const float rstd = 1.0f / sqrtf(variance[ch] + epsilon);
    const float db = static_cast<float>(total[0]);
    const float dg = static_cast<float>(total[1] * static_cast<double>(rstd));
    dbeta[ch] = db;
    dgamma[ch] = dg;
    const float inv_m = static_cast<float>(1.0 / static_cast<double>(m));
    coef[ch] = gamma[ch] * rstd;
    coef[c + ch] = db * inv_m;
    coef[2 * c + ch] = rstd * dg * inv_m;
  }
};

__global__ void scale_kernel(const float* gamma, const float* variance, float epsilon, int64_t c, float* scale) {
  for (int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; ch < c; ch += int64_t{gridDim.x} * blockDim.x)
    scale[ch] = gamma[ch] / sqrtf(variance[ch] + epsilon);
}

// y = (x - mean) * scale + beta.
template <class Index>
__global__ void normalize_kernel(const float* x, const float* mean, const float* scale, const float* beta, Index total,
                                 Index c, float* y) {
  for (Index i = blockIdx.x * Index{blockDim.x} + threadIdx.x; i < total; i += Index{gridDim.x} * blockDim.x) {
    const Index ch = i % c;
    y[i] = (x[i] - mean[ch]) * scale[ch] + beta[ch];
  }
}

// dx = a * (dy - b - (x - mean) * d) with a, b, d = coef[0:c], coef[c:2c], coef[2c:3c].
template <class Index>
__global__ void backward_dx_kernel(const float* x, const float* dy, const float* mean, const float* coef, Index total,
                                   Index c, float* dx) {
  for (Index i = blockIdx.x * Index{blockDim.x} + threadIdx.x; i < total; i += Index{gridDim.x} * blockDim.x) {
    const Index ch = i % c;
    dx[i] = coef[ch] * (dy[i] - coef[c + ch] - (x[i] - mean[ch]) * coef[2 * c + ch]);
  }
}

unsigned blocks_for(int64_t total) {
  return static_cast<unsigned>(std::clamp<int64_t>((total + kThreads - 1) / kThreads, 1, int64_t{1} << 20));
}

bool valid(int64_t m, int64_t c) {
  return m >= 1 && c >= 1 && c <= INT_MAX && m <= LLONG_MAX / c && plan_for(m, c).groups <= INT_MAX;
}

// Queues the partial sums of `load` over [m, c] into `partials`.
template <class Load>
cudaError_t partial_sums(const Load& load, int64_t m, int64_t c, const Plan& p, float* partials, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.groups), static_cast<unsigned>(p.chunks));
  partial_sums_kernel<Load><<<grid, kThreads, 0, stream>>>(load, m, c, p.w_log2, p.chunk, partials);
  return cudaGetLastError();
}

// Queues the chunk totals of `partials` into `finish`.
template <class Finish>
cudaError_t finish_sums(const Finish& finish, const float* partials, int64_t c, const Plan& p, cudaStream_t stream) {
  int t_log2 = 0;
  while ((int64_t{1} << t_log2) < p.chunks && (1 << t_log2) < kThreads) ++t_log2;
  const int64_t per_block = kThreads >> t_log2;
  const unsigned blocks = static_cast<unsigned>((c + per_block - 1) / per_block);
  finish_kernel<Finish::kSums, Finish><<<blocks, kThreads, 0, stream>>>(partials, p.chunks, c, t_log2, finish);
  return cudaGetLastError();
}

cudaError_t normalize(const float* x, const float* mean, const float* scale, const float* beta, int64_t m, int64_t c,
                      float* y, cudaStream_t stream) {
  const int64_t total = m * c;
  if (total <= INT_MAX) {
    normalize_kernel<uint32_t><<<blocks_for(total), kThreads, 0, stream>>>(
        x, mean, scale, beta, static_cast<uint32_t>(total), static_cast<uint32_t>(c), y);
  } else {
    normalize_kernel<int64_t><<<blocks_for(total), kThreads, 0, stream>>>(x, mean, scale, beta, total, c, y);
  }
  return cudaGetLastError();
}

}  // namespace

size_t channel_scratch_floats(int64_t m, int64_t c) {
  if (!valid(m, c)) return 0;
  const Plan p = plan_for(m, c);
  return static_cast<size_t>(p.chunks * 2 * c + 3 * c);
}

cudaError_t channel_sums(const float* x, int64_t m, int64_t c, float alpha, float* out, float* scratch,
                         cudaStream_t stream) {
  if (!valid(m, c)) return cudaErrorInvalidValue;
  const Plan p = plan_for(m, c);
  if (cudaError_t e = partial_sums(SumLoad{x}, m, c, p, scratch, stream); e != cudaSuccess) return e;
  return finish_sums(SumsFinish{alpha, out}, scratch, c, p, stream);
}

cudaError_t batch_norm_training_rows(const float* x, const float* gamma, const float* beta, int64_t m, int64_t c,
                                     float epsilon, float* y, float* mean, float* variance, float* scratch,
                                     cudaStream_t stream) {
  if (!valid(m, c)) return cudaErrorInvalidValue;
  const Plan p = plan_for(m, c);
  float* scale = scratch + p.chunks * 2 * c;
  if (cudaError_t e = partial_sums(SumLoad{x}, m, c, p, scratch, stream); e != cudaSuccess) return e;
  if (cudaError_t e = finish_sums(SumsFinish{1.0 / static_cast<double>(m), mean}, scratch, c, p, stream);
      e != cudaSuccess)
    return e;
  if (cudaError_t e = partial_sums(CenteredSquareLoad{x, mean}, m, c, p, scratch, stream); e != cudaSuccess) return e;
  if (cudaError_t e = finish_sums(VarianceFinish{m, gamma, epsilon, variance, scale}, scratch, c, p, stream);
      e != cudaSuccess)
    return e;
  return normalize(x, mean, scale, beta, m, c, y, stream);
}

cudaError_t batch_norm_inference_rows(const float* x, const float* gamma, const float* beta, const float* mean,
                                      const float* variance, int64_t m, int64_t c, float epsilon, float* y,
                                      float* scratch, cudaStream_t stream) {
  if (!valid(m, c)) return cudaErrorInvalidValue;
  float* scale = scratch;
  scale_kernel<<<blocks_for(c), kThreads, 0, stream>>>(gamma, variance, epsilon, c, scale);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return normalize(x, mean, scale, beta, m, c, y, stream);
}

cudaError_t batch_norm_backward_rows(const float* x, const float* dy, const float* mean, const float* variance,
                                     const float* gamma, int64_t m, int64_t c, float epsilon, float* dx, float* dgamma,
                                     float* dbeta, float* scratch, cudaStream_t stream) {
  if (!valid(m, c)) return cudaErrorInvalidValue;
  const Plan p = plan_for(m, c);
  float* coef = scratch + p.chunks * 2 * c;
  if (cudaError_t e = partial_sums(BackwardLoad{x, dy, mean}, m, c, p, scratch, stream); e != cudaSuccess) return e;
  if (cudaError_t e =
          finish_sums(BackwardFinish{m, c, variance, gamma, epsilon, dgamma, dbeta, coef}, scratch, c, p, stream);
      e != cudaSuccess)
    return e;
  const int64_t total = m * c;
  if (total <= INT_MAX) {
    backward_dx_kernel<uint32_t><<<blocks_for(total), kThreads, 0, stream>>>(
        x, dy, mean, coef, static_cast<uint32_t>(total), static_cast<uint32_t>(c), dx);
  } else {
    backward_dx_kernel<int64_t><<<blocks_for(total), kThreads, 0, stream>>>(x, dy, mean, coef, total, c, dx);
  }
  return cudaGetLastError();
}

}  // namespace strata::kernels::cuda
