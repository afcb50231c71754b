// The fused losses of loss_ops.cc on a GPU (optim_kernels.h). A row's reductions (max, sum of exps, the loss) are one
// warp's: 32 lanes stride over the row and combine by shuffles, so a [batch, classes] loss is one launch of
// batch / 8 blocks; gradients are one thread per element. The arithmetic (float or double accumulators, where the
// clip and epsilon sit) is the CPU loops'; sums are in another order, so results agree to float rounding. The batch
// reduction of compute_weighted_loss is one block (CUB's BlockReduce), in a fixed order, so it is deterministic.
// Every launch is queued on the device's stream; nothing here waits for it.
// Thread-safety: see optim_kernels.h.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "core/cuda/cuda_context.h"
#include "optim/cuda/optim_kernels.h"
#include "strata/error.h"

namespace strata::optim::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // warps of a row-wise kernel's block
constexpr int kThreads = 256;
constexpr float kEpsilon = 1e-7f;  // keras.backend.epsilon(), as loss_ops.cc

cudaStream_t stream_of(int device) { return ::strata::detail::cuda::stream(device); }
void check_launch(const char* what) { ::strata::detail::cuda::check(cudaGetLastError(), what); }

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }
unsigned element_blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// This warp's row, or -1 past the last (the whole warp then returns together).
__device__ __forceinline__ int64_t warp_row(int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  return r < rows ? r : -1;
}
__device__ __forceinline__ int lane() { return static_cast<int>(threadIdx.x % kWarp); }
__device__ __forceinline__ int64_t element_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t label_at(const void* labels, DType dtype, int64_t r) {
  switch (dtype) {
    case DType::kInt32:
      return static_cast<const int32_t*>(labels)[r];
    case DType::kInt64:
      return static_cast<const int64_t*>(labels)[r];
    case DType::kUInt8:
      return static_cast<const uint8_t*>(labels)[r];
    default:
      return static_cast<int64_t>(floorf(static_cast<const float*>(labels)[r]));
  }
}

// std::min(std::max(q, eps), 1 - eps) as loss_ops.cc writes it (a NaN stays NaN, as there).
__device__ __forceinline__ float clip_probability(float q) {
  const float low = q < kEpsilon ? kEpsilon : q;
  return 1.0f - kEpsilon < low ? 1.0f - kEpsilon : low;
}

// ---- sparse categorical crossentropy

__global__ void sparse_xent_forward_kernel(const float* x, const void* labels, DType label_dtype, int64_t rows,
                                           int64_t n, bool from_logits, float* out, float* probs, float* row_sum,
                                           int64_t* bad_label) {
  const int64_t r = warp_row(rows);
  if (r < 0) return;
  const float* xr = x + r * n;
  const int64_t y = label_at(labels, label_dtype, r);
  const bool valid = y >= 0 && y < n;
  if (from_logits) {
    float m = -INFINITY;
    for (int64_t k = lane(); k < n; k += kWarp) m = fmaxf(m, xr[k]);
    m = warp_max(m);
    float s = 0.0f;
    float* pr = probs + r * n;
    for (int64_t k = lane(); k < n; k += kWarp) {
      const float e = expf(xr[k] - m);
      pr[k] = e;
      s += e;
    }
    s = warp_sum(s);
    const float inv = 1.0f / s;
    for (int64_t k = lane(); k < n; k += kWarp) pr[k] *= inv;
    if (lane() == 0) out[r] = valid ? m + logf(s) - xr[y] : NAN;
  } else {
    double s = 0.0;
    for (int64_t k = lane(); k < n; k += kWarp) s += xr[k];
    s = warp_sum(s);
    if (lane() == 0) {
      row_sum[r] = static_cast<float>(s);
      out[r] = valid ? -logf(clip_probability(static_cast<float>(xr[y] / s))) : NAN;
    }
  }
  if (!valid && lane() == 0)
    atomicMin(reinterpret_cast<unsigned long long*>(bad_label), static_cast<unsigned long long>(r));
}

