// Differentiable neural-network ops: convolution, pooling, batch and layer normalisation, dropout and the fused LSTM
// cell.
#include "autograd/composed_ops.h"
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
k::Padding to_kernel(Padding p) { return p == Padding::kSame ? k::Padding::kSame : k::Padding::kValid; }

k::Conv2DParams to_kernel(const Conv2DOptions& o) {
  return {o.stride_h, o.stride_w, to_kernel(o.padding), o.dilation_h, o.dilation_w, o.fused_relu};
}

k::Pool2DParams to_kernel(const Pool2DOptions& o) {
  return {o.pool_h, o.pool_w, o.stride_h, o.stride_w, to_kernel(o.padding)};
}
}  // namespace

Variable conv2d(const Variable& x, const Variable& kernel, const Variable& bias, const Conv2DOptions& options) {
  const k::Conv2DParams p = to_kernel(options);
  const Tensor xv = x.value(), wv = kernel.value();
  const bool with_bias = bias.defined();
  Tensor y = k::conv2d(xv, wv, with_bias ? bias.value() : Tensor(), p);
  const k::ComputePrecision precision = k::compute_precision();  // the backward computes as the forward did
  std::vector<Variable> inputs = {x, kernel};
  if (with_bias) inputs.push_back(bias);
  // With the fused relu, the gradient first passes relu's mask (y > 0 exactly where the pre-activation
  // is), unless the one consumer of y already applied it (a max pool; see BackwardNeeds).
  const Tensor relu_out = p.fused_relu ? y : Tensor();
  return make_result(
      y, p.fused_relu ? "conv2d_relu" : "conv2d", inputs,
      [xv, wv, p, with_bias, relu_out, precision](const Tensor& dy_out, const Needs& needs) -> Grads {
    const k::ComputePrecisionScope scope(precision);
    const bool mask = p.fused_relu && !needs.dy_relu_masked;
    const Tensor dy = mask ? k::unary_backward(k::UnaryOp::kRelu, relu_out, Tensor(), dy_out) : dy_out;
    Grads grads(with_bias ? 3 : 2);
    if (needs[0]) grads[0] = k::conv2d_backward_input(dy, wv, xv.shape(), p);
    if (needs[1] || (with_bias && needs[2])) {
      k::Conv2DWeightGrads g = k::conv2d_backward_weights(xv, dy, wv.shape(), with_bias, p);
      grads[1] = g.dw;
      if (with_bias) grads[2] = g.db;
    }
    return grads;
  },
      {.relu_output = p.fused_relu});
}

Variable max_pool2d(const Variable& x, const Pool2DOptions& options) {
  const k::Pool2DParams p = to_kernel(options);
  k::MaxPoolResult r = k::max_pool2d(x.value(), p);
  const Tensor workspace = r.workspace;
  const Shape xs = x.shape();
  const Tensor pooled = r.y;
  // When asked (x is a relu's output and this is its only consumer), masks dy by pooled > 0 first: the
  // cell each gradient goes to holds the pooled value, so this is relu's mask on a quarter of the cells.
  return make_result(
      r.y, "max_pool2d", {x},
      [workspace, xs, p, pooled](const Tensor& dy, const Needs& needs) -> Grads {
        if (!needs.premask_relu_input) return {k::max_pool2d_backward(dy, workspace, xs, p)};
        const Tensor masked = k::unary_backward(k::UnaryOp::kRelu, pooled, Tensor(), dy);
        return {k::max_pool2d_backward(masked, workspace, xs, p)};
      },
      {.premasks_relu_input = true});
}

Variable avg_pool2d(const Variable& x, const Pool2DOptions& options) {
  const k::Pool2DParams p = to_kernel(options);
  const Shape xs = x.shape();
  return make_result(k::avg_pool2d(x.value(), p), "avg_pool2d", {x}, [xs, p](const Tensor& dy, const Needs&) -> Grads {
    return {k::avg_pool2d_backward(dy, xs, p)};
  });
}

