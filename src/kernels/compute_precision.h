// The precision the calling thread's matrix products and convolutions compute in (mixed precision, Keras's
// mixed_bfloat16): float32 by default; inside a ComputePrecisionScope(kBFloat16) the kernels of dense, matmul and
// conv2d (forward and backward) round their float32 operands to bfloat16 and accumulate in float32. On the CPU:
// oneDNN reorders and oneDNN's bf16 primitives, which write float32. On a GPU (kernels/cuda, built but not yet run
// on a GPU): bf16 copies of the operands (cuda/compute_operand.h) into cuBLAS/cuBLASLt products with CUDA_R_16BF
// inputs, CUBLAS_COMPUTE_32F and float32 outputs, and cuDNN bf16 convolutions with float32 compute, whose bf16 output
// is widened to float32. Inputs, outputs and gradients stay float32 tensors either way.
//
// Thread-safety: the setting is per thread (thread_local); a scope must end on the thread that opened it.
#pragma once

#include <cstdint>

namespace strata::kernels {

enum class ComputePrecision : uint8_t { kFloat32, kBFloat16 };

// The calling thread's precision (kFloat32 unless a scope says otherwise).
ComputePrecision compute_precision();

// Sets the calling thread's precision until it ends, then restores the previous one. Nests.
class ComputePrecisionScope {
 public:
  explicit ComputePrecisionScope(ComputePrecision precision);
  ~ComputePrecisionScope();
  ComputePrecisionScope(const ComputePrecisionScope&) = delete;
  ComputePrecisionScope& operator=(const ComputePrecisionScope&) = delete;

 private:
  ComputePrecision previous_;
};

// Whether oneDNN may run bf16 primitives with native instructions on this CPU (its effective ISA holds
// avx512_core_bf16, AMX included; ONEDNN_MAX_CPU_ISA lowers it). Without them oneDNN 2.6 has no bf16 matmul at all.
bool cpu_has_native_bf16();
// oneDNN's effective ISA by name ("avx512_core_bf16", "avx2", ...), for messages.
const char* cpu_isa_name();

}  // namespace strata::kernels