__global__ void sparse_xent_backward_kernel(const float* x, const float* probs, const float* row_sum,
                                            const void* labels, DType label_dtype, int64_t rows, int64_t n,
                                            bool from_logits, const float* d, float* g) {
  const int64_t i = element_index();
  if (i >= rows * n) return;
  const int64_t r = i / n, k = i % n;
  const int64_t y = label_at(labels, label_dtype, r);
  const float dr = d[r];
  if (from_logits) {
    float v = dr * probs[i];
    if (k == y) v -= dr;
    g[i] = v;
    return;
  }
  // dp_j = dq * (δ_jy - q) / s with q = p_y / s and dq = -1 / q inside the clip.
  const float s = row_sum[r];
  const float q = x[r * n + y] / s;
  const bool inside = q >= kEpsilon && q <= 1.0f - kEpsilon;
  const float dq = inside ? -1.0f / q : 0.0f;
  const float scale = dr / s;
  float v = -scale * dq * q;
  if (k == y) v += scale * dq;
  g[i] = v;
}

// ---- categorical crossentropy

__global__ void categorical_xent_forward_kernel(const float* t, const float* x, int64_t rows, int64_t n,
                                                bool from_logits, float keep, float spread, float* logq, float* out) {
  const int64_t r = warp_row(rows);
  if (r < 0) return;
  const float* xr = x + r * n;
  const float* tr = t + r * n;
  float* lq = logq + r * n;
  if (from_logits) {
    float m = -INFINITY;
    for (int64_t k = lane(); k < n; k += kWarp) m = fmaxf(m, xr[k]);
    m = warp_max(m);
    float s = 0.0f;
    for (int64_t k = lane(); k < n; k += kWarp) s += expf(xr[k] - m);
    s = warp_sum(s);
    const float lse = m + logf(s);
    for (int64_t k = lane(); k < n; k += kWarp) lq[k] = xr[k] - lse;
  } else {
    double s = 0.0;
    for (int64_t k = lane(); k < n; k += kWarp) s += xr[k];
    s = warp_sum(s);
    for (int64_t k = lane(); k < n; k += kWarp) lq[k] = logf(clip_probability(static_cast<float>(xr[k] / s)));
  }
  double loss = 0.0;
  for (int64_t k = lane(); k < n; k += kWarp) loss -= static_cast<double>(tr[k] * keep + spread) * lq[k];
  loss = warp_sum(loss);
  if (lane() == 0) out[r] = static_cast<float>(loss);
}

__global__ void categorical_target_grad_kernel(const float* logq, int64_t rows, int64_t n, float keep, const float* d,
                                               float* gt) {
  const int64_t i = element_index();
  if (i < rows * n) gt[i] = -d[i / n] * keep * logq[i];
}

__global__ void categorical_prediction_grad_kernel(const float* t, const float* x, const float* logq, int64_t rows,
                                                   int64_t n, bool from_logits, float keep, float spread,
                                                   const float* d, float* gp) {
  const int64_t r = warp_row(rows);
  if (r < 0) return;
  const float* tr = t + r * n;
  const float* lq = logq + r * n;
  float* out = gp + r * n;
  const float dr = d[r];
  if (from_logits) {  // softmax * sum(t') - t'
    double total = 0.0;
    for (int64_t k = lane(); k < n; k += kWarp) total += tr[k] * keep + spread;
    total = warp_sum(total);
    for (int64_t k = lane(); k < n; k += kWarp)
      out[k] = dr * (expf(lq[k]) * static_cast<float>(total) - (tr[k] * keep + spread));
    return;
  }
  // q = p / s, loss = -sum t' log(clip(q)): dq_k = -t'_k / q_k inside the clip; dp_j = (dq_j - sum_k dq_k q_k) / s.
  const float* xr = x + r * n;
  double s = 0.0;
  for (int64_t k = lane(); k < n; k += kWarp) s += xr[k];
  s = warp_sum(s);
  double dot = 0.0;
  for (int64_t k = lane(); k < n; k += kWarp) {
    const float q = static_cast<float>(xr[k] / s);
    const bool inside = q >= kEpsilon && q <= 1.0f - kEpsilon;
    const float v = inside ? -(tr[k] * keep + spread) / q : 0.0f;
    out[k] = v;
    dot += static_cast<double>(v) * q;
  }
  dot = warp_sum(dot);
  const float scale = static_cast<float>(dr / s);
  for (int64_t k = lane(); k < n; k += kWarp) out[k] = scale * (out[k] - static_cast<float>(dot));  // its own k
}

// ---- losses averaged over the last axis

