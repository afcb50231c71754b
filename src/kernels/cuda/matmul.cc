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
#include "kernels/kernel_checks.h"

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
  const MatmulShape s = matmul_shape(a, b, trans_a, trans_b);  // the CPU kernel's checks and messages
  const int64_t M = s.M, N = s.N, K = s.K, Ba = s.Ba, Bb = s.Bb, batch = s.batch;
  const bool batched = s.batched;
  const Device dev = a.device();
  if (K == 0) return zeros_on(s.out_shape(), DType::kFloat32, dev);
  Tensor out = Tensor::empty(s.out_shape(), DType::kFloat32, dev);
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
