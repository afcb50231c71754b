// 2-D convolution on NVIDIA GPUs through cuDNN's convolution API: forward with optional bias and relu, the input
// gradient, and the kernel and bias gradients, with the contracts of kernels.h (cuda_kernels.h).
//
// Layouts: activations stay NHWC (CUDNN_TENSOR_NHWC). cuDNN's NHWC filters are KRSC [F, kh, kw, C] and strata's
// kernels HWIO [kh, kw, C, F] (Keras's), so the forward and input-gradient passes read a KRSC copy of the kernel,
// and the kernel gradient comes out KRSC and is copied back to HWIO (cudnnTransformTensor between the two stride
// patterns; kh*kw*C*F floats, small beside a feature map). Should cuDNN refuse every NHWC algorithm of a pass on a
// shape, that pass runs in NCHW (kernel KCRS) on copies of its tensors, made and copied back the same way. With
// STRATA_CUDNN_CONV_LAYOUT=nchw in the environment every pass runs in NCHW (how the GPU tests reach that path).
// Padding: SAME follows TensorFlow (cpu::window_geometry, the CPU kernels' rule). cuDNN pads both sides alike;
// where TensorFlow's padding is not symmetric (an odd total puts the extra row or column at the bottom or right,
// as in every stride-2 3x3 SAME convolution of an even input), x is copied into a zero-padded buffer and cuDNN runs
// unpadded on it; the input gradient is then the crop of the padded buffer's gradient.
// Precision: float32 stays float32: the convolution's math type is CUDNN_FMA_MATH, which keeps TF32 tensor cores out
// (CUDNN_DEFAULT_MATH lets cuDNN use them on Ampere and later); every algorithm runs under that math type.
// Mixed precision (kernels/compute_precision.h): under ComputePrecision::kBFloat16 every pass (forward, input
// gradient, kernel gradient) runs on bfloat16 copies of its float32 operands (compute_operand.h: x and the kernel,
// dy and the kernel, x and dy), with float32 compute (the convolution descriptor's type) under CUDNN_TENSOR_OP_MATH.
// cuDNN's legacy convolution API takes bf16 only in its bf16 configuration, whose output is bf16 as well, so y, dx
// and the kernel gradient come out of cuDNN rounded to bf16 and are widened to the float32 tensors the kernels
// return (the CPU's oneDNN primitives write float32 unrounded: a difference within bf16's tolerance). The bias, its
// gradient and relu stay float32. Unlike the CPU, the input gradient of a convolution with C <= 4 channels is bf16
// too (the CPU keeps its sgemm + col2im path float32). Built, not yet run on a GPU: should cuDNN refuse bf16 for a
// pass on a shape, the pass fails naming it (the algorithm search's Unavailable) rather than run float32 unasked.
// Algorithms: for each (device, pass, shape) the first call times cuDNN's algorithms (cudnnFind*; with
// STRATA_CUDNN_ALGO_SEARCH=heuristic it asks cuDNN's heuristics, cudnnGet*Algorithm_v7, instead) and runs the first
// candidate, fastest first, that cuDNN accepts (then the remaining algorithms, should every candidate be refused); that
// algorithm and its layout are cached, so later calls run them directly. Workspaces come from library_handles.h.
// Bias and relu: cudnnAddTensor, then cudnnActivationForward in place (cudnnConvolutionBiasActivationForward runs
// relu with one algorithm only).
// Thread-safety: safe to call concurrently: handles and workspaces are per thread, the algorithm cache is guarded by
// a mutex.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda/tensor_cuda.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cuda/column_sums.h"
#include "kernels/cuda/compute_operand.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudnn_util.h"
#include "kernels/cuda/library_handles.h"
#include "kernels/kernel_checks.h"
#include "strata/error.h"

namespace strata::kernels::cuda {

namespace {

// Candidates needing more workspace than this are skipped (cuDNN's FFT algorithms can ask for gigabytes).
constexpr size_t kMaxWorkspaceBytes = size_t{2} << 30;

// Sizes and padding (kernel_checks.h), with the padding as cudnn_util.h's Pads.
struct ConvGeometry : ConvShape {
  Pads pads;

