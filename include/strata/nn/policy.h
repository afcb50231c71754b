// Dtype policies (Keras's keras.mixed_precision): the precision layers compute in, while their variables stay
// float32 ("master weights"), so gradients and optimizer updates are float32.
//
//   nn::set_global_policy("mixed_bfloat16");   // before fit(): Dense, MultiHeadAttention's products, Conv1D/Conv2D
//   model.fit(train, {.epochs = 5});          // compute in bf16 through oneDNN; the loss is float32
//
// "float32": everything float32 (the default). "mixed_bfloat16" (alias "bf16"): the kernels of matrix products and
// convolutions, forward and backward, round their operands to bfloat16 and accumulate in float32 (on the CPU oneDNN's
// bf16 primitives; on a GPU cuBLAS/cuBLASLt with bf16 inputs and cuDNN's bf16 convolutions, built but not yet run on
// a GPU); their outputs, and the tensors between layers, are float32 (Keras keeps them in bf16: here normalization,
// softmax and elementwise layers run in float32, so a bf16 activation would only be widened again); the loss is
// float32. Where oneDNN finds no bf16 instructions on the CPU (avx512_core_bf16 or AMX), layers on the CPU compute
// in float32 and the first such call prints one warning to stderr; layers on a GPU compute in bf16 regardless.
//
// The policy in force when a layer is called decides how it computes (Layer::operator() sets it for the call and
// for the call's gradient), so set it before training, not while another thread is inside a step.
// Thread-safety: the global policy is one atomic value; set_global_policy may be called from any thread.
#pragma once

#include <string>
#include <vector>

#include "strata/device.h"
#include "strata/dtype.h"

namespace strata::nn {

class DTypePolicy {
 public:
  // "float32", "mixed_bfloat16" or "bf16" (its alias); anything else is an InvalidArgument listing the choices.
  explicit DTypePolicy(const std::string& name = "float32");
  // The canonical name: "float32" or "mixed_bfloat16".
  const std::string& name() const { return name_; }
  // The dtype the policy asks layers to compute in.
  DType compute_dtype() const { return compute_; }
  // The dtype of variables: always float32.
  DType variable_dtype() const { return DType::kFloat32; }

 private:
  std::string name_;
  DType compute_ = DType::kFloat32;
};

// The names set_global_policy accepts.
std::vector<std::string> policy_choices();

// Sets the process's policy (prints nothing: the warning of a CPU without bf16 comes with the first layer call that
// falls back to float32 on it, so a model on a GPU never prints it).
void set_global_policy(const std::string& name);
void set_global_policy(const DTypePolicy& policy);
DTypePolicy global_policy();
// What layers called now on the CPU compute in: the global policy's compute dtype, or float32 where the CPU lacks
// bf16. Prints nothing.
DType effective_compute_dtype();
// What a layer called now with inputs on `device` computes in: on a GPU the policy's compute dtype; on the CPU as
// above, and the first call that falls back to float32 there prints the one warning (once per process).
DType effective_compute_dtype(const Device& device);

namespace detail {
// For tests: pretend the CPU has (true) or lacks (false) bf16 instructions; reset() restores oneDNN's answer and
// lets the warning print again.
void set_cpu_bf16_for_testing(bool has_bf16);
void reset_cpu_bf16_for_testing();
}  // namespace detail

}  // namespace strata::nn