BatchNormOutput batch_norm(const Variable& x, const Variable& gamma, const Variable& beta, float epsilon) {
  const Tensor xv = x.value(), gv = gamma.value();
  k::BatchNormResult r = k::batch_norm_training(xv, gv, beta.value(), epsilon);
  const Tensor mean = r.mean, variance = r.variance;
  Variable y = make_result(r.y, "batch_norm", {x, gamma, beta},
                           [xv, gv, mean, variance, epsilon](const Tensor& dy, const Needs&) -> Grads {
                             k::BatchNormGrads g = k::batch_norm_backward(xv, dy, mean, variance, gv, epsilon);
                             return {g.dx, g.dgamma, g.dbeta};
                           });
  return {y, r.mean, r.variance};
}

Variable batch_norm_inference(const Variable& x, const Variable& gamma, const Variable& beta, const Tensor& mean,
                              const Tensor& variance, float epsilon) {
  const Tensor xv = x.value(), gv = gamma.value();
  Tensor y = k::batch_norm_inference(xv, gv, beta.value(), mean, variance, epsilon);
  return make_result(y, "batch_norm_inference", {x, gamma, beta},
                     [xv, gv, mean, variance, epsilon](const Tensor& dy, const Needs& needs) -> Grads {
                       // y = (x - mean) * inv_std * gamma + beta, with fixed statistics.
                       const Tensor std_dev =
                           k::unary(k::UnaryOp::kSqrt, k::affine(variance, 1.0f, epsilon));
                       const Tensor scale = k::div(gv, std_dev);  // gamma / sqrt(var + eps)
                       const int64_t channels = gv.numel();
                       const Shape channel_shape = {channels};
                       Grads grads(3);
                       if (needs[0]) grads[0] = k::mul(dy, scale);
                       if (needs[1]) {
                         const Tensor x_hat = k::div(k::sub(xv, mean), std_dev);
                         grads[1] = k::sum_to_shape(k::mul(dy, x_hat), channel_shape);
                       }
                       if (needs[2]) grads[2] = k::sum_to_shape(dy, channel_shape);
                       return grads;
                     });
}

Variable detail::layer_norm_composed(const Variable& x, const Variable& gamma, const Variable& beta, float epsilon) {
  const Variable centred = x - mean(x, {-1}, true);
  const Variable variance = mean(square(centred), {-1}, true);  // biased, as Keras and oneDNN
  return centred / sqrt(variance + epsilon) * gamma + beta;
}

Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float epsilon) {
  // No layer-norm kernel off the host yet: the same math from ops that every device has.
  if (!x.value().device().is_cpu()) return detail::layer_norm_composed(x, gamma, beta, epsilon);
  const Tensor xv = x.value(), gv = gamma.value();
  k::LayerNormResult r = k::layer_norm(xv, gv, beta.value(), epsilon);
  return make_result(r.y, "layer_norm", {x, gamma, beta},
                     [xv, gv, row_mean = r.mean, row_var = r.variance, epsilon](const Tensor& dy, const Needs&) -> Grads {
                       k::LayerNormGrads g = k::layer_norm_backward(xv, dy, row_mean, row_var, gv, epsilon);
                       return {g.dx, g.dgamma, g.dbeta};
                     });
}

Variable dropout(const Variable& x, float rate, Generator& gen) {
  k::DropoutResult r = k::dropout(x.value(), rate, gen);
  const Tensor mask = r.mask;
  return make_result(r.y, "dropout", {x}, [mask](const Tensor& dy, const Needs&) -> Grads { return {k::mul(dy, mask)}; });
}

Variable lstm_cell(const Variable& z, const Variable& c_prev) {
  const Tensor c_prev_value = c_prev.defined() ? c_prev.value() : Tensor();
  k::LstmCellResult r = k::lstm_cell(z.value(), c_prev_value);
  std::vector<Variable> inputs = {z};
  if (c_prev.defined()) inputs.push_back(c_prev);
  return make_result(r.packed, "lstm_cell", inputs,
                     [gates = r.gates, packed = r.packed, c_prev_value](const Tensor& dy, const Needs& needs) -> Grads {
                       k::LstmCellGrads g = k::lstm_cell_backward(gates, packed, c_prev_value, dy);
                       Grads grads = {needs[0] ? g.dz : Tensor()};
                       if (c_prev_value.defined()) grads.push_back(needs[1] ? g.dc_prev : Tensor());
                       return grads;
                     });
}

}  // namespace strata