  // cuDNN pads symmetrically only: otherwise it runs on a padded copy of x, unpadded.
  bool explicit_padding() const { return !pads.symmetric(); }
  Shape padded_x_shape() const { return padded_shape({n, h, w, c}, pads); }
  // The input cuDNN sees and the padding it adds.
  int64_t in_h() const { return explicit_padding() ? h + pads.top + pads.bottom : h; }
  int64_t in_w() const { return explicit_padding() ? w + pads.left + pads.right : w; }
  int64_t cudnn_pad_h() const { return explicit_padding() ? 0 : pads.top; }
  int64_t cudnn_pad_w() const { return explicit_padding() ? 0 : pads.left; }
};

// The checks and geometry of the CPU kernel (kernels/kernel_checks.h: one code, one set of messages).
ConvGeometry conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2DParams& p) {
  ConvGeometry g;
  static_cast<ConvShape&>(g) = conv_shape(op, x, w, p);
  g.pads = {g.pad_top, g.pad_bottom, g.pad_left, g.pad_right};
  return g;
}

bool is_empty(const ConvGeometry& g) { return g.n == 0 || g.c == 0 || g.f == 0 || g.h == 0 || g.w == 0; }

// The layout cuDNN runs a pass in. NHWC is strata's own, so nothing is copied. NCHW (kernels KCRS) is cuDNN's
// oldest and most widely supported layout: a pass runs in it only on a shape for which cuDNN refuses every NHWC
// algorithm, and then x, y and their gradients are copied across with cudnnTransformTensor.
enum class Layout : int64_t { kNhwc, kNchw };

cudnnTensorFormat_t format_of(Layout layout) { return layout == Layout::kNhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW; }

// cuDNN's name for a float32 or bfloat16 operand.
cudnnDataType_t cudnn_type(DType dtype) { return dtype == DType::kBFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }

// A packed tensor of cuDNN's dims [n, c, h, w] and `dtype` (float32 unless said), stored in `layout`.
void describe_packed(const TensorDescriptor& d, const char* op, Layout layout, int64_t n, int64_t c, int64_t h,
                     int64_t w, DType dtype = DType::kFloat32) {
  STRATA_CHECK(n * c * h * w <= INT_MAX, ShapeError,
               op << ": a tensor of " << n * c * h * w << " elements is beyond cuDNN's limit of " << INT_MAX);
  check_cudnn(cudnnSetTensor4dDescriptor(d.get(), format_of(layout), cudnn_type(dtype), to_int(n, op, "batch"),
                                         to_int(c, op, "channels"), to_int(h, op, "height"), to_int(w, op, "width")),
              "cudnnSetTensor4dDescriptor");
}

// The cuDNN descriptions of one convolution in one layout: x (or its padded copy), the kernel, y, the convolution,
// and the dtype of all three tensors (float32, or bfloat16 under mixed precision; the compute is float32 either way).
struct ConvDescs {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  DType dtype = DType::kFloat32;
  bool bf16() const { return dtype == DType::kBFloat16; }
};

void describe(const char* op, const ConvGeometry& g, const Conv2DParams& p, Layout layout, DType dtype, ConvDescs& d) {
  d.dtype = dtype;
  describe_packed(d.x, op, layout, g.n, g.c, g.in_h(), g.in_w(), dtype);
  describe_packed(d.y, op, layout, g.n, g.f, g.oh, g.ow, dtype);
  STRATA_CHECK(g.kh * g.kw * g.c * g.f <= INT_MAX, ShapeError,
               op << ": a kernel of [" << g.kh << ", " << g.kw << ", " << g.c << ", " << g.f
                  << "] is beyond cuDNN's limit of " << INT_MAX << " elements");
  check_cudnn(cudnnSetFilter4dDescriptor(d.w.get(), cudnn_type(dtype), format_of(layout), to_int(g.f, op, "filters"),
                                         to_int(g.c, op, "channels"), to_int(g.kh, op, "kernel height"),
                                         to_int(g.kw, op, "kernel width")),
              "cudnnSetFilter4dDescriptor");
  check_cudnn(cudnnSetConvolution2dDescriptor(d.conv.get(), to_int(g.cudnn_pad_h(), op, "padding"),
                                              to_int(g.cudnn_pad_w(), op, "padding"), p.stride_h, p.stride_w,
                                              p.dilation_h, p.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              "cudnnSetConvolution2dDescriptor");
  // float32: FMA math keeps TF32 out. bf16: tensor cores allowed (TENSOR_OP_MATH, not ..._ALLOW_CONVERSION: no
  // operand is narrowed beyond the bf16 it already is).
  check_cudnn(cudnnSetConvolutionMathType(d.conv.get(), d.bf16() ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
              "cudnnSetConvolutionMathType");
  int on = 0, oc = 0, oh = 0, ow = 0;
  check_cudnn(cudnnGetConvolution2dForwardOutputDim(d.conv.get(), d.x.get(), d.w.get(), &on, &oc, &oh, &ow),
              "cudnnGetConvolution2dForwardOutputDim");
  STRATA_CHECK(on == g.n && oc == g.f && oh == g.oh && ow == g.ow, Error,
               op << ": internal error: cuDNN's output [" << on << ", " << oh << ", " << ow << ", " << oc << "] is not "
                  << shape_str(g.y_shape()));
}

// The kernel's elements as a 4-D tensor n = F, c = C, h = kh, w = kw: with HWIO strides (strata's [kh, kw, C, F]),
// and packed in `layout` (KRSC [F, kh, kw, C], cuDNN's NHWC filters, or KCRS [F, C, kh, kw], its NCHW ones).
void describe_hwio(const TensorDescriptor& d, const ConvGeometry& g) {
  check_cudnn(cudnnSetTensor4dDescriptorEx(d.get(), CUDNN_DATA_FLOAT, static_cast<int>(g.f), static_cast<int>(g.c),
                                           static_cast<int>(g.kh), static_cast<int>(g.kw), /*nStride=*/1,
                                           /*cStride=*/static_cast<int>(g.f),
                                           /*hStride=*/static_cast<int>(g.kw * g.c * g.f),
                                           /*wStride=*/static_cast<int>(g.c * g.f)),
              "cudnnSetTensor4dDescriptorEx (HWIO kernel)");
}
void describe_cudnn_filter(const TensorDescriptor& d, const ConvGeometry& g, Layout layout) {
  check_cudnn(cudnnSetTensor4dDescriptor(d.get(), format_of(layout), CUDNN_DATA_FLOAT, static_cast<int>(g.f),
                                         static_cast<int>(g.c), static_cast<int>(g.kh), static_cast<int>(g.kw)),
              "cudnnSetTensor4dDescriptor (cuDNN's kernel layout)");
}

// The HWIO kernel w copied to cuDNN's filter layout for `layout`. REQUIRES: describe() accepted g.
Tensor filter_for(cudnnHandle_t handle, const Tensor& w, const ConvGeometry& g, Layout layout) {
  Tensor out = Tensor::empty({g.f * g.c * g.kh * g.kw}, DType::kFloat32, w.device());
  TensorDescriptor hwio, filter;
  describe_hwio(hwio, g);
  describe_cudnn_filter(filter, g, layout);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnTransformTensor(handle, &one, hwio.get(), w.data<float>(), &zero, filter.get(), out.data<float>()),
              "cudnnTransformTensor (HWIO kernel to cuDNN's layout)");
  return out;
}

// dw (HWIO) = the kernel gradient `filter_grad`, in cuDNN's filter layout for `layout`.
void filter_to_hwio(cudnnHandle_t handle, const Tensor& filter_grad, const ConvGeometry& g, Layout layout, Tensor& dw) {
  TensorDescriptor hwio, filter;
  describe_hwio(hwio, g);
  describe_cudnn_filter(filter, g, layout);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(
      cudnnTransformTensor(handle, &one, filter.get(), filter_grad.data<float>(), &zero, hwio.get(), dw.data<float>()),
      "cudnnTransformTensor (kernel gradient to HWIO)");
}

// An NCHW copy [n, c, h, w] of the NHWC map src [n, h, w, c], and back.
Tensor nhwc_to_nchw(cudnnHandle_t handle, const char* op, const float* src, int64_t n, int64_t c, int64_t h, int64_t w,
                    Device device) {
  Tensor out = Tensor::empty({n, c, h, w}, DType::kFloat32, device);
  TensorDescriptor from, to;
  describe_packed(from, op, Layout::kNhwc, n, c, h, w);
  describe_packed(to, op, Layout::kNchw, n, c, h, w);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnTransformTensor(handle, &one, from.get(), src, &zero, to.get(), out.data<float>()),
              "cudnnTransformTensor (NHWC to NCHW)");
  return out;
}
void nchw_to_nhwc(cudnnHandle_t handle, const char* op, const float* src, int64_t n, int64_t c, int64_t h, int64_t w,
                  float* dst) {
  TensorDescriptor from, to;
  describe_packed(from, op, Layout::kNchw, n, c, h, w);
  describe_packed(to, op, Layout::kNhwc, n, c, h, w);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnTransformTensor(handle, &one, from.get(), src, &zero, to.get(), dst),
              "cudnnTransformTensor (NCHW to NHWC)");
}