__device__ __forceinline__ float sign_of(float v) { return v > 0 ? 1.0f : (v < 0 ? -1.0f : 0.0f); }
__device__ __forceinline__ float smooth(float t, float keep) { return t * keep + 0.5f * (1.0f - keep); }

__device__ double mean_loss_value(MeanLoss which, float keep, float t, float p) {
  switch (which) {
    case MeanLoss::kSquared:
      return static_cast<double>(p - t) * (p - t);
    case MeanLoss::kAbsolute:
      return fabsf(p - t);
    case MeanLoss::kBinaryProbabilities: {
      const double ts = smooth(t, keep), pc = clip_probability(p);
      return -(ts * log(pc) + (1.0 - ts) * log(1.0 - pc));
    }
    case MeanLoss::kBinaryLogits: {
      const double xd = p;
      return fmax(xd, 0.0) - xd * smooth(t, keep) + log1p(exp(-fabs(xd)));
    }
  }
  return 0.0;
}

__device__ float mean_loss_dp(MeanLoss which, float keep, float t, float p) {
  switch (which) {
    case MeanLoss::kSquared:
      return 2.0f * (p - t);
    case MeanLoss::kAbsolute:
      return sign_of(p - t);
    case MeanLoss::kBinaryProbabilities: {
      if (p < kEpsilon || p > 1.0f - kEpsilon) return 0.0f;  // the clip's gradient
      const float ts = smooth(t, keep);
      return -(ts / p - (1.0f - ts) / (1.0f - p));
    }
    case MeanLoss::kBinaryLogits: {
      const float s = p >= 0 ? 1.0f / (1.0f + expf(-p)) : expf(p) / (1.0f + expf(p));
      return s - smooth(t, keep);
    }
  }
  return 0.0f;
}

__device__ float mean_loss_dt(MeanLoss which, float keep, float t, float p) {
  switch (which) {
    case MeanLoss::kSquared:
      return -2.0f * (p - t);
    case MeanLoss::kAbsolute:
      return -sign_of(p - t);
    case MeanLoss::kBinaryProbabilities: {
      const float pc = clip_probability(p);
      return -(logf(pc) - logf(1.0f - pc)) * keep;
    }
    case MeanLoss::kBinaryLogits:
      return -p * keep;
  }
  return 0.0f;
}

__global__ void mean_loss_forward_kernel(MeanLoss which, float keep, const float* t, const float* p, int64_t rows,
                                         int64_t n, float* out) {
  const int64_t r = warp_row(rows);
  if (r < 0) return;
  double s = 0.0;
  for (int64_t k = r * n + lane(); k < (r + 1) * n; k += kWarp) s += mean_loss_value(which, keep, t[k], p[k]);
  s = warp_sum(s);
  if (lane() == 0) out[r] = static_cast<float>(s / static_cast<double>(n));
}

__global__ void mean_loss_backward_kernel(MeanLoss which, float keep, const float* t, const float* p, int64_t rows,
                                          int64_t n, const float* d, float* gt, float* gp) {
  const int64_t i = element_index();
  if (i >= rows * n) return;
  const float scale = d[i / n] * (1.0f / static_cast<float>(n));
  if (gt != nullptr) gt[i] = scale * mean_loss_dt(which, keep, t[i], p[i]);
  if (gp != nullptr) gp[i] = scale * mean_loss_dp(which, keep, t[i], p[i]);
}

// ---- compute_weighted_loss

__global__ void weighted_sum_kernel(const float* l, const float* w, int64_t group, int64_t n, double scale,
                                    float* out) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    s += static_cast<double>(l[i]) * (w != nullptr ? w[i / group] : 1.0f);
  const double total = Reduce(temp).Sum(s);
  if (threadIdx.x == 0) out[0] = static_cast<float>(total * scale);
}

__global__ void weighted_elements_kernel(const float* l, const float* w, int64_t group, int64_t n, float* out) {
  const int64_t i = element_index();
  if (i < n) out[i] = l[i] * w[i / group];
}

__global__ void weighted_backward_kernel(const float* d, const float* w, int64_t group, int64_t n, bool reduce,
                                         float scale, float* g) {
  const int64_t i = element_index();
  if (i >= n) return;
  const float base = reduce ? d[0] * scale : d[i];
  g[i] = w != nullptr ? base * w[i / group] : base;
}

}  // namespace

