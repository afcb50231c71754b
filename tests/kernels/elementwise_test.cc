// Elementwise kernels: broadcasting binary ops, affine/axpy, unary ops and their gradients, leaky
// ReLU, ELU and clip, against double-precision references; stability at large magnitudes; errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "kernels/cpu/cpu_util.h"
#include "kernels/kernels.h"
#include "strata/threading.h"
#include "test_util.h"

namespace strata::kernels {
namespace {

using test::message_of;
using test::random_tensor;

using ::testing::HasSubstr;

// Element of `t` (shape `s`) read at the output multi-index `idx` of a broadcast (NumPy rules).
double broadcast_read(const Tensor& t, const Shape& out, const std::vector<int64_t>& idx) {
  const int lead = static_cast<int>(out.size()) - t.rank();
  int64_t off = 0;
  for (int j = 0; j < t.rank(); ++j) off = off * t.shape()[j] + (t.shape()[j] == 1 ? 0 : idx[j + lead]);
  return t.data<float>()[off];
}

double ref_binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
    case BinaryOp::kPow:
      return std::pow(a, b);
    case BinaryOp::kMaximum:
      return std::max(a, b);
    case BinaryOp::kMinimum:
      return std::min(a, b);
    case BinaryOp::kEqual:
      return a == b;
    case BinaryOp::kGreater:
      return a > b;
  }
  return 0;
}

void expect_binary_matches(BinaryOp op, const Tensor& a, const Tensor& b, const Shape& want) {
  const Tensor c = binary(op, a, b);
  ASSERT_EQ(c.shape(), want);
  std::vector<int64_t> idx(want.size(), 0);
  for (int64_t e = 0; e < c.numel(); ++e) {
    int64_t r = e;
    for (int j = static_cast<int>(want.size()) - 1; j >= 0; --j) {
      idx[j] = r % want[j];
      r /= want[j];
    }
    const double ref = ref_binary(op, broadcast_read(a, want, idx), broadcast_read(b, want, idx));
    ASSERT_NEAR(c.data<float>()[e], ref, 1e-5 * (1.0 + std::fabs(ref))) << "op " << static_cast<int>(op) << " at " << e;
  }
}

constexpr BinaryOp kAllBinary[] = {BinaryOp::kAdd,     BinaryOp::kSub,   BinaryOp::kMul,
                                   BinaryOp::kDiv,     BinaryOp::kPow,   BinaryOp::kMaximum,
                                   BinaryOp::kMinimum, BinaryOp::kEqual, BinaryOp::kGreater};

TEST(BinaryTest, BroadcastingCasesMatchReference) {
  struct Case {
    Shape a, b, out;
  };
  const Case cases[] = {
      {{2, 3}, {2, 3}, {2, 3}},           // same shape
      {{2, 1, 3}, {4, 1}, {2, 4, 3}},     // both sides broadcast
      {{3, 5}, {}, {3, 5}},               // scalar right
      {{}, {3, 5}, {3, 5}},               // scalar left
      {{3, 5}, {5}, {3, 5}},              // row
      {{5}, {3, 5}, {3, 5}},              // row, left
      {{3, 5}, {3, 1}, {3, 5}},           // column
      {{3, 1}, {1, 5}, {3, 5}},           // outer product
      {{2, 3, 4}, {2, 1, 4}, {2, 3, 4}},  // middle axis
      {{3, 1, 5}, {1, 4, 1}, {3, 4, 5}},  // alternating
      {{2, 3, 1, 2}, {3, 4, 1}, {2, 3, 4, 2}},
      {{1}, {1}, {1}},
      {{}, {}, {}},
  };
  for (const Case& c : cases) {
    const Tensor a = random_tensor(c.a, 1, 0.5f, 2.0f);  // positive: pow stays real
    const Tensor b = random_tensor(c.b, 2, -2.0f, 2.0f);
    for (BinaryOp op : kAllBinary) expect_binary_matches(op, a, b, c.out);
  }
}

