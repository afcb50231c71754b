// Dense layers on the CPU: y = act(x w + b) as one sgemm and one pass over y, and its backward with the
// relu mask and the bias gradient in one pass over dy.
//
// Why fused: in a small MLP step (batch 64, 784-128-10) the separate broadcast add, relu, relu
// gradient and bias reduction were four more passes, four more tensors and three more tape nodes
// beside two products that are already at the machine's peak; the passes here run over data the
// product has just left in L1/L2.
// Under ComputePrecision::kBFloat16 (mixed precision) the three products run in bf16 (cpu/bf16_gemm.h), the forward
// one with the bias and relu as its post-ops; the relu mask and the bias gradient stay float32 passes.
// Thread-safety: safe to call concurrently; each call writes only the tensors it allocates.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <vector>

#include "kernels/compute_precision.h"
#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernel_checks.h"
#include "kernels/kernels.h"
#include "strata/threading.h"

namespace strata::kernels {

namespace {

// Rows per parallel chunk so that a chunk holds about cpu::kGrain elements.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, cpu::kGrain / std::max<int64_t>(cols, 1)); }

// The passes below are compiled for AVX-512, AVX2 and the baseline and picked at load, as Adam's loop is
// (optimizers.cc); the baseline build is SSE2 only.
#define STRATA_DENSE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

// Over `rows` rows of n: z = y > 0 ? d : 0, and acc += z when acc is given. Branch-free so that it
// vectorizes (a branch on the sign mispredicted on half the elements: 4x slower).
STRATA_DENSE_CLONES void relu_mask_rows(const float* __restrict y, const float* __restrict d, float* __restrict z,
                                        float* __restrict acc, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r, y += n, d += n, z += n) {
    if (acc != nullptr) {
      for (int64_t j = 0; j < n; ++j) {
        const float dj = d[j];  // loaded unconditionally, so the select becomes a vector blend
        const float v = y[j] > 0.0f ? dj : 0.0f;
        z[j] = v;
        acc[j] += v;
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        const float dj = d[j];
        z[j] = y[j] > 0.0f ? dj : 0.0f;
      }
    }
  }
}

// acc += each of `rows` rows of d.
STRATA_DENSE_CLONES void add_rows(const float* __restrict d, float* __restrict acc, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r, d += n)
    for (int64_t j = 0; j < n; ++j) acc[j] += d[j];
}

// Each of `rows` rows of y: y + b, relu'd when asked (b may be null).
STRATA_DENSE_CLONES void bias_relu_rows(float* __restrict y, const float* __restrict b, bool relu, int64_t rows,
                                        int64_t n) {
  for (int64_t r = 0; r < rows; ++r, y += n) {
    if (b != nullptr && relu) {
      for (int64_t j = 0; j < n; ++j) y[j] = std::max(y[j] + b[j], 0.0f);
    } else if (b != nullptr) {
      for (int64_t j = 0; j < n; ++j) y[j] += b[j];
    } else {
      for (int64_t j = 0; j < n; ++j) y[j] = std::max(y[j], 0.0f);
    }
  }
}

void check_sgemm(dnnl_status_t st, const char* what, const Tensor& a, const Tensor& b) {
  STRATA_CHECK(st == dnnl_success, Error,
               "dense: oneDNN sgemm failed (status " << static_cast<int>(st) << ") for " << what << " of "
                                                     << a.shape_str() << " and " << b.shape_str());
}

}  // namespace

Tensor dense(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  if (on_cuda("dense", {&x, &w})) STRATA_CUDA_KERNEL(return cuda::dense(x, w, bias, relu));
  cpu::require_host("dense", {&x, &w});
  const DenseShape d = dense_shape(x, w);
  const int64_t M = d.M, K = d.K, N = d.N;
  if (bias.defined()) {
    cpu::require_host("dense", {&bias});
    check_dense_bias(bias, w);
  }
  Tensor y = Tensor::empty({M, N});
  if (y.numel() == 0) return y;
  float* py = y.data<float>();
  if (K > 0 && compute_precision() == ComputePrecision::kBFloat16) {
    cpu::gemm_bf16("dense", {.M = M, .N = N, .K = K}, x.data<float>(), w.data<float>(), py,
                   bias.defined() ? bias.data<float>() : nullptr, relu);
    return y;
  }
  if (K == 0) {
    std::fill(py, py + M * N, 0.0f);
  } else {
    cpu::sync_dnnl_threads();
    check_sgemm(dnnl_sgemm('N', 'N', M, N, K, 1.0f, x.data<float>(), K, w.data<float>(), N, 0.0f, py, N), "x w", x, w);
  }
  if (!bias.defined() && !relu) return y;
  const float* pb = bias.defined() ? bias.data<float>() : nullptr;
  parallel_for(0, M, row_grain(N), [=](int64_t r0, int64_t r1) { bias_relu_rows(py + r0 * N, pb, relu, r1 - r0, N); });
  return y;
}

