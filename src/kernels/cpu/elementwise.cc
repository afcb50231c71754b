// Elementwise CPU kernels: binary ops with NumPy broadcasting, affine/axpy, unary ops and their
// gradients, leaky ReLU, ELU and clip. Plain loops the compiler vectorises, split across
// strata::num_threads() threads by parallel_for in chunks of at least cpu::kGrain elements. GELU and its gradient
// are oneDNN's eltwise primitives (dnnl_eltwise.h), whose vectorised erf beats a loop over libm.
//
// Broadcasting walks the output in contiguous runs (cpu::BroadcastPlan), so same-shape, scalar,
// row and column broadcasts all become tight inner loops; other layouts take the same path with
// an odometer over the outer dimensions.
// Thread-safety: safe to call concurrently on distinct outputs.
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/dnnl_eltwise.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernel_checks.h"
#include "kernels/kernels.h"

namespace strata::kernels {

namespace {

using cpu::kGrain;

// out[e] = f(a[...], b[...]) over a broadcast plan; the three inner loops cover same-shape runs and
// runs where one side is constant (scalar, row or column broadcast).
template <class F>
void run_binary(const cpu::BroadcastPlan& p, const float* a, const float* b, float* out, F f) {
  const int64_t sa = p.strides[0].back();
  const int64_t sb = p.strides[1].back();
  parallel_for(0, p.numel, kGrain, [&](int64_t e0, int64_t e1) {
    cpu::for_each_segment(p, e0, e1, [&](int64_t o, int64_t ia, int64_t ib, int64_t len) {
      float* __restrict__ y = out + o;
      const float* __restrict__ x0 = a + ia;
      const float* __restrict__ x1 = b + ib;
      if (sa == 1 && sb == 1) {
        for (int64_t i = 0; i < len; ++i) y[i] = f(x0[i], x1[i]);
      } else if (sa == 1 && sb == 0) {
        const float v = *x1;
        for (int64_t i = 0; i < len; ++i) y[i] = f(x0[i], v);
      } else if (sa == 0 && sb == 1) {
        const float v = *x0;
        for (int64_t i = 0; i < len; ++i) y[i] = f(v, x1[i]);
      } else {
        for (int64_t i = 0; i < len; ++i) y[i] = f(x0[i * sa], x1[i * sb]);
      }
    });
  });
}

// y[i] = f(x[i]) for a flat range.
template <class F>
Tensor map1(const Tensor& x, F f) {
  Tensor out = Tensor::empty(x.shape());
  const float* px = x.data<float>();
  float* py = out.data<float>();
  parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) py[i] = f(px[i]);
  });
  return out;
}

// out[i] = f(x[i], y[i]) for flat, same-shape inputs.
template <class F>
Tensor map2(const Tensor& x, const Tensor& y, F f) {
  Tensor out = Tensor::empty(x.shape());
  const float* px = x.data<float>();
  const float* py = y.data<float>();
  float* po = out.data<float>();
  parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = f(px[i], py[i]);
  });
  return out;
}

// out[i] = f(x[i], y[i], z[i]).
template <class F>
Tensor map3(const Tensor& x, const Tensor& y, const Tensor& z, F f) {
  Tensor out = Tensor::empty(x.shape());
  const float* px = x.data<float>();
  const float* py = y.data<float>();
  const float* pz = z.data<float>();
  float* po = out.data<float>();
  parallel_for(0, x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = f(px[i], py[i], pz[i]);
  });
  return out;
}

// NaN-propagating max/min, like NumPy's maximum/minimum.
inline float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }
inline float nan_min(float a, float b) { return (a < b || a != a) ? a : b; }

using cpu::stable_sigmoid;

inline float sign(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }

