// Differentiable ops on Variables: the vocabulary of models and custom training loops.
//
// Each op computes its result with the kernels and, while a GradientTape records (see
// strata/gradient_tape.h), remembers how to send the gradient back to its inputs. Binary arithmetic
// broadcasts like NumPy, and its gradient is summed back to each input's shape. Images are NHWC and
// convolution kernels HWIO, like Keras. Ops that return integers or masks (argmax, one_hot) return
// Tensors: they have no gradient.
// Thread-safety: ops may run concurrently on different threads; each records on its own thread's tapes.
#pragma once

#include <vector>

#include "strata/random.h"
#include "strata/variable.h"

namespace strata {

// Layout and padding options shared with the kernels.
enum class Padding { kValid, kSame };

// ---- arithmetic (NumPy broadcasting)
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable pow(const Variable& a, const Variable& b);
Variable maximum(const Variable& a, const Variable& b);
Variable minimum(const Variable& a, const Variable& b);
// x * scale + shift.
Variable affine(const Variable& x, float scale, float shift = 0.0f);
Variable operator+(const Variable& a, const Variable& b);
Variable operator-(const Variable& a, const Variable& b);
Variable operator*(const Variable& a, const Variable& b);
Variable operator/(const Variable& a, const Variable& b);
Variable operator-(const Variable& x);
Variable operator*(const Variable& x, float s);
Variable operator*(float s, const Variable& x);
Variable operator+(const Variable& x, float s);
Variable operator-(const Variable& x, float s);

// ---- matrix product: [M, K] x [K, N] (with optional transposes); rank-3 inputs are batched
Variable matmul(const Variable& a, const Variable& b, bool transpose_a = false, bool transpose_b = false);

// ---- elementwise functions
Variable neg(const Variable& x);
Variable exp(const Variable& x);
Variable log(const Variable& x);
Variable sqrt(const Variable& x);
Variable abs(const Variable& x);
Variable square(const Variable& x);
Variable relu(const Variable& x);
Variable leaky_relu(const Variable& x, float alpha = 0.2f);
Variable elu(const Variable& x, float alpha = 1.0f);
Variable gelu(const Variable& x);
Variable sigmoid(const Variable& x);
Variable tanh(const Variable& x);
Variable clip(const Variable& x, float low, float high);
Variable softmax(const Variable& x, int axis = -1);
Variable log_softmax(const Variable& x, int axis = -1);

// ---- reductions (empty axes = all)
Variable sum(const Variable& x, const std::vector<int>& axes = {}, bool keepdims = false);
Variable mean(const Variable& x, const std::vector<int>& axes = {}, bool keepdims = false);
// On ties the gradient is split evenly between the maxima (as TensorFlow does).
Variable reduce_max(const Variable& x, const std::vector<int>& axes = {}, bool keepdims = false);
Tensor argmax(const Variable& x, int axis = -1);

// ---- shapes
Variable reshape(const Variable& x, const Shape& shape);
Variable transpose(const Variable& x, const std::vector<int>& perm = {});
Variable broadcast_to(const Variable& x, const Shape& shape);
Variable concat(const std::vector<Variable>& xs, int axis);
Variable stack(const std::vector<Variable>& xs, int axis);
Variable slice_axis(const Variable& x, int axis, int64_t start, int64_t end);
// Rows of `params` [V, ...] picked by integer `indices` (embedding lookup); the gradient scatter-adds.
Variable gather(const Variable& params, const Tensor& indices);
Tensor one_hot(const Tensor& indices, int64_t depth);

// ---- neural-network ops (NHWC images, HWIO kernels)
struct Conv2DOptions {
  int stride_h = 1, stride_w = 1;
  Padding padding = Padding::kValid;
  int dilation_h = 1, dilation_w = 1;
  // relu(conv2d(...)) in one pass over the output (Conv2D layers with activation "relu" use it).
  bool fused_relu = false;
};
// `bias` may be an undefined Variable.
Variable conv2d(const Variable& x, const Variable& kernel, const Variable& bias, const Conv2DOptions& options = {});
struct Pool2DOptions {
  int pool_h = 2, pool_w = 2;
  int stride_h = 2, stride_w = 2;
  Padding padding = Padding::kValid;
};
Variable max_pool2d(const Variable& x, const Pool2DOptions& options = {});
Variable avg_pool2d(const Variable& x, const Pool2DOptions& options = {});

struct BatchNormOutput {
  Variable y;
  Tensor batch_mean;      // [C]
  Tensor batch_variance;  // [C], biased
};
// Normalises with the batch's statistics over every axis but the last (training mode).
BatchNormOutput batch_norm(const Variable& x, const Variable& gamma, const Variable& beta, float epsilon);
// Normalises with given statistics (inference mode); differentiable in x, gamma and beta.
Variable batch_norm_inference(const Variable& x, const Variable& gamma, const Variable& beta, const Tensor& mean,
                              const Tensor& variance, float epsilon);
// Normalises each row of x [..., C] over its last axis with its own mean and biased variance, then * gamma [C]
// + beta [C] (Keras's LayerNormalization); differentiable in x, gamma and beta. oneDNN's layer normalization on the
// host; composed from elementwise ops and reductions on other devices.
Variable layer_norm(const Variable& x, const Variable& gamma, const Variable& beta, float epsilon);
// Zeroes each element with probability `rate` and scales the rest by 1/(1-rate).
Variable dropout(const Variable& x, float rate, Generator& gen);
// One step of an LSTM with sigmoid gates and tanh (Keras's default cell), fused: z [B, 4u] the gates' pre-activations
// in Keras's order (i, f, c, o), c_prev [B, u] (undefined: zeros). Returns [B, 2u]: h, then the new c (slice them
// with slice_axis); differentiable in z and c_prev.
Variable lstm_cell(const Variable& z, const Variable& c_prev);

// A Variable with the same value whose gradient is not propagated (tf.stop_gradient).
Variable stop_gradient(const Variable& x);

}  // namespace strata
