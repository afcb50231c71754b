// Dense layers on a GPU: y = relu?(x w + bias) as one cuBLASLt product whose epilogue adds the bias and applies relu
// (CUBLASLT_EPILOGUE_BIAS / RELU_BIAS, float32 compute, no TF32), and the backward as cuBLAS products, the relu mask
// one Thrust pass over dy, and the bias gradient a cuBLAS product of dz with a vector of ones.
//
// Layout: the row-major y [M, N] is the column-major [N, M] at the same address, so cuBLASLt computes
// D (N x M) = W (N x K) * X (K x M); the bias then runs along D's rows (N of them), as the epilogue wants. Should
// cuBLASLt offer no algorithm for a shape (or the bias be misaligned for it), the product runs through cublasSgemm
// and a Thrust pass adds the bias and relu.
// Mixed precision (kernels/compute_precision.h), as the CPU's dense: under ComputePrecision::kBFloat16 the three
// products take bfloat16 copies of their operands (compute_operand.h; dz is rounded once for both backward products)
// and accumulate and write float32: cuBLASLt with CUDA_R_16BF A and B, float32 C, D and bias, and cublasGemmEx for
// the others. The relu mask and the bias gradient stay float32. Built, not yet run on a GPU.
// Thread-safety: as kernels.h; each call uses the calling thread's handles and the device's stream.
#include <thrust/execution_policy.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda/compute_operand.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_rows.h"
#include "kernels/cuda/library_handles.h"
#include "kernels/kernel_checks.h"

