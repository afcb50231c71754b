// Kernels: the math strata runs on tensors, with no knowledge of gradients.
//
// Every function takes and returns float32 tensors unless it says otherwise, checks shapes and
// devices (a ShapeError names the op and the shapes), and allocates its result. Images are NHWC
// and convolution kernels HWIO ([kh, kw, in, out]) as in Keras. CPU implementations live in
// kernels/cpu and use oneDNN (convolution, pooling, batch norm) and BLAS (matrix products); a
// tensor on another device raises Unavailable until that device's kernels are built.
// Each kernel uses up to strata::num_threads() threads of the calling thread.
// Thread-safety: kernels may be called concurrently on distinct outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/random.h"
#include "strata/tensor.h"

namespace strata::kernels {

// ---------------------------------------------------------------- matrix products (matmul.cc)
// a: [M, K] ([K, M] if trans_a), b: [K, N] ([N, K] if trans_b) -> [M, N].
// Rank-3 inputs [B, ., .] are batched; a rank-2 operand is shared across the batch.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// ---------------------------------------------------------------- dense layers (dense.cc)
// y = x w + bias, then relu when `relu`: x [M, K], w [K, N], bias [N] (undefined for none) -> [M, N].
// One product and one pass over y for the bias and the activation.
Tensor dense(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu);
struct DenseGrads {
  Tensor dx;  // [M, K]
  Tensor dw;  // [K, N]
  Tensor db;  // [N]
};
// The gradients of dense() that are asked for (the others stay undefined), given its inputs, its
// output y (whose sign is relu's mask) and dy [M, N]. With relu, the mask and the bias gradient's
// column sums are one pass over dy.
DenseGrads dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, bool want_dx,
                          bool want_dw, bool want_db);

// ---------------------------------------------------------------- elementwise (elementwise.cc)
// Binary ops with NumPy broadcasting. kEqual/kGreater return 1.0f or 0.0f.
enum class BinaryOp { kAdd, kSub, kMul, kDiv, kPow, kMaximum, kMinimum, kEqual, kGreater };
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
inline Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kAdd, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kSub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMul, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kDiv, a, b); }
inline Tensor pow(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kPow, a, b); }
// x * scale + shift, elementwise (the fast path for scalars).
Tensor affine(const Tensor& x, float scale, float shift);
// In place: y += alpha * x (same shape). The optimizer and gradient-accumulation workhorse.
void axpy_(Tensor& y, float alpha, const Tensor& x);

// Unary ops. kGelu is the exact (erf) form, like Keras's gelu(approximate=False).
enum class UnaryOp { kNeg, kExp, kLog, kSqrt, kAbs, kSquare, kSign, kRelu, kSigmoid, kTanh, kGelu };
Tensor unary(UnaryOp op, const Tensor& x);
// Gradient of a unary op: dx given the input x, its output y = op(x) and dy.
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy);
Tensor leaky_relu(const Tensor& x, float alpha);
Tensor leaky_relu_backward(const Tensor& x, const Tensor& dy, float alpha);
Tensor elu(const Tensor& x, float alpha);
Tensor elu_backward(const Tensor& x, const Tensor& y, const Tensor& dy, float alpha);
// min(max(x, low), high); the gradient passes where low <= x <= high.
Tensor clip(const Tensor& x, float low, float high);
Tensor clip_backward(const Tensor& x, const Tensor& dy, float low, float high);

// ---------------------------------------------------------------- softmax (softmax.cc)
Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);
// dx from the forward output y and dy.
Tensor softmax_backward(const Tensor& y, const Tensor& dy, int axis = -1);
Tensor log_softmax_backward(const Tensor& y, const Tensor& dy, int axis = -1);

// ---------------------------------------------------------------- reductions (reduce.cc)
// Over `axes` (negative allowed; empty = all axes).
Tensor sum(const Tensor& x, const std::vector<int>& axes = {}, bool keepdims = false);
Tensor mean(const Tensor& x, const std::vector<int>& axes = {}, bool keepdims = false);
Tensor max(const Tensor& x, const std::vector<int>& axes = {}, bool keepdims = false);
// Index of the largest element along `axis` as int64 (first one on ties); the axis is removed.
Tensor argmax(const Tensor& x, int axis = -1);
// Repeats x (NumPy broadcasting) to `shape`.
Tensor broadcast_to(const Tensor& x, const Shape& shape);
// Sums a broadcast result back down to `shape` (the gradient of broadcasting).
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

