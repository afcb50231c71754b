// Matrix products on the CPU through oneDNN's sgemm (row-major, OpenMP-threaded).
//
// oneDNN was chosen over OpenBLAS's cblas_sgemm by measurement on this machine (x86-64 with AVX-512):
// it was as fast or faster on 256x784x128, its two backward products and 1024^3, at 1 and 2
// threads, and it threads through OpenMP, whose thread count is a per-thread setting, so
// strata::num_threads() of the calling thread is honoured without touching a global pool.
// Under ComputePrecision::kBFloat16 (mixed precision) a product runs as one batched oneDNN bf16 matmul instead
// (cpu/bf16_gemm.h), a shared operand broadcast by the primitive.
// Thread-safety: safe to call concurrently; each call sets only the calling thread's OpenMP count.
#include <oneapi/dnnl/dnnl.h>

#include <atomic>

#include "kernels/compute_precision.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernel_checks.h"
#include "kernels/kernels.h"

namespace strata::kernels {

namespace {

// Below this many multiply-adds per matrix a batch runs one matrix per thread instead of
// threading each product.
constexpr int64_t kSmallGemm = int64_t{1} << 21;

// C[M, N] = op(A) op(B), row-major. Returns the oneDNN status.
dnnl_status_t sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  const int64_t lda = ta ? M : K;
  const int64_t ldb = tb ? K : N;
  return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
}

void check_status(dnnl_status_t st, const Tensor& a, const Tensor& b) {
  STRATA_CHECK(st == dnnl_success, Error,
               "matmul: oneDNN sgemm failed (status " << static_cast<int>(st) << ") for " << a.shape_str() << " x "
                                                      << b.shape_str());
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  if (on_cuda("matmul", {&a, &b})) STRATA_CUDA_KERNEL(return cuda::matmul(a, b, trans_a, trans_b));
  cpu::require_host("matmul", {&a, &b});
  const MatmulShape s = matmul_shape(a, b, trans_a, trans_b);
  const int64_t M = s.M, N = s.N, K = s.K, Ba = s.Ba, Bb = s.Bb, batch = s.batch;
  const bool batched = s.batched;
  Tensor out = Tensor::empty(s.out_shape());
  if (out.numel() == 0) return out;
  if (K == 0) {
    out.fill_(0.0);
    return out;
  }

  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = out.data<float>();
  cpu::sync_dnnl_threads();  // dnnl_sgemm threads like the other oneDNN calls

  if (compute_precision() == ComputePrecision::kBFloat16) {
    cpu::Bf16Gemm g{.batch = batch, .a_batch = Ba, .b_batch = Bb, .M = M, .N = N, .K = K, .ta = trans_a, .tb = trans_b};
    if (!batched || (a.rank() == 3 && b.rank() == 2 && !trans_a)) {
      g = {.M = Ba * M, .N = N, .K = K, .ta = trans_a, .tb = trans_b};  // as one product, like the sgemm path
    }
    cpu::gemm_bf16("matmul", g, pa, pb, pc);
    return out;
  }

  // One product: both 2-D, or a batch of A rows against a shared B ([B*M, K] x [K, N]).
  if (!batched || (a.rank() == 3 && b.rank() == 2 && !trans_a)) {
    check_status(sgemm(trans_a, trans_b, Ba * M, N, K, pa, pb, pc), a, b);
    return out;
  }

  // A batch: operand strides are 0 for a shared (rank-2 or batch-1) operand.
  const int64_t stride_a = Ba == 1 ? 0 : M * K;
  const int64_t stride_b = Bb == 1 ? 0 : K * N;
  const int64_t stride_c = M * N;
  if (M * N * K >= kSmallGemm || num_threads() == 1) {
    for (int64_t i = 0; i < batch; ++i) {
      check_status(sgemm(trans_a, trans_b, M, N, K, pa + i * stride_a, pb + i * stride_b, pc + i * stride_c), a, b);
    }
    return out;
  }
  // Small matrices: one per thread; sgemm inside a parallel region runs on its own thread.
  std::atomic<int> failure{static_cast<int>(dnnl_success)};
  parallel_for(0, batch, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const dnnl_status_t st =
          sgemm(trans_a, trans_b, M, N, K, pa + i * stride_a, pb + i * stride_b, pc + i * stride_c);
      if (st != dnnl_success) failure.store(static_cast<int>(st));
    }
  });
  check_status(static_cast<dnnl_status_t>(failure.load()), a, b);
  return out;
}

}  // namespace strata::kernels
