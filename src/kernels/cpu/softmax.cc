// Softmax and log-softmax on the CPU, forward and backward, over any axis.
//
// The tensor is seen as [outer, n, inner] around the axis. The last axis (inner == 1) runs one row
// at a time; another axis runs blocks of up to kBlock adjacent columns so the inner loops stay
// contiguous. Both subtract the maximum before exponentiating, so large logits never overflow, and
// sums are accumulated in double. Tensors of kDnnlMinElements or more (attention's [batch, heads, T, T]
// probabilities) run oneDNN's softmax_v2 primitive instead (vectorised exp, float sums; cached per shape, see
// dnnl_util.h): on the Transformer job's attention it took the plain loops' 8% of a step's time. The plain loops stay
// for the small shapes ([batch, classes] of a loss), where one call is shorter than a primitive's dispatch.
// Thread-safety: safe to call concurrently on distinct outputs.
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernels.h"

namespace strata::kernels {

namespace {

constexpr int64_t kBlock = 64;
constexpr int64_t kDnnlMinElements = 16384;
enum class Kind { kSoftmax, kLogSoftmax };

// ---- oneDNN, over the tensor seen as [outer, n, inner] with the softmax along dimension 1
dnnl::memory::desc axis_desc(const cpu::AxisSplit& s) {
  return cpu::f32_desc({s.outer, s.n, s.inner}, dnnl::memory::format_tag::abc);
}
dnnl::algorithm algorithm_of(Kind kind) {
  return kind == Kind::kSoftmax ? dnnl::algorithm::softmax_accurate : dnnl::algorithm::softmax_log;
}
dnnl::softmax_v2_forward::primitive_desc forward_pd(const cpu::AxisSplit& s, Kind kind) {
  const auto md = axis_desc(s);
  return dnnl::softmax_v2_forward::primitive_desc(
      {dnnl::prop_kind::forward_training, algorithm_of(kind), md, md, 1}, cpu::default_attr(), cpu::dnnl_engine());
}
cpu::CacheKey softmax_key(const char* op, const cpu::AxisSplit& s, Kind kind) {
  cpu::CacheKey key(op);
  key << s.outer << s.n << s.inner << static_cast<int64_t>(kind);
  return key;
}

void dnnl_forward(const char* op, const cpu::AxisSplit& s, const Tensor& x, const Tensor& y, Kind kind) {
  struct Entry {
    dnnl::softmax_v2_forward::primitive_desc pd;
    dnnl::softmax_v2_forward prim;
  };
  auto entry = cpu::cached<Entry>(softmax_key(op, s, kind), [&] {
    return cpu::dnnl_call(op, [&] {
      auto pd = forward_pd(s, kind);
      return std::make_shared<const Entry>(Entry{pd, dnnl::softmax_v2_forward(pd)});
    });
  });
  const auto md = axis_desc(s);
  cpu::execute(op, entry->prim, entry->pd, {{DNNL_ARG_SRC, cpu::wrap(md, x)}, {DNNL_ARG_DST, cpu::wrap(md, y)}});
}

void dnnl_backward(const char* op, const cpu::AxisSplit& s, const Tensor& y, const Tensor& dy, const Tensor& dx,
                   Kind kind) {
  struct Entry {
    dnnl::softmax_v2_backward::primitive_desc pd;
    dnnl::softmax_v2_backward prim;
  };
  auto entry = cpu::cached<Entry>(softmax_key(op, s, kind), [&] {
    return cpu::dnnl_call(op, [&] {
      const auto md = axis_desc(s);
      dnnl::softmax_v2_backward::primitive_desc pd({algorithm_of(kind), md, md, md, 1}, cpu::default_attr(),
                                                   cpu::dnnl_engine(), forward_pd(s, kind));
      return std::make_shared<const Entry>(Entry{pd, dnnl::softmax_v2_backward(pd)});
    });
  });
  const auto md = axis_desc(s);
  cpu::execute(op, entry->prim, entry->pd,
               {{DNNL_ARG_DST, cpu::wrap(md, y)}, {DNNL_ARG_DIFF_DST, cpu::wrap(md, dy)},
                {DNNL_ARG_DIFF_SRC, cpu::wrap(md, dx)}});
}

// ---- one contiguous row of n elements
void forward_row(const float* x, float* y, int64_t n, Kind kind) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t k = 0; k < n; ++k) m = x[k] > m ? x[k] : m;
  double s = 0.0;
  if (kind == Kind::kSoftmax) {
    for (int64_t k = 0; k < n; ++k) {
      y[k] = std::exp(x[k] - m);
      s += y[k];
    }
    const float inv = static_cast<float>(1.0 / s);
    for (int64_t k = 0; k < n; ++k) y[k] *= inv;
  } else {
    for (int64_t k = 0; k < n; ++k) s += std::exp(x[k] - m);
    const float log_s = static_cast<float>(std::log(s));
    for (int64_t k = 0; k < n; ++k) y[k] = (x[k] - m) - log_s;
  }
}

