// The checks, messages, names and shapes that the CPU and CUDA kernels share (kernel_checks.h).
// Thread-safety: pure functions on values.
#include "kernels/kernel_checks.h"

#include <algorithm>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/dnnl_util.h"
#include "strata/error.h"

namespace strata::kernels {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "add";
    case BinaryOp::kSub:
      return "sub";
    case BinaryOp::kMul:
      return "mul";
    case BinaryOp::kDiv:
      return "div";
    case BinaryOp::kPow:
      return "pow";
    case BinaryOp::kMaximum:
      return "maximum";
    case BinaryOp::kMinimum:
      return "minimum";
    case BinaryOp::kEqual:
      return "equal";
    case BinaryOp::kGreater:
      return "greater";
  }
  return "binary";
}

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg:
      return "neg";
    case UnaryOp::kExp:
      return "exp";
    case UnaryOp::kLog:
      return "log";
    case UnaryOp::kSqrt:
      return "sqrt";
    case UnaryOp::kAbs:
      return "abs";
    case UnaryOp::kSquare:
      return "square";
    case UnaryOp::kSign:
      return "sign";
    case UnaryOp::kRelu:
      return "relu";
    case UnaryOp::kSigmoid:
      return "sigmoid";
    case UnaryOp::kTanh:
      return "tanh";
    case UnaryOp::kGelu:
      return "gelu";
  }
  return "unary";
}

void throw_unknown_unary_op(const char* fn, UnaryOp op) {
  STRATA_THROW(InvalidArgument, fn << ": unknown op " << static_cast<int>(op));
}

const Tensor* unary_backward_input(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy) {
  const char* name = unary_name(op);
  const bool needs_x = op == UnaryOp::kLog || op == UnaryOp::kAbs || op == UnaryOp::kSquare || op == UnaryOp::kRelu ||
                       op == UnaryOp::kGelu;
  const bool needs_y = op == UnaryOp::kExp || op == UnaryOp::kSqrt || op == UnaryOp::kSigmoid || op == UnaryOp::kTanh;
  if (!needs_x && !needs_y) {
    check_same_device(name, {&dy});
    cpu::require_float(name, {&dy});
    return nullptr;
  }
  const Tensor& in = needs_y ? y : x;
  check_same_device(name, {&in, &dy});
  cpu::require_float(name, {&in, &dy});
  cpu::require_same_shape(name, in, needs_y ? "y" : "x", dy, "dy");
  return &in;
}

void check_clip_range(float low, float high) {
  STRATA_CHECK(low <= high, InvalidArgument, "clip: low " << low << " is greater than high " << high);
}

MatmulShape matmul_shape(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  cpu::require_float("matmul", {&a, &b});
  STRATA_CHECK((a.rank() == 2 || a.rank() == 3) && (b.rank() == 2 || b.rank() == 3), ShapeError,
               "matmul: wants rank-2 or rank-3 operands, got " << a.shape_str() << " and " << b.shape_str());
  MatmulShape s;
  s.M = trans_a ? a.dim(-1) : a.dim(-2);
  const int64_t Ka = trans_a ? a.dim(-2) : a.dim(-1);
  const int64_t Kb = trans_b ? b.dim(-1) : b.dim(-2);
  s.N = trans_b ? b.dim(-2) : b.dim(-1);
  STRATA_CHECK(Ka == Kb, ShapeError,
               "matmul: inner dimensions differ: a " << a.shape_str() << (trans_a ? " (transposed)" : "") << " and b "
                                                     << b.shape_str() << (trans_b ? " (transposed)" : "") << " give "
                                                     << Ka << " vs " << Kb);
  s.K = Ka;
  s.batched = a.rank() == 3 || b.rank() == 3;
  s.Ba = a.rank() == 3 ? a.dim(0) : 1;
  s.Bb = b.rank() == 3 ? b.dim(0) : 1;
  if (a.rank() == 3 && b.rank() == 3) {
    STRATA_CHECK(s.Ba == s.Bb || s.Ba == 1 || s.Bb == 1, ShapeError,
                 "matmul: batch sizes differ: a " << a.shape_str() << " and b " << b.shape_str());
  }
  s.batch = s.Ba == 1 ? s.Bb : s.Ba;  // a batch of 1 (or a rank-2 operand) is shared
  return s;
}

DenseShape dense_shape(const Tensor& x, const Tensor& w) {
  cpu::require_float("dense", {&x, &w});
  STRATA_CHECK(x.rank() == 2 && w.rank() == 2 && x.dim(1) == w.dim(0), ShapeError,
               "dense: wants x [M, K] and w [K, N], got x " << x.shape_str() << " and w " << w.shape_str());
  return {x.dim(0), x.dim(1), w.dim(1)};
}

