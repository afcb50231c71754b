// Row-major float32 products on cuBLAS, shared by the matmul, dense and reduction kernels (defined in matmul.cc).
// Built only with STRATA_WITH_CUDA. Thread-safety: as the cuBLAS handle passed in (one per thread and device).
#pragma once

#include <cublas_v2.h>

#include <cstdint>

namespace strata::kernels::cuda {

// C[M, N] = op(A) op(B) for `batch` row-major matrices (A [M, K], or [K, M] when ta; B [K, N], or [N, K] when tb)
// at the given element strides between matrices (0: shared), queued on the handle's stream. Needs M, N, K > 0.
// Throws Unavailable with cuBLAS's message on failure.
void sgemm_rows(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t stride_a,
                const float* B, int64_t stride_b, float* C, int64_t stride_c, int64_t batch);

}  // namespace strata::kernels::cuda