void backward_row(const float* y, const float* dy, float* dx, int64_t n, Kind kind) {
  double s = 0.0;
  if (kind == Kind::kSoftmax) {
    for (int64_t k = 0; k < n; ++k) s += static_cast<double>(dy[k]) * y[k];
    const float dot = static_cast<float>(s);
    for (int64_t k = 0; k < n; ++k) dx[k] = y[k] * (dy[k] - dot);
  } else {
    for (int64_t k = 0; k < n; ++k) s += dy[k];
    const float total = static_cast<float>(s);
    for (int64_t k = 0; k < n; ++k) dx[k] = dy[k] - std::exp(y[k]) * total;
  }
}

// ---- w <= kBlock adjacent columns; element k of column j is at [k * stride + j]
void forward_cols(const float* x, float* y, int64_t n, int64_t stride, int64_t w, Kind kind) {
  float m[kBlock];
  double s[kBlock];
  for (int64_t j = 0; j < w; ++j) {
    m[j] = -std::numeric_limits<float>::infinity();
    s[j] = 0.0;
  }
  for (int64_t k = 0; k < n; ++k) {
    const float* xr = x + k * stride;
    for (int64_t j = 0; j < w; ++j) m[j] = xr[j] > m[j] ? xr[j] : m[j];
  }
  for (int64_t k = 0; k < n; ++k) {
    const float* xr = x + k * stride;
    float* yr = y + k * stride;
    for (int64_t j = 0; j < w; ++j) {
      const float e = std::exp(xr[j] - m[j]);
      if (kind == Kind::kSoftmax) yr[j] = e;
      s[j] += e;
    }
  }
  float f[kBlock];
  for (int64_t j = 0; j < w; ++j) {
    f[j] = kind == Kind::kSoftmax ? static_cast<float>(1.0 / s[j]) : static_cast<float>(std::log(s[j]));
  }
  for (int64_t k = 0; k < n; ++k) {
    const float* xr = x + k * stride;
    float* yr = y + k * stride;
    if (kind == Kind::kSoftmax) {
      for (int64_t j = 0; j < w; ++j) yr[j] *= f[j];
    } else {
      for (int64_t j = 0; j < w; ++j) yr[j] = (xr[j] - m[j]) - f[j];
    }
  }
}

void backward_cols(const float* y, const float* dy, float* dx, int64_t n, int64_t stride, int64_t w, Kind kind) {
  double s[kBlock];
  for (int64_t j = 0; j < w; ++j) s[j] = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    const float* yr = y + k * stride;
    const float* gr = dy + k * stride;
    for (int64_t j = 0; j < w; ++j) s[j] += kind == Kind::kSoftmax ? static_cast<double>(gr[j]) * yr[j] : gr[j];
  }
  float t[kBlock];
  for (int64_t j = 0; j < w; ++j) t[j] = static_cast<float>(s[j]);
  for (int64_t k = 0; k < n; ++k) {
    const float* yr = y + k * stride;
    const float* gr = dy + k * stride;
    float* dr = dx + k * stride;
    if (kind == Kind::kSoftmax) {
      for (int64_t j = 0; j < w; ++j) dr[j] = yr[j] * (gr[j] - t[j]);
    } else {
      for (int64_t j = 0; j < w; ++j) dr[j] = gr[j] - std::exp(yr[j]) * t[j];
    }
  }
}

