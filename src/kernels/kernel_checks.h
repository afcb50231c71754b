// The argument checks, error messages, op names and output shapes that a kernel of kernels.h has on every device:
// the CPU kernels (kernels/cpu) and the CUDA kernels (kernels/cuda) both call these, so a message or a rule is
// written once and the two devices cannot drift apart. Each function throws the exception its comment names, with
// the message the kernels document; none reads a tensor's data or asks for a particular device (unary_backward_input
// only checks that its tensors share one), so each caller keeps its own device checks and dispatch. Compiled into
// strata_kernels in every build; nvcc includes this header, so it stays free of oneDNN/OpenMP.
// Thread-safety: pure functions on values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "strata/tensor.h"

namespace strata::kernels {

// ---- elementwise: the name an op's messages use ("add", "relu", ...).
const char* binary_name(BinaryOp op);
const char* unary_name(UnaryOp op);

// Throws InvalidArgument "<fn>: unknown op <n>" (fn is "unary" or "unary_backward").
[[noreturn]] void throw_unknown_unary_op(const char* fn, UnaryOp op);

// The forward tensor unary_backward(op, x, y, dy) reads: y for exp, sqrt, sigmoid and tanh, x for log, abs, square,
// relu and gelu, nullptr for neg and sign (dy only). Throws InvalidArgument naming the op unless that tensor and dy
// share a device and are float32 (dy alone when it is nullptr), ShapeError unless they have one shape.
const Tensor* unary_backward_input(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy);

// Throws InvalidArgument unless low <= high.
void check_clip_range(float low, float high);

// ---- matmul: the product's sizes. Throws InvalidArgument unless both operands are float32, ShapeError unless
// they are rank 2 or 3 with equal inner dimensions and batch sizes that are equal or 1.
struct MatmulShape {
  int64_t M = 0, N = 0, K = 0;
  int64_t Ba = 1, Bb = 1, batch = 1;  // a's and b's batch (1 for rank 2) and the output's
  bool batched = false;               // either operand is rank 3
  Shape out_shape() const { return batched ? Shape{batch, M, N} : Shape{M, N}; }
};
MatmulShape matmul_shape(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b);

// ---- dense.
// dense's sizes: x [M, K], w [K, N]. Throws InvalidArgument unless both are float32, ShapeError unless they are
// matrices with matching inner dimensions.
struct DenseShape {
  int64_t M = 0, K = 0, N = 0;
};
DenseShape dense_shape(const Tensor& x, const Tensor& w);

// Throws InvalidArgument unless dense's (defined) bias is float32, ShapeError unless it is [N] for w [K, N].
void check_dense_bias(const Tensor& bias, const Tensor& w);

// Throws ShapeError unless dense_backward's dy (and y, with relu) is [M, N] for x [M, K] and w [K, N].
void check_dense_backward_dy(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu);

// ---- LSTM cell and dropout.
// lstm_cell's z [batch, 4 * units]: throws InvalidArgument naming `op` unless z is float32, ShapeError unless it has
// that shape with units > 0.
struct LstmShape {
  int64_t batch = 0, units = 0;
};
LstmShape lstm_shape(const char* op, const Tensor& z);

// Throws InvalidArgument naming `op` unless the (defined) c_prev is float32, ShapeError unless it is [batch, units].
void check_lstm_c_prev(const char* op, const Tensor& c_prev, const LstmShape& s);

// Throws InvalidArgument unless 0 <= rate < 1.
void check_dropout_rate(float rate);

// ---- reductions.
// Which axes of x to reduce; an empty list means all of them. Throws InvalidArgument naming `op` for an axis out
// of range or listed twice.
std::vector<bool> reduced_axes(const char* op, const Tensor& x, const std::vector<int>& axes);

// One pass of a reduction: [outer, n, inner] (the previous pass's result, or x) reduced over n to [outer, inner].
struct ReduceStep {
  int64_t outer = 1, n = 1, inner = 1;
};

// The output shape and element count of reducing x over the flagged axes, and the passes that do it: x's
// dimensions are coalesced (unit axes dropped, neighbours both reduced or both kept merged), then each reduced
// group is one pass, innermost first. No passes when only unit axes are reduced (the result is a copy of x).
struct ReduceLayout {
  Shape out_shape;
  int64_t count = 1;  // elements reduced into each output element
  std::vector<ReduceStep> steps;
};
ReduceLayout reduce_layout(const Tensor& x, const std::vector<bool>& flags, bool keepdims);

// argmax's axis (normalized) and output shape; throws InvalidArgument for an axis out of range, or an empty axis
// when the output is not empty.
struct ArgmaxShape {
  int axis = 0;
  Shape out_shape;
};
ArgmaxShape argmax_shape(const Tensor& x, int axis);

// For a reduction whose output is not empty but reduces over an empty axis: throws InvalidArgument naming `op`
// when it is a max (a sum or mean of nothing is 0 or NaN).
void check_empty_reduction(const char* op, const Tensor& x, bool is_max);

// Throws ShapeError unless x broadcasts to `shape`.
void check_broadcast_to(const Tensor& x, const Shape& shape);

// Throws InvalidArgument: broadcast_to has no copy for elements of x's size.
[[noreturn]] void throw_broadcast_dtype(const Tensor& x);

// The axes of x that sum_to_shape reduces; throws ShapeError unless x is a broadcast of `shape`.
std::vector<bool> sum_to_shape_axes(const Tensor& x, const Shape& shape);

// ---- shape ops.
// Throws InvalidArgument "<op>: no tensors to <verb>" when xs is empty (concat, stack).
void require_tensors(const char* op, const std::vector<Tensor>& xs, const char* verb);

// Throws InvalidArgument naming `op` unless `indices` is int32 or int64.
void require_index_dtype(const char* op, const Tensor& indices);

// concat's axis (normalized) and output shape; throws InvalidArgument for an axis out of range or mixed dtypes,
// ShapeError for a tensor that does not fit tensor 0. REQUIRES: !xs.empty().
struct ConcatShape {
  int axis = 0;
  Shape out_shape;
};
ConcatShape concat_shape(const std::vector<Tensor>& xs, int axis);

// stack's axis (normalized against rank + 1) and the inputs reshaped with a unit dimension there, to be
// concatenated along it; throws ShapeError unless every shape is tensor 0's. REQUIRES: !xs.empty().
struct StackViews {
  int axis = 0;
  std::vector<Tensor> views;
};
StackViews stack_views(const std::vector<Tensor>& xs, int axis);

// slice_axis's axis (normalized), that axis's size and the output shape; throws InvalidArgument unless
// 0 <= start <= end <= that size.
struct SliceShape {
  int axis = 0;
  int64_t dim = 0;
  Shape out_shape;
};
SliceShape slice_shape(const Tensor& x, int axis, int64_t start, int64_t end);

// gather's output shape (indices' shape, then params' row shape); throws InvalidArgument for indices that are
// not int32/int64, ShapeError for params of rank 0.
Shape gather_shape(const Tensor& params, const Tensor& indices);

// scatter_add's output shape: [num_rows] then the updates' dimensions past the indices' rank; throws
// InvalidArgument for a negative num_rows.
Shape scatter_add_shape(const Tensor& indices, const Tensor& updates, int64_t num_rows);

// The shape of one row of scatter_add_into's `out` (the updates' dimensions past the indices'); throws
// InvalidArgument for indices that are not int32/int64 or updates/out not float32, ShapeError unless the updates
// start with the indices' shape and out's rows have the updates' row shape.
Shape scatter_add_row_shape(const Tensor& out, const Tensor& indices, const Tensor& updates);

// one_hot's output shape (indices' shape, then depth); throws InvalidArgument for indices that are not
// int32/int64 or a negative depth.
Shape one_hot_shape(const Tensor& indices, int64_t depth);

// ---- convolution and pooling (NHWC): sizes and TensorFlow's padding (cpu::window_geometry).
// Throws InvalidArgument naming `op` for a stride or dilation below 1, ShapeError for an input that is not rank 4,
// a kernel that is not rank 4, channels that differ, an empty window, or a window that does not fit under VALID.
struct ConvShape {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input
  int64_t kh = 0, kw = 0, f = 0;       // kernel [kh, kw, c, f]
  int64_t oh = 0, ow = 0;              // output
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  Shape y_shape() const { return {n, oh, ow, f}; }
};
ConvShape conv_shape(const char* op, const Shape& x, const Shape& w, const Conv2DParams& p);

// Throws ShapeError naming `op` unless a convolution's output gradient dy has the output's shape.
void check_conv_dy(const char* op, const Tensor& dy, const ConvShape& g, const Shape& x_shape, const Shape& w_shape);

// Throws InvalidArgument naming `op` for a pool size or stride below 1, ShapeError for an input that is not
// rank 4 or a window that does not fit under VALID.
struct PoolShape {
  int64_t n = 0, h = 0, w = 0, c = 0, oh = 0, ow = 0;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  Shape y_shape() const { return {n, oh, ow, c}; }
};
PoolShape pool_shape(const char* op, const Shape& x, const Pool2DParams& p);

// Throws ShapeError naming `op` unless a pool's output gradient dy has the output's shape.
void check_pool_dy(const char* op, const Tensor& dy, const PoolShape& g, const Shape& x_shape);

// Throws InvalidArgument naming `op` unless max_pool2d's workspace has the `bytes` this device's max_pool2d makes.
void check_pool_workspace(const char* op, const Tensor& workspace, size_t bytes, const Shape& x_shape);

}  // namespace strata::kernels
