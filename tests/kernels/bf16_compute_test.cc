// The CPU kernels under ComputePrecisionScope(kBFloat16) (kernels/compute_precision.h): matmul in every transpose and
// batch layout, dense with bias and relu and its gradients, conv2d and its gradients, each against float32 to bf16's
// tolerance, and exactly bf16's result where the operands are bf16 numbers already; the scope nests and restores.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/compute_precision.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace strata::kernels {
namespace {

using test::random_tensor;
using test::relative_difference;

// `f` computed in float32 and in bf16: shapes equal, float32 out, within 1e-2 of the scale, and (natively) not equal.
template <class F>
void expect_close_to_float32(const char* what, F&& f) {
  const Tensor ref = f();
  Tensor got;
  {
    const ComputePrecisionScope bf16(ComputePrecision::kBFloat16);
    got = f();
  }
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  EXPECT_EQ(got.dtype(), DType::kFloat32) << what;
  const double d = relative_difference(got, ref);
  EXPECT_LT(d, 1e-2) << what;
  if (cpu_has_native_bf16()) {
    EXPECT_GT(d, 1e-6) << what << ": no bf16 rounding happened";
  }
}

// Values that bf16 holds exactly (multiples of 1/8 in [-2, 2]): products of them are exact in float32 too.
Tensor bf16_exact(const Shape& shape, uint64_t seed) {
  Tensor t = random_tensor(shape, seed, -2.0f, 2.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::round(p[i] * 8.0f) / 8.0f;
  return t;
}

class Bf16ComputeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_has_native_bf16()) GTEST_SKIP() << "oneDNN finds no bf16 instructions (ISA " << cpu_isa_name() << ")";
  }
};

TEST(ComputePrecisionTest, ScopeNestsAndRestores) {
  EXPECT_EQ(compute_precision(), ComputePrecision::kFloat32);
  {
    const ComputePrecisionScope a(ComputePrecision::kBFloat16);
    EXPECT_EQ(compute_precision(), ComputePrecision::kBFloat16);
    {
      const ComputePrecisionScope b(ComputePrecision::kFloat32);
      EXPECT_EQ(compute_precision(), ComputePrecision::kFloat32);
    }
    EXPECT_EQ(compute_precision(), ComputePrecision::kBFloat16);
  }
  EXPECT_EQ(compute_precision(), ComputePrecision::kFloat32);
}

TEST_F(Bf16ComputeTest, MatmulInEveryLayoutMatchesFloat32) {
  const Tensor a = random_tensor({5, 7}, 1), at = random_tensor({7, 5}, 2);
  const Tensor b = random_tensor({7, 6}, 3), bt = random_tensor({6, 7}, 4);
  expect_close_to_float32("a b", [&] { return matmul(a, b); });
  expect_close_to_float32("a^T b", [&] { return matmul(at, b, true, false); });
  expect_close_to_float32("a b^T", [&] { return matmul(a, bt, false, true); });
  expect_close_to_float32("a^T b^T", [&] { return matmul(at, bt, true, true); });
  const Tensor a3 = random_tensor({4, 5, 7}, 5), b3 = random_tensor({4, 7, 6}, 6), b3t = random_tensor({4, 6, 7}, 7);
  expect_close_to_float32("batch", [&] { return matmul(a3, b3); });
  expect_close_to_float32("batch b^T", [&] { return matmul(a3, b3t, false, true); });
  expect_close_to_float32("batch, shared b", [&] { return matmul(a3, b); });
  expect_close_to_float32("batch, shared a", [&] { return matmul(a, b3); });
  expect_close_to_float32("batch a^T, shared b^T", [&] { return matmul(random_tensor({4, 7, 5}, 8), bt, true, true); });
}

TEST_F(Bf16ComputeTest, ProductsOfBf16NumbersAreExact) {
  // The operands lose nothing to the rounding and the products accumulate in float32: the result is float32's.
  const Tensor a = bf16_exact({3, 9, 16}, 1), b = bf16_exact({16, 5}, 2);
  const Tensor ref = matmul(a, b);
  const ComputePrecisionScope bf16(ComputePrecision::kBFloat16);
  test::expect_near(matmul(a, b), ref, 0.0f);
}

TEST_F(Bf16ComputeTest, DenseAndItsGradientsMatchFloat32) {
  const Tensor x = random_tensor({12, 20}, 1), w = random_tensor({20, 9}, 2), bias = random_tensor({9}, 3);
  const Tensor y = dense(x, w, bias, true), dy = random_tensor({12, 9}, 4);
  expect_close_to_float32("dense", [&] { return dense(x, w, bias, true); });
  expect_close_to_float32("dense, no bias", [&] { return dense(x, w, Tensor(), false); });
  expect_close_to_float32("dx", [&] { return dense_backward(x, w, y, dy, true, true, false, false).dx; });
  expect_close_to_float32("dw", [&] { return dense_backward(x, w, y, dy, true, false, true, false).dw; });
  // The bias gradient is a float32 column sum under either precision.
  const Tensor db = dense_backward(x, w, y, dy, true, false, false, true).db;
  const ComputePrecisionScope bf16(ComputePrecision::kBFloat16);
  test::expect_near(dense_backward(x, w, y, dy, true, false, false, true).db, db, 0.0f);
}

TEST_F(Bf16ComputeTest, Conv2DAndItsGradientsMatchFloat32) {
  const Conv2DParams p{.stride_h = 2, .stride_w = 1, .padding = Padding::kSame};
  const Tensor x = random_tensor({2, 8, 7, 6}, 1), w = random_tensor({3, 3, 6, 5}, 2), bias = random_tensor({5}, 3);
  const Tensor y = conv2d(x, w, bias, p), dy = random_tensor(y.shape(), 4);
  expect_close_to_float32("conv2d", [&] { return conv2d(x, w, bias, p); });
  expect_close_to_float32("conv2d dx", [&] { return conv2d_backward_input(dy, w, x.shape(), p); });
  expect_close_to_float32("conv2d dw", [&] { return conv2d_backward_weights(x, dy, w.shape(), true, p).dw; });
  expect_close_to_float32("conv2d db", [&] { return conv2d_backward_weights(x, dy, w.shape(), true, p).db; });
}

}  // namespace
}  // namespace strata::kernels