void check_dense_bias(const Tensor& bias, const Tensor& w) {
  cpu::require_float("dense", {&bias});
  STRATA_CHECK(bias.rank() == 1 && bias.dim(0) == w.dim(1), ShapeError,
               "dense: bias " << bias.shape_str() << " does not match w " << w.shape_str());
}

void check_dense_backward_dy(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu) {
  const int64_t M = x.dim(0), N = w.dim(1);
  STRATA_CHECK(dy.shape() == Shape({M, N}) && (!relu || y.shape() == dy.shape()), ShapeError,
               "dense_backward: dy " << dy.shape_str() << " (and y " << y.shape_str() << " with relu) must be [" << M
                                     << ", " << N << "] for x " << x.shape_str() << " and w " << w.shape_str());
}

LstmShape lstm_shape(const char* op, const Tensor& z) {
  cpu::require_float(op, {&z});
  STRATA_CHECK(z.rank() == 2 && z.dim(1) % 4 == 0 && z.dim(1) > 0, ShapeError,
               op << ": z must be [batch, 4 * units], got " << z.shape_str());
  return {z.dim(0), z.dim(1) / 4};
}

void check_lstm_c_prev(const char* op, const Tensor& c_prev, const LstmShape& s) {
  cpu::require_float(op, {&c_prev});
  STRATA_CHECK(c_prev.shape() == (Shape{s.batch, s.units}), ShapeError,
               op << ": c_prev must be [" << s.batch << ", " << s.units << "], got " << c_prev.shape_str());
}

void check_dropout_rate(float rate) {
  STRATA_CHECK(rate >= 0.0f && rate < 1.0f, InvalidArgument, "dropout: rate must be in [0, 1), got " << rate);
}

std::vector<bool> reduced_axes(const char* op, const Tensor& x, const std::vector<int>& axes) {
  std::vector<bool> flags(x.rank(), axes.empty());
  for (int a : axes) {
    const int ax = normalize_axis(a, x.rank(), op);
    STRATA_CHECK(!flags[ax], InvalidArgument, op << ": axis " << a << " is listed twice for " << x.shape_str());
    flags[ax] = true;
  }
  return flags;
}

ReduceLayout reduce_layout(const Tensor& x, const std::vector<bool>& flags, bool keepdims) {
  ReduceLayout l;
  for (int j = 0; j < x.rank(); ++j) {
    if (flags[j]) {
      l.count *= x.shape()[j];
      if (keepdims) l.out_shape.push_back(1);
    } else {
      l.out_shape.push_back(x.shape()[j]);
    }
  }
  // Coalesce: drop unit axes, merge neighbours of the same kind.
  std::vector<int64_t> sizes;
  std::vector<bool> kinds;
  for (int j = 0; j < x.rank(); ++j) {
    if (x.shape()[j] == 1) continue;
    if (!kinds.empty() && kinds.back() == flags[j]) {
      sizes.back() *= x.shape()[j];
    } else {
      sizes.push_back(x.shape()[j]);
      kinds.push_back(flags[j]);
    }
  }
  for (int g = static_cast<int>(sizes.size()) - 1; g >= 0; --g) {
    if (!kinds[g]) continue;
    ReduceStep st;
    for (int j = 0; j < g; ++j) st.outer *= sizes[j];
    st.n = sizes[g];
    for (int j = g + 1; j < static_cast<int>(sizes.size()); ++j) st.inner *= sizes[j];
    l.steps.push_back(st);
    sizes.erase(sizes.begin() + g);
    kinds.erase(kinds.begin() + g);
  }
  return l;
}

ArgmaxShape argmax_shape(const Tensor& x, int axis) {
  ArgmaxShape s;
  s.axis = normalize_axis(axis, x.rank(), "argmax");
  s.out_shape = x.shape();
  s.out_shape.erase(s.out_shape.begin() + s.axis);
  STRATA_CHECK(shape_numel(s.out_shape) == 0 || x.shape()[s.axis] > 0, InvalidArgument,
               "argmax: axis " << axis << " of " << x.shape_str() << " is empty");
  return s;
}

void check_empty_reduction(const char* op, const Tensor& x, bool is_max) {
  STRATA_CHECK(!is_max, InvalidArgument, op << ": cannot reduce over an empty axis of " << x.shape_str());
}

void check_broadcast_to(const Tensor& x, const Shape& shape) {
  const bool fits = shape.size() >= x.shape().size() && broadcast_shapes(x.shape(), shape, "broadcast_to") == shape;
  STRATA_CHECK(fits, ShapeError, "broadcast_to: cannot broadcast " << x.shape_str() << " to " << shape_str(shape));
}

void throw_broadcast_dtype(const Tensor& x) {
  STRATA_THROW(InvalidArgument, "broadcast_to: unsupported dtype " << dtype_name(x.dtype()));
}

