// The global dtype policy (strata/nn/policy.h) and its one warning when a layer on a CPU without bf16 instructions
// computes under mixed_bfloat16 (layers on a GPU compute in bf16 there, whatever the CPU has).
// Thread-safety: the policy and the test override are atomics; the warning is printed under a once-flag (atomic).
#include "strata/nn/policy.h"

#include <atomic>
#include <cstdio>

#include "kernels/compute_precision.h"
#include "strata/error.h"

namespace strata::nn {

namespace {

std::atomic<bool> g_mixed_bf16{false};
// -1: ask oneDNN; 0 / 1: a test's answer.
std::atomic<int> g_cpu_bf16_override{-1};
std::atomic<bool> g_warned{false};

bool cpu_has_bf16() {
  const int o = g_cpu_bf16_override.load();
  return o < 0 ? kernels::cpu_has_native_bf16() : o == 1;
}

void warn_once_without_bf16() {
  if (g_warned.exchange(true)) return;
  std::fprintf(stderr,
               "strata: warning: mixed precision mixed_bfloat16: this CPU has no bf16 instructions (oneDNN's ISA is "
               "%s; bf16 needs avx512_core_bf16 or AMX), so layers compute in float32\n",
               kernels::cpu_isa_name());
}

}  // namespace

std::vector<std::string> policy_choices() { return {"float32", "mixed_bfloat16", "bf16"}; }

DTypePolicy::DTypePolicy(const std::string& name) {
  if (name == "float32") {
    name_ = "float32";
  } else if (name == "mixed_bfloat16" || name == "bf16") {
    name_ = "mixed_bfloat16";
    compute_ = DType::kBFloat16;
  } else {
    STRATA_THROW(InvalidArgument, "unknown dtype policy '"
                                      << name << "'; choices: float32, mixed_bfloat16 (or bf16)"
                                      << (name == "mixed_float16" || name == "float16" || name == "fp16"
                                              ? " (float16 compute is not built: oneDNN's CPU kernels use bf16)"
                                              : ""));
  }
}

void set_global_policy(const std::string& name) { set_global_policy(DTypePolicy(name)); }

void set_global_policy(const DTypePolicy& policy) { g_mixed_bf16.store(policy.compute_dtype() == DType::kBFloat16); }

DTypePolicy global_policy() { return DTypePolicy(g_mixed_bf16.load() ? "mixed_bfloat16" : "float32"); }

DType effective_compute_dtype() {
  return g_mixed_bf16.load() && cpu_has_bf16() ? DType::kBFloat16 : DType::kFloat32;
}

DType effective_compute_dtype(const Device& device) {
  if (!g_mixed_bf16.load()) return DType::kFloat32;
  if (!device.is_cpu()) return DType::kBFloat16;  // cuBLAS and cuDNN take bf16 whatever the CPU has
  if (cpu_has_bf16()) return DType::kBFloat16;
  warn_once_without_bf16();
  return DType::kFloat32;
}

namespace detail {
void set_cpu_bf16_for_testing(bool has_bf16) { g_cpu_bf16_override.store(has_bf16 ? 1 : 0); }
void reset_cpu_bf16_for_testing() {
  g_cpu_bf16_override.store(-1);
  g_warned.store(false);
}
}  // namespace detail

}  // namespace strata::nn