void sparse_xent_forward(int device, const float* x, const void* labels, DType label_dtype, int64_t rows, int64_t n,
                         bool from_logits, float* out, float* probs, float* row_sum, int64_t* bad_label) {
  cudaStream_t stream = stream_of(device);
  // All ones: UINT64_MAX, which every atomicMin lowers; read as int64 it is -1, "no bad label".
  ::strata::detail::cuda::check(cudaMemsetAsync(bad_label, 0xFF, sizeof(int64_t), stream), "cudaMemsetAsync");
  if (rows <= 0) return;
  sparse_xent_forward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(x, labels, label_dtype, rows, n, from_logits,
                                                                        out, probs, row_sum, bad_label);
  check_launch("sparse_categorical_crossentropy on the GPU");
}

void sparse_xent_backward(int device, const float* x, const float* probs, const float* row_sum, const void* labels,
                          DType label_dtype, int64_t rows, int64_t n, bool from_logits, const float* d, float* g) {
  if (rows * n <= 0) return;
  sparse_xent_backward_kernel<<<element_blocks(rows * n), kThreads, 0, stream_of(device)>>>(
      x, probs, row_sum, labels, label_dtype, rows, n, from_logits, d, g);
  check_launch("sparse_categorical_crossentropy's gradient on the GPU");
}

void categorical_xent_forward(int device, const float* t, const float* x, int64_t rows, int64_t n, bool from_logits,
                              float keep, float spread, float* logq, float* out) {
  if (rows <= 0) return;
  categorical_xent_forward_kernel<<<row_blocks(rows), kThreads, 0, stream_of(device)>>>(t, x, rows, n, from_logits,
                                                                                        keep, spread, logq, out);
  check_launch("categorical_crossentropy on the GPU");
}

void categorical_xent_backward(int device, const float* t, const float* x, const float* logq, int64_t rows, int64_t n,
                               bool from_logits, float keep, float spread, const float* d, float* gt, float* gp) {
  if (rows * n <= 0) return;
  cudaStream_t s = stream_of(device);
  if (gt != nullptr)
    categorical_target_grad_kernel<<<element_blocks(rows * n), kThreads, 0, s>>>(logq, rows, n, keep, d, gt);
  if (gp != nullptr) {
    categorical_prediction_grad_kernel<<<row_blocks(rows), kThreads, 0, s>>>(t, x, logq, rows, n, from_logits, keep,
                                                                             spread, d, gp);
  }
  check_launch("categorical_crossentropy's gradient on the GPU");
}

void mean_loss_forward(int device, MeanLoss which, float keep, const float* t, const float* p, int64_t rows, int64_t n,
                       float* out) {
  if (rows <= 0) return;
  mean_loss_forward_kernel<<<row_blocks(rows), kThreads, 0, stream_of(device)>>>(which, keep, t, p, rows, n, out);
  check_launch("a loss on the GPU");
}

void mean_loss_backward(int device, MeanLoss which, float keep, const float* t, const float* p, int64_t rows, int64_t n,
                        const float* d, float* gt, float* gp) {
  if (rows * n <= 0) return;
  mean_loss_backward_kernel<<<element_blocks(rows * n), kThreads, 0, stream_of(device)>>>(which, keep, t, p, rows, n, d,
                                                                                          gt, gp);
  check_launch("a loss's gradient on the GPU");
}

void weighted_loss_forward(int device, const float* l, const float* w, int64_t group, int64_t n, bool reduce,
                           double scale, float* out) {
  cudaStream_t s = stream_of(device);
  if (reduce) {
    weighted_sum_kernel<<<1, kThreads, 0, s>>>(l, w, group, n, scale, out);  // n = 0 writes 0
  } else if (n > 0) {
    weighted_elements_kernel<<<element_blocks(n), kThreads, 0, s>>>(l, w, group, n, out);
  }
  check_launch("compute_weighted_loss on the GPU");
}

void weighted_loss_backward(int device, const float* d, const float* w, int64_t group, int64_t n, bool reduce,
                            double scale, float* g) {
  if (n <= 0) return;
  weighted_backward_kernel<<<element_blocks(n), kThreads, 0, stream_of(device)>>>(d, w, group, n, reduce,
                                                                                  static_cast<float>(scale), g);
  check_launch("compute_weighted_loss's gradient on the GPU");
}

}  // namespace strata::optim::cuda
