// 2-D convolution on the CPU through oneDNN: forward (with optional bias), the gradient with
// respect to the input, and the gradients with respect to the kernel and the bias.
//
// Public layouts are NHWC activations and HWIO kernels (Keras's). Padding SAME follows TensorFlow:
// total = max((ceil(in/s) - 1) * s + (k - 1) * d + 1 - in, 0), before = total / 2, after = the
// rest (oneDNN takes the two sides separately). oneDNN's dilation counts the gaps (d - 1).
//
// Formats, by measurement (oneDNN 2.6 on AVX-512, N=64, 1 and 2 threads, 1 to 64 channels,
// strides 1 and 2; see bench/kernels_bench): activations stay NHWC, which the AVX-512 kernels
// (brgconv forward, jit backward) read directly, so no feature map is reordered; kernels are
// format_tag::any (a blocked layout) and reordered each call, which is cheap (kh*kw*C*F floats).
// With every format plain oneDNN falls back to its gemm convolution (2-3x slower), and blocked
// activations cost reorders of whole feature maps. Two exceptions, both for convolutions with few
// input channels (an image net's first layer):
//  - weight gradients with C <= 3 on more than one thread: oneDNN's NHWC kernel barely uses a second
//    thread there, so dy is reordered to a blocked layout (2.5x faster at 2 threads when measured
//    first, 1.2x in a later run). On one thread the two take the same time alone, but the reorder is
//    a whole feature map more memory traffic: with two MirroredStrategy replicas of one thread each
//    running side by side, NHWC trained the CNN bench 3-10% faster in 6 runs out of 6. (An im2col +
//    sgemm weight gradient was tried too: 20% faster at C=1 stride 1, slower everywhere else.)
//  - input gradients with C <= 4: every oneDNN kernel is slow (1.8-4 ms for the N=64 28x28x1->32
//    case), so strata computes dx itself as one sgemm, planes[kh*kw*C, pixels] = w[kh*kw*C, F] .
//    dy[pixels, F]^T, and a col2im that adds each plane into dx shifted by its tap: 5-6x faster at
//    C=1, 1.1-1.8x at C=2..4, even at C=6 (so the threshold stops at 4).
//
// Mixed precision (kernels/compute_precision.h): under ComputePrecision::kBFloat16 the primitives are built with
// bf16 inputs (x and the kernel forward, dy and the kernel for dx, x and dy for dw) and float32 outputs, and the
// float32 tensors are rounded to bf16 by the same input_in_format reorders that pick the layouts. The sgemm + col2im
// input gradient (C <= 4) stays float32: it is the first layer's, which a model rarely asks for.
//
// Thread-safety: safe to call concurrently (see dnnl_util.h).
#include <algorithm>
#include <cstring>

#include "kernels/compute_precision.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernel_checks.h"
#include "kernels/kernels.h"
#include "strata/threading.h"

