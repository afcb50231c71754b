// The GPU kernels under mixed precision (ComputePrecisionScope(kBFloat16), kernels/compute_precision.h): every bf16
// product (matmul in each transpose and batch layout, dense forward with and without bias and relu, dense's two
// product gradients) and every convolution pass (forward, input and kernel gradients, NHWC and the NCHW fallback,
// symmetric and explicit padding) against the CPU's float32 result to bf16's tolerance, against the CPU's own bf16
// result where oneDNN has bf16 instructions, and different from the GPU's float32 result (so bf16 really ran).
// Outputs and gradients stay float32 tensors. Every test skips without a GPU (STRATA_REQUIRE_GPU).
// Thread-safety: test-thread only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "cuda/cuda_test_util.h"
#include "kernels/compute_precision.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace strata {
namespace {

namespace k = kernels;
using testing::on_gpu;
using testing::random_host;

// bf16 keeps 8 significant bits: a product of inner length K rounds each operand by up to 2^-9 relatively, so its
// result moves by well under 1e-2 of the result's scale for the lengths here.
constexpr double kBf16Tolerance = 1e-2;
// Products on both devices round the same operands the same way (to nearest even) and accumulate in float32: only
// the order of the sums differs.
constexpr double kSameRoundingTolerance = 1e-3;

// The largest difference between a and b (any devices) relative to b's largest magnitude.
double relative_difference(const Tensor& a, const Tensor& b) {
  return test::relative_difference(a.to(Device::cpu()), b.to(Device::cpu()));
}

Tensor in_bf16(const std::function<Tensor()>& f) {
  const k::ComputePrecisionScope bf16(k::ComputePrecision::kBFloat16);
  return f();
}

// One kernel call made by `run(on_gpu)` on both devices: the GPU's bf16 result is a float32 tensor on the GPU,
// within kBf16Tolerance of the CPU's float32 result, within `cpu_bf16_tolerance` of the CPU's bf16 result (where
// oneDNN computes bf16 natively), and not the GPU's float32 result.
void check_bf16(const std::string& what, const std::function<Tensor(bool gpu)>& run,
                double cpu_bf16_tolerance = kSameRoundingTolerance) {
  SCOPED_TRACE(what);
  const Tensor cpu_f32 = run(false);
  const Tensor gpu_f32 = run(true);
  const Tensor gpu_bf16 = in_bf16([&] { return run(true); });
  ASSERT_EQ(gpu_bf16.shape(), cpu_f32.shape());
  EXPECT_EQ(gpu_bf16.dtype(), DType::kFloat32);
  EXPECT_EQ(gpu_bf16.device(), testing::gpu());
  EXPECT_LT(relative_difference(gpu_bf16, cpu_f32), kBf16Tolerance) << "against the CPU's float32";
  EXPECT_GT(relative_difference(gpu_bf16, gpu_f32), 1e-6) << "the GPU's bf16 result is its float32 one: no rounding";
  if (k::cpu_has_native_bf16()) {
    const Tensor cpu_bf16 = in_bf16([&] { return run(false); });
    EXPECT_LT(relative_difference(gpu_bf16, cpu_bf16), cpu_bf16_tolerance) << "against the CPU's bf16";
  }
}

// `t` on the GPU when `gpu`, else itself; undefined stays undefined.
Tensor at(const Tensor& t, bool gpu) { return gpu ? on_gpu(t) : t; }

TEST(GpuBf16Test, MatmulInEveryTransposeAndBatchLayout) {
  STRATA_REQUIRE_GPU();
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const std::string tr = std::string(ta ? " a^T" : "") + (tb ? " b^T" : "");
    const Shape a2 = ta ? Shape{40, 17} : Shape{17, 40}, b2 = tb ? Shape{23, 40} : Shape{40, 23};
    const Shape a3 = {5, a2[0], a2[1]}, b3 = {5, b2[0], b2[1]};
    const struct {
      const char* what;
      Shape a, b;
    } cases[] = {{"2-D", a2, b2},
                 {"batch x batch", a3, b3},
                 {"batch x shared", a3, b2},
                 {"shared x batch", a2, b3},
                 {"batch of 1", {1, a2[0], a2[1]}, b3}};
    for (const auto& c : cases) {
      const Tensor a = random_host(c.a, 10 + t), b = random_host(c.b, 20 + t);
      check_bf16(std::string("matmul ") + c.what + tr,
                 [&](bool gpu) { return k::matmul(at(a, gpu), at(b, gpu), ta, tb); });
    }
  }
  // Large enough for cuBLAS's tensor-core kernels, and the tutorial CNN's flatten -> dense product.
  const Tensor a = random_host({512, 784}, 30), b = random_host({784, 1024}, 31);
  check_bf16("matmul 512x784x1024", [&](bool gpu) { return k::matmul(at(a, gpu), at(b, gpu)); });
  const Tensor x = random_host({64, 5408}, 32), w = random_host({5408, 64}, 33);
  check_bf16("matmul 64x5408x64", [&](bool gpu) { return k::matmul(at(x, gpu), at(w, gpu)); });
}

TEST(GpuBf16Test, ProductsOfBf16NumbersAreFloat32Exact) {
  STRATA_REQUIRE_GPU();
  // Multiples of 1/8 in [-2, 2] are bf16 numbers and their sums of 16 products are exact in float32: bf16 compute
  // rounds nothing, so it gives float32's result exactly (the CPU's test of the same name).
  Tensor a = random_host({3, 9, 16}, 40, -2.0f, 2.0f), b = random_host({16, 5}, 41, -2.0f, 2.0f);
  for (Tensor* t : {&a, &b}) {
    float* p = t->data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = std::round(p[i] * 8.0f) / 8.0f;
  }
  const Tensor want = k::matmul(a, b);
  const Tensor got = in_bf16([&] { return k::matmul(on_gpu(a), on_gpu(b)); });
  testing::expect_matches_cpu(got, want, 0.0, "bf16 numbers");
}

