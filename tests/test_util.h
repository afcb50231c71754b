// Helpers shared by the test suites: reproducible random tensors and exception messages.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "strata/random.h"
#include "strata/tensor.h"

namespace strata::test {

// A float32 tensor of `shape`, uniform in [low, high), the same for the same seed everywhere.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  gen.fill_uniform(t.data<float>(), t.numel(), low, high);
  return t;
}

// The message of the E that f() throws; a test failure when it throws nothing.
template <class E, class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

}  // namespace strata::test
