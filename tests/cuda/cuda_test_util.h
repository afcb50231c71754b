// Helpers of the GPU tests (tests/cuda): skip without a GPU, copies to the GPU, random inputs, and a GPU result
// compared with the CPU kernel's on the same inputs, within a tolerance per dtype. Thread-safety: test-thread only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/device_memory.h"
#include "strata/device_stats.h"
#include "strata/random.h"
#include "strata/tensor.h"

namespace strata::testing {

// Skips the calling test, saying why, unless this build has CUDA and a GPU is visible.
#define STRATA_REQUIRE_GPU()                                                                   \
  do {                                                                                         \
    if (::strata::detail::cuda_device_count() == 0)                                            \
      GTEST_SKIP() << "no CUDA device visible (this build "                                    \
                   << (::strata::built_with_cuda() ? "has" : "lacks")                          \
                   << " CUDA): the GPU checks run in scripts/gpu_check.sh on a GPU machine";  \
  } while (0)

inline Device gpu() { return Device::cuda(0); }

// A copy of `t` on GPU 0; an undefined tensor (an optional argument left out) stays undefined.
inline Tensor on_gpu(const Tensor& t) { return t.defined() ? t.to(gpu()) : Tensor(); }

// Uniform in [low, high), float32, on the host; the same `seed` gives the same tensor.
inline Tensor random_host(const Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = low + (high - low) * gen.uniform();
  return t;
}

// While it lives, every cuDNN convolution pass runs in NCHW (STRATA_CUDNN_CONV_LAYOUT=nchw, conv.cc's fallback
// layout), on shapes whose algorithm is not cached yet; the environment is restored also when a check throws.
struct ForceNchwConvolutions {
  ForceNchwConvolutions() { setenv("STRATA_CUDNN_CONV_LAYOUT", "nchw", 1); }
  ~ForceNchwConvolutions() { unsetenv("STRATA_CUDNN_CONV_LAYOUT"); }
  ForceNchwConvolutions(const ForceNchwConvolutions&) = delete;
  ForceNchwConvolutions& operator=(const ForceNchwConvolutions&) = delete;
};

// Tolerance for float32 results of reductions and products of inner length up to a few thousand.
inline constexpr double kFloat32Tolerance = 1e-4;

// Expects `gpu_result` (any device) to have `cpu_result`'s shape and dtype, and every element within
// `tolerance * (1 + |expected|)`; names the first element that is not.
inline void expect_matches_cpu(const Tensor& gpu_result, const Tensor& cpu_result, double tolerance,
                               const std::string& what) {
  ASSERT_TRUE(gpu_result.defined()) << what;
  ASSERT_EQ(gpu_result.shape(), cpu_result.shape()) << what;
  ASSERT_EQ(gpu_result.dtype(), cpu_result.dtype()) << what;
  const Tensor got = gpu_result.to(Device::cpu()).to(DType::kFloat32);
  const Tensor want = cpu_result.to(DType::kFloat32);
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double bound = tolerance * (1.0 + std::fabs(w[i]));
    ASSERT_LE(std::fabs(double(g[i]) - double(w[i])), bound)
        << what << ": element " << i << " of " << want.numel() << " is " << g[i] << " on the GPU, " << w[i]
        << " on the CPU";
  }
}

}  // namespace strata::testing
