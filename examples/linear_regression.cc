// The smallest complete strata program: fit y = 3x - 1 with GradientTape and plain SGD.
#include <strata/strata.h>

#include <cstdio>

using namespace strata;

int main() {
  Generator gen(0);
  Variable x = init::uniform({256, 1}, gen, -1.0f, 1.0f);
  Variable y = affine(x, 3.0f, -1.0f);  // the targets
  Variable w(Tensor::zeros({1, 1}), /*trainable=*/true, "w");
  Variable b(Tensor::zeros({1}), /*trainable=*/true, "b");
  for (int step = 0; step < 200; ++step) {
    GradientTape tape;
    Variable loss = mean(square(matmul(x, w) + b - y));
    std::vector<Tensor> grads = tape.gradient(loss, {w, b});
    w.assign_sub(grads[0], 0.5f);
    b.assign_sub(grads[1], 0.5f);
    if (step % 50 == 0) std::printf("step %3d  loss %.6f\n", step, loss.value().item<float>());
  }
  std::printf("w = %.4f (want 3), b = %.4f (want -1)\n", w.value().item<float>(), b.value().item<float>());
  return 0;
}
