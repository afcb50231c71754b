// 2-D convolution on NVIDIA GPUs through cuDNN's convolution API: forward with optional bias and relu, the input
// gradient, and the kernel and bias gradients, with the contracts of kernels.h (cuda_kernels.h).
//
// Layouts: activations stay NHWC (CUDNN_TENSOR_NHWC). cuDNN's NHWC filters are KRSC [F, kh, kw, C] and strata's
// kernels HWIO [kh, kw, C, F] (Keras's), so the forward and input-gradient passes read a KRSC copy of the kernel,
// and the kernel gradient comes out KRSC and is copied back to HWIO (cudnnTransformTensor between the two stride
// patterns; kh*kw*C*F floats, small beside a feature map).
// Padding: SAME follows TensorFlow (cpu::window_geometry, the CPU kernels' rule). cuDNN pads both sides alike;
// where TensorFlow's padding is not symmetric (an odd total puts the extra row or column at the bottom or right,
// as in every stride-2 3x3 SAME convolution of an even input), x is copied into a zero-padded buffer and cuDNN runs
// unpadded on it; the input gradient is then the crop of the padded buffer's gradient.
// Precision: float32 stays float32: the convolution's math type is CUDNN_FMA_MATH, which keeps TF32 tensor cores out
// (CUDNN_DEFAULT_MATH lets cuDNN use them on Ampere and later); every algorithm runs under that math type.
// Algorithms: for each (device, pass, shape) the first call asks cuDNN's heuristics (cudnnGet*Algorithm_v7) and runs
// the first candidate that cuDNN accepts (then the remaining algorithms, should every candidate be refused); that
// algorithm is cached, so later calls run it directly. Workspaces come from library_handles.h.
// Bias and relu: cudnnAddTensor, then cudnnActivationForward in place (cudnnConvolutionBiasActivationForward runs
// relu with one algorithm only).
// Thread-safety: safe to call concurrently: handles and workspaces are per thread, the algorithm cache is guarded by
// a mutex.
#include <algorithm>
#include <climits>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/dnnl_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudnn_util.h"
#include "kernels/cuda/library_handles.h"
#include "strata/error.h"

namespace strata::kernels::cuda {

namespace {

// Candidates needing more workspace than this are skipped (cuDNN's FFT algorithms can ask for gigabytes).
constexpr size_t kMaxWorkspaceBytes = size_t{2} << 30;

struct ConvGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input
  int64_t kh = 0, kw = 0, f = 0;       // kernel [kh, kw, c, f]
  int64_t oh = 0, ow = 0;              // output
  Pads pads;

  Shape y_shape() const { return {n, oh, ow, f}; }
  // cuDNN pads symmetrically only: otherwise it runs on a padded copy of x, unpadded.
  bool explicit_padding() const { return !pads.symmetric(); }
  Shape padded_x_shape() const { return padded_shape({n, h, w, c}, pads); }
  // The input cuDNN sees and the padding it adds.
  int64_t in_h() const { return explicit_padding() ? h + pads.top + pads.bottom : h; }
  int64_t in_w() const { return explicit_padding() ? w + pads.left + pads.right : w; }
  int64_t cudnn_pad_h() const { return explicit_padding() ? 0 : pads.top; }
  int64_t cudnn_pad_w() const { return explicit_padding() ? 0 : pads.left; }
};

// The checks and geometry of the CPU kernel (kernels/cpu/conv.cc), with its messages.
ConvGeometry conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2DParams& p) {
  STRATA_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1, InvalidArgument,
               op << ": strides and dilations must be >= 1, got strides (" << p.stride_h << ", " << p.stride_w
                  << ") and dilations (" << p.dilation_h << ", " << p.dilation_w << ")");
  STRATA_CHECK(x.size() == 4, ShapeError, op << ": input must be [N, H, W, C], got " << shape_str(x));
  STRATA_CHECK(w.size() == 4, ShapeError, op << ": kernel must be [kh, kw, in, out], got " << shape_str(w));
  STRATA_CHECK(x[3] == w[2], ShapeError,
               op << ": input " << shape_str(x) << " has " << x[3] << " channels but kernel " << shape_str(w)
                  << " expects " << w[2]);
  ConvGeometry g;
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.kh = w[0], g.kw = w[1], g.f = w[3];
  STRATA_CHECK(g.kh >= 1 && g.kw >= 1, ShapeError, op << ": kernel " << shape_str(w) << " has an empty window");
  const bool fits_h =
      cpu::window_geometry(g.h, g.kh, p.stride_h, p.dilation_h, p.padding, g.oh, g.pads.top, g.pads.bottom);
  const bool fits_w =
      cpu::window_geometry(g.w, g.kw, p.stride_w, p.dilation_w, p.padding, g.ow, g.pads.left, g.pads.right);
  STRATA_CHECK(fits_h && fits_w, ShapeError,
               op << ": kernel " << shape_str(w) << " with dilations (" << p.dilation_h << ", " << p.dilation_w
                  << ") does not fit input " << shape_str(x) << " with VALID padding");
  return g;
}

