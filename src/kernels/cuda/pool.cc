// 2-D max and average pooling on NVIDIA GPUs through cuDNN, forward and backward, NHWC, with the contracts of
// kernels.h (cuda_kernels.h). Padding is VALID or SAME by TensorFlow's rule (cpu::window_geometry, the CPU
// kernels' rule).
//
// Max pooling: cudnnPoolingBackward finds each window's maximum again from the forward's input and output, so the
// opaque workspace of max_pool2d is a uint8 tensor on the GPU holding both: x as cuDNN pooled it, then (at the next
// 256-byte boundary) y, which is also returned. x is stored padded with -inf on the sides SAME asks for, and cuDNN
// pools that copy unpadded: padded cells never win a max whether the padding is symmetric or not (cuDNN pads both
// sides alike). The backward computes the gradient of the padded copy and crops it. The mode is
// CUDNN_POOLING_MAX_DETERMINISTIC (CUDNN_POOLING_MAX should cuDNN refuse it), so the same inputs route the gradient
// the same way on every run. Where a window
// holds its maximum twice, which cell receives the gradient is cuDNN's choice as it is oneDNN's on the CPU
// (tests/cuda/conv_pool_bn_test.cc checks that each window's gradient is passed on once, ties or not).
// The workspace costs one more pass over x and y per call (and their memory until the backward has run).
// Average pooling divides by the window's cells inside the input (Keras's SAME): cuDNN's
// CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING with its own padding where that is symmetric; where TensorFlow pads one
// more cell at the end, the divisor depends on both sides, so dnn_kernels.cu's kernels run instead.
// Thread-safety: safe to call concurrently (per-thread cuDNN handles; no shared state).
#include <limits>

#include "core/cuda/cuda_context.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudnn_util.h"
#include "kernels/cuda/dnn_kernels.h"
#include "kernels/cuda/library_handles.h"
#include "kernels/kernel_checks.h"
#include "strata/error.h"

