// Matrix products on a GPU through cuBLAS (float32, no TF32: the handle keeps CUBLAS_DEFAULT_MATH).
//
// strata's matrices are row-major and cuBLAS's column-major: a row-major [M, N] is the column-major [N, M] at the
// same address, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, i.e. cuBLAS gets B first, A second, and
// the dimensions (N, M, K) with the leading dimensions the row-major rows have. A batch is one strided-batched call;
// a shared (rank-2 or batch-1) operand has stride 0.
// Mixed precision (kernels/compute_precision.h): under ComputePrecision::kBFloat16 both operands are rounded to
// bfloat16 copies (compute_operand) and cublasGemmEx / cublasGemmStridedBatchedEx multiply them with float32
// accumulation into the float32 output, as the CPU's oneDNN bf16 matmul does. Built, not yet run on a GPU.
// Thread-safety: as kernels.h; each call uses the calling thread's cuBLAS handle on the device's stream.
#include <cuda_runtime_api.h>

#include "kernels/cuda/compute_operand.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_rows.h"
#include "kernels/cuda/library_handles.h"
#include "kernels/kernel_checks.h"

namespace strata::kernels::cuda {

namespace {

// A row-major product as cuBLAS's column-major C^T = op(B)^T op(A)^T sees it.
struct ColumnMajorProduct {
  cublasOperation_t op_a, op_b;
  int64_t lda, ldb;  // the row lengths of A and B as stored
};

ColumnMajorProduct column_major(bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  return {ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? M : K, tb ? K : N};
}

void bf16_gemm_rows(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A,
                    int64_t stride_a, const void* B, int64_t stride_b, float* C, int64_t stride_c, int64_t batch) {
  const float one = 1.0f, zero = 0.0f;
  const ColumnMajorProduct p = column_major(ta, tb, M, N, K);
  if (batch == 1) {
    check_cublas(cublasGemmEx_64(h, p.op_b, p.op_a, N, M, K, &one, B, CUDA_R_16BF, p.ldb, A, CUDA_R_16BF, p.lda, &zero,
                                 C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "matmul: cublasGemmEx (bf16)");
  } else {
    check_cublas(cublasGemmStridedBatchedEx_64(h, p.op_b, p.op_a, N, M, K, &one, B, CUDA_R_16BF, p.ldb, stride_b, A,
                                               CUDA_R_16BF, p.lda, stride_a, &zero, C, CUDA_R_32F, N, stride_c, batch,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "matmul: cublasGemmStridedBatchedEx (bf16)");
  }
}

}  // namespace

void sgemm_rows(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t stride_a,
                const float* B, int64_t stride_b, float* C, int64_t stride_c, int64_t batch) {
  const float one = 1.0f, zero = 0.0f;
  const ColumnMajorProduct p = column_major(ta, tb, M, N, K);
  if (batch == 1) {
    check_cublas(cublasSgemm_64(h, p.op_b, p.op_a, N, M, K, &one, B, p.ldb, A, p.lda, &zero, C, N),
                 "matmul: cublasSgemm");
  } else {
    check_cublas(cublasSgemmStridedBatched_64(h, p.op_b, p.op_a, N, M, K, &one, B, p.ldb, stride_b, A, p.lda, stride_a,
                                              &zero, C, N, stride_c, batch),
                 "matmul: cublasSgemmStridedBatched");
  }
}

void gemm_rows(const char* op, cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Tensor& A,
               int64_t stride_a, const Tensor& B, int64_t stride_b, float* C, int64_t stride_c, int64_t batch) {
  STRATA_CHECK(A.dtype() == B.dtype() && (A.dtype() == DType::kFloat32 || A.dtype() == DType::kBFloat16),
               InvalidArgument,
               op << ": internal error: a product of " << dtype_name(A.dtype()) << " and " << dtype_name(B.dtype())
                  << " operands (wants both float32 or both bfloat16)");
  if (A.dtype() == DType::kFloat32) {
    sgemm_rows(h, ta, tb, M, N, K, A.data<float>(), stride_a, B.data<float>(), stride_b, C, stride_c, batch);
  } else {
    bf16_gemm_rows(h, ta, tb, M, N, K, A.raw_data(), stride_a, B.raw_data(), stride_b, C, stride_c, batch);
  }
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const MatmulShape s = matmul_shape(a, b, trans_a, trans_b);  // the CPU kernel's checks and messages
  const int64_t M = s.M, N = s.N, K = s.K, Ba = s.Ba, Bb = s.Bb, batch = s.batch;
  const bool batched = s.batched;
  const Device dev = a.device();
  if (K == 0) return zeros_on(s.out_shape(), DType::kFloat32, dev);
  Tensor out = Tensor::empty(s.out_shape(), DType::kFloat32, dev);
  if (out.numel() == 0) return out;
  cublasHandle_t h = cublas_handle(dev.index);
  const Tensor pa = compute_operand(a), pb = compute_operand(b);
  float* pc = out.data<float>();
  // One product: both 2-D, or a batch of A rows against a shared B ([B*M, K] x [K, N]).
  if (!batched || (a.rank() == 3 && b.rank() == 2 && !trans_a)) {
    gemm_rows("matmul", h, trans_a, trans_b, Ba * M, N, K, pa, 0, pb, 0, pc, 0, 1);
    return out;
  }
  gemm_rows("matmul", h, trans_a, trans_b, M, N, K, pa, Ba == 1 ? 0 : M * K, pb, Bb == 1 ? 0 : K * N, pc, M * N, batch);
  return out;
}

}  // namespace strata::kernels::cuda