namespace strata::kernels::cuda {

namespace {

constexpr size_t kLtWorkspace = size_t{32} << 20;  // what cuBLASLt may use (NVIDIA suggests 32 MiB on Hopper)

// y[i] = relu?(y[i] + bias[i % n]) (bias may be null).
struct BiasRelu {
  float* y;
  const float* bias;
  int64_t n;
  bool relu;
  __device__ void operator()(int64_t i) const {
    float v = y[i];
    if (bias != nullptr) v += bias[i % n];
    y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
  }
};

// dz = y > 0 ? dy : 0 (relu's mask, from its output).
struct ReluMask {
  __device__ float operator()(float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};

// Destroys cuBLASLt descriptors on every path out.
struct LtObjects {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtObjects() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// The largest power of two, up to 256, that divides the address.
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// The bias vector's alignment the epilogue is trusted with (a vector is loaded 16 bytes at a time).
constexpr uint32_t kBiasAlignment = 16;

// The cuBLASLt type of a product's operands (both float32 or both bfloat16, as compute_operand makes them).
cudaDataType_t operand_type(const Tensor& t) { return t.dtype() == DType::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F; }

// y = epilogue(x w) through cuBLASLt, x and w float32 or bfloat16 (y and bias float32); false (nothing queued)
// when cuBLASLt has no algorithm for it.
bool lt_dense(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, Tensor& y) {
  if (bias.defined() && alignment_of(bias.data<float>()) < kBiasAlignment) return false;
  const int64_t M = x.dim(0), K = x.dim(1), N = w.dim(1);
  const int device = x.device().index;
  cublasLtHandle_t lt = cublaslt_handle(device);
  cudaStream_t stream = stream_of(x);
  LtObjects o;
  check_cublas(cublasLtMatmulDescCreate(&o.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "dense: cublasLtMatmulDescCreate");
  const cublasOperation_t no_trans = CUBLAS_OP_N;
  check_cublas(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSA, &no_trans, sizeof(no_trans)),
               "dense: cublasLtMatmulDescSetAttribute(TRANSA)");
  check_cublas(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)),
               "dense: cublasLtMatmulDescSetAttribute(TRANSB)");
  const cublasLtEpilogue_t epilogue = bias.defined() ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                                     : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  check_cublas(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
               "dense: cublasLtMatmulDescSetAttribute(EPILOGUE)");
  if (bias.defined()) {
    const void* pb = bias.data<float>();
    check_cublas(cublasLtMatmulDescSetAttribute(o.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pb, sizeof(pb)),
                 "dense: cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  // Column-major views: W is N x K (ld N), X is K x M (ld K), Y is N x M (ld N).
  check_cublas(cublasLtMatrixLayoutCreate(&o.a, operand_type(w), N, K, N), "dense: cublasLtMatrixLayoutCreate(w)");
  check_cublas(cublasLtMatrixLayoutCreate(&o.b, operand_type(x), K, M, K), "dense: cublasLtMatrixLayoutCreate(x)");
  check_cublas(cublasLtMatrixLayoutCreate(&o.d, CUDA_R_32F, N, M, N), "dense: cublasLtMatrixLayoutCreate(y)");
  check_cublas(cublasLtMatmulPreferenceCreate(&o.pref), "dense: cublasLtMatmulPreferenceCreate");
  const uint64_t ws_bytes = kLtWorkspace;
  check_cublas(cublasLtMatmulPreferenceSetAttribute(o.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                    sizeof(ws_bytes)),
               "dense: cublasLtMatmulPreferenceSetAttribute");
  // cuBLASLt assumes 256-byte aligned operands unless told: a view (a batch's rows) may start anywhere.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> operands[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, w.raw_data()},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, x.raw_data()},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, y.data<float>()},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, y.data<float>()}};
  for (const auto& [attribute, pointer] : operands) {
    const uint32_t alignment = alignment_of(pointer);
    check_cublas(cublasLtMatmulPreferenceSetAttribute(o.pref, attribute, &alignment, sizeof(alignment)),
                 "dense: cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, o.op, o.a, o.b, o.d, o.d, o.pref, 1, &result, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  check_cublas(st, "dense: cublasLtMatmulAlgoGetHeuristic");
  void* ws = workspace(device, kLtWorkspace);
  const float one = 1.0f, zero = 0.0f;
  float* py = y.data<float>();
  check_cublas(cublasLtMatmul(lt, o.op, &one, w.raw_data(), o.a, x.raw_data(), o.b, &zero, py, o.d, py, o.d,
                              &result.algo, ws, kLtWorkspace, stream),
               "dense: cublasLtMatmul");
  return true;
}

}  // namespace

Tensor dense(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  const DenseShape d = dense_shape(x, w);  // the CPU kernel's checks and messages
  const int64_t M = d.M, K = d.K, N = d.N;
  if (bias.defined()) {
    check_same_device("dense", {&x, &bias});
    check_dense_bias(bias, w);
  }
  const Device dev = x.device();
  if (M * N == 0) return Tensor::empty({M, N}, DType::kFloat32, dev);
  cudaStream_t stream = stream_of(x);
  Tensor y;
  if (K == 0) {
    y = zeros_on({M, N}, DType::kFloat32, dev);
  } else {
    y = Tensor::empty({M, N}, DType::kFloat32, dev);
    const Tensor xo = compute_operand(x), wo = compute_operand(w);
    if (!bias.defined() && !relu) {
      gemm_rows("dense", cublas_handle(dev.index), false, false, M, N, K, xo, 0, wo, 0, y.data<float>(), 0, 1);
      return y;
    }
    if (lt_dense(xo, wo, bias, relu, y)) return y;
    gemm_rows("dense", cublas_handle(dev.index), false, false, M, N, K, xo, 0, wo, 0, y.data<float>(), 0, 1);
  }
  if (!bias.defined() && !relu) return y;
  thrust::for_each_n(thrust::cuda::par_nosync.on(stream), thrust::counting_iterator<int64_t>(0), M * N,
                     BiasRelu{y.data<float>(), bias.defined() ? bias.data<float>() : nullptr, N, relu});
  return y;
}

DenseGrads dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, bool want_dx,
                          bool want_dw, bool want_db) {
  check_dtype("dense_backward", x, DType::kFloat32);
  check_dtype("dense_backward", w, DType::kFloat32);
  check_dtype("dense_backward", dy, DType::kFloat32);
  STRATA_CHECK(x.rank() == 2 && w.rank() == 2, ShapeError,
               "dense_backward: wants x [M, K] and w [K, N], got x " << x.shape_str() << " and w " << w.shape_str());
  const int64_t M = x.dim(0), K = x.dim(1), N = w.dim(1);
  check_dense_backward_dy(x, w, y, dy, relu);
  if (relu) {
    check_same_device("dense_backward", {&dy, &y});
    check_dtype("dense_backward", y, DType::kFloat32);
  }
  const Device dev = x.device();
  cudaStream_t stream = stream_of(x);
  auto policy = thrust::cuda::par_nosync.on(stream);
  DenseGrads g;
  Tensor dz = dy;
  if (relu && M * N > 0) {
    dz = Tensor::empty({M, N}, DType::kFloat32, dev);
    thrust::transform(policy, y.data<float>(), y.data<float>() + M * N, dy.data<float>(), dz.data<float>(), ReluMask{});
  }
  cublasHandle_t h = (want_db || want_dw || want_dx) ? cublas_handle(dev.index) : nullptr;
  const float* pz = dz.data<float>();
  // dz as both products read it: rounded once under bf16, as the CPU kernel does.
  const Tensor zo = (want_dw || want_dx) && M * N * K > 0 ? compute_operand(dz) : Tensor();
  if (want_db) {
    if (M == 0 || N == 0) {
      g.db = zeros_on({N}, DType::kFloat32, dev);
    } else {
      // db = the column sums of dz [M, N]: dz's column-major view (N x M, ld N) times a vector of M ones.
      g.db = Tensor::empty({N}, DType::kFloat32, dev);
      Tensor ones = Tensor::empty({M}, DType::kFloat32, dev);
      thrust::fill_n(policy, ones.data<float>(), M, 1.0f);
      const float one = 1.0f, zero = 0.0f;
      check_cublas(
          cublasSgemv_64(h, CUBLAS_OP_N, N, M, &one, pz, N, ones.data<float>(), 1, &zero, g.db.data<float>(), 1),
          "dense_backward: cublasSgemv (bias gradient)");
    }
  }
  if (want_dw) {
    if (M == 0 || K * N == 0) {
      g.dw = zeros_on({K, N}, DType::kFloat32, dev);
    } else {
      g.dw = Tensor::empty({K, N}, DType::kFloat32, dev);
      gemm_rows("dense_backward", h, true, false, K, N, M, compute_operand(x), 0, zo, 0, g.dw.data<float>(), 0,
                1);  // x^T dz
    }
  }
  if (want_dx) {
    if (N == 0 || M * K == 0) {
      g.dx = zeros_on({M, K}, DType::kFloat32, dev);
    } else {
      g.dx = Tensor::empty({M, K}, DType::kFloat32, dev);
      gemm_rows("dense_backward", h, false, true, M, K, N, zo, 0, compute_operand(w), 0, g.dx.data<float>(), 0,
                1);  // dz w^T
    }
  }
  return g;
}

}  // namespace strata::kernels::cuda