void check_unary_input(const char* op, const Tensor& x) {
  cpu::require_host(op, {&x});
  cpu::require_float(op, {&x});
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  if (on_cuda(name, {&a, &b})) STRATA_CUDA_KERNEL(return cuda::binary(op, a, b));
  cpu::require_host(name, {&a, &b});
  cpu::require_float(name, {&a, &b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape);
  if (out.numel() == 0) return out;
  const cpu::BroadcastPlan p = cpu::plan_broadcast(shape, {&a.shape(), &b.shape()});
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  switch (op) {
    case BinaryOp::kAdd:
      run_binary(p, pa, pb, po, [](float x, float y) { return x + y; });
      break;
    case BinaryOp::kSub:
      run_binary(p, pa, pb, po, [](float x, float y) { return x - y; });
      break;
    case BinaryOp::kMul:
      run_binary(p, pa, pb, po, [](float x, float y) { return x * y; });
      break;
    case BinaryOp::kDiv:
      run_binary(p, pa, pb, po, [](float x, float y) { return x / y; });
      break;
    case BinaryOp::kPow:
      run_binary(p, pa, pb, po, [](float x, float y) { return std::pow(x, y); });
      break;
    case BinaryOp::kMaximum:
      run_binary(p, pa, pb, po, [](float x, float y) { return nan_max(x, y); });
      break;
    case BinaryOp::kMinimum:
      run_binary(p, pa, pb, po, [](float x, float y) { return nan_min(x, y); });
      break;
    case BinaryOp::kEqual:
      run_binary(p, pa, pb, po, [](float x, float y) { return x == y ? 1.0f : 0.0f; });
      break;
    case BinaryOp::kGreater:
      run_binary(p, pa, pb, po, [](float x, float y) { return x > y ? 1.0f : 0.0f; });
      break;
  }
  return out;
}

Tensor affine(const Tensor& x, float scale, float shift) {
  if (on_cuda("affine", {&x})) STRATA_CUDA_KERNEL(return cuda::affine(x, scale, shift));
  check_unary_input("affine", x);
  return map1(x, [scale, shift](float v) { return v * scale + shift; });
}

void axpy_(Tensor& y, float alpha, const Tensor& x) {
  if (on_cuda("axpy_", {&y, &x})) STRATA_CUDA_KERNEL(return cuda::axpy_(y, alpha, x));
  cpu::require_host("axpy_", {&y, &x});
  cpu::require_float("axpy_", {&y, &x});
  cpu::require_same_shape("axpy_", y, "y", x, "x");
  float* __restrict__ py = y.data<float>();
  const float* __restrict__ px = x.data<float>();
  if (py == px) {  // y += alpha * y
    parallel_for(0, y.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) py[i] *= 1.0f + alpha;
    });
    return;
  }
  parallel_for(0, y.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) py[i] += alpha * px[i];
  });
}

Tensor unary(UnaryOp op, const Tensor& x) {
  if (on_cuda(unary_name(op), {&x})) STRATA_CUDA_KERNEL(return cuda::unary(op, x));
  check_unary_input(unary_name(op), x);
  switch (op) {
    case UnaryOp::kNeg:
      return map1(x, [](float v) { return -v; });
    case UnaryOp::kExp:
      return map1(x, [](float v) { return std::exp(v); });
    case UnaryOp::kLog:
      return map1(x, [](float v) { return std::log(v); });
    case UnaryOp::kSqrt:
      return map1(x, [](float v) { return std::sqrt(v); });
    case UnaryOp::kAbs:
      return map1(x, [](float v) { return std::fabs(v); });
    case UnaryOp::kSquare:
      return map1(x, [](float v) { return v * v; });
    case UnaryOp::kSign:
      return map1(x, [](float v) { return sign(v); });
    case UnaryOp::kRelu:
      return map1(x, [](float v) { return v > 0.0f ? v : 0.0f; });
    case UnaryOp::kSigmoid:
      return map1(x, [](float v) { return stable_sigmoid(v); });
    case UnaryOp::kTanh:
      return map1(x, [](float v) { return std::tanh(v); });
    case UnaryOp::kGelu:
      // oneDNN's vectorised erf: a scalar loop over libm's erff was a third of a Transformer's step.
      return cpu::dnnl_gelu_erf(x);
  }
  throw_unknown_unary_op("unary", op);
}