namespace strata::kernels {

namespace {

using cpu::CacheKey;
using dnnl::memory;
using tag = memory::format_tag;

// Input gradients of convolutions with at most this many input channels use sgemm + col2im.
constexpr int64_t kCol2ImMaxChannels = 4;
// Weight gradients of convolutions with at most this many input channels use blocked activations.
constexpr int64_t kBlockedWeightGradMaxChannels = 3;
// The sgemm + col2im path works on groups of images whose planes fit in this many bytes.
constexpr int64_t kCol2ImChunkBytes = int64_t{16} << 20;

// Sizes and padding (kernel_checks.h), with oneDNN's views of them.
struct ConvGeometry : ConvShape {
  memory::dims x_dims() const { return {n, c, h, w}; }
  memory::dims w_dims() const { return {f, c, kh, kw}; }
  memory::dims y_dims() const { return {n, f, oh, ow}; }
};

// Checks x and the kernel shape and computes the geometry.
ConvGeometry conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2DParams& p) {
  ConvGeometry g;
  static_cast<ConvShape&>(g) = conv_shape(op, x, w, p);
  return g;
}

bool is_empty(const ConvGeometry& g) { return g.n == 0 || g.c == 0 || g.f == 0 || g.h == 0 || g.w == 0; }

// The data types of x, the kernel and y (or their gradients) a primitive is built with.
struct ConvTypes {
  memory::data_type x = memory::data_type::f32, w = memory::data_type::f32, y = memory::data_type::f32;
};
constexpr memory::data_type kBf16 = memory::data_type::bf16;

bool bf16_compute() { return compute_precision() == ComputePrecision::kBFloat16; }

CacheKey conv_key(const char* op, const ConvGeometry& g, const Conv2DParams& p, bool with_bias) {
  CacheKey key(op);
  key << static_cast<int64_t>(bf16_compute());
  key << g.n << g.h << g.w << g.c << g.kh << g.kw << g.f << p.stride_h << p.stride_w << p.dilation_h << p.dilation_w
      << p.fused_relu
      << g.pad_top << g.pad_bottom << g.pad_left << g.pad_right << static_cast<int64_t>(with_bias);
  return key;
}

// The oneDNN descriptions of one convolution.
struct ConvDescs {
  memory::desc x, w, b, y;
  memory::dims strides, dilates, pad_l, pad_r;
};

// Plain NHWC activations and HWIO kernels unless told otherwise (format_tag::any lets oneDNN choose).
ConvDescs conv_descs(const ConvGeometry& g, const Conv2DParams& p, bool with_bias, tag weights_tag = tag::hwio,
                     tag activations_tag = tag::nhwc, ConvTypes types = {}) {
  ConvDescs d;
  d.x = memory::desc(g.x_dims(), types.x, activations_tag);
  d.w = memory::desc(g.w_dims(), types.w, weights_tag);
  if (with_bias) d.b = cpu::f32_desc({g.f}, tag::x);
  d.y = memory::desc(g.y_dims(), types.y, activations_tag);
  d.strides = {p.stride_h, p.stride_w};
  d.dilates = {p.dilation_h - 1, p.dilation_w - 1};
  d.pad_l = {g.pad_top, g.pad_left};
  d.pad_r = {g.pad_bottom, g.pad_right};
  return d;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& d, bool fused_relu = false) {
  dnnl::primitive_attr attr = cpu::default_attr();
  if (fused_relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return dnnl::convolution_forward::primitive_desc(
      {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, d.x, d.w, d.b, d.y, d.strides, d.dilates,
       d.pad_l, d.pad_r},
      attr, cpu::dnnl_engine());
}

struct ForwardEntry {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
};
struct BackwardDataEntry {
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data prim;
};
struct BackwardWeightsEntry {
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights prim;
};

void check_sgemm(const char* op, dnnl_status_t st, const Tensor& a, const Tensor& b) {
  STRATA_CHECK(st == dnnl_success, Error,
               op << ": oneDNN sgemm failed (status " << static_cast<int>(st) << ") for " << a.shape_str() << " and "
                  << b.shape_str());
}

// dx = col2im(w . dy^T) for convolutions with few input channels (see the file comment).
// planes[q, pixel] for tap q = (i, j, c) holds sum_f w[i, j, c, f] * dy[pixel, f]; dx[n, ih, iw, c]
// is the sum over the taps and output pixels that read it. Works on groups of whole images so the
// planes stay within kCol2ImChunkBytes; images of a group are added up in parallel.
void backward_input_col2im(const Tensor& dy, const Tensor& w, const ConvGeometry& g, const Conv2DParams& p,
                           Tensor& dx) {
  const int64_t taps = g.kh * g.kw * g.c;
  const int64_t pixels = g.oh * g.ow;  // per image
  const int64_t group = std::clamp<int64_t>(kCol2ImChunkBytes / (taps * pixels * 4), 1, g.n);
  float* planes = static_cast<float*>(cpu::thread_scratch(1, static_cast<size_t>(taps * pixels * group) * 4));
  const float* pw = w.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  for (int64_t n0 = 0; n0 < g.n; n0 += group) {
    const int64_t images = std::min(group, g.n - n0);
    const int64_t cols = images * pixels;
    cpu::sync_dnnl_threads();
    check_sgemm("conv2d_backward_input",
                dnnl_sgemm('N', 'T', taps, cols, g.f, 1.0f, pw, g.f, pdy + n0 * pixels * g.f, g.f, 0.0f, planes, cols),
                dy, w);
    parallel_for(0, images, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        float* img = pdx + (n0 + k) * g.h * g.w * g.c;
        std::memset(img, 0, sizeof(float) * g.h * g.w * g.c);
        for (int64_t i = 0; i < g.kh; ++i) {
          for (int64_t j = 0; j < g.kw; ++j) {
            // Output columns whose input column iw = ow * stride - pad + j * dilation is inside.
            const int64_t shift_w = j * p.dilation_w - g.pad_left;
            const int64_t ow_lo = shift_w >= 0 ? 0 : (-shift_w + p.stride_w - 1) / p.stride_w;
            const int64_t last = g.w - 1 - shift_w;  // the last input column minus the shift
            const int64_t ow_hi = last < 0 ? 0 : std::min(g.ow, last / p.stride_w + 1);  // exclusive
            if (ow_lo >= ow_hi) continue;
            for (int64_t c = 0; c < g.c; ++c) {
              const float* plane = planes + ((i * g.kw + j) * g.c + c) * cols + k * pixels;
              for (int64_t oh = 0; oh < g.oh; ++oh) {
                const int64_t ih = oh * p.stride_h - g.pad_top + i * p.dilation_h;
                if (ih < 0 || ih >= g.h) continue;
                const float* src = plane + oh * g.ow;
                float* dst = img + (ih * g.w + ow_lo * p.stride_w + shift_w) * g.c + c;
                const int64_t step = p.stride_w * g.c;
                if (step == 1) {
                  for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow - ow_lo] += src[ow];
                } else {
                  for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[(ow - ow_lo) * step] += src[ow];
                }
              }
            }
          }
        }
      }
    });
  }
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2DParams& p) {
  const char* op = "conv2d";
  const bool with_bias = bias.defined();
  if (with_bias ? on_cuda(op, {&x, &w, &bias}) : on_cuda(op, {&x, &w}))
    STRATA_CUDA_KERNEL(return cuda::conv2d(x, w, bias, p));
  if (with_bias) {
    cpu::require_host(op, {&x, &w, &bias});
    cpu::require_float(op, {&x, &w, &bias});
  } else {
    cpu::require_host(op, {&x, &w});
    cpu::require_float(op, {&x, &w});
  }
  const ConvGeometry g = conv_geometry(op, x.shape(), w.shape(), p);
  if (with_bias) {
    STRATA_CHECK(bias.rank() == 1 && bias.dim(0) == g.f, ShapeError,
                 op << ": bias " << bias.shape_str() << " does not match kernel " << w.shape_str() << " (wants [" << g.f
                    << "])");
  }
  Tensor y = Tensor::empty(g.y_shape());
  if (y.numel() == 0) return y;
  if (is_empty(g)) {  // no input channels: the sum is empty
    if (with_bias) {
      Tensor b = kernels::broadcast_to(bias, g.y_shape()).clone();
      return p.fused_relu ? kernels::unary(UnaryOp::kRelu, b) : b;
    }
    y.fill_(0.0);
    return y;
  }

  auto entry = cpu::cached<ForwardEntry>(conv_key(op, g, p, with_bias), [&] {
    return cpu::dnnl_call(op, [&] {
      const ConvTypes types = bf16_compute() ? ConvTypes{.x = kBf16, .w = kBf16} : ConvTypes{};
      auto pd = forward_pd(conv_descs(g, p, with_bias, tag::any, tag::nhwc, types), p.fused_relu);
      return std::make_shared<const ForwardEntry>(ForwardEntry{pd, dnnl::convolution_forward(pd)});
    });
  });
  const ConvDescs d = conv_descs(g, p, with_bias);
  const memory xm = cpu::input_in_format(op, entry->pd.src_desc(), cpu::wrap(d.x, x), 1);
  const memory wm = cpu::input_in_format(op, entry->pd.weights_desc(), cpu::wrap(d.w, w), 2);
  const memory y_user = cpu::wrap(d.y, y);
  const memory ym = cpu::output_in_format(entry->pd.dst_desc(), y_user, 3);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}};
  if (with_bias) args.emplace(DNNL_ARG_BIAS, cpu::wrap(d.b, bias));
  cpu::execute(op, entry->prim, entry->pd, std::move(args));
  cpu::output_to_user(op, ym, y_user);
  return y;
}

