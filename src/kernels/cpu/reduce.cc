// Reductions on the CPU: sum, mean and max over any set of axes, argmax, and broadcasting
// (broadcast_to and its gradient, sum_to_shape).
//
// Reduced and kept axes are first coalesced into alternating groups; each reduced group is then
// removed in one pass over a [outer, n, inner] view. Sums accumulate in double (a contiguous run
// first adds 16 float lanes over 16 elements each, then adds those in double), so a sum of 1e6
// floats stays within ~1e-7 relative. Work is cut into pieces whose sizes do not depend on the
// thread count and partial results are combined in a fixed order, so results are the same for any
// num_threads().
// Thread-safety: safe to call concurrently on distinct outputs.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/cpu_util.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernel_checks.h"
#include "kernels/kernels.h"

namespace strata::kernels {

namespace {

constexpr int64_t kRunChunk = 65536;  // elements of a contiguous run summed by one task
constexpr int64_t kCols = 256;        // columns of a strided reduction handled by one task
constexpr int64_t kLanes = 16;

inline float nan_max(float a, float b) { return (b > a || b != b) ? b : a; }

struct SumOp {
  using Acc = double;
  static Acc identity() { return 0.0; }
  static Acc combine(Acc a, Acc b) { return a + b; }
  template <class In>
  static Acc run(const In* p, int64_t n) {  // sum of a contiguous run
    Acc total = 0.0;
    for (int64_t b = 0; b < n; b += kLanes * kLanes) {
      const int64_t e = std::min(n, b + kLanes * kLanes);
      In lane[kLanes] = {};
      int64_t i = b;
      for (; i + kLanes <= e; i += kLanes) {
        for (int64_t j = 0; j < kLanes; ++j) lane[j] += p[i + j];
      }
      for (; i < e; ++i) lane[0] += p[i];
      for (int64_t j = 0; j < kLanes; ++j) total += lane[j];
    }
    return total;
  }
};

struct MaxOp {
  using Acc = float;
  static Acc identity() { return -std::numeric_limits<float>::infinity(); }
  static Acc combine(Acc a, Acc b) { return nan_max(a, b); }
  static Acc run(const float* p, int64_t n) {
    float lane[kLanes];
    for (int64_t j = 0; j < kLanes; ++j) lane[j] = identity();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int64_t j = 0; j < kLanes; ++j) lane[j] = nan_max(lane[j], p[i + j]);
    }
    for (; i < n; ++i) lane[0] = nan_max(lane[0], p[i]);
    float m = identity();
    for (int64_t j = 0; j < kLanes; ++j) m = nan_max(m, lane[j]);
    return m;
  }
};