// ---------------------------------------------------------------- shape ops (shape_ops.cc)
// Any dtype for concat/stack/slice_axis.
Tensor concat(const std::vector<Tensor>& xs, int axis);
Tensor stack(const std::vector<Tensor>& xs, int axis);
// Elements [start, end) along `axis`, as a copy.
Tensor slice_axis(const Tensor& x, int axis, int64_t start, int64_t end);
// params [V, ...] gathered by int32/int64 `indices` of any shape -> [indices..., ...]. An index
// outside [0, V) raises InvalidArgument naming the index and V.
Tensor gather(const Tensor& params, const Tensor& indices);
// The gradient of gather: rows of `updates` [indices..., ...] added into a zero [num_rows, ...].
Tensor scatter_add(const Tensor& indices, const Tensor& updates, int64_t num_rows);
// The same added into `out` [num_rows, ...] in place (float32, the updates' row shape), allocating nothing.
void scatter_add_into(Tensor& out, const Tensor& indices, const Tensor& updates);
// int32/int64 indices [...] -> float32 [..., depth]; an index outside [0, depth) gives a zero row.
Tensor one_hot(const Tensor& indices, int64_t depth);

// ---------------------------------------------------------------- convolution (conv.cc, oneDNN)
enum class Padding { kValid, kSame };
struct Conv2DParams {
  int stride_h = 1, stride_w = 1;
  Padding padding = Padding::kValid;
  int dilation_h = 1, dilation_w = 1;
  // Forward only: y = relu(conv + bias) in the same pass (a oneDNN post-op), saving a read and a write
  // of the output. The backward kernels ignore it; the caller applies relu's gradient first.
  bool fused_relu = false;
};
// x [N, H, W, C], w [kh, kw, C, F], optional bias [F] (pass an undefined Tensor for none) -> [N, OH, OW, F].
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2DParams& p);
Tensor conv2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, const Conv2DParams& p);
struct Conv2DWeightGrads {
  Tensor dw;  // [kh, kw, C, F]
  Tensor db;  // [F], or undefined when with_bias is false
};
Conv2DWeightGrads conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Shape& w_shape, bool with_bias,
                                          const Conv2DParams& p);

// ---------------------------------------------------------------- pooling (pool.cc, oneDNN)
struct Pool2DParams {
  int pool_h = 2, pool_w = 2;
  int stride_h = 2, stride_w = 2;
  Padding padding = Padding::kValid;
};
struct MaxPoolResult {
  Tensor y;          // [N, OH, OW, C]
  Tensor workspace;  // opaque, for max_pool2d_backward
};
MaxPoolResult max_pool2d(const Tensor& x, const Pool2DParams& p);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& workspace, const Shape& x_shape, const Pool2DParams& p);
// Average over the window's elements inside the input (padding excluded, like Keras).
Tensor avg_pool2d(const Tensor& x, const Pool2DParams& p);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2DParams& p);

// ---------------------------------------------------------------- batch norm (batch_norm.cc, oneDNN)
// Channels last: x [..., C]; statistics over every axis but the last.
struct BatchNormResult {
  Tensor y;
  Tensor mean;      // [C], batch mean
  Tensor variance;  // [C], biased batch variance (what normalised x)
};
BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon);
Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                            const Tensor& variance, float epsilon);
struct BatchNormGrads {
  Tensor dx, dgamma, dbeta;
};
BatchNormGrads batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& variance,
                                   const Tensor& gamma, float epsilon);

// ---------------------------------------------------------------- layer norm (layer_norm.cc, oneDNN)
// x [..., C] normalised over its last axis, per row (M = numel / C rows), then * gamma [C] + beta [C]. Host only:
// on another device the layer_norm op (strata/ops.h) composes it from other kernels.
struct LayerNormResult {
  Tensor y;
  Tensor mean;      // [M]
  Tensor variance;  // [M], biased (what normalised each row)
};
LayerNormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon);
struct LayerNormGrads {
  Tensor dx, dgamma, dbeta;
};
LayerNormGrads layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& variance,
                                   const Tensor& gamma, float epsilon);

// ---------------------------------------------------------------- LSTM cell (lstm_cell.cc)
// One step of an LSTM with sigmoid gates and tanh (Keras's default cell): z [B, 4u] holds the gates' pre-activations
// in Keras's order (i, f, c, o); c_prev [B, u] (undefined: zeros). c = f * c_prev + i * tanh(z_c), h = o * tanh(c).
struct LstmCellResult {
  Tensor gates;   // [B, 4u]: i, f, g = tanh(z_c), o after their activations (what the backward needs)
  Tensor packed;  // [B, 2u]: h, then c
};
LstmCellResult lstm_cell(const Tensor& z, const Tensor& c_prev);
struct LstmCellGrads {
  Tensor dz;       // [B, 4u]
  Tensor dc_prev;  // [B, u]; undefined when c_prev is
};
// d_packed [B, 2u]: the gradients of h and c. `packed` and `gates` from lstm_cell.
LstmCellGrads lstm_cell_backward(const Tensor& gates, const Tensor& packed, const Tensor& c_prev,
                                 const Tensor& d_packed);

// ---------------------------------------------------------------- dropout (dropout.cc)
struct DropoutResult {
  Tensor y;
  Tensor mask;  // 0 or 1/(1-rate) per element; the gradient is dy * mask
};
DropoutResult dropout(const Tensor& x, float rate, Generator& gen);

}  // namespace strata::kernels