TEST(GpuBf16Test, DenseForwardAndItsProductGradients) {
  STRATA_REQUIRE_GPU();
  const struct { int64_t M, K, N; } shapes[] = {{7, 13, 5}, {64, 784, 128}, {512, 1024, 256}};
  for (const auto& s : shapes) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.K));
    const Tensor x = random_host({s.M, s.K}, 50), w = random_host({s.K, s.N}, 51, -scale, scale);
    const Tensor bias = random_host({s.N}, 52), dy = random_host({s.M, s.N}, 53);
    const std::string shape = " [" + std::to_string(s.M) + ", " + std::to_string(s.K) + "] x [" + std::to_string(s.K) +
                              ", " + std::to_string(s.N) + "]";
    for (int v = 0; v < 4; ++v) {
      const bool with_bias = v & 1, relu = v & 2;
      const Tensor b = with_bias ? bias : Tensor();
      const std::string what = shape + (with_bias ? " + bias" : "") + (relu ? " relu" : "");
      check_bf16("dense" + what, [&](bool gpu) { return k::dense(at(x, gpu), at(w, gpu), at(b, gpu), relu); });
      // The backward reads y's sign: both devices get the CPU's float32 y, so the relu mask is the same.
      const Tensor y = k::dense(x, w, b, relu);
      const auto grads = [&](bool gpu) {
        return k::dense_backward(at(x, gpu), at(w, gpu), at(y, gpu), at(dy, gpu), relu, true, true, with_bias);
      };
      check_bf16("dense dx" + what, [&](bool gpu) { return grads(gpu).dx; });
      check_bf16("dense dw" + what, [&](bool gpu) { return grads(gpu).dw; });
      if (with_bias) {  // the bias gradient is a float32 column sum under either precision
        testing::expect_matches_cpu(in_bf16([&] { return grads(true).db; }), grads(false).db, 1e-4, "dense db" + what);
      }
    }
  }
}

k::Conv2DParams conv_params(int64_t stride, k::Padding padding, bool relu = false) {
  k::Conv2DParams p;
  p.stride_h = p.stride_w = stride;
  p.padding = padding;
  p.fused_relu = relu;
  return p;
}

// conv2d with bias, its input gradient and its kernel gradient in bf16 against the CPU. cuDNN writes bf16 outputs
// (conv.cc), so against the CPU's bf16 result the tolerance is bf16's own.
void check_conv_bf16(const std::string& what, const Shape& x_shape, const Shape& w_shape, const k::Conv2DParams& p,
                     uint64_t seed) {
  const Tensor x = random_host(x_shape, seed), bias = random_host({w_shape[3]}, seed + 2);
  const float scale = 1.0f / std::sqrt(static_cast<float>(w_shape[0] * w_shape[1] * w_shape[2]));
  const Tensor w = random_host(w_shape, seed + 1, -scale, scale);
  const Tensor dy = random_host(k::conv2d(x, w, bias, p).shape(), seed + 3);
  check_bf16(
      what + ": conv2d", [&](bool gpu) { return k::conv2d(at(x, gpu), at(w, gpu), at(bias, gpu), p); }, kBf16Tolerance);
  check_bf16(
      what + ": input gradient",
      [&](bool gpu) { return k::conv2d_backward_input(at(dy, gpu), at(w, gpu), x_shape, p); }, kBf16Tolerance);
  check_bf16(
      what + ": kernel gradient",
      [&](bool gpu) { return k::conv2d_backward_weights(at(x, gpu), at(dy, gpu), w_shape, true, p).dw; },
      kBf16Tolerance);
  const k::Conv2DWeightGrads f32 = k::conv2d_backward_weights(x, dy, w_shape, true, p);
  const Tensor db = in_bf16([&] { return k::conv2d_backward_weights(on_gpu(x), on_gpu(dy), w_shape, true, p).db; });
  // A float32 sum over every output pixel under either precision (the float32 tests' tolerance for it).
  testing::expect_matches_cpu(db, f32.db, 1e-3, what + ": bias gradient");
}

TEST(GpuBf16Test, ConvolutionForwardAndBothGradients) {
  STRATA_REQUIRE_GPU();
  check_conv_bf16("3x3 same relu", {4, 12, 12, 8}, {3, 3, 8, 16}, conv_params(1, k::Padding::kSame, true), 60);
  check_conv_bf16("3x3 stride 2 same (explicit padding)", {4, 14, 14, 8}, {3, 3, 8, 16},
                  conv_params(2, k::Padding::kSame), 61);
  check_conv_bf16("1x1 stride 2 valid", {4, 9, 9, 16}, {1, 1, 16, 32}, conv_params(2, k::Padding::kValid), 62);
  check_conv_bf16("one input channel (the tutorial CNN's first layer)", {8, 28, 28, 1}, {3, 3, 1, 32},
                  conv_params(1, k::Padding::kValid, true), 63);
}

TEST(GpuBf16Test, TheNchwFallbackInBf16) {
  STRATA_REQUIRE_GPU();
  // Shapes no other test uses: the algorithm cache remembers a shape's layout (and precision).
  const testing::ForceNchwConvolutions force_nchw;
  check_conv_bf16("nchw 3x3 same", {3, 11, 11, 6}, {3, 3, 6, 10}, conv_params(1, k::Padding::kSame, true), 70);
  check_conv_bf16("nchw stride 2 same", {3, 12, 12, 6}, {3, 3, 6, 10}, conv_params(2, k::Padding::kSame), 71);
}

}  // namespace
}  // namespace strata