DenseGrads dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, bool want_dx,
                          bool want_dw, bool want_db) {
  if (on_cuda("dense_backward", {&x, &w, &dy})) {
    STRATA_CUDA_KERNEL(return cuda::dense_backward(x, w, y, dy, relu, want_dx, want_dw, want_db));
  }
  cpu::require_host("dense_backward", {&x, &w, &dy});
  cpu::require_float("dense_backward", {&x, &w, &dy});
  const int64_t M = x.dim(0), K = x.dim(1), N = w.dim(1);
  check_dense_backward_dy(x, w, y, dy, relu);
  DenseGrads g;
  // dz: dy through relu's mask (y > 0 exactly where the pre-activation is), with the bias gradient's
  // column sums taken in the same pass; the blocks' float sums add up in double.
  Tensor dz = dy;
  if (relu || want_db) {
    if (relu) dz = Tensor::empty({M, N});
    const float* pdy = dy.data<float>();
    const float* py = relu ? y.data<float>() : nullptr;
    float* pdz = relu ? dz.data<float>() : nullptr;
    // Blocks of `grain` rows, each summing into its own partial row, so the result does not depend on
    // the thread count.
    const int64_t grain = row_grain(N);
    const int64_t blocks = (M + grain - 1) / grain;
    std::vector<float> partial(want_db ? static_cast<size_t>(blocks * N) : 0, 0.0f);
    float* pp = partial.data();
    parallel_for(0, blocks, 1, [=](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        float* acc = want_db ? pp + b * N : nullptr;
        const int64_t r0 = b * grain, rows = std::min(M, r0 + grain) - r0;
        if (relu) {
          relu_mask_rows(py + r0 * N, pdy + r0 * N, pdz + r0 * N, acc, rows, N);
        } else {
          add_rows(pdy + r0 * N, acc, rows, N);
        }
      }
    });
    if (want_db) {
      g.db = Tensor::empty({N});
      float* pdb = g.db.data<float>();
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t b = 0; b < blocks; ++b) s += pp[b * N + j];
        pdb[j] = static_cast<float>(s);
      }
    }
  }
  const float* pz = dz.data<float>();
  const bool bf16 = compute_precision() == ComputePrecision::kBFloat16;
  if (want_dw || want_dx) cpu::sync_dnnl_threads();
  // bf16: dz is an operand of both products, so it is rounded once (scratch slot 3; the products use 0-2).
  const void* dz_bf16 = nullptr;
  if (bf16 && M * N * K > 0 && (want_dw || want_dx)) {
    void* buffer = cpu::thread_scratch(3, static_cast<size_t>(M * N) * 2);
    cpu::to_bf16("dense_backward", pz, buffer, M * N);
    dz_bf16 = buffer;
  }
  if (want_dw) {
    g.dw = Tensor::empty({K, N});
    if (M == 0) {
      g.dw.fill_(0.0);
    } else if (K * N > 0 && bf16) {
      cpu::gemm_bf16("dense_backward", {.M = K, .N = N, .K = M, .ta = true}, x.data<float>(), nullptr,
                     g.dw.data<float>(), nullptr, false, nullptr, dz_bf16);
    } else if (K * N > 0) {
      // dw = x^T dz: [K, M] x [M, N].
      check_sgemm(dnnl_sgemm('T', 'N', K, N, M, 1.0f, x.data<float>(), K, pz, N, 0.0f, g.dw.data<float>(), N), "x^T dy",
                  x, dy);
    }
  }
  if (want_dx) {
    g.dx = Tensor::empty({M, K});
    if (N == 0) {
      g.dx.fill_(0.0);
    } else if (M * K > 0 && bf16) {
      cpu::gemm_bf16("dense_backward", {.M = M, .N = K, .K = N, .tb = true}, nullptr, w.data<float>(),
                     g.dx.data<float>(), nullptr, false, dz_bf16);
    } else if (M * K > 0) {
      // dx = dz w^T: [M, N] x [N, K].
      check_sgemm(dnnl_sgemm('N', 'T', M, K, N, 1.0f, pz, N, w.data<float>(), N, 0.0f, g.dx.data<float>(), K), "dy w^T",
                  dy, w);
    }
  }
  return g;
}

}  // namespace strata::kernels