// Runs row(offset) for each of the outer rows (inner == 1), or cols(offset, width) for each block
// of columns, in parallel.
template <class Row, class Cols>
void for_each_slice(const cpu::AxisSplit& s, Row row, Cols cols) {
  if (s.inner == 1) {
    parallel_for(0, s.outer, std::max<int64_t>(1, cpu::kGrain / std::max<int64_t>(s.n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) row(o * s.n);
    });
    return;
  }
  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, cpu::kGrain / std::max<int64_t>(s.n * std::min(s.inner, kBlock), 1));
  parallel_for(0, s.outer * blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / blocks;
      const int64_t j = (t % blocks) * kBlock;
      cols(o * s.n * s.inner + j, std::min(kBlock, s.inner - j));
    }
  });
}

Tensor forward(const char* op, const Tensor& x, int axis, Kind kind) {
  cpu::require_host(op, {&x});
  cpu::require_float(op, {&x});
  const int ax = normalize_axis(axis, x.rank(), op);
  Tensor y = Tensor::empty(x.shape());
  if (x.numel() == 0) return y;
  const cpu::AxisSplit s = cpu::split_at_axis(x.shape(), ax);
  if (x.numel() >= kDnnlMinElements) {
    dnnl_forward(op, s, x, y, kind);
    return y;
  }
  const float* px = x.data<float>();
  float* py = y.data<float>();
  for_each_slice(
      s, [&](int64_t off) { forward_row(px + off, py + off, s.n, kind); },
      [&](int64_t off, int64_t w) { forward_cols(px + off, py + off, s.n, s.inner, w, kind); });
  return y;
}

Tensor backward(const char* op, const Tensor& y, const Tensor& dy, int axis, Kind kind) {
  cpu::require_host(op, {&y, &dy});
  cpu::require_float(op, {&y, &dy});
  cpu::require_same_shape(op, y, "y", dy, "dy");
  const int ax = normalize_axis(axis, y.rank(), op);
  Tensor dx = Tensor::empty(y.shape());
  if (y.numel() == 0) return dx;
  const cpu::AxisSplit s = cpu::split_at_axis(y.shape(), ax);
  if (y.numel() >= kDnnlMinElements) {
    dnnl_backward(op, s, y, dy, dx, kind);
    return dx;
  }
  const float* py = y.data<float>();
  const float* pg = dy.data<float>();
  float* pd = dx.data<float>();
  for_each_slice(
      s, [&](int64_t off) { backward_row(py + off, pg + off, pd + off, s.n, kind); },
      [&](int64_t off, int64_t w) { backward_cols(py + off, pg + off, pd + off, s.n, s.inner, w, kind); });
  return dx;
}

}  // namespace

Tensor softmax(const Tensor& x, int axis) {
  if (on_cuda("softmax", {&x})) STRATA_CUDA_KERNEL(return cuda::softmax(x, axis));
  return forward("softmax", x, axis, Kind::kSoftmax);
}

Tensor log_softmax(const Tensor& x, int axis) {
  if (on_cuda("log_softmax", {&x})) STRATA_CUDA_KERNEL(return cuda::log_softmax(x, axis));
  return forward("log_softmax", x, axis, Kind::kLogSoftmax);
}

Tensor softmax_backward(const Tensor& y, const Tensor& dy, int axis) {
  if (on_cuda("softmax_backward", {&y, &dy})) STRATA_CUDA_KERNEL(return cuda::softmax_backward(y, dy, axis));
  return backward("softmax_backward", y, dy, axis, Kind::kSoftmax);
}

Tensor log_softmax_backward(const Tensor& y, const Tensor& dy, int axis) {
  if (on_cuda("log_softmax_backward", {&y, &dy})) STRATA_CUDA_KERNEL(return cuda::log_softmax_backward(y, dy, axis));
  return backward("log_softmax_backward", y, dy, axis, Kind::kLogSoftmax);
}

}  // namespace strata::kernels