bool is_empty(const ConvGeometry& g) { return g.n == 0 || g.c == 0 || g.f == 0 || g.h == 0 || g.w == 0; }

// The cuDNN descriptions of one convolution: x (or its padded copy), the KRSC kernel, y, and the convolution.
struct ConvDescs {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
};

void describe(const char* op, const ConvGeometry& g, const Conv2DParams& p, ConvDescs& d) {
  set_nhwc(d.x, op, g.n, g.in_h(), g.in_w(), g.c);
  set_nhwc(d.y, op, g.n, g.oh, g.ow, g.f);
  STRATA_CHECK(g.kh * g.kw * g.c * g.f <= INT_MAX, ShapeError,
               op << ": a kernel of [" << g.kh << ", " << g.kw << ", " << g.c << ", " << g.f
                  << "] is beyond cuDNN's limit of " << INT_MAX << " elements");
  check_cudnn(cudnnSetFilter4dDescriptor(d.w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, to_int(g.f, op, "filters"),
                                         to_int(g.c, op, "channels"), to_int(g.kh, op, "kernel height"),
                                         to_int(g.kw, op, "kernel width")),
              "cudnnSetFilter4dDescriptor");
  check_cudnn(cudnnSetConvolution2dDescriptor(d.conv.get(), to_int(g.cudnn_pad_h(), op, "padding"),
                                              to_int(g.cudnn_pad_w(), op, "padding"), p.stride_h, p.stride_w,
                                              p.dilation_h, p.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              "cudnnSetConvolution2dDescriptor");
  check_cudnn(cudnnSetConvolutionMathType(d.conv.get(), CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
  int on = 0, oc = 0, oh = 0, ow = 0;
  check_cudnn(cudnnGetConvolution2dForwardOutputDim(d.conv.get(), d.x.get(), d.w.get(), &on, &oc, &oh, &ow),
              "cudnnGetConvolution2dForwardOutputDim");
  STRATA_CHECK(on == g.n && oc == g.f && oh == g.oh && ow == g.ow, Error,
               op << ": internal error: cuDNN's output [" << on << ", " << oh << ", " << ow << ", " << oc << "] is not "
                  << shape_str(g.y_shape()));
}

// HWIO [kh, kw, C, F] and KRSC [F, kh, kw, C] (cuDNN's NHWC filters) as two stride patterns of one 4-D tensor with
// n = F, c = C, h = kh, w = kw.
void describe_hwio(const TensorDescriptor& d, const ConvGeometry& g) {
  check_cudnn(cudnnSetTensor4dDescriptorEx(d.get(), CUDNN_DATA_FLOAT, static_cast<int>(g.f), static_cast<int>(g.c),
                                           static_cast<int>(g.kh), static_cast<int>(g.kw), /*nStride=*/1,
                                           /*cStride=*/static_cast<int>(g.f),
                                           /*hStride=*/static_cast<int>(g.kw * g.c * g.f),
                                           /*wStride=*/static_cast<int>(g.c * g.f)),
              "cudnnSetTensor4dDescriptorEx (HWIO kernel)");
}
void describe_krsc(const TensorDescriptor& d, const ConvGeometry& g) {
  check_cudnn(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, static_cast<int>(g.f),
                                         static_cast<int>(g.c), static_cast<int>(g.kh), static_cast<int>(g.kw)),
              "cudnnSetTensor4dDescriptor (KRSC kernel)");
}

// A KRSC copy of the HWIO kernel w. REQUIRES: describe() accepted g (the kernel fits cuDNN's ints), w non-empty.
Tensor to_krsc(cudnnHandle_t handle, const Tensor& w, const ConvGeometry& g) {
  Tensor out = Tensor::empty({g.f, g.kh, g.kw, g.c}, DType::kFloat32, w.device());
  TensorDescriptor hwio, krsc;
  describe_hwio(hwio, g);
  describe_krsc(krsc, g);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnTransformTensor(handle, &one, hwio.get(), w.data<float>(), &zero, krsc.get(), out.data<float>()),
              "cudnnTransformTensor (HWIO kernel to KRSC)");
  return out;
}

// dw (HWIO) = the KRSC kernel gradient dw_krsc.
void from_krsc(cudnnHandle_t handle, const Tensor& dw_krsc, const ConvGeometry& g, Tensor& dw) {
  TensorDescriptor hwio, krsc;
  describe_hwio(hwio, g);
  describe_krsc(krsc, g);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(
      cudnnTransformTensor(handle, &one, krsc.get(), dw_krsc.data<float>(), &zero, hwio.get(), dw.data<float>()),
      "cudnnTransformTensor (KRSC kernel gradient to HWIO)");
}

// x as cuDNN reads it: x itself, or its zero-padded copy when the padding is not symmetric.
Tensor cudnn_input(const char* op, const Tensor& x, const ConvGeometry& g) {
  if (!g.explicit_padding()) return x;
  Tensor padded = Tensor::empty(g.padded_x_shape(), DType::kFloat32, x.device());
  pad_nhwc(op, x.device().index, x.data<float>(), x.shape(), g.pads, 0.0f, padded.data<float>());
  return padded;
}

// ---------------------------------------------------------------- algorithm choice

enum class Pass : int64_t { kForward, kBackwardData, kBackwardFilter };

std::string algo_key(Pass pass, int device, const ConvGeometry& g, const Conv2DParams& p) {
  const int64_t fields[] = {static_cast<int64_t>(pass),
                            device,
                            g.n,
                            g.in_h(),
                            g.in_w(),
                            g.c,
                            g.kh,
                            g.kw,
                            g.f,
                            g.cudnn_pad_h(),
                            g.cudnn_pad_w(),
                            p.stride_h,
                            p.stride_w,
                            p.dilation_h,
                            p.dilation_w};
  return std::string(reinterpret_cast<const char*>(fields), sizeof fields);
}

std::mutex& algo_mutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<std::string, int>& algo_cache() {
  static std::unordered_map<std::string, int> cache;
  return cache;
}

// The algorithms cuDNN's heuristics rank for a pass that report success without tensor-op math, in cuDNN's order,
// then every other algorithm of the pass (tried only if cuDNN refuses all of those; all run under FMA math).
template <class Perf>
std::vector<int> candidates(const std::vector<Perf>& perf, int returned, int algo_count) {
  std::vector<int> out;
  std::vector<bool> listed(algo_count, false);
  for (int i = 0; i < returned; ++i) {
    const int algo = static_cast<int>(perf[i].algo);
    if (algo < 0 || algo >= algo_count || listed[algo]) continue;
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH) continue;
    out.push_back(algo);
    listed[algo] = true;
  }
  for (int algo = 0; algo < algo_count; ++algo) {
    if (!listed[algo]) out.push_back(algo);
  }
  return out;
}