// x as cuDNN reads it: x itself, or its zero-padded copy when the padding is not symmetric.
Tensor cudnn_input(const char* op, const Tensor& x, const ConvGeometry& g) {
  if (!g.explicit_padding()) return x;
  Tensor padded = Tensor::empty(g.padded_x_shape(), DType::kFloat32, x.device());
  pad_nhwc(op, x.device().index, x.data<float>(), x.shape(), g.pads, 0.0f, padded.data<float>());
  return padded;
}

// The buffer a pass writes its output into: `dst` (float32 NHWC) itself when the pass runs in NHWC on float32, else a
// new tensor of cuDNN's dims [n, c, h, w] stored in `layout`, in the pass's dtype, which store_nhwc then moves to dst.
Tensor pass_output(const Tensor& dst, Layout layout, DType dtype, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (layout == Layout::kNhwc && dtype == DType::kFloat32) return dst;
  const Shape shape = layout == Layout::kNhwc ? Shape{n, h, w, c} : Shape{n, c, h, w};
  return Tensor::empty(shape, dtype, dst.device());
}

// dst (float32 NHWC [n, h, w, c]) = `out`, the buffer pass_output gave the pass: widened to float32 and moved back to
// NHWC where it is not dst itself.
void store_nhwc(cudnnHandle_t handle, const char* op, const Tensor& out, Layout layout, int64_t n, int64_t c, int64_t h,
                int64_t w, Tensor& dst) {
  if (out.raw_data() == dst.raw_data()) return;
  if (layout == Layout::kNhwc) {  // a bf16 output in place: widened straight into dst
    detail::cuda_convert(out.raw_data(), out.dtype(), dst.raw_data(), DType::kFloat32, out.numel(), dst.device().index);
    return;
  }
  const Tensor wide = out.dtype() == DType::kFloat32 ? out : out.to(DType::kFloat32);
  nchw_to_nhwc(handle, op, wide.data<float>(), n, c, h, w, dst.data<float>());
}

