// Matrix products on a GPU through cuBLAS (float32, no TF32: the handle keeps CUBLAS_DEFAULT_MATH).
//
// strata's matrices are row-major and cuBLAS's column-major: a row-major [M, N] is the column-major [N, M] at the
// same address, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, i.e. cuBLAS gets B first, A second, and
// the dimensions (N, M, K) with the leading dimensions the row-major rows have. A batch is one strided-batched call;
// a shared (rank-2 or batch-1) operand has stride 0.
// Thread-safety: as kernels.h; each call uses the calling thread's cuBLAS handle on the device's stream.
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_rows.h"
#include "kernels/cuda/library_handles.h"

namespace strata::kernels::cuda {

void sgemm_rows(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t stride_a,
                const float* B, int64_t stride_b, float* C, int64_t stride_c, int64_t batch) {
  const float one = 1.0f, zero = 0.0f;
  const int64_t lda = ta ? M : K;  // row length of A as stored
  const int64_t ldb = tb ? K : N;
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    check_cublas(cublasSgemm_64(h, op_b, op_a, N, M, K, &one, B, ldb, A, lda, &zero, C, N), "matmul: cublasSgemm");
  } else {
    check_cublas(cublasSgemmStridedBatched_64(h, op_b, op_a, N, M, K, &one, B, ldb, stride_b, A, lda, stride_a, &zero,
                                              C, N, stride_c, batch),
                 "matmul: cublasSgemmStridedBatched");
  }
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  check_dtype("matmul", a, DType::kFloat32);
  check_dtype("matmul", b, DType::kFloat32);
  STRATA_CHECK((a.rank() == 2 || a.rank() == 3) && (b.rank() == 2 || b.rank() == 3), ShapeError,
               "matmul: wants rank-2 or rank-3 operands, got " << a.shape_str() << " and " << b.shape_str());
  const int64_t M = trans_a ? a.dim(-1) : a.dim(-2);
  const int64_t Ka = trans_a ? a.dim(-2) : a.dim(-1);
  const int64_t Kb = trans_b ? b.dim(-1) : b.dim(-2);
  const int64_t N = trans_b ? b.dim(-2) : b.dim(-1);
  STRATA_CHECK(Ka == Kb, ShapeError,
               "matmul: inner dimensions differ: a " << a.shape_str() << (trans_a ? " (transposed)" : "") << " and b "
                                                     << b.shape_str() << (trans_b ? " (transposed)" : "") << " give "
                                                     << Ka << " vs " << Kb);
  const int64_t K = Ka;
  const bool batched = a.rank() == 3 || b.rank() == 3;
  const int64_t Ba = a.rank() == 3 ? a.dim(0) : 1;
  const int64_t Bb = b.rank() == 3 ? b.dim(0) : 1;
  if (a.rank() == 3 && b.rank() == 3) {
    STRATA_CHECK(Ba == Bb || Ba == 1 || Bb == 1, ShapeError,
                 "matmul: batch sizes differ: a " << a.shape_str() << " and b " << b.shape_str());
  }
  const int64_t batch = Ba == 1 ? Bb : Ba;
  const Device dev = a.device();
  if (K == 0) return zeros_on(batched ? Shape{batch, M, N} : Shape{M, N}, DType::kFloat32, dev);
  Tensor out = Tensor::empty(batched ? Shape{batch, M, N} : Shape{M, N}, DType::kFloat32, dev);
  if (out.numel() == 0) return out;
  cublasHandle_t h = cublas_handle(dev.index);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = out.data<float>();
  // One product: both 2-D, or a batch of A rows against a shared B ([B*M, K] x [K, N]).
  if (!batched || (a.rank() == 3 && b.rank() == 2 && !trans_a)) {
    sgemm_rows(h, trans_a, trans_b, Ba * M, N, K, pa, 0, pb, 0, pc, 0, 1);
    return out;
  }
  sgemm_rows(h, trans_a, trans_b, M, N, K, pa, Ba == 1 ? 0 : M * K, pb, Bb == 1 ? 0 : K * N, pc, M * N, batch);
  return out;
}

}  // namespace strata::kernels::cuda
