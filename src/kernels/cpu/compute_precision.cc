// The per-thread compute precision and oneDNN's ISA query (see kernels/compute_precision.h).
// Thread-safety: the precision is thread_local; the ISA query is answered once (a function-local static).
#include "kernels/compute_precision.h"

#include <oneapi/dnnl/dnnl.hpp>

namespace strata::kernels {

namespace {
thread_local ComputePrecision t_precision = ComputePrecision::kFloat32;

dnnl::cpu_isa effective_isa() {
  static const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa;
}
}  // namespace

ComputePrecision compute_precision() { return t_precision; }

ComputePrecisionScope::ComputePrecisionScope(ComputePrecision precision) : previous_(t_precision) {
  t_precision = precision;
}
ComputePrecisionScope::~ComputePrecisionScope() { t_precision = previous_; }

bool cpu_has_native_bf16() {
  // oneDNN's ISA values are bit sets, each holding the ISAs below it.
  const auto isa = static_cast<unsigned>(effective_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;
}

const char* cpu_isa_name() {
  switch (effective_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::sse41: return "sse41";
    default: return "another ISA";
  }
}

}  // namespace strata::kernels