using WorkspaceSizeFn = std::function<cudnnStatus_t(int algo, size_t* bytes)>;
using RunFn = std::function<cudnnStatus_t(int algo, void* workspace, size_t bytes)>;

// Runs one pass with the cached algorithm of `key`, or, the first time, with the first of `find()`'s candidates
// that cuDNN accepts, and caches that one.
void run_pass(const char* op, const char* what, int device, const std::string& key,
              const std::function<std::vector<int>()>& find, const WorkspaceSizeFn& workspace_size, const RunFn& run) {
  int cached = -1;
  {
    std::lock_guard<std::mutex> lock(algo_mutex());
    auto it = algo_cache().find(key);
    if (it != algo_cache().end()) cached = it->second;
  }
  if (cached >= 0) {
    size_t bytes = 0;
    check_cudnn(workspace_size(cached, &bytes), what);
    check_cudnn(run(cached, bytes > 0 ? workspace(device, bytes) : nullptr, bytes), what);
    return;
  }
  const std::vector<int> algos = find();
  std::string first_refusal = "none tried";
  bool any_refused = false;
  for (int algo : algos) {
    size_t bytes = 0;
    cudnnStatus_t st = workspace_size(algo, &bytes);
    if (st == CUDNN_STATUS_SUCCESS && bytes > kMaxWorkspaceBytes) continue;
    if (st == CUDNN_STATUS_SUCCESS) st = run(algo, bytes > 0 ? workspace(device, bytes) : nullptr, bytes);
    if (st == CUDNN_STATUS_SUCCESS) {
      std::lock_guard<std::mutex> lock(algo_mutex());
      algo_cache().emplace(key, algo);
      return;
    }
    if (!cudnn_refused(st)) check_cudnn(st, what);
    if (!any_refused) first_refusal = std::string("algorithm ") + std::to_string(algo) + ": " + cudnnGetErrorString(st);
    any_refused = true;
  }
  STRATA_THROW(Unavailable, op << ": cuDNN runs none of its " << algos.size() << " algorithms for " << what
                               << " in float32 (FMA math) on this shape; the first refusal: " << first_refusal);
}