// out[o, j] = reduce_k in[o, k, j].
template <class Op, class In>
void reduce_step(const In* in, int64_t outer, int64_t n, int64_t inner, typename Op::Acc* out) {
  using Acc = typename Op::Acc;
  if (inner == 1) {
    const int64_t chunks = (n + kRunChunk - 1) / kRunChunk;
    std::vector<Acc> partial(chunks > 1 ? outer * chunks : 0);
    Acc* dst = chunks > 1 ? partial.data() : out;
    parallel_for(0, outer * chunks, std::max<int64_t>(1, cpu::kGrain / std::min(n, kRunChunk)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t t = b; t < e; ++t) {
                     const int64_t o = t / chunks, k0 = (t % chunks) * kRunChunk;
                     dst[t] = Op::run(in + o * n + k0, std::min(kRunChunk, n - k0));
                   }
                 });
    if (chunks > 1) {
      for (int64_t o = 0; o < outer; ++o) {
        Acc a = partial[o * chunks];
        for (int64_t c = 1; c < chunks; ++c) a = Op::combine(a, partial[o * chunks + c]);
        out[o] = a;
      }
    }
    return;
  }
  const int64_t width = std::min(inner, kCols);
  const int64_t col_blocks = (inner + kCols - 1) / kCols;
  const int64_t rows_per_chunk = std::max<int64_t>(1, kRunChunk / width);
  const int64_t chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<Acc> partial(chunks > 1 ? outer * chunks * inner : 0);
  parallel_for(0, outer * col_blocks * chunks,
               std::max<int64_t>(1, cpu::kGrain / (width * std::min(n, rows_per_chunk))), [&](int64_t b, int64_t e) {
                 Acc acc[kCols];
                 for (int64_t t = b; t < e; ++t) {
                   const int64_t c = t % chunks;
                   const int64_t j0 = (t / chunks % col_blocks) * kCols;
                   const int64_t o = t / chunks / col_blocks;
                   const int64_t w = std::min(kCols, inner - j0);
                   const int64_t k1 = std::min(n, (c + 1) * rows_per_chunk);
                   for (int64_t j = 0; j < w; ++j) acc[j] = Op::identity();
                   for (int64_t k = c * rows_per_chunk; k < k1; ++k) {
                     const In* row = in + (o * n + k) * inner + j0;
                     for (int64_t j = 0; j < w; ++j) acc[j] = Op::combine(acc[j], row[j]);
                   }
                   Acc* dst = chunks > 1 ? partial.data() + (o * chunks + c) * inner + j0 : out + o * inner + j0;
                   std::memcpy(dst, acc, w * sizeof(Acc));
                 }
               });
  if (chunks > 1) {
    parallel_for(0, outer * inner, cpu::kGrain, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / inner, j = t % inner;
        Acc a = partial[o * chunks * inner + j];
        for (int64_t c = 1; c < chunks; ++c) a = Op::combine(a, partial[(o * chunks + c) * inner + j]);
        out[t] = a;
      }
    });
  }
}

// Reduces x over the flagged axes with Op, then multiplies by `scale` (1/count for a mean when
// `mean` is set).
template <class Op>
Tensor reduce_impl(const char* op, const Tensor& x, const std::vector<bool>& flags, bool keepdims, bool mean) {
  using Acc = typename Op::Acc;
  const ReduceLayout layout = reduce_layout(x, flags, keepdims);
  const Shape& out_shape = layout.out_shape;
  const int64_t count = layout.count;
  Tensor out = Tensor::empty(out_shape);
  const int64_t out_numel = out.numel();
  if (out_numel == 0) return out;
  if (count == 0) {
    check_empty_reduction(op, x, std::is_same_v<Op, MaxOp>);
    out.fill_(mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return out;
  }
  float* po = out.data<float>();
  const float* px = x.data<float>();
  std::vector<Acc> cur, next;
  bool first = true;
  for (const ReduceStep& st : layout.steps) {
    next.assign(st.outer * st.inner, Acc{});
    if (first) {
      reduce_step<Op, float>(px, st.outer, st.n, st.inner, next.data());
    } else {
      reduce_step<Op, Acc>(cur.data(), st.outer, st.n, st.inner, next.data());
    }
    first = false;
    cur.swap(next);
  }
  if (first) {  // only unit axes were reduced: a copy
    std::memcpy(po, px, out_numel * sizeof(float));
    return out;
  }
  const double scale = mean ? 1.0 / static_cast<double>(count) : 1.0;
  parallel_for(0, out_numel, cpu::kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = static_cast<float>(cur[i] * scale);
  });
  return out;
}

void check_reduce_input(const char* op, const Tensor& x) {
  cpu::require_host(op, {&x});
  cpu::require_float(op, {&x});
}

// Copies contiguous runs of x (elements of `T`, any type of that size) into its broadcast.
template <class T>
void broadcast_copy(const cpu::BroadcastPlan& p, const T* in, T* out) {
  const int64_t s = p.strides[0].back();
  parallel_for(0, p.numel, cpu::kGrain, [&](int64_t e0, int64_t e1) {
    cpu::for_each_segment(p, e0, e1, [&](int64_t o, int64_t i, int64_t, int64_t len) {
      if (s == 1) {
        std::memcpy(out + o, in + i, len * sizeof(T));
      } else {
        for (int64_t k = 0; k < len; ++k) out[o + k] = in[i + k * s];
      }
    });
  });
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  if (on_cuda("sum", {&x})) STRATA_CUDA_KERNEL(return cuda::sum(x, axes, keepdims));
  check_reduce_input("sum", x);
  return reduce_impl<SumOp>("sum", x, reduced_axes("sum", x, axes), keepdims, false);
}