TEST(BinaryTest, LargeTensorsUseEveryPathAtTwoThreads) {
  ScopedNumThreads scope(2);
  const Tensor a = random_tensor({300, 257}, 3, 0.5f, 2.0f);
  expect_binary_matches(BinaryOp::kAdd, a, random_tensor({300, 257}, 4, -2.0f, 2.0f), {300, 257});
  expect_binary_matches(BinaryOp::kMul, a, random_tensor({257}, 5, -2.0f, 2.0f), {300, 257});
  expect_binary_matches(BinaryOp::kSub, a, random_tensor({300, 1}, 6, -2.0f, 2.0f), {300, 257});
  expect_binary_matches(BinaryOp::kDiv, random_tensor({300, 1, 257}, 7, -2.0f, 2.0f),
                        random_tensor({1, 70, 1}, 8, -2.0f, 2.0f), {300, 70, 257});
  expect_binary_matches(BinaryOp::kMaximum, random_tensor({40000, 2}, 9, -2.0f, 2.0f),
                        random_tensor({40000, 1}, 10, -2.0f, 2.0f), {40000, 2});
}

TEST(BinaryTest, ComparisonsAndNaN) {
  const Tensor a = Tensor::from_list({1, 2, 3, NAN}, {4});
  const Tensor b = Tensor::from_list({1, 3, 2, 0}, {4});
  EXPECT_EQ(binary(BinaryOp::kEqual, a, b).to_vector<float>(), (std::vector<float>{1, 0, 0, 0}));
  EXPECT_EQ(binary(BinaryOp::kGreater, a, b).to_vector<float>(), (std::vector<float>{0, 0, 1, 0}));
  EXPECT_TRUE(std::isnan(binary(BinaryOp::kMaximum, a, b).to_vector<float>()[3]));
  EXPECT_TRUE(std::isnan(binary(BinaryOp::kMinimum, b, a).to_vector<float>()[3]));
}

TEST(BinaryTest, EmptyBroadcasts) {
  EXPECT_EQ(add(Tensor::zeros({0, 3}), Tensor::zeros({3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(add(Tensor::zeros({2, 1}), Tensor::zeros({0})).shape(), (Shape{2, 0}));
}

TEST(BinaryTest, ErrorsNameTheOpAndShapes) {
  const std::string m = message_of<ShapeError>([] { add(Tensor::zeros({2, 3}), Tensor::zeros({4})); });
  EXPECT_THAT(m, HasSubstr("add"));
  EXPECT_THAT(m, HasSubstr("[2, 3]"));
  EXPECT_THAT(m, HasSubstr("[4]"));
  EXPECT_THAT(message_of<ShapeError>([] { mul(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})); }), HasSubstr("mul"));
  EXPECT_THROW(add(Tensor::zeros({2}, DType::kInt32), Tensor::zeros({2})), InvalidArgument);
  EXPECT_THROW(add(Tensor(), Tensor::zeros({2})), InvalidArgument);
}

TEST(AffineTest, ScalesAndShifts) {
  const Tensor x = random_tensor({50000}, 11, -2.0f, 2.0f);
  const Tensor y = affine(x, 3.0f, -1.0f);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_NEAR(y.data<float>()[i], 3.0 * x.data<float>()[i] - 1.0, 1e-5);
  EXPECT_EQ(affine(Tensor::zeros({0}), 2.0f, 1.0f).numel(), 0);
}

TEST(AxpyTest, AccumulatesInPlace) {
  Tensor y = random_tensor({40000}, 12, -2.0f, 2.0f);
  const Tensor x = random_tensor({40000}, 13, -2.0f, 2.0f);
  const std::vector<float> y0 = y.to_vector<float>();
  axpy_(y, -0.5f, x);
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(y.data<float>()[i], y0[i] - 0.5 * x.data<float>()[i], 1e-6);
  Tensor z = Tensor::full({3}, 2.0);
  axpy_(z, 1.0f, z);  // aliasing: z += z
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{4, 4, 4}));
  Tensor w = Tensor::zeros({3});
  EXPECT_THAT(message_of<ShapeError>([&] { axpy_(w, 1.0f, Tensor::zeros({4})); }), HasSubstr("axpy_"));
}