// Which of x and y each gradient reads; the one not read may be passed undefined.
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy) {
  const char* name = unary_name(op);
  if (on_cuda(name, {&dy})) STRATA_CUDA_KERNEL(return cuda::unary_backward(op, x, y, dy));
  // dy is on the host here (on_cuda said so), so the shared checks' one device is the host.
  const Tensor* in = unary_backward_input(op, x, y, dy);  // the forward tensor this gradient reads
  switch (op) {
    case UnaryOp::kNeg:
      return map1(dy, [](float g) { return -g; });
    case UnaryOp::kSign:
      return Tensor::zeros(dy.shape());
    case UnaryOp::kExp:
      return map2(*in, dy, [](float v, float g) { return g * v; });
    case UnaryOp::kLog:
      return map2(*in, dy, [](float v, float g) { return g / v; });
    case UnaryOp::kSqrt:
      return map2(*in, dy, [](float v, float g) { return g * 0.5f / v; });
    case UnaryOp::kAbs:
      return map2(*in, dy, [](float v, float g) { return g * sign(v); });
    case UnaryOp::kSquare:
      return map2(*in, dy, [](float v, float g) { return 2.0f * v * g; });
    case UnaryOp::kRelu:
      return map2(*in, dy, [](float v, float g) { return v > 0.0f ? g : 0.0f; });
    case UnaryOp::kSigmoid:
      return map2(*in, dy, [](float v, float g) { return g * v * (1.0f - v); });
    case UnaryOp::kTanh:
      return map2(*in, dy, [](float v, float g) { return g * (1.0f - v * v); });
    case UnaryOp::kGelu:
      return cpu::dnnl_gelu_erf_backward(*in, dy);
  }
  throw_unknown_unary_op("unary_backward", op);
}

Tensor leaky_relu(const Tensor& x, float alpha) {
  if (on_cuda("leaky_relu", {&x})) STRATA_CUDA_KERNEL(return cuda::leaky_relu(x, alpha));
  check_unary_input("leaky_relu", x);
  return map1(x, [alpha](float v) { return v > 0.0f ? v : alpha * v; });
}

Tensor leaky_relu_backward(const Tensor& x, const Tensor& dy, float alpha) {
  if (on_cuda("leaky_relu_backward", {&x, &dy})) STRATA_CUDA_KERNEL(return cuda::leaky_relu_backward(x, dy, alpha));
  cpu::require_host("leaky_relu_backward", {&x, &dy});
  cpu::require_float("leaky_relu_backward", {&x, &dy});
  cpu::require_same_shape("leaky_relu_backward", x, "x", dy, "dy");
  return map2(x, dy, [alpha](float v, float g) { return v > 0.0f ? g : alpha * g; });
}

Tensor elu(const Tensor& x, float alpha) {
  if (on_cuda("elu", {&x})) STRATA_CUDA_KERNEL(return cuda::elu(x, alpha));
  check_unary_input("elu", x);
  return map1(x, [alpha](float v) { return v > 0.0f ? v : alpha * std::expm1(v); });
}

// For x <= 0, d/dx alpha * (exp(x) - 1) = alpha * exp(x) = y + alpha.
Tensor elu_backward(const Tensor& x, const Tensor& y, const Tensor& dy, float alpha) {
  if (on_cuda("elu_backward", {&x, &y, &dy})) STRATA_CUDA_KERNEL(return cuda::elu_backward(x, y, dy, alpha));
  cpu::require_host("elu_backward", {&x, &y, &dy});
  cpu::require_float("elu_backward", {&x, &y, &dy});
  cpu::require_same_shape("elu_backward", x, "x", y, "y");
  cpu::require_same_shape("elu_backward", x, "x", dy, "dy");
  return map3(x, y, dy, [alpha](float v, float out, float g) { return v > 0.0f ? g : g * (out + alpha); });
}

Tensor clip(const Tensor& x, float low, float high) {
  if (on_cuda("clip", {&x})) STRATA_CUDA_KERNEL(return cuda::clip(x, low, high));
  check_unary_input("clip", x);
  check_clip_range(low, high);
  return map1(x, [low, high](float v) { return v < low ? low : (v > high ? high : v); });
}

Tensor clip_backward(const Tensor& x, const Tensor& dy, float low, float high) {
  if (on_cuda("clip_backward", {&x, &dy})) STRATA_CUDA_KERNEL(return cuda::clip_backward(x, dy, low, high));
  cpu::require_host("clip_backward", {&x, &dy});
  cpu::require_float("clip_backward", {&x, &dy});
  cpu::require_same_shape("clip_backward", x, "x", dy, "dy");
  return map2(x, dy, [low, high](float v, float g) { return (v >= low && v <= high) ? g : 0.0f; });
}

}  // namespace strata::kernels
