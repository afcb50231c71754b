// Row-major products on cuBLAS, shared by the matmul, dense and reduction kernels (defined in matmul.cc): float32
// ones, and those of mixed precision (kernels/compute_precision.h), whose operands are bfloat16 copies and whose
// output and accumulation are float32. Built only with STRATA_WITH_CUDA. Thread-safety: as the cuBLAS handle passed
// in (one per thread and device).
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "strata/tensor.h"

namespace strata::kernels::cuda {

// C[M, N] = op(A) op(B) for `batch` row-major matrices (A [M, K], or [K, M] when ta; B [K, N], or [N, K] when tb)
// at the given element strides between matrices (0: shared), queued on the handle's stream. Needs M, N, K > 0.
// Throws Unavailable with cuBLAS's message on failure.
void sgemm_rows(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t stride_a,
                const float* B, int64_t stride_b, float* C, int64_t stride_c, int64_t batch);

// The product of sgemm_rows for operands A and B as compute_operand (compute_operand.h) made them, holding the
// matrices' elements: both float32 runs sgemm_rows; both bfloat16 runs cublasGemmEx (cublasGemmStridedBatchedEx for a
// batch) on CUDA_R_16BF inputs with CUBLAS_COMPUTE_32F, so products accumulate in float32, and writes float32 C.
// Throws InvalidArgument naming `op` when A and B differ in dtype or are neither.
void gemm_rows(const char* op, cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Tensor& A,
               int64_t stride_a, const Tensor& B, int64_t stride_b, float* C, int64_t stride_c, int64_t batch);

}  // namespace strata::kernels::cuda