// ---------------------------------------------------------------- algorithm choice

enum class Pass : int64_t { kForward, kBackwardData, kBackwardFilter };

// Whether STRATA_CUDNN_CONV_LAYOUT=nchw asks for NCHW only (read on each call, so a test may set it for a while).
bool nchw_forced() {
  const char* v = std::getenv("STRATA_CUDNN_CONV_LAYOUT");
  return v != nullptr && (std::string(v) == "nchw" || std::string(v) == "NCHW");
}

std::string algo_key(Pass pass, int device, const ConvGeometry& g, const Conv2DParams& p) {
  const int64_t fields[] = {static_cast<int64_t>(pass),
                            static_cast<int64_t>(nchw_forced()),
                            static_cast<int64_t>(operand_dtype()),
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

// The layout and algorithm that ran a pass on a shape.
struct AlgoChoice {
  Layout layout = Layout::kNhwc;
  int algo = 0;
};

std::mutex& algo_mutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<std::string, AlgoChoice>& algo_cache() {
  static std::unordered_map<std::string, AlgoChoice> cache;
  return cache;
}

bool cached_choice(const std::string& key, AlgoChoice& choice) {
  std::lock_guard<std::mutex> lock(algo_mutex());
  auto it = algo_cache().find(key);
  if (it == algo_cache().end()) return false;
  choice = it->second;
  return true;
}

// The algorithms cuDNN's heuristics rank for a pass that report success without tensor-op math (with it too when
// `tensor_ops`, bf16's passes), in cuDNN's order, then every other algorithm of the pass (tried only if cuDNN refuses
// all of those; all run under the descriptor's math type).
template <class Perf>
std::vector<int> candidates(const std::vector<Perf>& perf, int returned, int algo_count, bool tensor_ops) {
  std::vector<int> out;
  std::vector<bool> listed(algo_count, false);
  for (int i = 0; i < returned; ++i) {
    const int algo = static_cast<int>(perf[i].algo);
    if (algo < 0 || algo >= algo_count || listed[algo]) continue;
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH &&
        !(tensor_ops && perf[i].mathType == CUDNN_TENSOR_OP_MATH)) {
      continue;
    }
    out.push_back(algo);
    listed[algo] = true;
  }
  for (int algo = 0; algo < algo_count; ++algo) {
    if (!listed[algo]) out.push_back(algo);
  }
  return out;
}

// Takes the status of a heuristics query: one that cuDNN refuses lists nothing (`returned` = 0, so every algorithm is
// tried in turn); any other failure throws.
void heuristics(cudnnStatus_t st, const char* what, int& returned) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  if (!cudnn_refused(st)) check_cudnn(st, what);
  returned = 0;
}

