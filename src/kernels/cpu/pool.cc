// 2-D max and average pooling on the CPU through oneDNN, forward and backward, NHWC.
//
// Max pooling returns oneDNN's workspace (where each maximum came from) as an opaque uint8 tensor,
// so the backward pass routes each gradient to its argmax without searching again. Padding is
// VALID or SAME with TensorFlow's rule (see window_geometry); padded cells never win a max, and
// average pooling divides by the number of cells inside the input (Keras's SAME, oneDNN's
// pooling_avg_exclude_padding). Tensors stay NHWC: oneDNN's jit pooling reads it directly.
//
// Thread-safety: safe to call concurrently (see dnnl_util.h).
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernel_checks.h"
#include "kernels/kernels.h"

namespace strata::kernels {

namespace {

using cpu::CacheKey;
using dnnl::memory;
using tag = memory::format_tag;

// Sizes and padding: kernel_checks.h's, whose checks and messages the CUDA kernels share.
using PoolGeometry = PoolShape;

PoolGeometry pool_geometry(const char* op, const Shape& x, const Pool2DParams& p) { return pool_shape(op, x, p); }

CacheKey pool_key(const char* op, const PoolGeometry& g, const Pool2DParams& p) {
  CacheKey key(op);
  key << g.n << g.h << g.w << g.c << p.pool_h << p.pool_w << p.stride_h << p.stride_w << g.pad_top << g.pad_bottom
      << g.pad_left << g.pad_right;
  return key;
}

memory::desc x_desc(const PoolGeometry& g) { return cpu::f32_desc({g.n, g.c, g.h, g.w}, tag::nhwc); }
memory::desc y_desc(const PoolGeometry& g) { return cpu::f32_desc({g.n, g.c, g.oh, g.ow}, tag::nhwc); }

dnnl::pooling_forward::primitive_desc forward_pd(const PoolGeometry& g, const Pool2DParams& p, dnnl::algorithm alg) {
  return dnnl::pooling_forward::primitive_desc({dnnl::prop_kind::forward_training,
                                                alg,
                                                x_desc(g),
                                                y_desc(g),
                                                {p.stride_h, p.stride_w},
                                                {p.pool_h, p.pool_w},
                                                {g.pad_top, g.pad_left},
                                                {g.pad_bottom, g.pad_right}},
                                               cpu::default_attr(), cpu::dnnl_engine());
}

struct ForwardEntry {
  dnnl::pooling_forward::primitive_desc pd;
  dnnl::pooling_forward prim;
};
struct BackwardEntry {
  dnnl::pooling_backward::primitive_desc pd;
  dnnl::pooling_backward prim;
};

std::shared_ptr<const ForwardEntry> forward_entry(const char* op, const PoolGeometry& g, const Pool2DParams& p,
                                                  dnnl::algorithm alg) {
  return cpu::cached<ForwardEntry>(pool_key(op, g, p), [&] {
    return cpu::dnnl_call(op, [&] {
      auto pd = forward_pd(g, p, alg);
      return std::make_shared<const ForwardEntry>(ForwardEntry{pd, dnnl::pooling_forward(pd)});
    });
  });
}

std::shared_ptr<const BackwardEntry> backward_entry(const char* op, const PoolGeometry& g, const Pool2DParams& p,
                                                    dnnl::algorithm alg) {
  return cpu::cached<BackwardEntry>(pool_key(op, g, p), [&] {
    return cpu::dnnl_call(op, [&] {
      const auto hint = forward_pd(g, p, alg);
      dnnl::pooling_backward::primitive_desc pd({alg,
                                                 x_desc(g),
                                                 y_desc(g),
                                                 {p.stride_h, p.stride_w},
                                                 {p.pool_h, p.pool_w},
                                                 {g.pad_top, g.pad_left},
                                                 {g.pad_bottom, g.pad_right}},
                                                cpu::default_attr(), cpu::dnnl_engine(), hint);
      return std::make_shared<const BackwardEntry>(BackwardEntry{pd, dnnl::pooling_backward(pd)});
    });
  });
}

// The part both backward passes share: checks dy against the pooling of x_shape and allocates dx.
// Returns false when dx is already complete (empty, or zeros because dy is empty).
bool begin_backward(const char* op, const Tensor& dy, const Shape& x_shape, const Pool2DParams& p, PoolGeometry& g,
                    Tensor& dx) {
  cpu::require_host(op, {&dy});
  cpu::require_float(op, {&dy});
  g = pool_geometry(op, x_shape, p);
  check_pool_dy(op, dy, g, x_shape);
  dx = Tensor::empty(x_shape);
  if (dx.numel() == 0) return false;
  if (dy.numel() == 0) {
    dx.fill_(0.0);
    return false;
  }
  return true;
}

}  // namespace

MaxPoolResult max_pool2d(const Tensor& x, const Pool2DParams& p) {
  const char* op = "max_pool2d";
  if (on_cuda(op, {&x})) STRATA_CUDA_KERNEL(return cuda::max_pool2d(x, p));
  cpu::require_host(op, {&x});
  cpu::require_float(op, {&x});
  const PoolGeometry g = pool_geometry(op, x.shape(), p);
  MaxPoolResult r;
  r.y = Tensor::empty(g.y_shape());
  if (r.y.numel() == 0) {
    r.workspace = Tensor::empty({0}, DType::kUInt8);
    return r;
  }
  auto entry = forward_entry(op, g, p, dnnl::algorithm::pooling_max);
  const memory::desc ws_desc = entry->pd.workspace_desc();
  r.workspace = Tensor::empty({static_cast<int64_t>(ws_desc.get_size())}, DType::kUInt8);
  cpu::execute(op, entry->prim, entry->pd,
               {{DNNL_ARG_SRC, cpu::wrap(x_desc(g), x)},
                {DNNL_ARG_DST, cpu::wrap(y_desc(g), r.y)},
                {DNNL_ARG_WORKSPACE, cpu::wrap(ws_desc, r.workspace)}});
  return r;
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& workspace, const Shape& x_shape, const Pool2DParams& p) {
  const char* op = "max_pool2d_backward";
  if (on_cuda(op, {&dy, &workspace})) STRATA_CUDA_KERNEL(return cuda::max_pool2d_backward(dy, workspace, x_shape, p));
  cpu::require_host(op, {&workspace});
  check_dtype(op, workspace, DType::kUInt8);
  PoolGeometry g;
  Tensor dx;
  if (!begin_backward(op, dy, x_shape, p, g, dx)) return dx;
  auto entry = backward_entry(op, g, p, dnnl::algorithm::pooling_max);
  const memory::desc ws_desc = entry->pd.workspace_desc();
  check_pool_workspace(op, workspace, ws_desc.get_size(), x_shape);
  cpu::execute(op, entry->prim, entry->pd,
               {{DNNL_ARG_DIFF_DST, cpu::wrap(y_desc(g), dy)},
                {DNNL_ARG_WORKSPACE, cpu::wrap(ws_desc, workspace)},
                {DNNL_ARG_DIFF_SRC, cpu::wrap(x_desc(g), dx)}});
  return dx;
}

Tensor avg_pool2d(const Tensor& x, const Pool2DParams& p) {
  const char* op = "avg_pool2d";
  if (on_cuda(op, {&x})) STRATA_CUDA_KERNEL(return cuda::avg_pool2d(x, p));
  cpu::require_host(op, {&x});
  cpu::require_float(op, {&x});
  const PoolGeometry g = pool_geometry(op, x.shape(), p);
  Tensor y = Tensor::empty(g.y_shape());
  if (y.numel() == 0) return y;
  auto entry = forward_entry(op, g, p, dnnl::algorithm::pooling_avg_exclude_padding);
  cpu::execute(op, entry->prim, entry->pd,
               {{DNNL_ARG_SRC, cpu::wrap(x_desc(g), x)}, {DNNL_ARG_DST, cpu::wrap(y_desc(g), y)}});
  return y;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2DParams& p) {
  const char* op = "avg_pool2d_backward";
  if (on_cuda(op, {&dy})) STRATA_CUDA_KERNEL(return cuda::avg_pool2d_backward(dy, x_shape, p));
  PoolGeometry g;
  Tensor dx;
  if (!begin_backward(op, dy, x_shape, p, g, dx)) return dx;
  auto entry = backward_entry(op, g, p, dnnl::algorithm::pooling_avg_exclude_padding);
  cpu::execute(op, entry->prim, entry->pd,
               {{DNNL_ARG_DIFF_DST, cpu::wrap(y_desc(g), dy)}, {DNNL_ARG_DIFF_SRC, cpu::wrap(x_desc(g), dx)}});
  return dx;
}

}  // namespace strata::kernels