void forward(const char* op, cudnnHandle_t handle, int device, const ConvGeometry& g, const Conv2DParams& p,
             const ConvDescs& d, const float* x, const float* w, float* y) {
  const float one = 1.0f, zero = 0.0f;
  run_pass(
      op, "cudnnConvolutionForward", device, algo_key(Pass::kForward, device, g, p),
      [&] {
        int max_count = 0;
        check_cudnn(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count),
                    "cudnnGetConvolutionForwardAlgorithmMaxCount");
        std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::max(max_count, 1));
        int returned = 0;
        check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                           static_cast<int>(perf.size()), &returned, perf.data()),
                    "cudnnGetConvolutionForwardAlgorithm_v7");
        return candidates(perf, returned, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
      },
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      },
      [&](int algo, void* ws, size_t bytes) {
        return cudnnConvolutionForward(handle, &one, d.x.get(), x, d.w.get(), w, d.conv.get(),
                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, &zero, d.y.get(), y);
      });
}

void backward_data(const char* op, cudnnHandle_t handle, int device, const ConvGeometry& g, const Conv2DParams& p,
                   const ConvDescs& d, const float* w, const float* dy, float* dx) {
  const float one = 1.0f, zero = 0.0f;
  run_pass(
      op, "cudnnConvolutionBackwardData", device, algo_key(Pass::kBackwardData, device, g, p),
      [&] {
        int max_count = 0;
        check_cudnn(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count),
                    "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
        std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::max(max_count, 1));
        int returned = 0;
        check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                                static_cast<int>(perf.size()), &returned, perf.data()),
                    "cudnnGetConvolutionBackwardDataAlgorithm_v7");
        return candidates(perf, returned, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
      },
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      },
      [&](int algo, void* ws, size_t bytes) {
        return cudnnConvolutionBackwardData(handle, &one, d.w.get(), w, d.y.get(), dy, d.conv.get(),
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes, &zero,
                                            d.x.get(), dx);
      });
}

