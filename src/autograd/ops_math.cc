// Differentiable arithmetic, matrix products, elementwise functions, softmax and reductions.
#include <cmath>

#include "autograd/node.h"
#include "kernels/compute_precision.h"
#include "kernels/kernels.h"
#include "strata/ops.h"

namespace strata {

namespace k = kernels;
using detail::make_result;
using Grads = std::vector<Tensor>;
using Needs = detail::BackwardNeeds;

namespace {
// Gradient of a broadcast input: sum dy back to the input's shape.
Tensor reduce_to(const Tensor& g, const Shape& shape) { return g.shape() == shape ? g : k::sum_to_shape(g, shape); }

Variable binary_op(k::BinaryOp op, const char* name, const Variable& a, const Variable& b) {
  Tensor y = k::binary(op, a.value(), b.value());
  const Tensor av = a.value(), bv = b.value();
  return make_result(y, name, {a, b}, [op, av, bv, y](const Tensor& dy, const Needs& needs) -> Grads {
    Tensor da, db;
    switch (op) {
      case k::BinaryOp::kAdd:
        if (needs[0]) da = reduce_to(dy, av.shape());
        if (needs[1]) db = reduce_to(dy, bv.shape());
        break;
      case k::BinaryOp::kSub:
        if (needs[0]) da = reduce_to(dy, av.shape());
        if (needs[1]) db = reduce_to(k::affine(dy, -1.0f, 0.0f), bv.shape());
        break;
      case k::BinaryOp::kMul:
        if (needs[0]) da = reduce_to(k::mul(dy, bv), av.shape());
        if (needs[1]) db = reduce_to(k::mul(dy, av), bv.shape());
        break;
      case k::BinaryOp::kDiv:
        if (needs[0]) da = reduce_to(k::div(dy, bv), av.shape());
        // d(a/b)/db = -a/b^2 = -y/b
        if (needs[1]) db = reduce_to(k::affine(k::div(k::mul(dy, y), bv), -1.0f, 0.0f), bv.shape());
        break;
      case k::BinaryOp::kPow: {
        // d(a^b)/da = b * a^(b-1); d(a^b)/db = a^b * log(a), taken as 0 where a <= 0 (like TensorFlow).
        if (needs[0]) {
          const Tensor b_minus_1 = k::affine(bv, 1.0f, -1.0f);
          da = reduce_to(k::mul(dy, k::mul(bv, k::pow(av, b_minus_1))), av.shape());
        }
        if (needs[1]) {
          const Tensor positive = k::binary(k::BinaryOp::kGreater, av, Tensor::zeros({}, DType::kFloat32, av.device()));
          const Tensor safe_a = k::add(k::mul(av, positive), k::affine(positive, -1.0f, 1.0f));  // 1 where a <= 0
          db = reduce_to(k::mul(k::mul(dy, y), k::mul(k::unary(k::UnaryOp::kLog, safe_a), positive)), bv.shape());
        }
        break;
      }
      case k::BinaryOp::kMaximum:
      case k::BinaryOp::kMinimum: {
        // The gradient goes to a where a >= b (maximum) or a <= b (minimum), else to b.
        const Tensor a_wins = op == k::BinaryOp::kMaximum
                                  ? k::affine(k::binary(k::BinaryOp::kGreater, bv, av), -1.0f, 1.0f)
                                  : k::affine(k::binary(k::BinaryOp::kGreater, av, bv), -1.0f, 1.0f);
        if (needs[0]) da = reduce_to(k::mul(dy, a_wins), av.shape());
        if (needs[1]) db = reduce_to(k::mul(dy, k::affine(a_wins, -1.0f, 1.0f)), bv.shape());
        break;
      }
      default:
        STRATA_THROW(InvalidArgument, "no gradient for comparison ops");
    }
    return {da, db};
  });
}

Variable unary_op(k::UnaryOp op, const char* name, const Variable& x) {
  Tensor y = k::unary(op, x.value());
  const Tensor xv = x.value();
  const bool relu = op == k::UnaryOp::kRelu;
  return make_result(
      y, name, {x},
      [op, xv, y](const Tensor& dy, const Needs& needs) -> Grads {
        if (needs.dy_relu_masked) return {dy};  // relu's mask was applied by its consumer (BackwardNeeds)
        return {k::unary_backward(op, xv, y, dy)};
      },
      {.relu_output = relu});
}
}  // namespace

Variable add(const Variable& a, const Variable& b) { return binary_op(k::BinaryOp::kAdd, "add", a, b); }
Variable sub(const Variable& a, const Variable& b) { return binary_op(k::BinaryOp::kSub, "sub", a, b); }
Variable mul(const Variable& a, const Variable& b) { return binary_op(k::BinaryOp::kMul, "mul", a, b); }
Variable div(const Variable& a, const Variable& b) { return binary_op(k::BinaryOp::kDiv, "div", a, b); }
Variable pow(const Variable& a, const Variable& b) { return binary_op(k::BinaryOp::kPow, "pow", a, b); }
Variable maximum(const Variable& a, const Variable& b) { return binary_op(k::BinaryOp::kMaximum, "maximum", a, b); }
Variable minimum(const Variable& a, const Variable& b) { return binary_op(k::BinaryOp::kMinimum, "minimum", a, b); }

Variable affine(const Variable& x, float scale, float shift) {
  return make_result(k::affine(x.value(), scale, shift), "affine", {x},
                     [scale](const Tensor& dy, const Needs&) -> Grads { return {k::affine(dy, scale, 0.0f)}; });
}

Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
Variable operator-(const Variable& x) { return neg(x); }
Variable operator*(const Variable& x, float s) { return affine(x, s, 0.0f); }
Variable operator*(float s, const Variable& x) { return affine(x, s, 0.0f); }
Variable operator+(const Variable& x, float s) { return affine(x, 1.0f, s); }
Variable operator-(const Variable& x, float s) { return affine(x, 1.0f, -s); }

Variable matmul(const Variable& a, const Variable& b, bool ta, bool tb) {
  const Tensor av = a.value(), bv = b.value();
  Tensor y = k::matmul(av, bv, ta, tb);
  // The backward products compute in the precision the forward one did (mixed precision; kernels/compute_precision.h).
  const k::ComputePrecision precision = k::compute_precision();
  return make_result(y, "matmul", {a, b}, [av, bv, ta, tb, precision](const Tensor& dy, const Needs& needs) -> Grads {
    const k::ComputePrecisionScope scope(precision);
    Tensor da, db;
    // y = op(a) op(b): d op(a) = dy op(b)^T, d op(b) = op(a)^T dy, then undo the transposes.
    if (needs[0]) da = ta ? k::matmul(bv, dy, tb, true) : k::matmul(dy, bv, false, !tb);
    if (needs[1]) db = tb ? k::matmul(dy, av, true, ta) : k::matmul(av, dy, !ta, false);
    // A rank-2 operand shared across a batch gets the sum over the batch.
    if (da.defined() && da.rank() > av.rank()) da = k::sum(da, {0});
    if (db.defined() && db.rank() > bv.rank()) db = k::sum(db, {0});
    return {da, db};
  });
}

Variable neg(const Variable& x) { return unary_op(k::UnaryOp::kNeg, "neg", x); }
Variable exp(const Variable& x) { return unary_op(k::UnaryOp::kExp, "exp", x); }
Variable log(const Variable& x) { return unary_op(k::UnaryOp::kLog, "log", x); }
Variable sqrt(const Variable& x) { return unary_op(k::UnaryOp::kSqrt, "sqrt", x); }
Variable abs(const Variable& x) { return unary_op(k::UnaryOp::kAbs, "abs", x); }
Variable square(const Variable& x) { return unary_op(k::UnaryOp::kSquare, "square", x); }
Variable relu(const Variable& x) { return unary_op(k::UnaryOp::kRelu, "relu", x); }
Variable gelu(const Variable& x) { return unary_op(k::UnaryOp::kGelu, "gelu", x); }
Variable sigmoid(const Variable& x) { return unary_op(k::UnaryOp::kSigmoid, "sigmoid", x); }
Variable tanh(const Variable& x) { return unary_op(k::UnaryOp::kTanh, "tanh", x); }

Variable leaky_relu(const Variable& x, float alpha) {
  const Tensor xv = x.value();
  return make_result(k::leaky_relu(xv, alpha), "leaky_relu", {x}, [xv, alpha](const Tensor& dy, const Needs&) -> Grads {
    return {k::leaky_relu_backward(xv, dy, alpha)};
  });
}

Variable elu(const Variable& x, float alpha) {
  const Tensor xv = x.value();
  Tensor y = k::elu(xv, alpha);
  return make_result(y, "elu", {x}, [xv, y, alpha](const Tensor& dy, const Needs&) -> Grads {
    return {k::elu_backward(xv, y, dy, alpha)};
  });
}

Variable clip(const Variable& x, float low, float high) {
  STRATA_CHECK(low <= high, InvalidArgument, "clip: low " << low << " is above high " << high);
  const Tensor xv = x.value();
  return make_result(k::clip(xv, low, high), "clip", {x}, [xv, low, high](const Tensor& dy, const Needs&) -> Grads {
    return {k::clip_backward(xv, dy, low, high)};
  });
}

Variable softmax(const Variable& x, int axis) {
  Tensor y = k::softmax(x.value(), axis);
  return make_result(y, "softmax", {x}, [y, axis](const Tensor& dy, const Needs&) -> Grads {
    return {k::softmax_backward(y, dy, axis)};
  });
}

Variable log_softmax(const Variable& x, int axis) {
  Tensor y = k::log_softmax(x.value(), axis);
  return make_result(y, "log_softmax", {x}, [y, axis](const Tensor& dy, const Needs&) -> Grads {
    return {k::log_softmax_backward(y, dy, axis)};
  });
}

namespace {
// The shape of a reduction's result with keepdims, so dy can broadcast back over x.
Shape kept_shape(const Shape& x, std::vector<int> axes) {
  Shape out = x;
  if (axes.empty())
    for (int i = 0; i < static_cast<int>(x.size()); ++i) axes.push_back(i);
  for (int a : axes) out[normalize_axis(a, static_cast<int>(x.size()), "reduce")] = 1;
  return out;
}
}  // namespace

Variable sum(const Variable& x, const std::vector<int>& axes, bool keepdims) {
  const Shape xs = x.shape();
  return make_result(k::sum(x.value(), axes, keepdims), "sum", {x}, [xs, axes](const Tensor& dy, const Needs&) -> Grads {
    return {k::broadcast_to(dy.reshape(kept_shape(xs, axes)), xs)};
  });
}

Variable mean(const Variable& x, const std::vector<int>& axes, bool keepdims) {
  const Shape xs = x.shape();
  Tensor y = k::mean(x.value(), axes, keepdims);
  const float count = static_cast<float>(shape_numel(xs)) / static_cast<float>(std::max<int64_t>(y.numel(), 1));
  return make_result(y, "mean", {x}, [xs, axes, count](const Tensor& dy, const Needs&) -> Grads {
    return {k::broadcast_to(k::affine(dy, 1.0f / count, 0.0f).reshape(kept_shape(xs, axes)), xs)};
  });
}

Variable reduce_max(const Variable& x, const std::vector<int>& axes, bool keepdims) {
  const Tensor xv = x.value();
  Tensor y = k::max(xv, axes, keepdims);
  return make_result(y, "reduce_max", {x}, [xv, y, axes](const Tensor& dy, const Needs&) -> Grads {
    const Shape kept = kept_shape(xv.shape(), axes);
    const Tensor is_max = k::binary(k::BinaryOp::kEqual, xv, y.reshape(kept));
    const Tensor count = k::sum(is_max, axes, true);
    return {k::mul(is_max, k::div(dy.reshape(kept), count))};
  });
}

Tensor argmax(const Variable& x, int axis) { return k::argmax(x.value(), axis); }

}  // namespace strata
