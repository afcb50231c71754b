// Differentiates sum(x * x) through an installed strata; prints the gradient.
#include <strata/strata.h>

#include <cstdio>

int main() {
  strata::Variable x(strata::Tensor::from_list({1, 2, 3}, {3}), true, "x");
  strata::GradientTape tape;
  strata::Variable y = strata::sum(x * x);
  const auto g = tape.gradient(y, {x})[0].to_vector<float>();
  std::printf("%g %g %g\n", g[0], g[1], g[2]);
  return g[0] == 2 && g[1] == 4 && g[2] == 6 ? 0 : 1;
}