// Whether a shape's first call times cuDNN's algorithms (cudnnFind*, TensorFlow's autotuning and PyTorch's
// cudnn.benchmark) rather than taking its heuristics' order: the default, since the heuristics' first choice can be
// far from the fastest. STRATA_CUDNN_ALGO_SEARCH=heuristic takes the heuristics (no timing runs at the first call).
bool timed_search() {
  static const bool timed = [] {
    const char* v = std::getenv("STRATA_CUDNN_ALGO_SEARCH");
    return v == nullptr || std::string(v) != "heuristic";
  }();
  return timed;
}

using WorkspaceSizeFn = std::function<cudnnStatus_t(int algo, size_t* bytes)>;
using RunFn = std::function<cudnnStatus_t(int algo, void* workspace, size_t bytes)>;

// One pass in one layout: with `algo` when it is >= 0 (the cached choice), else with the first of find()'s
// candidates that cuDNN accepts, which is then cached for `key` with the layout. Returns false, with cuDNN's first
// refusal in `refusal`, when cuDNN accepts none of them.
bool run_pass(const char* what, int device, const std::string& key, Layout layout, int algo,
              const std::function<std::vector<int>()>& find, const WorkspaceSizeFn& workspace_size, const RunFn& run,
              std::string& refusal) {
  if (algo >= 0) {
    size_t bytes = 0;
    check_cudnn(workspace_size(algo, &bytes), what);
    check_cudnn(run(algo, bytes > 0 ? workspace(device, bytes) : nullptr, bytes), what);
    return true;
  }
  const std::vector<int> algos = find();
  refusal = std::to_string(algos.size()) + " algorithms tried, none ran";
  bool any_refused = false;
  for (int candidate : algos) {
    size_t bytes = 0;
    cudnnStatus_t st = workspace_size(candidate, &bytes);
    if (st == CUDNN_STATUS_SUCCESS && bytes > kMaxWorkspaceBytes) continue;
    if (st == CUDNN_STATUS_SUCCESS) st = run(candidate, bytes > 0 ? workspace(device, bytes) : nullptr, bytes);
    if (st == CUDNN_STATUS_SUCCESS) {
      std::lock_guard<std::mutex> lock(algo_mutex());
      algo_cache().emplace(key, AlgoChoice{layout, candidate});
      return true;
    }
    if (!cudnn_refused(st)) check_cudnn(st, what);
    if (!any_refused) {
      refusal = std::to_string(algos.size()) + " algorithms tried, the first refusal: algorithm " +
                std::to_string(candidate) + ": " + cudnnGetErrorString(st);
    }
    any_refused = true;
  }
  return false;
}

