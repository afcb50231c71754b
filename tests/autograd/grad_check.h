// Finite-difference gradient checking for autograd tests.
//
// check_gradients(f, inputs) compares the tape's gradient of L = sum(f(inputs) * R), for a fixed
// random R, with central differences of the same L. The forward pass runs in float32 as in training,
// but L is accumulated in double so that the differences are not drowned by rounding.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "strata/gradient_tape.h"
#include "strata/init.h"
#include "strata/ops.h"
#include "test_util.h"

namespace strata::testing {

struct GradCheckOptions {
  double epsilon = 5e-3;
  double rtol = 2e-2;
  double atol = 5e-3;
};

using OpFn = std::function<Variable(const std::vector<Variable>&)>;

inline double weighted_sum(const Tensor& out, const std::vector<double>& r) {
  const auto v = out.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * r[i];
  return s;
}

// `inputs` are float32 tensors; every one is differentiated.
inline void check_gradients(const OpFn& f, const std::vector<Tensor>& inputs, GradCheckOptions opt = {}) {
  std::vector<Variable> vars;
  for (size_t i = 0; i < inputs.size(); ++i) vars.emplace_back(inputs[i].clone(), true, "input" + std::to_string(i));

  // Analytical: d/dx sum(f(x) * R) is the tape's gradient seeded with R.
  GradientTape tape;
  Variable out = f(vars);
  Generator gen(1234);
  Tensor r_tensor = init::uniform(out.shape(), gen, -1.0f, 1.0f);
  const std::vector<double> r = r_tensor.to_vector<double>();
  std::vector<Tensor> analytic = tape.gradient(out, vars, r_tensor, UnconnectedGradients::kZero);

  for (size_t i = 0; i < vars.size(); ++i) {
    ASSERT_EQ(analytic[i].shape(), inputs[i].shape()) << "gradient of input " << i;
    const auto a = analytic[i].to_vector<double>();
    for (int64_t j = 0; j < inputs[i].numel(); ++j) {
      std::vector<Variable> probe;
      for (size_t m = 0; m < inputs.size(); ++m) probe.emplace_back(inputs[m].clone(), true);
      float* p = const_cast<Tensor&>(probe[i].value()).data<float>();
      const float original = p[j];
      p[j] = static_cast<float>(original + opt.epsilon);
      const double plus = weighted_sum(f(probe).value(), r);
      p[j] = static_cast<float>(original - opt.epsilon);
      const double minus = weighted_sum(f(probe).value(), r);
      const double numeric = (plus - minus) / (2 * opt.epsilon);
      ASSERT_NEAR(a[j], numeric, opt.atol + opt.rtol * std::fabs(numeric))
          << "input " << i << " element " << j << " of shape " << inputs[i].shape_str();
    }
  }
}

using test::random_tensor;

// Values spread at least `gap` apart in a shuffled order, so max/relu-style kinks are far from every
// element (finite differences of a kink are meaningless).
inline Tensor distinct_tensor(const Shape& shape, uint64_t seed, float gap = 0.05f) {
  const int64_t n = shape_numel(shape);
  std::vector<float> v(n);
  Generator gen(seed);
  for (int64_t i = 0; i < n; ++i) v[i] = (static_cast<float>(i) - n / 2.0f + 0.5f) * gap;  // never 0
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[gen.uniform_int(i + 1)]);
  return Tensor::from_vector(v, shape);
}

}  // namespace strata::testing