std::vector<bool> sum_to_shape_axes(const Tensor& x, const Shape& shape) {
  const bool fits = shape.size() <= x.shape().size() && broadcast_shapes(shape, x.shape(), "sum_to_shape") == x.shape();
  STRATA_CHECK(fits, ShapeError, "sum_to_shape: " << x.shape_str() << " is not a broadcast of " << shape_str(shape));
  const int lead = x.rank() - static_cast<int>(shape.size());
  std::vector<bool> flags(x.rank(), false);
  for (int j = 0; j < x.rank(); ++j) flags[j] = j < lead || (shape[j - lead] == 1 && x.shape()[j] != 1);
  return flags;
}

void require_tensors(const char* op, const std::vector<Tensor>& xs, const char* verb) {
  STRATA_CHECK(!xs.empty(), InvalidArgument, op << ": no tensors to " << verb);
}

void require_index_dtype(const char* op, const Tensor& indices) {
  STRATA_CHECK(indices.dtype() == DType::kInt32 || indices.dtype() == DType::kInt64, InvalidArgument,
               op << ": indices must be int32 or int64, got " << dtype_name(indices.dtype()) << indices.shape_str());
}

ConcatShape concat_shape(const std::vector<Tensor>& xs, int axis) {
  const Tensor& first = xs[0];
  ConcatShape s;
  s.axis = normalize_axis(axis, first.rank(), "concat");
  const int ax = s.axis;
  s.out_shape = first.shape();
  s.out_shape[ax] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    STRATA_CHECK(x.dtype() == first.dtype(), InvalidArgument,
                 "concat: tensor " << i << " holds " << dtype_name(x.dtype()) << ", tensor 0 holds "
                                   << dtype_name(first.dtype()));
    bool fits = x.rank() == first.rank();
    for (int j = 0; fits && j < x.rank(); ++j) fits = j == ax || x.shape()[j] == first.shape()[j];
    STRATA_CHECK(fits, ShapeError,
                 "concat: along axis " << axis << ", tensor " << i << " " << x.shape_str() << " does not fit tensor 0 "
                                       << first.shape_str());
    s.out_shape[ax] += x.shape()[ax];
  }
  return s;
}

StackViews stack_views(const std::vector<Tensor>& xs, int axis) {
  StackViews s;
  s.axis = normalize_axis(axis, xs[0].rank() + 1, "stack");
  s.views.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    STRATA_CHECK(xs[i].shape() == xs[0].shape(), ShapeError,
                 "stack: tensor " << i << " " << xs[i].shape_str() << " differs from tensor 0 " << xs[0].shape_str());
    Shape shape = xs[i].shape();
    shape.insert(shape.begin() + s.axis, 1);
    s.views.push_back(xs[i].reshape(shape));
  }
  return s;
}

SliceShape slice_shape(const Tensor& x, int axis, int64_t start, int64_t end) {
  SliceShape s;
  s.axis = normalize_axis(axis, x.rank(), "slice_axis");
  s.dim = x.shape()[s.axis];
  STRATA_CHECK(
      0 <= start && start <= end && end <= s.dim, InvalidArgument,
      "slice_axis: range [" << start << ", " << end << ") is outside axis " << axis << " of " << x.shape_str());
  s.out_shape = x.shape();
  s.out_shape[s.axis] = end - start;
  return s;
}

Shape gather_shape(const Tensor& params, const Tensor& indices) {
  require_index_dtype("gather", indices);
  STRATA_CHECK(params.rank() >= 1, ShapeError, "gather: params must have rank >= 1, got " << params.shape_str());
  Shape out_shape = indices.shape();
  out_shape.insert(out_shape.end(), params.shape().begin() + 1, params.shape().end());
  return out_shape;
}

Shape scatter_add_shape(const Tensor& indices, const Tensor& updates, int64_t num_rows) {
  STRATA_CHECK(num_rows >= 0, InvalidArgument, "scatter_add: num_rows " << num_rows << " is negative");
  Shape out_shape{num_rows};
  const size_t index_rank = std::min(indices.shape().size(), updates.shape().size());
  out_shape.insert(out_shape.end(), updates.shape().begin() + static_cast<std::ptrdiff_t>(index_rank),
                   updates.shape().end());
  return out_shape;
}

Shape scatter_add_row_shape(const Tensor& out, const Tensor& indices, const Tensor& updates) {
  require_index_dtype("scatter_add", indices);
  cpu::require_float("scatter_add", {&updates, &out});
  const Shape& is = indices.shape();
  const Shape& us = updates.shape();
  STRATA_CHECK(
      us.size() >= is.size() && std::equal(is.begin(), is.end(), us.begin()), ShapeError,
      "scatter_add: updates " << updates.shape_str() << " must start with the indices' shape " << indices.shape_str());
  Shape row_shape(us.begin() + static_cast<std::ptrdiff_t>(is.size()), us.end());
  STRATA_CHECK(
      out.rank() >= 1 && Shape(out.shape().begin() + 1, out.shape().end()) == row_shape, ShapeError,
      "scatter_add: into " << out.shape_str() << ", whose rows are not the updates' rows " << shape_str(row_shape));
  return row_shape;
}