// Runs a pass through attempt(layout, algo, refusal) (which describes the pass in that layout, moves its data there
// and back, and returns run_pass's answer): with the cached choice of `key`, else in NHWC, else in NCHW.
template <class Attempt>
void run_in_a_layout(const char* op, const char* what, const std::string& key, Attempt&& attempt) {
  AlgoChoice choice;
  std::string refusal_nhwc, refusal_nchw;
  if (cached_choice(key, choice)) {
    STRATA_CHECK(attempt(choice.layout, choice.algo, refusal_nhwc), Error,
                 op << ": internal error: a cached " << what << " algorithm did not run");
    return;
  }
  if (!nchw_forced() && attempt(Layout::kNhwc, -1, refusal_nhwc)) return;
  if (attempt(Layout::kNchw, -1, refusal_nchw)) return;
  const char* precision =
      operand_dtype() == DType::kBFloat16 ? "in bf16 with float32 compute (mixed precision)" : "in float32 (FMA math)";
  STRATA_THROW(Unavailable, op << ": cuDNN runs no " << what << " algorithm on this shape " << precision << ": NHWC, "
                               << refusal_nhwc << "; NCHW, " << refusal_nchw);
}

bool forward(cudnnHandle_t handle, int device, const std::string& key, Layout layout, int cached_algo,
             const ConvDescs& d, const void* x, const void* w, void* y, std::string& refusal) {
  const float one = 1.0f, zero = 0.0f;
  return run_pass(
      "cudnnConvolutionForward", device, key, layout, cached_algo,
      [&] {
        int max_count = 0;
        check_cudnn(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count),
                    "cudnnGetConvolutionForwardAlgorithmMaxCount");
        std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::max(max_count, 1));
        int returned = 0;
        if (timed_search()) {
          heuristics(cudnnFindConvolutionForwardAlgorithm(handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                          static_cast<int>(perf.size()), &returned, perf.data()),
                     "cudnnFindConvolutionForwardAlgorithm", returned);
        } else {
          heuristics(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                            static_cast<int>(perf.size()), &returned, perf.data()),
                     "cudnnGetConvolutionForwardAlgorithm_v7", returned);
        }
        return candidates(perf, returned, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, d.bf16());
      },
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      },
      [&](int algo, void* ws, size_t bytes) {
        return cudnnConvolutionForward(handle, &one, d.x.get(), x, d.w.get(), w, d.conv.get(),
                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, &zero, d.y.get(), y);
      },
      refusal);
}

bool backward_data(cudnnHandle_t handle, int device, const std::string& key, Layout layout, int cached_algo,
                   const ConvDescs& d, const void* w, const void* dy, void* dx, std::string& refusal) {
  const float one = 1.0f, zero = 0.0f;
  return run_pass(
      "cudnnConvolutionBackwardData", device, key, layout, cached_algo,
      [&] {
        int max_count = 0;
        check_cudnn(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count),
                    "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
        std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::max(max_count, 1));
        int returned = 0;
        if (timed_search()) {
          heuristics(cudnnFindConvolutionBackwardDataAlgorithm(handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                               static_cast<int>(perf.size()), &returned, perf.data()),
                     "cudnnFindConvolutionBackwardDataAlgorithm", returned);
        } else {
          heuristics(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w.get(), d.y.get(), d.conv.get(),
                                                                 d.x.get(), static_cast<int>(perf.size()), &returned,
                                                                 perf.data()),
                     "cudnnGetConvolutionBackwardDataAlgorithm_v7", returned);
        }
        return candidates(perf, returned, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, d.bf16());
      },
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      },
      [&](int algo, void* ws, size_t bytes) {
        return cudnnConvolutionBackwardData(handle, &one, d.w.get(), w, d.y.get(), dy, d.conv.get(),
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes, &zero,
                                            d.x.get(), dx);
      },
      refusal);
}