Tensor conv2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, const Conv2DParams& p) {
  const char* op = "conv2d_backward_input";
  if (on_cuda(op, {&dy, &w})) STRATA_CUDA_KERNEL(return cuda::conv2d_backward_input(dy, w, x_shape, p));
  cpu::require_host(op, {&dy, &w});
  cpu::require_float(op, {&dy, &w});
  const ConvGeometry g = conv_geometry(op, x_shape, w.shape(), p);
  check_conv_dy(op, dy, g, x_shape, w.shape());
  Tensor dx = Tensor::empty(x_shape);
  if (dx.numel() == 0) return dx;
  if (is_empty(g)) {
    dx.fill_(0.0);
    return dx;
  }

  if (g.c <= kCol2ImMaxChannels) {
    backward_input_col2im(dy, w, g, p, dx);
    return dx;
  }
  auto entry = cpu::cached<BackwardDataEntry>(conv_key(op, g, p, false), [&] {
    return cpu::dnnl_call(op, [&] {
      const bool bf16 = bf16_compute();
      const ConvDescs d = conv_descs(g, p, false, tag::any, tag::nhwc,
                                     bf16 ? ConvTypes{.w = kBf16, .y = kBf16} : ConvTypes{});
      const auto hint = forward_pd(conv_descs(g, p, false, tag::any, tag::nhwc,
                                              bf16 ? ConvTypes{.x = kBf16, .w = kBf16} : ConvTypes{}));
      dnnl::convolution_backward_data::primitive_desc pd(
          {dnnl::algorithm::convolution_direct, d.x, d.w, d.y, d.strides, d.dilates, d.pad_l, d.pad_r},
          cpu::default_attr(), cpu::dnnl_engine(), hint);
      return std::make_shared<const BackwardDataEntry>(BackwardDataEntry{pd, dnnl::convolution_backward_data(pd)});
    });
  });
  const ConvDescs d = conv_descs(g, p, false);
  const memory dym = cpu::input_in_format(op, entry->pd.diff_dst_desc(), cpu::wrap(d.y, dy), 1);
  const memory wm = cpu::input_in_format(op, entry->pd.weights_desc(), cpu::wrap(d.w, w), 2);
  const memory dx_user = cpu::wrap(d.x, dx);
  const memory dxm = cpu::output_in_format(entry->pd.diff_src_desc(), dx_user, 3);
  cpu::execute(op, entry->prim, entry->pd,
               {{DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dxm}});
  cpu::output_to_user(op, dxm, dx_user);
  return dx;
}