Shape one_hot_shape(const Tensor& indices, int64_t depth) {
  require_index_dtype("one_hot", indices);
  STRATA_CHECK(depth >= 0, InvalidArgument, "one_hot: depth " << depth << " is negative");
  Shape out_shape = indices.shape();
  out_shape.push_back(depth);
  return out_shape;
}

ConvShape conv_shape(const char* op, const Shape& x, const Shape& w, const Conv2DParams& p) {
  STRATA_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1, InvalidArgument,
               op << ": strides and dilations must be >= 1, got strides (" << p.stride_h << ", " << p.stride_w
                  << ") and dilations (" << p.dilation_h << ", " << p.dilation_w << ")");
  STRATA_CHECK(x.size() == 4, ShapeError, op << ": input must be [N, H, W, C], got " << shape_str(x));
  STRATA_CHECK(w.size() == 4, ShapeError, op << ": kernel must be [kh, kw, in, out], got " << shape_str(w));
  STRATA_CHECK(x[3] == w[2], ShapeError,
               op << ": input " << shape_str(x) << " has " << x[3] << " channels but kernel " << shape_str(w)
                  << " expects " << w[2]);
  ConvShape g;
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.kh = w[0], g.kw = w[1], g.f = w[3];
  STRATA_CHECK(g.kh >= 1 && g.kw >= 1, ShapeError, op << ": kernel " << shape_str(w) << " has an empty window");
  const bool fits_h =
      cpu::window_geometry(g.h, g.kh, p.stride_h, p.dilation_h, p.padding, g.oh, g.pad_top, g.pad_bottom);
  const bool fits_w =
      cpu::window_geometry(g.w, g.kw, p.stride_w, p.dilation_w, p.padding, g.ow, g.pad_left, g.pad_right);
  STRATA_CHECK(fits_h && fits_w, ShapeError,
               op << ": kernel " << shape_str(w) << " with dilations (" << p.dilation_h << ", " << p.dilation_w
                  << ") does not fit input " << shape_str(x) << " with VALID padding");
  return g;
}

void check_conv_dy(const char* op, const Tensor& dy, const ConvShape& g, const Shape& x_shape, const Shape& w_shape) {
  STRATA_CHECK(dy.shape() == g.y_shape(), ShapeError,
               op << ": output gradient " << dy.shape_str() << " does not match the output " << shape_str(g.y_shape())
                  << " of input " << shape_str(x_shape) << " and kernel " << shape_str(w_shape));
}

PoolShape pool_shape(const char* op, const Shape& x, const Pool2DParams& p) {
  STRATA_CHECK(p.pool_h >= 1 && p.pool_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1, InvalidArgument,
               op << ": pool size and strides must be >= 1, got pool (" << p.pool_h << ", " << p.pool_w
                  << ") and strides (" << p.stride_h << ", " << p.stride_w << ")");
  STRATA_CHECK(x.size() == 4, ShapeError, op << ": input must be [N, H, W, C], got " << shape_str(x));
  PoolShape g;
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  const bool fits_h = cpu::window_geometry(g.h, p.pool_h, p.stride_h, 1, p.padding, g.oh, g.pad_top, g.pad_bottom);
  const bool fits_w = cpu::window_geometry(g.w, p.pool_w, p.stride_w, 1, p.padding, g.ow, g.pad_left, g.pad_right);
  STRATA_CHECK(fits_h && fits_w, ShapeError,
               op << ": pool (" << p.pool_h << ", " << p.pool_w << ") does not fit input " << shape_str(x)
                  << " with VALID padding");
  return g;
}

void check_pool_dy(const char* op, const Tensor& dy, const PoolShape& g, const Shape& x_shape) {
  STRATA_CHECK(dy.shape() == g.y_shape(), ShapeError,
               op << ": output gradient " << dy.shape_str() << " does not match the output " << shape_str(g.y_shape())
                  << " of input " << shape_str(x_shape));
}

void check_pool_workspace(const char* op, const Tensor& workspace, size_t bytes, const Shape& x_shape) {
  STRATA_CHECK(workspace.nbytes() == bytes, InvalidArgument,
               op << ": workspace of " << workspace.nbytes() << " bytes is not the " << bytes
                  << " bytes max_pool2d made for input " << shape_str(x_shape));
}

}  // namespace strata::kernels