double ref_unary(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kExp:
      return std::exp(x);
    case UnaryOp::kLog:
      return std::log(x);
    case UnaryOp::kSqrt:
      return std::sqrt(x);
    case UnaryOp::kAbs:
      return std::fabs(x);
    case UnaryOp::kSquare:
      return x * x;
    case UnaryOp::kSign:
      return (x > 0) - (x < 0);
    case UnaryOp::kRelu:
      return x > 0 ? x : 0;
    case UnaryOp::kSigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::kTanh:
      return std::tanh(x);
    case UnaryOp::kGelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  }
  return 0;
}

constexpr UnaryOp kAllUnary[] = {UnaryOp::kNeg,     UnaryOp::kExp,    UnaryOp::kLog,  UnaryOp::kSqrt,
                                 UnaryOp::kAbs,     UnaryOp::kSquare, UnaryOp::kSign, UnaryOp::kRelu,
                                 UnaryOp::kSigmoid, UnaryOp::kTanh,   UnaryOp::kGelu};

bool positive_domain(UnaryOp op) { return op == UnaryOp::kLog || op == UnaryOp::kSqrt; }

TEST(UnaryTest, MatchesReference) {
  for (UnaryOp op : kAllUnary) {
    const Tensor x =
        positive_domain(op) ? random_tensor({3, 7001}, 14, 0.1f, 3.0f) : random_tensor({3, 7001}, 14, -2.0f, 2.0f);
    const Tensor y = unary(op, x);
    ASSERT_EQ(y.shape(), x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double ref = ref_unary(op, x.data<float>()[i]);
      ASSERT_NEAR(y.data<float>()[i], ref, 2e-6 * (1.0 + std::fabs(ref))) << "op " << static_cast<int>(op);
    }
  }
}

TEST(UnaryTest, StableAtLargeMagnitudes) {
  const Tensor x = Tensor::from_list({-1000, -100, -30, 30, 100, 1000}, {6});
  for (UnaryOp op : {UnaryOp::kSigmoid, UnaryOp::kTanh, UnaryOp::kGelu, UnaryOp::kExp}) {
    for (float v : unary(op, x).to_vector<float>()) EXPECT_FALSE(std::isnan(v)) << static_cast<int>(op);
  }
  const std::vector<float> s = unary(UnaryOp::kSigmoid, x).to_vector<float>();
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[5], 1.0f);
  EXPECT_NEAR(s[2] / std::exp(-30.0), 1.0, 1e-5);  // the tail keeps its relative accuracy
  const std::vector<float> t = unary(UnaryOp::kTanh, x).to_vector<float>();
  EXPECT_EQ(t[0], -1.0f);
  EXPECT_EQ(t[5], 1.0f);
  const std::vector<float> g = unary(UnaryOp::kGelu, x).to_vector<float>();
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_EQ(g[5], 1000.0f);
  EXPECT_TRUE(std::isinf(unary(UnaryOp::kExp, x).to_vector<float>()[5]));
  // Gradients stay finite too.
  for (UnaryOp op : {UnaryOp::kSigmoid, UnaryOp::kTanh, UnaryOp::kGelu}) {
    const Tensor dx = unary_backward(op, x, unary(op, x), Tensor::ones({6}));
    for (float v : dx.to_vector<float>()) EXPECT_FALSE(std::isnan(v)) << static_cast<int>(op);
  }
}

// unary_backward against central differences of the double reference (random inputs miss the
// kinks of abs, relu and sign).
TEST(UnaryTest, BackwardMatchesFiniteDifferences) {
  for (UnaryOp op : kAllUnary) {
    Tensor x = positive_domain(op) ? random_tensor({1000}, 15, 0.2f, 3.0f) : random_tensor({1000}, 15, -2.0f, 2.0f);
    const Tensor y = unary(op, x);
    const Tensor dy = random_tensor({1000}, 16, -2.0f, 2.0f);
    const Tensor dx = unary_backward(op, x, y, dy);
    const double h = 1e-6;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double xv = x.data<float>()[i];
      const double fd = (ref_unary(op, xv + h) - ref_unary(op, xv - h)) / (2 * h);
      const double ref = fd * dy.data<float>()[i];
      ASSERT_NEAR(dx.data<float>()[i], ref, 1e-4 * (1.0 + std::fabs(ref)))
          << "op " << static_cast<int>(op) << " x " << xv;
    }
  }
}