bool backward_filter(cudnnHandle_t handle, int device, const std::string& key, Layout layout, int cached_algo,
                     const ConvDescs& d, const void* x, const void* dy, void* dw, std::string& refusal) {
  const float one = 1.0f, zero = 0.0f;
  return run_pass(
      "cudnnConvolutionBackwardFilter", device, key, layout, cached_algo,
      [&] {
        int max_count = 0;
        check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max_count),
                    "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
        std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::max(max_count, 1));
        int returned = 0;
        if (timed_search()) {
          heuristics(cudnnFindConvolutionBackwardFilterAlgorithm(handle, d.x.get(), d.y.get(), d.conv.get(),
                                                                 d.w.get(), static_cast<int>(perf.size()), &returned,
                                                                 perf.data()),
                     "cudnnFindConvolutionBackwardFilterAlgorithm", returned);
        } else {
          heuristics(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x.get(), d.y.get(), d.conv.get(),
                                                                   d.w.get(), static_cast<int>(perf.size()), &returned,
                                                                   perf.data()),
                     "cudnnGetConvolutionBackwardFilterAlgorithm_v7", returned);
        }
        return candidates(perf, returned, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, d.bf16());
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
      },
      refusal);
}

// The bias as cuDNN broadcasts it: [1, F, 1, 1].
void describe_bias(const TensorDescriptor& d, const char* op, int64_t f) {
  check_cudnn(
      cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, to_int(f, op, "filters"), 1, 1),
      "cudnnSetTensor4dDescriptor (bias)");
}

// y [N, OH, OW, F] as the [N * OH * OW, F, 1, 1] NCHW tensor of the same bytes: the plain layout in which cuDNN
// adds a [1, F, 1, 1] bias and applies relu.
void describe_pixels_by_filters(const TensorDescriptor& d, const char* op, const ConvGeometry& g) {
  check_cudnn(
      cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                 to_int(g.n * g.oh * g.ow, op, "output pixels"), to_int(g.f, op, "filters"), 1, 1),
      "cudnnSetTensor4dDescriptor (output pixels by filters)");
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
    const Tensor xin = cudnn_input(op, x, g);
    const std::string key = algo_key(Pass::kForward, device, g, p);
    run_in_a_layout(op, "forward convolution", key, [&](Layout layout, int algo, std::string& refusal) {
      ConvDescs d;
      describe(op, g, p, layout, operand_dtype(), d);
      const Tensor wk = compute_operand(filter_for(handle, w, g, layout));
      const Tensor xl = compute_operand(layout == Layout::kNhwc ? xin
                                                                : nhwc_to_nchw(handle, op, xin.data<float>(), g.n, g.c,
                                                                               g.in_h(), g.in_w(), x.device()));
      Tensor yl = pass_output(y, layout, d.dtype, g.n, g.f, g.oh, g.ow);
      if (!forward(handle, device, key, layout, algo, d, xl.raw_data(), wk.raw_data(), yl.raw_data(), refusal)) {
        return false;
      }
      store_nhwc(handle, op, yl, layout, g.n, g.f, g.oh, g.ow, y);
      return true;
    });
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
  check_conv_dy(op, dy, g, x_shape, w.shape());
  const int device = dy.device().index;
  Tensor dx = Tensor::empty(x_shape, DType::kFloat32, dy.device());
  if (dx.numel() == 0) return dx;
  if (is_empty(g)) {  // no filters: nothing flows back
    zero_fill(dx);
    return dx;
  }
  cudnnHandle_t handle = cudnn_handle(device);
  // The gradient of what cuDNN convolves: x itself, or its padded copy, which is then cropped.
  Tensor din = g.explicit_padding() ? Tensor::empty(g.padded_x_shape(), DType::kFloat32, dy.device()) : dx;
  const std::string key = algo_key(Pass::kBackwardData, device, g, p);
  run_in_a_layout(op, "input-gradient convolution", key, [&](Layout layout, int algo, std::string& refusal) {
    ConvDescs d;
    describe(op, g, p, layout, operand_dtype(), d);
    const Tensor wk = compute_operand(filter_for(handle, w, g, layout));
    const Tensor dyl = compute_operand(
        layout == Layout::kNhwc ? dy : nhwc_to_nchw(handle, op, dy.data<float>(), g.n, g.f, g.oh, g.ow, dy.device()));
    Tensor dinl = pass_output(din, layout, d.dtype, g.n, g.c, g.in_h(), g.in_w());
    if (!backward_data(handle, device, key, layout, algo, d, wk.raw_data(), dyl.raw_data(), dinl.raw_data(), refusal)) {
      return false;
    }
    store_nhwc(handle, op, dinl, layout, g.n, g.c, g.in_h(), g.in_w(), din);
    return true;
  });
  if (g.explicit_padding()) crop_nhwc(op, device, din.data<float>(), g.pads, x_shape, dx.data<float>());
  return dx;
}

