// Option argument types that take a Keras name (see strata/nn/layer_options.h).
#include "strata/nn/layer_options.h"

#include <algorithm>
#include <cctype>

#include "strata/error.h"

namespace strata::nn {

ActivationSpec::ActivationSpec(std::string name) : name_(name.empty() ? "linear" : name) {
  ActivationFn fn = activation(name);  // rejects unknown names
  if (name_ != "linear") fn_ = std::move(fn);
}

PaddingSpec::PaddingSpec(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "valid") {
    padding_ = Padding::kValid;
  } else if (lower == "same") {
    padding_ = Padding::kSame;
  } else {
    STRATA_THROW(InvalidArgument, "unknown padding '" << name << "'; known: valid, same");
  }
}

Conv1DPaddingSpec::Conv1DPaddingSpec(const std::string& name) : padding_(Padding::kValid) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "causal") {
    causal_ = true;
  } else if (lower == "same") {
    padding_ = Padding::kSame;
  } else {
    STRATA_CHECK(lower == "valid", InvalidArgument,
                 "unknown Conv1D padding '" << name << "'; known: valid, same, causal");
  }
}

}  // namespace strata::nn