namespace strata::kernels::cuda {

namespace {

// Sizes and padding (kernel_checks.h), with the padding as cudnn_util.h's Pads.
struct PoolGeometry : PoolShape {
  Pads pads;
  Shape x_shape() const { return {n, h, w, c}; }
};

// The checks and geometry of the CPU kernel (kernels/kernel_checks.h: one code, one set of messages).
PoolGeometry pool_geometry(const char* op, const Shape& x, const Pool2DParams& p) {
  PoolGeometry g;
  static_cast<PoolShape&>(g) = pool_shape(op, x, p);
  g.pads = {g.pad_top, g.pad_bottom, g.pad_left, g.pad_right};
  return g;
}

// A cuDNN pooling of window p with padding (pad_h, pad_w) on both sides.
void describe_pooling(const PoolingDescriptor& d, const char* op, cudnnPoolingMode_t mode, const Pool2DParams& p,
                      int64_t pad_h, int64_t pad_w) {
  check_cudnn(
      cudnnSetPooling2dDescriptor(d.get(), mode, CUDNN_PROPAGATE_NAN, p.pool_h, p.pool_w, to_int(pad_h, op, "padding"),
                                  to_int(pad_w, op, "padding"), p.stride_h, p.stride_w),
      "cudnnSetPooling2dDescriptor");
}

// Throws unless cuDNN's output of pooling `x_desc` with `pool` is g's output.
void check_output(const char* op, const PoolingDescriptor& pool, const TensorDescriptor& x_desc,
                  const PoolGeometry& g) {
  int n = 0, c = 0, h = 0, w = 0;
  check_cudnn(cudnnGetPooling2dForwardOutputDim(pool.get(), x_desc.get(), &n, &c, &h, &w),
              "cudnnGetPooling2dForwardOutputDim");
  STRATA_CHECK(n == g.n && c == g.c && h == g.oh && w == g.ow, Error,
               op << ": internal error: cuDNN's output [" << n << ", " << h << ", " << w << ", " << c << "] is not "
                  << shape_str(g.y_shape()));
}

// Runs `call` with an unpadded max pooling of window p over x_desc: CUDNN_POOLING_MAX_DETERMINISTIC, or, should cuDNN
// refuse that mode for the shape, CUDNN_POOLING_MAX (the same maxima; the backward may then route ties either way).
template <class Call>
void run_max_pooling(const char* op, const Pool2DParams& p, const TensorDescriptor& x_desc, const PoolGeometry& g,
                     Call&& call) {
  PoolingDescriptor deterministic;
  describe_pooling(deterministic, op, CUDNN_POOLING_MAX_DETERMINISTIC, p, 0, 0);
  check_output(op, deterministic, x_desc, g);
  const cudnnStatus_t st = call(deterministic);
  if (st == CUDNN_STATUS_SUCCESS) return;
  if (!cudnn_refused(st)) check_cudnn(st, "max pooling (CUDNN_POOLING_MAX_DETERMINISTIC)");
  PoolingDescriptor plain;
  describe_pooling(plain, op, CUDNN_POOLING_MAX, p, 0, 0);
  check_cudnn(call(plain), "max pooling (CUDNN_POOLING_MAX)");
}

// ---------------------------------------------------------------- max pooling's workspace

// The workspace: x padded with -inf as cuDNN pooled it, then y at a 256-byte boundary.
struct MaxWorkspaceLayout {
  Shape padded_x;
  size_t y_offset = 0;  // bytes
  size_t bytes = 0;
};

MaxWorkspaceLayout max_workspace_layout(const PoolGeometry& g) {
  MaxWorkspaceLayout l;
  l.padded_x = padded_shape(g.x_shape(), g.pads);
  const size_t x_bytes = static_cast<size_t>(shape_numel(l.padded_x)) * sizeof(float);
  l.y_offset = (x_bytes + 255) / 256 * 256;
  l.bytes = l.y_offset + static_cast<size_t>(shape_numel(g.y_shape())) * sizeof(float);
  return l;
}

// The part both backward passes share, as on the CPU: checks dy against the pooling of x_shape and allocates dx.
// Returns false when dx is already complete (empty, or zeros because dy is empty).
bool begin_backward(const char* op, const Tensor& dy, const Shape& x_shape, const Pool2DParams& p, PoolGeometry& g,
                    Tensor& dx) {
  check_dtype(op, dy, DType::kFloat32);
  g = pool_geometry(op, x_shape, p);
  check_pool_dy(op, dy, g, x_shape);
  dx = Tensor::empty(x_shape, DType::kFloat32, dy.device());
  if (dx.numel() == 0) return false;
  if (dy.numel() == 0) {
    zero_fill(dx);
    return false;
  }
  return true;
}

AvgPoolShape avg_pool_shape(const PoolGeometry& g, const Pool2DParams& p) {
  AvgPoolShape s;
  s.n = g.n, s.h = g.h, s.w = g.w, s.c = g.c, s.oh = g.oh, s.ow = g.ow;
  s.pool_h = p.pool_h, s.pool_w = p.pool_w, s.stride_h = p.stride_h, s.stride_w = p.stride_w;
  s.pad_top = g.pads.top, s.pad_left = g.pads.left;
  return s;
}

}  // namespace

MaxPoolResult max_pool2d(const Tensor& x, const Pool2DParams& p) {
  const char* op = "max_pool2d";
  check_dtype(op, x, DType::kFloat32);
  const PoolGeometry g = pool_geometry(op, x.shape(), p);
  const int device = x.device().index;
  MaxPoolResult r;
  r.y = Tensor::empty(g.y_shape(), DType::kFloat32, x.device());
  if (r.y.numel() == 0) {
    r.workspace = Tensor::empty({0}, DType::kUInt8, x.device());
    return r;
  }
  const MaxWorkspaceLayout l = max_workspace_layout(g);
  r.workspace = Tensor::empty({static_cast<int64_t>(l.bytes)}, DType::kUInt8, x.device());
  uint8_t* ws = r.workspace.data<uint8_t>();
  float* xp = reinterpret_cast<float*>(ws);
  float* y = reinterpret_cast<float*>(ws + l.y_offset);
  cudaStream_t stream = detail::cuda::stream(device);
  if (g.pads.any()) {
    pad_nhwc(op, device, x.data<float>(), x.shape(), g.pads, -std::numeric_limits<float>::infinity(), xp);
  } else {
    detail::cuda::check(cudaMemcpyAsync(xp, x.data<float>(), x.nbytes(), cudaMemcpyDeviceToDevice, stream),
                        "cudaMemcpyAsync (max pool workspace)");
  }
  cudnnHandle_t handle = cudnn_handle(device);
  TensorDescriptor x_desc, y_desc;
  set_nhwc(x_desc, op, l.padded_x[0], l.padded_x[1], l.padded_x[2], l.padded_x[3]);
  set_nhwc(y_desc, op, g.n, g.oh, g.ow, g.c);
  const float one = 1.0f, zero = 0.0f;
  run_max_pooling(op, p, x_desc, g, [&](const PoolingDescriptor& pool) {
    return cudnnPoolingForward(handle, pool.get(), &one, x_desc.get(), xp, &zero, y_desc.get(), y);
  });
  detail::cuda::check(cudaMemcpyAsync(r.y.data<float>(), y, r.y.nbytes(), cudaMemcpyDeviceToDevice, stream),
                      "cudaMemcpyAsync (max pool output)");
  return r;
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& workspace, const Shape& x_shape, const Pool2DParams& p) {
  const char* op = "max_pool2d_backward";
  check_dtype(op, workspace, DType::kUInt8);
  PoolGeometry g;
  Tensor dx;
  if (!begin_backward(op, dy, x_shape, p, g, dx)) return dx;
  const MaxWorkspaceLayout l = max_workspace_layout(g);
  check_pool_workspace(op, workspace, l.bytes, x_shape);
  const int device = dy.device().index;
  const uint8_t* ws = workspace.data<uint8_t>();
  const float* xp = reinterpret_cast<const float*>(ws);
  const float* y = reinterpret_cast<const float*>(ws + l.y_offset);
  cudnnHandle_t handle = cudnn_handle(device);
  TensorDescriptor x_desc, y_desc;
  set_nhwc(x_desc, op, l.padded_x[0], l.padded_x[1], l.padded_x[2], l.padded_x[3]);
  set_nhwc(y_desc, op, g.n, g.oh, g.ow, g.c);
  Tensor dxp = g.pads.any() ? Tensor::empty(l.padded_x, DType::kFloat32, dy.device()) : dx;
  const float one = 1.0f, zero = 0.0f;
  run_max_pooling(op, p, x_desc, g, [&](const PoolingDescriptor& pool) {
    return cudnnPoolingBackward(handle, pool.get(), &one, y_desc.get(), y, y_desc.get(), dy.data<float>(), x_desc.get(),
                                xp, &zero, x_desc.get(), dxp.data<float>());
  });
  if (g.pads.any()) crop_nhwc(op, device, dxp.data<float>(), g.pads, x_shape, dx.data<float>());
  return dx;
}

Tensor avg_pool2d(const Tensor& x, const Pool2DParams& p) {
  const char* op = "avg_pool2d";
  check_dtype(op, x, DType::kFloat32);
  const PoolGeometry g = pool_geometry(op, x.shape(), p);
  const int device = x.device().index;
  Tensor y = Tensor::empty(g.y_shape(), DType::kFloat32, x.device());
  if (y.numel() == 0) return y;
  if (!g.pads.symmetric()) {
    detail::cuda::check(
        avg_pool_exclude_padding(avg_pool_shape(g, p), x.data<float>(), y.data<float>(), detail::cuda::stream(device)),
        "avg_pool_exclude_padding");
    return y;
  }
  cudnnHandle_t handle = cudnn_handle(device);
  TensorDescriptor x_desc, y_desc;
  set_nhwc(x_desc, op, g.n, g.h, g.w, g.c);
  set_nhwc(y_desc, op, g.n, g.oh, g.ow, g.c);
  PoolingDescriptor pool;
  describe_pooling(pool, op, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, p, g.pads.top, g.pads.left);
  check_output(op, pool, x_desc, g);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnPoolingForward(handle, pool.get(), &one, x_desc.get(), x.data<float>(), &zero, y_desc.get(),
                                  y.data<float>()),
              "cudnnPoolingForward (average)");
  return y;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2DParams& p) {
  const char* op = "avg_pool2d_backward";
  PoolGeometry g;
  Tensor dx;
  if (!begin_backward(op, dy, x_shape, p, g, dx)) return dx;
  const int device = dy.device().index;
  if (!g.pads.symmetric()) {
    detail::cuda::check(avg_pool_exclude_padding_backward(avg_pool_shape(g, p), dy.data<float>(), dx.data<float>(),
                                                          detail::cuda::stream(device)),
                        "avg_pool_exclude_padding_backward");
    return dx;
  }
  cudnnHandle_t handle = cudnn_handle(device);
  TensorDescriptor x_desc, y_desc;
  set_nhwc(x_desc, op, g.n, g.h, g.w, g.c);
  set_nhwc(y_desc, op, g.n, g.oh, g.ow, g.c);
  PoolingDescriptor pool;
  describe_pooling(pool, op, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, p, g.pads.top, g.pads.left);
  check_output(op, pool, x_desc, g);
  // An average's gradient does not depend on the forward's values, but cuDNN takes its x and y: dy stands in for
  // y (same shape), and an unfilled buffer of x's shape for x.
  const Tensor unused_x = Tensor::empty(x_shape, DType::kFloat32, dy.device());
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(
      cudnnPoolingBackward(handle, pool.get(), &one, y_desc.get(), dy.data<float>(), y_desc.get(), dy.data<float>(),
                           x_desc.get(), unused_x.data<float>(), &zero, x_desc.get(), dx.data<float>()),
      "cudnnPoolingBackward (average)");
  return dx;
}

}  // namespace strata::kernels::cuda
