// Matrix products in bfloat16 on the CPU for mixed precision (kernels/compute_precision.h): the float32 operands are
// rounded to bfloat16 by oneDNN reorders into per-thread scratch, multiplied by oneDNN's bf16 matmul primitive
// (brgemm on avx512_core_bf16 / AMX), accumulated and written in float32, with an optional float32 bias and relu
// fused as the primitive's post-ops.
// Thread-safety: safe to call concurrently (per-thread scratch and stream, the shared primitive cache).
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

// C[batch, M, N] = op(A) op(B) (+ bias[N]) (then relu): A holds `a_batch` matrices [M, K] ([K, M] when ta) and B
// `b_batch` matrices [K, N] ([N, K] when tb), each 1 (shared by every output matrix) or `batch`. Row-major and
// contiguous; C is written whole.
struct Bf16Gemm {
  int64_t batch = 1, a_batch = 1, b_batch = 1;
  int64_t M = 0, N = 0, K = 0;
  bool ta = false, tb = false;
};
// REQUIRES: M, N, K > 0. `bias` may be null. Throws strata::Error naming `op` when oneDNN fails.
// `a_bf16` / `b_bf16`, when given, are A / B already rounded (to_bf16) and are used instead of converting A / B (which
// may then be null): an operand of two products is rounded once. They must not be in scratch slots 0-2.
void gemm_bf16(const char* op, const Bf16Gemm& g, const float* A, const float* B, float* C, const float* bias = nullptr,
               bool relu = false, const void* a_bf16 = nullptr, const void* b_bf16 = nullptr);

// Rounds n float32 values to bfloat16 through a (cached) oneDNN reorder.
void to_bf16(const char* op, const float* src, void* dst, int64_t n);

}  // namespace strata::kernels::cpu