Conv2DWeightGrads conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Shape& w_shape, bool with_bias,
                                          const Conv2DParams& p) {
  const char* op = "conv2d_backward_weights";
  check_float(op, {&x, &dy});
  const ConvGeometry g = conv_geometry(op, x.shape(), w_shape, p);
  check_conv_dy(op, dy, g, x.shape(), w_shape);
  const int device = x.device().index;
  Conv2DWeightGrads grads;
  grads.dw = Tensor::empty(w_shape, DType::kFloat32, x.device());
  if (with_bias) grads.db = Tensor::empty({g.f}, DType::kFloat32, x.device());
  if (grads.dw.numel() == 0 && !with_bias) return grads;
  if (with_bias && g.f > 0) {
    if (dy.numel() == 0) {
      zero_fill(grads.db);
    } else {
      grads.db = column_sums(dy);  // not cudnnConvolutionBackwardBias: see column_sums.h
    }
  }
  if (grads.dw.numel() == 0) return grads;
  if (is_empty(g) || dy.numel() == 0) {  // no images (or no output pixels): the sums are empty
    zero_fill(grads.dw);
    return grads;
  }
  cudnnHandle_t handle = cudnn_handle(device);
  const Tensor xin = cudnn_input(op, x, g);
  const std::string key = algo_key(Pass::kBackwardFilter, device, g, p);
  run_in_a_layout(op, "kernel-gradient convolution", key, [&](Layout layout, int algo, std::string& refusal) {
    ConvDescs d;
    describe(op, g, p, layout, operand_dtype(), d);
    const bool nhwc = layout == Layout::kNhwc;
    const Tensor xl = compute_operand(
        nhwc ? xin : nhwc_to_nchw(handle, op, xin.data<float>(), g.n, g.c, g.in_h(), g.in_w(), x.device()));
    const Tensor dyl =
        compute_operand(nhwc ? dy : nhwc_to_nchw(handle, op, dy.data<float>(), g.n, g.f, g.oh, g.ow, x.device()));
    Tensor dwl = Tensor::empty({g.f * g.c * g.kh * g.kw}, d.dtype, x.device());
    if (!backward_filter(handle, device, key, layout, algo, d, xl.raw_data(), dyl.raw_data(), dwl.raw_data(),
                         refusal)) {
      return false;
    }
    filter_to_hwio(handle, d.bf16() ? dwl.to(DType::kFloat32) : dwl, g, layout, grads.dw);
    return true;
  });
  return grads;
}

}  // namespace strata::kernels::cuda
