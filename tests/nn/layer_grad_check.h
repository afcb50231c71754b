// Finite-difference gradient checks for whole layers: the tape's gradients of L = sum(layer(x) * R)
// with respect to the float inputs and every trainable weight, against central differences of L
// (perturbing each weight in place). Builds on tests/autograd/grad_check.h.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/grad_check.h"
#include "strata/gradient_tape.h"
#include "strata/nn/layer.h"

namespace strata::testing {

inline void check_layer_gradients(nn::Layer& layer, const std::vector<Tensor>& inputs, bool training = false,
                                  GradCheckOptions opt = {}) {
  std::vector<Variable> xs, sources;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool is_float = inputs[i].dtype() == DType::kFloat32;
    xs.emplace_back(inputs[i].clone(), /*trainable=*/is_float, std::string("x").append(std::to_string(i)));
    if (is_float) sources.push_back(xs.back());
  }
  GradientTape tape;
  Variable out = layer(xs, training);
  for (const Variable& w : layer.trainable_variables()) sources.push_back(w);
  Generator gen(4321);
  const Tensor r_tensor = init::uniform(out.shape(), gen, -1.0f, 1.0f);
  const std::vector<double> r = r_tensor.to_vector<double>();
  const std::vector<Tensor> analytic = tape.gradient(out, sources, r_tensor, UnconnectedGradients::kZero);

  NoGradGuard no_grad;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string what = sources[i].name();
    ASSERT_EQ(analytic[i].shape(), sources[i].shape()) << "gradient of " << what;
    const auto a = analytic[i].to_vector<double>();
    float* p = const_cast<Tensor&>(sources[i].value()).data<float>();
    for (int64_t j = 0; j < sources[i].value().numel(); ++j) {
      const float original = p[j];
      p[j] = static_cast<float>(original + opt.epsilon);
      const double plus = weighted_sum(layer(xs, training).value(), r);
      p[j] = static_cast<float>(original - opt.epsilon);
      const double minus = weighted_sum(layer(xs, training).value(), r);
      p[j] = original;
      const double numeric = (plus - minus) / (2 * opt.epsilon);
      ASSERT_NEAR(a[j], numeric, opt.atol + opt.rtol * std::fabs(numeric))
          << what << " element " << j << " of shape " << shape_str(sources[i].shape());
    }
  }
}

}  // namespace strata::testing
