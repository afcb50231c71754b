// Helpers shared by the CPU elementwise, reduction, softmax, matmul, shape and LSTM kernels: input checks,
// the parallel grain, a stable sigmoid, and a broadcasting plan that walks an output in contiguous segments.
// Thread-safety: pure functions on values; a plan may be read by many threads at once.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "strata/error.h"
#include "strata/tensor.h"
#include "strata/threading.h"

namespace strata::kernels::cpu {

// Elements per parallel_for chunk for memory-bound loops.
inline constexpr int64_t kGrain = 16384;

// tanh(x) through one exp (libm's tanhf goes through expm1f, several times slower): (1 - e) / (1 + e) with
// e = exp(-2|x|) for |x| >= 0.25, where the subtraction loses nothing that matters (within 2e-7 relative), and the
// series x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 - 1382x^11/155925 below (its remainder < 1e-10).
inline float fast_tanh(float x) {
  const float a = std::fabs(x);
  if (a < 0.25f) {
    const float x2 = x * x;
    return x * (1.0f + x2 * (-1.0f / 3.0f +
                             x2 * (2.0f / 15.0f +
                                   x2 * (-17.0f / 315.0f + x2 * (62.0f / 2835.0f + x2 * (-1382.0f / 155925.0f))))));
  }
  const float e = std::exp(-2.0f * a);
  const float t = (1.0f - e) / (1.0f + e);
  return x < 0.0f ? -t : t;
}

// 1 / (1 + exp(-x)) without overflow: exp is only taken of -|x|.
inline float stable_sigmoid(float x) {
  const float z = std::exp(-std::fabs(x));
  const float r = 1.0f / (1.0f + z);
  return x >= 0.0f ? r : z * r;
}

// REQUIRES: nothing. Throws InvalidArgument unless every tensor is defined and all are on one device,
// and Unavailable unless that device is the host (this file's kernels run on the CPU only).
inline void require_host(const char* op, std::initializer_list<const Tensor*> tensors) {
  check_same_device(op, tensors);
  const Tensor* first = *tensors.begin();
  STRATA_CHECK(first->device().is_cpu(), Unavailable,
               op << ": no kernel for tensors on " << first->device().str() << " in this build");
}

// Throws InvalidArgument naming `op` unless every tensor is float32.
inline void require_float(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) check_dtype(op, *t, DType::kFloat32);
}

// Throws ShapeError naming `op` unless `b` has the shape of `a`.
inline void require_same_shape(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                               const char* b_name) {
  STRATA_CHECK(a.shape() == b.shape(), ShapeError,
               op << ": " << a_name << " " << a.shape_str() << " and " << b_name << " " << b.shape_str()
                  << " must have the same shape");
}

// The inputs of a broadcast, mapped onto the output as coalesced dimensions: output element with
// multi-index (i_0..i_{r-1}) over `dims` reads input k at sum_j i_j * strides[k][j]. Adjacent
// dimensions are merged wherever every input allows it, so a same-shape op is one dimension, and a
// row or column broadcast two.
struct BroadcastPlan {
  std::vector<int64_t> dims;        // at least one dimension; the last is the contiguous run
  std::vector<int64_t> strides[2];  // per input; 0 where that input is broadcast
  int num_inputs = 0;
  int64_t numel = 1;
};

// REQUIRES: each input shape broadcasts to `out` (check with broadcast_shapes first); 1 or 2 inputs.
inline BroadcastPlan plan_broadcast(const Shape& out, std::initializer_list<const Shape*> inputs) {
  BroadcastPlan p;
  p.num_inputs = static_cast<int>(inputs.size());
  const int rank = static_cast<int>(out.size());
  std::vector<int64_t> full[2];
  int k = 0;
  for (const Shape* in : inputs) {
    const int lead = rank - static_cast<int>(in->size());
    const std::vector<int64_t> s = contiguous_strides(*in);
    full[k].assign(rank, 0);
    for (int j = lead; j < rank; ++j) full[k][j] = (*in)[j - lead] == 1 ? 0 : s[j - lead];
    ++k;
  }
  for (int j = 0; j < rank; ++j) {
    p.numel *= out[j];
    if (out[j] == 1) continue;  // a unit dimension never moves an index
    bool merge = !p.dims.empty();
    for (int i = 0; i < p.num_inputs && merge; ++i) merge = p.strides[i].back() == full[i][j] * out[j];
    if (merge) {
      p.dims.back() *= out[j];
      for (int i = 0; i < p.num_inputs; ++i) p.strides[i].back() = full[i][j];
    } else {
      p.dims.push_back(out[j]);
      for (int i = 0; i < p.num_inputs; ++i) p.strides[i].push_back(full[i][j]);
    }
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    for (int i = 0; i < p.num_inputs; ++i) p.strides[i].push_back(0);
  }
  return p;
}

// Calls seg(out_offset, in0_offset, in1_offset, len) for the contiguous runs of output elements
// [e0, e1); along a run input k advances by plan.strides[k].back() (0 or 1 after coalescing, or any
// stride when the last dimension could not merge).
template <class Seg>
void for_each_segment(const BroadcastPlan& p, int64_t e0, int64_t e1, Seg&& seg) {
  const int r = static_cast<int>(p.dims.size());
  const int64_t inner = p.dims[r - 1];
  int64_t row = e0 / inner;
  int64_t col = e0 % inner;
  std::vector<int64_t> idx(r, 0);
  int64_t off[2] = {0, 0};
  for (int j = r - 2; j >= 0; --j) {
    idx[j] = row % p.dims[j];
    row /= p.dims[j];
    for (int i = 0; i < p.num_inputs; ++i) off[i] += idx[j] * p.strides[i][j];
  }
  const int64_t s0 = p.strides[0][r - 1];
  const int64_t s1 = p.num_inputs > 1 ? p.strides[1][r - 1] : 0;
  for (int64_t e = e0; e < e1;) {
    const int64_t len = std::min(inner - col, e1 - e);
    seg(e, off[0] + col * s0, off[1] + col * s1, len);
    e += len;
    col = 0;
    for (int j = r - 2; j >= 0; --j) {  // advance the odometer over the outer dimensions
      for (int i = 0; i < p.num_inputs; ++i) off[i] += p.strides[i][j];
      if (++idx[j] < p.dims[j]) break;
      for (int i = 0; i < p.num_inputs; ++i) off[i] -= idx[j] * p.strides[i][j];
      idx[j] = 0;
    }
  }
}

// A tensor's shape seen as [outer, n, inner] around `axis` (already normalised).
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AxisSplit split_at_axis(const Shape& shape, int axis) {
  AxisSplit s;
  for (int j = 0; j < static_cast<int>(shape.size()); ++j) {
    if (j < axis)
      s.outer *= shape[j];
    else if (j == axis)
      s.n = shape[j];
    else
      s.inner *= shape[j];
  }
  return s;
}

}  // namespace strata::kernels::cpu
