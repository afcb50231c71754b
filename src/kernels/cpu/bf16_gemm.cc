// bf16 matrix products through oneDNN's matmul primitive (see bf16_gemm.h).
//
// Transposed operands are described by strides, so no operand is transposed in memory; a shared operand has batch 1
// and the primitive broadcasts it. The rounded copies live in scratch slots 1 (A) and 2 (B); slot 0 is execute()'s
// scratchpad.
// Thread-safety: see bf16_gemm.h.
#include "kernels/cpu/bf16_gemm.h"

#include "kernels/cpu/dnnl_util.h"
#include "strata/error.h"

namespace strata::kernels::cpu {

namespace {

using dnnl::memory;
using dt = memory::data_type;

struct MatmulEntry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

// [b, rows, cols] stored as b matrices of [rows, cols], or of [cols, rows] when `transposed`.
memory::desc matrix_desc(int64_t b, int64_t rows, int64_t cols, bool transposed, dt type) {
  const memory::dims strides = transposed ? memory::dims{rows * cols, 1, rows} : memory::dims{rows * cols, cols, 1};
  return memory::desc({b, rows, cols}, type, strides);
}

}  // namespace

void to_bf16(const char* op, const float* src, void* dst, int64_t n) {
  const memory::desc from({n}, dt::f32, memory::format_tag::a);
  const memory::desc to({n}, dt::bf16, memory::format_tag::a);
  reorder(op, memory(from, dnnl_engine(), const_cast<float*>(src)), memory(to, dnnl_engine(), dst));
}

void gemm_bf16(const char* op, const Bf16Gemm& g, const float* A, const float* B, float* C, const float* bias,
               bool relu, const void* a_bf16, const void* b_bf16) {
  STRATA_CHECK(g.M > 0 && g.N > 0 && g.K > 0 && (g.a_batch == 1 || g.a_batch == g.batch) &&
                   (g.b_batch == 1 || g.b_batch == g.batch),
               InvalidArgument,
               op << ": bf16 product of [" << g.a_batch << ", " << g.M << ", " << g.K << "] and [" << g.b_batch << ", "
                  << g.K << ", " << g.N << "] into batch " << g.batch << " is not a product gemm_bf16 runs");
  const memory::desc a_desc = matrix_desc(g.a_batch, g.M, g.K, g.ta, dt::bf16);
  const memory::desc b_desc = matrix_desc(g.b_batch, g.K, g.N, g.tb, dt::bf16);
  const memory::desc c_f32 = matrix_desc(g.batch, g.M, g.N, false, dt::f32);
  const memory::desc bias_f32 = bias ? memory::desc({1, 1, g.N}, dt::f32, memory::dims{g.N, g.N, 1}) : memory::desc();

  CacheKey key("matmul_bf16");
  key << g.batch << g.a_batch << g.b_batch << g.M << g.N << g.K << g.ta << g.tb << (bias != nullptr) << relu;
  auto entry = cached<MatmulEntry>(key, [&] {
    return dnnl_call(op, [&] {
      dnnl::primitive_attr attr = default_attr();
      if (relu) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(ops);
      }
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_desc, b_desc, bias_f32, c_f32), attr, dnnl_engine());
      return std::make_shared<const MatmulEntry>(MatmulEntry{pd, dnnl::matmul(pd)});
    });
  });

  const int64_t a_elems = g.a_batch * g.M * g.K, b_elems = g.b_batch * g.K * g.N;
  void* a_copy = const_cast<void*>(a_bf16);
  void* b_copy = const_cast<void*>(b_bf16);
  if (a_copy == nullptr) {
    a_copy = thread_scratch(1, static_cast<size_t>(a_elems) * 2);
    to_bf16(op, A, a_copy, a_elems);
  }
  if (b_copy == nullptr) {
    b_copy = thread_scratch(2, static_cast<size_t>(b_elems) * 2);
    to_bf16(op, B, b_copy, b_elems);
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(a_desc, dnnl_engine(), a_copy)},
                                       {DNNL_ARG_WEIGHTS, memory(b_desc, dnnl_engine(), b_copy)},
                                       {DNNL_ARG_DST, memory(c_f32, dnnl_engine(), C)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(bias_f32, dnnl_engine(), const_cast<float*>(bias)));
  execute(op, entry->prim, entry->pd, std::move(args));
}

}  // namespace strata::kernels::cpu