Tensor mean(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  if (on_cuda("mean", {&x})) STRATA_CUDA_KERNEL(return cuda::mean(x, axes, keepdims));
  check_reduce_input("mean", x);
  return reduce_impl<SumOp>("mean", x, reduced_axes("mean", x, axes), keepdims, true);
}

Tensor max(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  if (on_cuda("max", {&x})) STRATA_CUDA_KERNEL(return cuda::max(x, axes, keepdims));
  check_reduce_input("max", x);
  return reduce_impl<MaxOp>("max", x, reduced_axes("max", x, axes), keepdims, false);
}

// NaN counts as the largest value (the first NaN wins), like NumPy.
Tensor argmax(const Tensor& x, int axis) {
  if (on_cuda("argmax", {&x})) STRATA_CUDA_KERNEL(return cuda::argmax(x, axis));
  check_reduce_input("argmax", x);
  const auto [ax, out_shape] = argmax_shape(x, axis);
  Tensor out = Tensor::empty(out_shape, DType::kInt64);
  if (out.numel() == 0) return out;
  const cpu::AxisSplit s = cpu::split_at_axis(x.shape(), ax);
  const float* px = x.data<float>();
  int64_t* pi = out.data<int64_t>();
  auto better = [](float v, float best) { return v > best || (v != v && best == best); };
  const int64_t width = std::min(s.inner, kCols);
  const int64_t blocks = (s.inner + kCols - 1) / kCols;
  parallel_for(0, s.outer * blocks, std::max<int64_t>(1, cpu::kGrain / (s.n * width)), [&](int64_t b, int64_t e) {
    float best[kCols];
    int64_t idx[kCols];
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / blocks, j0 = (t % blocks) * kCols;
      const int64_t w = std::min(kCols, s.inner - j0);
      const float* base = px + o * s.n * s.inner + j0;
      for (int64_t j = 0; j < w; ++j) {
        best[j] = base[j];
        idx[j] = 0;
      }
      for (int64_t k = 1; k < s.n; ++k) {
        const float* row = base + k * s.inner;
        for (int64_t j = 0; j < w; ++j) {
          if (better(row[j], best[j])) {
            best[j] = row[j];
            idx[j] = k;
          }
        }
      }
      std::memcpy(pi + o * s.inner + j0, idx, w * sizeof(int64_t));
    }
  });
  return out;
}

// Any dtype.
Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  if (on_cuda("broadcast_to", {&x})) STRATA_CUDA_KERNEL(return cuda::broadcast_to(x, shape));
  cpu::require_host("broadcast_to", {&x});
  check_broadcast_to(x, shape);
  Tensor out = Tensor::empty(shape, x.dtype());
  if (out.numel() == 0) return out;
  const cpu::BroadcastPlan p = cpu::plan_broadcast(shape, {&x.shape()});
  switch (dtype_size(x.dtype())) {
    case 1:
      broadcast_copy(p, static_cast<const uint8_t*>(x.raw_data()), static_cast<uint8_t*>(out.raw_data()));
      break;
    case 2:
      broadcast_copy(p, static_cast<const uint16_t*>(x.raw_data()), static_cast<uint16_t*>(out.raw_data()));
      break;
    case 4:
      broadcast_copy(p, static_cast<const uint32_t*>(x.raw_data()), static_cast<uint32_t*>(out.raw_data()));
      break;
    case 8:
      broadcast_copy(p, static_cast<const uint64_t*>(x.raw_data()), static_cast<uint64_t*>(out.raw_data()));
      break;
    default:
      throw_broadcast_dtype(x);
  }
  return out;
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  if (on_cuda("sum_to_shape", {&x})) STRATA_CUDA_KERNEL(return cuda::sum_to_shape(x, shape));
  check_reduce_input("sum_to_shape", x);
  const std::vector<bool> flags = sum_to_shape_axes(x, shape);
  return reduce_impl<SumOp>("sum_to_shape", x, flags, true, false).reshape(shape);
}

}  // namespace strata::kernels