TEST(UnaryTest, BackwardChecksShapesAndAllowsTheUnusedInputUndefined) {
  const Tensor x = random_tensor({4}, 17, -2.0f, 2.0f);
  EXPECT_NO_THROW(unary_backward(UnaryOp::kRelu, x, Tensor(), Tensor::ones({4})));
  EXPECT_NO_THROW(unary_backward(UnaryOp::kSigmoid, Tensor(), unary(UnaryOp::kSigmoid, x), Tensor::ones({4})));
  EXPECT_THAT(message_of<ShapeError>([&] { unary_backward(UnaryOp::kRelu, x, Tensor(), Tensor::ones({5})); }),
              HasSubstr("relu"));
  EXPECT_THROW(unary(UnaryOp::kExp, Tensor::zeros({2}, DType::kInt64)), InvalidArgument);
}

TEST(ActivationTest, LeakyReluEluClipAndTheirGradients) {
  const Tensor x = random_tensor({20001}, 18, -3.0f, 3.0f);
  const Tensor dy = random_tensor({20001}, 19, -2.0f, 2.0f);
  const Tensor lr = leaky_relu(x, 0.2f);
  const Tensor lrb = leaky_relu_backward(x, dy, 0.2f);
  const Tensor e = elu(x, 1.5f);
  const Tensor eb = elu_backward(x, e, dy, 1.5f);
  const Tensor c = clip(x, -1.0f, 0.5f);
  const Tensor cb = clip_backward(x, dy, -1.0f, 0.5f);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data<float>()[i], g = dy.data<float>()[i];
    ASSERT_NEAR(lr.data<float>()[i], v > 0 ? v : 0.2 * v, 1e-6);
    ASSERT_NEAR(lrb.data<float>()[i], v > 0 ? g : 0.2 * g, 1e-6);
    ASSERT_NEAR(e.data<float>()[i], v > 0 ? v : 1.5 * (std::exp(v) - 1), 1e-6);
    ASSERT_NEAR(eb.data<float>()[i], v > 0 ? g : g * 1.5 * std::exp(v), 1e-5);
    ASSERT_NEAR(c.data<float>()[i], std::min(std::max(v, -1.0), 0.5), 0.0);
    ASSERT_NEAR(cb.data<float>()[i], (v >= -1.0 && v <= 0.5) ? g : 0.0, 0.0);
  }
  EXPECT_FALSE(std::isnan(elu(Tensor::from_list({-1e4f}, {1}), 1.0f).item<float>()));
  EXPECT_THROW(clip(x, 1.0f, -1.0f), InvalidArgument);
  EXPECT_THAT(message_of<ShapeError>([&] { clip_backward(x, Tensor::zeros({3}), 0.0f, 1.0f); }),
              HasSubstr("clip_backward"));
  EXPECT_THROW(elu_backward(x, e, Tensor::zeros({2}), 1.0f), ShapeError);
  EXPECT_THROW(leaky_relu_backward(x, Tensor::zeros({2}), 0.1f), ShapeError);
}

}  // namespace
}  // namespace strata::kernels

namespace strata::kernels {
namespace {

TEST(FastTanhTest, WithinTwoTenMillionthsOfTanhEverywhere) {
  // Every float step of 1/4096 over [-12, 12], and around the switch at 0.25 and near 0 more finely.
  double worst = 0;
  auto check = [&](float x) {
    const double want = std::tanh(static_cast<double>(x));
    const double got = cpu::fast_tanh(x);
    const double err = std::abs(got - want) / std::max(std::abs(want), 1e-30);
    worst = std::max(worst, err);
  };
  for (int i = -12 * 4096; i <= 12 * 4096; ++i) check(static_cast<float>(i) / 4096.0f);
  for (int i = -1000; i <= 1000; ++i) {
    check(0.25f + static_cast<float>(i) * 1e-6f);
    check(static_cast<float>(i) * 1e-7f);
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(cpu::fast_tanh(100.0f), 1.0f);
  EXPECT_EQ(cpu::fast_tanh(-100.0f), -1.0f);
  EXPECT_EQ(cpu::fast_tanh(0.0f), 0.0f);
}

}  // namespace
}  // namespace strata::kernels
