// Elementwise kernels on a GPU: binary ops with NumPy broadcasting, affine, axpy_ (cuBLAS), the unary ops and their
// gradients, leaky ReLU, ELU and clip, each one Thrust transform on the device's stream with the CPU kernel's formula
// (kernels/cpu/elementwise.cc), so results agree to float rounding.
//
// Broadcasting uses the CPU's plan (cpu::plan_broadcast: the output's coalesced dimensions and each input's strides
// along them); a thread turns its output index into the two input offsets through those few dimensions. Inputs of
// one shape skip the plan and run as a plain zip.
// Thread-safety: as kernels.h; each call only queues work on the device's stream and writes what it allocates
// (axpy_ writes its y).
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/library_handles.h"
#include "kernels/kernel_checks.h"

namespace strata::kernels::cuda {

namespace {

constexpr int kMaxDims = 12;  // coalesced broadcast dimensions a kernel takes (a tensor's rank bounds them)

// ---- device formulas (as kernels/cpu/elementwise.cc)
__device__ inline float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ inline float nan_min(float a, float b) { return (a < b || a != a) ? a : b; }
__device__ inline float sign(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }
__device__ inline float stable_sigmoid(float x) {
  const float z = expf(-fabsf(x));
  const float r = 1.0f / (1.0f + z);
  return x >= 0.0f ? r : z * r;
}
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
__device__ inline float gelu(float x) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }
__device__ inline float gelu_grad(float x) {
  return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
}

struct AddF {
  __device__ float operator()(float x, float y) const { return x + y; }
};
struct SubF {
  __device__ float operator()(float x, float y) const { return x - y; }
};
struct MulF {
  __device__ float operator()(float x, float y) const { return x * y; }
};
struct DivF {
  __device__ float operator()(float x, float y) const { return x / y; }
};
struct PowF {
  __device__ float operator()(float x, float y) const { return powf(x, y); }
};
struct MaxF {
  __device__ float operator()(float x, float y) const { return nan_max(x, y); }
};
struct MinF {
  __device__ float operator()(float x, float y) const { return nan_min(x, y); }
};
struct EqF {
  __device__ float operator()(float x, float y) const { return x == y ? 1.0f : 0.0f; }
};
struct GtF {
  __device__ float operator()(float x, float y) const { return x > y ? 1.0f : 0.0f; }
};

// The broadcast plan as a kernel argument.
struct Plan {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t sa[kMaxDims] = {};
  int64_t sb[kMaxDims] = {};
};

// out[e] = f(a[offset_a(e)], b[offset_b(e)]).
template <class F>
struct BroadcastBinary {
  Plan p;
  const float* a;
  const float* b;
  F f;
  __device__ float operator()(int64_t e) const {
    int64_t ia = 0, ib = 0;
    for (int j = p.rank - 1; j >= 0; --j) {
      const int64_t i = e % p.dims[j];
      e /= p.dims[j];
      ia += i * p.sa[j];
      ib += i * p.sb[j];
    }
    return f(a[ia], b[ib]);
  }
};

template <class F>
void run_binary(const char* name, const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const int64_t n = out.numel();
  auto policy = thrust::cuda::par_nosync.on(stream_of(out));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  if (a.shape() == b.shape()) {
    thrust::transform(policy, pa, pa + n, pb, po, f);
    return;
  }
  const cpu::BroadcastPlan bp = cpu::plan_broadcast(out.shape(), {&a.shape(), &b.shape()});
  STRATA_CHECK(static_cast<int>(bp.dims.size()) <= kMaxDims, Unavailable,
               name << ": broadcasting " << a.shape_str() << " with " << b.shape_str() << " needs " << bp.dims.size()
                    << " dimensions; the GPU kernel takes up to " << kMaxDims);
  Plan p;
  p.rank = static_cast<int>(bp.dims.size());
  for (int j = 0; j < p.rank; ++j) {
    p.dims[j] = bp.dims[j];
    p.sa[j] = bp.strides[0][j];
    p.sb[j] = bp.strides[1][j];
  }
  thrust::transform(policy, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(n), po,
                    BroadcastBinary<F>{p, pa, pb, f});
}

// ---- unary forward
struct UnaryF {
  UnaryOp op;
  __device__ float operator()(float v) const {
    switch (op) {
      case UnaryOp::kNeg:
        return -v;
      case UnaryOp::kExp:
        return expf(v);
      case UnaryOp::kLog:
        return logf(v);
      case UnaryOp::kSqrt:
        return sqrtf(v);
      case UnaryOp::kAbs:
        return fabsf(v);
      case UnaryOp::kSquare:
        return v * v;
      case UnaryOp::kSign:
        return sign(v);
      case UnaryOp::kRelu:
        return v > 0.0f ? v : 0.0f;
      case UnaryOp::kSigmoid:
        return stable_sigmoid(v);
      case UnaryOp::kTanh:
        return tanhf(v);
      case UnaryOp::kGelu:
        return gelu(v);
    }
    return v;
  }
};

// dx from `in` (x or y, whichever the op's gradient reads) and dy.
struct UnaryGradF {
  UnaryOp op;
  __device__ float operator()(float v, float g) const {
    switch (op) {
      case UnaryOp::kNeg:
        return -g;
      case UnaryOp::kSign:
        return 0.0f;
      case UnaryOp::kExp:
        return g * v;
      case UnaryOp::kLog:
        return g / v;
      case UnaryOp::kSqrt:
        return g * 0.5f / v;
      case UnaryOp::kAbs:
        return g * sign(v);
      case UnaryOp::kSquare:
        return 2.0f * v * g;
      case UnaryOp::kRelu:
        return v > 0.0f ? g : 0.0f;
      case UnaryOp::kSigmoid:
        return g * v * (1.0f - v);
      case UnaryOp::kTanh:
        return g * (1.0f - v * v);
      case UnaryOp::kGelu:
        return g * gelu_grad(v);
    }
    return g;
  }
};

struct AffineF {
  float scale, shift;
  __device__ float operator()(float v) const { return v * scale + shift; }
};
struct LeakyReluF {
  float alpha;
  __device__ float operator()(float v) const { return v > 0.0f ? v : alpha * v; }
};
struct LeakyReluGradF {
  float alpha;
  __device__ float operator()(float v, float g) const { return v > 0.0f ? g : alpha * g; }
};
struct EluF {
  float alpha;
  __device__ float operator()(float v) const { return v > 0.0f ? v : alpha * expm1f(v); }
};
// For x <= 0, d/dx alpha * (exp(x) - 1) = alpha * exp(x) = y + alpha.
struct EluGradF {
  float alpha;
  __device__ float operator()(int64_t i) const { return x[i] > 0.0f ? dy[i] : dy[i] * (y[i] + alpha); }
  const float* x;
  const float* y;
  const float* dy;
};
struct ClipF {
  float low, high;
  __device__ float operator()(float v) const { return v < low ? low : (v > high ? high : v); }
};
struct ClipGradF {
  float low, high;
  __device__ float operator()(float v, float g) const { return (v >= low && v <= high) ? g : 0.0f; }
};

template <class F>
Tensor map1(const Tensor& x, F f) {
  Tensor out = Tensor::empty(x.shape(), DType::kFloat32, x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  const float* px = x.data<float>();
  thrust::transform(thrust::cuda::par_nosync.on(stream_of(x)), px, px + n, out.data<float>(), f);
  return out;
}

template <class F>
Tensor map2(const Tensor& x, const Tensor& y, F f) {
  Tensor out = Tensor::empty(x.shape(), DType::kFloat32, x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  const float* px = x.data<float>();
  thrust::transform(thrust::cuda::par_nosync.on(stream_of(x)), px, px + n, y.data<float>(), out.data<float>(), f);
  return out;
}

void check_unary_input(const char* op, const Tensor& x) { cpu::require_float(op, {&x}); }

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  check_same_device(name, {&a, &b});
  cpu::require_float(name, {&a, &b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, DType::kFloat32, a.device());
  if (out.numel() == 0) return out;
  switch (op) {
    case BinaryOp::kAdd:
      run_binary(name, a, b, out, AddF{});
      break;
    case BinaryOp::kSub:
      run_binary(name, a, b, out, SubF{});
      break;
    case BinaryOp::kMul:
      run_binary(name, a, b, out, MulF{});
      break;
    case BinaryOp::kDiv:
      run_binary(name, a, b, out, DivF{});
      break;
    case BinaryOp::kPow:
      run_binary(name, a, b, out, PowF{});
      break;
    case BinaryOp::kMaximum:
      run_binary(name, a, b, out, MaxF{});
      break;
    case BinaryOp::kMinimum:
      run_binary(name, a, b, out, MinF{});
      break;
    case BinaryOp::kEqual:
      run_binary(name, a, b, out, EqF{});
      break;
    case BinaryOp::kGreater:
      run_binary(name, a, b, out, GtF{});
      break;
  }
  return out;
}

Tensor affine(const Tensor& x, float scale, float shift) {
  check_unary_input("affine", x);
  return map1(x, AffineF{scale, shift});
}

void axpy_(Tensor& y, float alpha, const Tensor& x) {
  check_same_device("axpy_", {&y, &x});
  cpu::require_float("axpy_", {&y, &x});
  cpu::require_same_shape("axpy_", y, "y", x, "x");
  if (y.numel() == 0) return;
  cublasHandle_t h = cublas_handle(y.device().index);
  float* py = y.data<float>();
  const float* px = x.data<float>();
  if (py == px) {  // y += alpha * y
    const float s = 1.0f + alpha;
    check_cublas(cublasSscal_64(h, y.numel(), &s, py, 1), "axpy_: cublasSscal");
    return;
  }
  check_cublas(cublasSaxpy_64(h, y.numel(), &alpha, px, 1, py, 1), "axpy_: cublasSaxpy");
}

Tensor unary(UnaryOp op, const Tensor& x) {
  check_unary_input(unary_name(op), x);
  if (static_cast<int>(op) < 0 || op > UnaryOp::kGelu) throw_unknown_unary_op("unary", op);
  return map1(x, UnaryF{op});
}

// Which of x and y each gradient reads; the one not read may be passed undefined.
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy) {
  if (static_cast<int>(op) < 0 || op > UnaryOp::kGelu) throw_unknown_unary_op("unary_backward", op);
  const Tensor* in = unary_backward_input(op, x, y, dy);
  if (in != nullptr) return map2(*in, dy, UnaryGradF{op});
  if (op == UnaryOp::kSign) return zeros_on(dy.shape(), DType::kFloat32, dy.device());
  return map2(dy, dy, UnaryGradF{op});  // kNeg reads dy only
}

Tensor leaky_relu(const Tensor& x, float alpha) {
  check_unary_input("leaky_relu", x);
  return map1(x, LeakyReluF{alpha});
}

Tensor leaky_relu_backward(const Tensor& x, const Tensor& dy, float alpha) {
  check_same_device("leaky_relu_backward", {&x, &dy});
  cpu::require_float("leaky_relu_backward", {&x, &dy});
  cpu::require_same_shape("leaky_relu_backward", x, "x", dy, "dy");
  return map2(x, dy, LeakyReluGradF{alpha});
}

Tensor elu(const Tensor& x, float alpha) {
  check_unary_input("elu", x);
  return map1(x, EluF{alpha});
}

Tensor elu_backward(const Tensor& x, const Tensor& y, const Tensor& dy, float alpha) {
  check_same_device("elu_backward", {&x, &y, &dy});
  cpu::require_float("elu_backward", {&x, &y, &dy});
  cpu::require_same_shape("elu_backward", x, "x", y, "y");
  cpu::require_same_shape("elu_backward", x, "x", dy, "dy");
  Tensor out = Tensor::empty(x.shape(), DType::kFloat32, x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  thrust::transform(thrust::cuda::par_nosync.on(stream_of(x)), thrust::counting_iterator<int64_t>(0),
                    thrust::counting_iterator<int64_t>(n), out.data<float>(),
                    EluGradF{alpha, x.data<float>(), y.data<float>(), dy.data<float>()});
  return out;
}

Tensor clip(const Tensor& x, float low, float high) {
  check_unary_input("clip", x);
  check_clip_range(low, high);
  return map1(x, ClipF{low, high});
}

Tensor clip_backward(const Tensor& x, const Tensor& dy, float low, float high) {
  check_same_device("clip_backward", {&x, &dy});
  cpu::require_float("clip_backward", {&x, &dy});
  cpu::require_same_shape("clip_backward", x, "x", dy, "dy");
  return map2(x, dy, ClipGradF{low, high});
}

}  // namespace strata::kernels::cuda
