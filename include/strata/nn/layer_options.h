// Argument types of the layers' options: each takes either a Keras name or an object, so both
//
//   nn::Dense(64, "relu")
//   nn::Dense(64, {.activation = "relu", .kernel_initializer = "he_normal", .kernel_regularizer = nn::l2(1e-4)})
//   nn::Dense(64, {.activation = [](const Variable& x) { return x * sigmoid(x); },
//                  .kernel_initializer = [](const Shape& s, Generator& g) { return init::normal(s, g, 0, 0.01f); }})
//
// compile. A name is resolved (and an unknown one rejected with an InvalidArgument) when the option is
// made, so a typo fails at the line that builds the model.
// Thread-safety: values; calling one from several threads is safe when the wrapped function is.
#pragma once

#include <concepts>
#include <string>
#include <type_traits>
#include <utility>

#include "strata/init.h"
#include "strata/nn/layer.h"
#include "strata/ops.h"

namespace strata::nn {

// An activation by Keras name ("relu"; "" or "linear" is none) or as a function of a Variable.
class ActivationSpec {
 public:
  ActivationSpec() = default;
  ActivationSpec(const char* name) : ActivationSpec(std::string(name)) {}  // NOLINT: implicit by design
  ActivationSpec(std::string name);                                        // NOLINT
  template <class F>
  requires(std::is_invocable_r_v<Variable, F&, const Variable&> && !std::is_convertible_v<F, std::string>)
      ActivationSpec(F fn)
      : fn_(std::move(fn)), name_("custom") {}  // NOLINT

  Variable operator()(const Variable& x) const { return fn_ ? fn_(x) : x; }
  // The Keras name, "linear" for none, "custom" for a function.
  const std::string& name() const { return name_; }
  bool is_linear() const { return !fn_; }

 private:
  ActivationFn fn_;  // empty for linear
  std::string name_ = "linear";
};

// A weight initializer by Keras name ("glorot_uniform", "zeros", ...) or as a function (see strata/init.h).
class InitializerSpec {
 public:
  InitializerSpec(const char* name) : InitializerSpec(std::string(name)) {}            // NOLINT
  InitializerSpec(const std::string& name) : fn_(init::by_name(name)), name_(name) {}  // NOLINT
  template <class F>
  requires(std::is_invocable_r_v<Tensor, F&, const Shape&, Generator&> && !std::is_convertible_v<F, std::string>)
      InitializerSpec(F fn)
      : fn_(std::move(fn)), name_("custom") {}  // NOLINT

  const init::Initializer& fn() const { return fn_; }
  const std::string& name() const { return name_; }

 private:
  init::Initializer fn_;
  std::string name_;
};

// A weight regularizer by name ("l1", "l2", "l1_l2" with Keras's factors) or object (nn::l2(1e-4));
// the default is none. name() is what a saved model's config records: "" for none, the name given, or "custom".
class RegularizerSpec {
 public:
  RegularizerSpec() = default;
  RegularizerSpec(const char* name) : RegularizerSpec(std::string(name)) {}  // NOLINT
  RegularizerSpec(const std::string& name) : fn_(regularizer(name)), name_(name) {}  // NOLINT
  template <class F>
  requires(std::is_invocable_r_v<Variable, F&, const Variable&> && !std::is_convertible_v<F, std::string>)
      RegularizerSpec(F fn)
      : fn_(std::move(fn)), name_("custom") {}  // NOLINT

  const Regularizer& fn() const { return fn_; }
  const std::string& name() const { return name_; }

 private:
  Regularizer fn_;
  std::string name_;
};

// "valid" or "same" (any case), or strata::Padding.
class PaddingSpec {
 public:
  PaddingSpec(Padding padding = Padding::kValid) : padding_(padding) {}  // NOLINT
  PaddingSpec(const char* name) : PaddingSpec(std::string(name)) {}      // NOLINT
  PaddingSpec(const std::string& name);                                  // NOLINT
  Padding value() const { return padding_; }
  const char* name() const { return padding_ == Padding::kSame ? "same" : "valid"; }

 private:
  Padding padding_;
};

// Conv1D's padding: "valid", "same" or "causal" (any case), as Keras. Causal pads (kernel_size - 1) * dilation_rate
// zeros before the first step and none after, so output step t sees input steps up to t only (WaveNet).
class Conv1DPaddingSpec {
 public:
  Conv1DPaddingSpec(Padding padding = Padding::kValid) : padding_(padding) {}    // NOLINT
  Conv1DPaddingSpec(const char* name) : Conv1DPaddingSpec(std::string(name)) {}  // NOLINT
  Conv1DPaddingSpec(const std::string& name);                                    // NOLINT
  bool is_causal() const { return causal_; }
  // What the convolution pads itself once any causal zeros are in place: kValid for "causal".
  Padding value() const { return padding_; }
  const char* name() const { return causal_ ? "causal" : padding_ == Padding::kSame ? "same" : "valid"; }

 private:
  Padding padding_;
  bool causal_ = false;
};

// A 2-D size: one number for both axes (3) or {height, width}.
struct Size2 {
  Size2(int both) : h(both), w(both) {}  // NOLINT: `3` means {3, 3}, as in Keras
  Size2(int height, int width) : h(height), w(width) {}
  bool operator==(const Size2&) const = default;
  int h, w;
};

}  // namespace strata::nn