void backward_filter(const char* op, cudnnHandle_t handle, int device, const ConvGeometry& g, const Conv2DParams& p,
                     const ConvDescs& d, const float* x, const float* dy, float* dw) {
  const float one = 1.0f, zero = 0.0f;
  run_pass(
      op, "cudnnConvolutionBackwardFilter", device, algo_key(Pass::kBackwardFilter, device, g, p),
      [&] {
        int max_count = 0;
        check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max_count),
                    "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
        std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::max(max_count, 1));
        int returned = 0;
        check_cudnn(
            cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                          static_cast<int>(perf.size()), &returned, perf.data()),
            "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
        return candidates(perf, returned, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
      },
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                              bytes);
      },
      [&](int algo, void* ws, size_t bytes) {
        return cudnnConvolutionBackwardFilter(handle, &one, d.x.get(), x, d.y.get(), dy, d.conv.get(),
                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes, &zero,
                                              d.w.get(), dw);
      });
}

// The bias as cuDNN broadcasts it: [1, F, 1, 1].
void describe_bias(const TensorDescriptor& d, const char* op, int64_t f) {
  check_cudnn(
      cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, to_int(f, op, "filters"), 1, 1),
      "cudnnSetTensor4dDescriptor (bias)");
}

// y or dy [N, OH, OW, F] as the [N * OH * OW, F, 1, 1] NCHW tensor of the same bytes: the plain layout in which cuDNN
// adds a [1, F, 1, 1] bias, sums the bias gradient, and applies relu.
void describe_pixels_by_filters(const TensorDescriptor& d, const char* op, const ConvGeometry& g) {
  check_cudnn(
      cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                 to_int(g.n * g.oh * g.ow, op, "output pixels"), to_int(g.f, op, "filters"), 1, 1),
      "cudnnSetTensor4dDescriptor (output pixels by filters)");
}

// db [F] = dy [N, OH, OW, F] summed over every axis but the last.
void bias_gradient(const char* op, cudnnHandle_t handle, const ConvGeometry& g, const Tensor& dy, Tensor& db) {
  TensorDescriptor dy_desc, db_desc;
  describe_pixels_by_filters(dy_desc, op, g);
  describe_bias(db_desc, op, g.f);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnConvolutionBackwardBias(handle, &one, dy_desc.get(), dy.data<float>(), &zero, db_desc.get(),
                                           db.data<float>()),
              "cudnnConvolutionBackwardBias");
}