Conv2DWeightGrads conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Shape& w_shape, bool with_bias,
                                          const Conv2DParams& p) {
  const char* op = "conv2d_backward_weights";
  if (on_cuda(op, {&x, &dy})) STRATA_CUDA_KERNEL(return cuda::conv2d_backward_weights(x, dy, w_shape, with_bias, p));
  cpu::require_host(op, {&x, &dy});
  cpu::require_float(op, {&x, &dy});
  const ConvGeometry g = conv_geometry(op, x.shape(), w_shape, p);
  check_conv_dy(op, dy, g, x.shape(), w_shape);
  Conv2DWeightGrads grads;
  grads.dw = Tensor::empty(w_shape);
  if (with_bias) grads.db = Tensor::empty({g.f});
  if (grads.dw.numel() == 0 && !with_bias) return grads;
  if (is_empty(g) || dy.numel() == 0) {
    grads.dw.fill_(0.0);
    if (with_bias) grads.db = dy.numel() == 0 ? Tensor::zeros({g.f}) : kernels::sum(dy, {0, 1, 2});
    return grads;
  }
  const bool blocked_dy = g.c <= kBlockedWeightGradMaxChannels && num_threads() > 1;
  CacheKey key = conv_key(op, g, p, with_bias);
  key << static_cast<int64_t>(blocked_dy);
  auto entry = cpu::cached<BackwardWeightsEntry>(key, [&] {
    return cpu::dnnl_call(op, [&] {
      const tag activations = blocked_dy ? tag::any : tag::nhwc;
      const bool bf16 = bf16_compute();
      const ConvDescs d = conv_descs(g, p, with_bias, tag::any, activations,
                                     bf16 ? ConvTypes{.x = kBf16, .y = kBf16} : ConvTypes{});
      const auto hint = forward_pd(conv_descs(g, p, with_bias, tag::any, activations,
                                              bf16 ? ConvTypes{.x = kBf16, .w = kBf16} : ConvTypes{}));
      dnnl::convolution_backward_weights::primitive_desc pd(
          {dnnl::algorithm::convolution_direct, d.x, d.w, d.b, d.y, d.strides, d.dilates, d.pad_l, d.pad_r},
          cpu::default_attr(), cpu::dnnl_engine(), hint);
      return std::make_shared<const BackwardWeightsEntry>(
          BackwardWeightsEntry{pd, dnnl::convolution_backward_weights(pd)});
    });
  });
  const ConvDescs d = conv_descs(g, p, with_bias);
  const memory xm = cpu::input_in_format(op, entry->pd.src_desc(), cpu::wrap(d.x, x), 1);
  const memory dym = cpu::input_in_format(op, entry->pd.diff_dst_desc(), cpu::wrap(d.y, dy), 2);
  const memory dw_user = cpu::wrap(d.w, grads.dw);
  const memory dwm = cpu::output_in_format(entry->pd.diff_weights_desc(), dw_user, 3);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_DIFF_WEIGHTS, dwm}};
  if (with_bias) args.emplace(DNNL_ARG_DIFF_BIAS, cpu::wrap(d.b, grads.db));
  cpu::execute(op, entry->prim, entry->pd, std::move(args));
  cpu::output_to_user(op, dwm, dw_user);
  return grads;
}

}  // namespace strata::kernels