void check_float(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) check_dtype(op, *t, DType::kFloat32);
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2DParams& p) {
  const char* op = "conv2d";
  const bool with_bias = bias.defined();
  if (with_bias) {
    check_float(op, {&x, &w, &bias});
  } else {
    check_float(op, {&x, &w});
  }
  const ConvGeometry g = conv_geometry(op, x.shape(), w.shape(), p);
  if (with_bias) {
    STRATA_CHECK(bias.rank() == 1 && bias.dim(0) == g.f, ShapeError,
                 op << ": bias " << bias.shape_str() << " does not match kernel " << w.shape_str() << " (wants [" << g.f
                    << "])");
  }
  const int device = x.device().index;
  Tensor y = Tensor::empty(g.y_shape(), DType::kFloat32, x.device());
  if (y.numel() == 0) return y;
  cudnnHandle_t handle = cudnn_handle(device);
  if (is_empty(g)) {  // no input channels: the sum is empty
    zero_fill(y);
  } else {
    ConvDescs d;
    describe(op, g, p, d);
    const Tensor wk = to_krsc(handle, w, g);
    const Tensor xin = cudnn_input(op, x, g);
    forward(op, handle, device, g, p, d, xin.data<float>(), wk.data<float>(), y.data<float>());
  }
  TensorDescriptor y_desc;
  describe_pixels_by_filters(y_desc, op, g);
  const float one = 1.0f, zero = 0.0f;
  if (with_bias) {
    TensorDescriptor b_desc;
    describe_bias(b_desc, op, g.f);
    check_cudnn(cudnnAddTensor(handle, &one, b_desc.get(), bias.data<float>(), &one, y_desc.get(), y.data<float>()),
                "cudnnAddTensor (bias)");
  }
  if (p.fused_relu) {
    ActivationDescriptor relu;
    check_cudnn(cudnnSetActivationDescriptor(relu.get(), CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
                "cudnnSetActivationDescriptor");
    check_cudnn(cudnnActivationForward(handle, relu.get(), &one, y_desc.get(), y.data<float>(), &zero, y_desc.get(),
                                       y.data<float>()),
                "cudnnActivationForward (relu)");
  }
  return y;
}

Tensor conv2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, const Conv2DParams& p) {
  const char* op = "conv2d_backward_input";
  check_float(op, {&dy, &w});
  const ConvGeometry g = conv_geometry(op, x_shape, w.shape(), p);
  STRATA_CHECK(dy.shape() == g.y_shape(), ShapeError,
               op << ": output gradient " << dy.shape_str() << " does not match the output " << shape_str(g.y_shape())
                  << " of input " << shape_str(x_shape) << " and kernel " << w.shape_str());
  const int device = dy.device().index;
  Tensor dx = Tensor::empty(x_shape, DType::kFloat32, dy.device());
  if (dx.numel() == 0) return dx;
  if (is_empty(g)) {  // no filters: nothing flows back
    zero_fill(dx);
    return dx;
  }
  cudnnHandle_t handle = cudnn_handle(device);
  ConvDescs d;
  describe(op, g, p, d);
  const Tensor wk = to_krsc(handle, w, g);
  if (!g.explicit_padding()) {
    backward_data(op, handle, device, g, p, d, wk.data<float>(), dy.data<float>(), dx.data<float>());
    return dx;
  }
  Tensor padded = Tensor::empty(g.padded_x_shape(), DType::kFloat32, dy.device());
  backward_data(op, handle, device, g, p, d, wk.data<float>(), dy.data<float>(), padded.data<float>());
  crop_nhwc(op, device, padded.data<float>(), g.pads, x_shape, dx.data<float>());
  return dx;
}

Conv2DWeightGrads conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Shape& w_shape, bool with_bias,
                                          const Conv2DParams& p) {
  const char* op = "conv2d_backward_weights";
  check_float(op, {&x, &dy});
  const ConvGeometry g = conv_geometry(op, x.shape(), w_shape, p);
  STRATA_CHECK(dy.shape() == g.y_shape(), ShapeError,
               op << ": output gradient " << dy.shape_str() << " does not match the output " << shape_str(g.y_shape())
                  << " of input " << x.shape_str() << " and kernel " << shape_str(w_shape));
  const int device = x.device().index;
  Conv2DWeightGrads grads;
  grads.dw = Tensor::empty(w_shape, DType::kFloat32, x.device());
  if (with_bias) grads.db = Tensor::empty({g.f}, DType::kFloat32, x.device());
  if (grads.dw.numel() == 0 && !with_bias) return grads;
  if (with_bias && g.f > 0) {
    if (dy.numel() == 0) {
      zero_fill(grads.db);
    } else {
      bias_gradient(op, cudnn_handle(device), g, dy, grads.db);
    }
  }
  if (grads.dw.numel() == 0) return grads;
  if (is_empty(g) || dy.numel() == 0) {  // no images (or no output pixels): the sums are empty
    zero_fill(grads.dw);
    return grads;
  }
  cudnnHandle_t handle = cudnn_handle(device);
  ConvDescs d;
  describe(op, g, p, d);
  const Tensor xin = cudnn_input(op, x, g);
  Tensor dw_krsc = Tensor::empty({g.f, g.kh, g.kw, g.c}, DType::kFloat32, x.device());
  backward_filter(op, handle, device, g, p, d, xin.data<float>(), dy.data<float>(), dw_krsc.data<float>());
  from_krsc(handle, dw_krsc, g, grads.dw);
  return grads;
}

}  // namespace strata::kernels::cuda
