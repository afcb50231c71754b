// softmax / log_softmax and their gradients over every axis, against double-precision references;
// stability with huge logits; errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/kernels.h"
#include "strata/threading.h"

namespace strata::kernels {
namespace {

using ::testing::HasSubstr;

Tensor random_tensor(const Shape& shape, uint32_t seed, float scale = 3.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(shape_numel(shape));
  for (float& x : v) x = dist(gen);
  return Tensor::from_vector(v, shape);
}

struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};
Split split(const Shape& s, int axis) {
  Split r;
  for (int j = 0; j < static_cast<int>(s.size()); ++j) (j < axis ? r.outer : j == axis ? r.n : r.inner) *= s[j];
  return r;
}

// Reference softmax (log when `log`) of x along `axis`, in double.
std::vector<double> ref_forward(const Tensor& x, int axis, bool log) {
  const Split s = split(x.shape(), axis < 0 ? axis + x.rank() : axis);
  const float* p = x.data<float>();
  std::vector<double> out(x.numel());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t k) { return (o * s.n + k) * s.inner + i; };
      double m = -INFINITY;
      for (int64_t k = 0; k < s.n; ++k) m = std::max(m, static_cast<double>(p[at(k)]));
      double z = 0;
      for (int64_t k = 0; k < s.n; ++k) z += std::exp(p[at(k)] - m);
      for (int64_t k = 0; k < s.n; ++k) out[at(k)] = log ? p[at(k)] - m - std::log(z) : std::exp(p[at(k)] - m) / z;
    }
  return out;
}

// Reference gradient: the Jacobian of the forward applied to dy, in double, from x.
std::vector<double> ref_backward(const Tensor& x, const Tensor& dy, int axis, bool log) {
  const std::vector<double> sm = ref_forward(x, axis, false);
  const Split s = split(x.shape(), axis < 0 ? axis + x.rank() : axis);
  const float* g = dy.data<float>();
  std::vector<double> dx(x.numel());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t k) { return (o * s.n + k) * s.inner + i; };
      double dot = 0, total = 0;
      for (int64_t k = 0; k < s.n; ++k) {
        dot += g[at(k)] * sm[at(k)];
        total += g[at(k)];
      }
      for (int64_t k = 0; k < s.n; ++k) dx[at(k)] = log ? g[at(k)] - sm[at(k)] * total : sm[at(k)] * (g[at(k)] - dot);
    }
  return dx;
}

void expect_near(const Tensor& t, const std::vector<double>& ref, double tol) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(ref.size()));
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_NEAR(t.data<float>()[i], ref[i], tol * (1.0 + std::fabs(ref[i]))) << i;
}

TEST(SoftmaxTest, EveryAxisMatchesReference) {
  for (const Shape& shape : {Shape{7}, Shape{3, 4, 5}, Shape{2, 70, 3}, Shape{2, 3, 130}, Shape{1, 1}}) {
    const Tensor x = random_tensor(shape, 1);
    const Tensor dy = random_tensor(shape, 2);
    for (int axis = -static_cast<int>(shape.size()); axis < static_cast<int>(shape.size()); ++axis) {
      SCOPED_TRACE(shape_str(shape) + " axis " + std::to_string(axis));
      const Tensor y = softmax(x, axis);
      const Tensor ly = log_softmax(x, axis);
      expect_near(y, ref_forward(x, axis, false), 1e-6);
      expect_near(ly, ref_forward(x, axis, true), 1e-6);
      expect_near(softmax_backward(y, dy, axis), ref_backward(x, dy, axis, false), 1e-5);
      expect_near(log_softmax_backward(ly, dy, axis), ref_backward(x, dy, axis, true), 1e-5);
    }
  }
}

TEST(SoftmaxTest, LargeBatchesAtTwoThreads) {
  ScopedNumThreads scope(2);
  const Tensor x = random_tensor({5000, 10}, 3);
  expect_near(softmax(x), ref_forward(x, -1, false), 1e-6);
  const Tensor x2 = random_tensor({50, 20, 300}, 4);
  expect_near(log_softmax(x2, 1), ref_forward(x2, 1, true), 1e-6);
  const Tensor dy = random_tensor({50, 20, 300}, 5);
  expect_near(softmax_backward(softmax(x2, 1), dy, 1), ref_backward(x2, dy, 1, false), 1e-5);
}

TEST(SoftmaxTest, AttentionShapesOnOneDnnMatchReference) {
  // [batch, heads, T, T] probabilities are large enough for oneDNN's primitive; every kind and both directions.
  const Tensor x = random_tensor({16, 4, 28, 28}, 7);
  const Tensor dy = random_tensor({16, 4, 28, 28}, 8);
  for (int threads : {1, 2}) {
    ScopedNumThreads scope(threads);
    const Tensor y = softmax(x);
    const Tensor ly = log_softmax(x);
    expect_near(y, ref_forward(x, -1, false), 1e-6);
    expect_near(ly, ref_forward(x, -1, true), 1e-5);
    expect_near(softmax_backward(y, dy), ref_backward(x, dy, -1, false), 1e-5);
    expect_near(log_softmax_backward(ly, dy), ref_backward(x, dy, -1, true), 1e-5);
  }
  // A masked row (huge negative logits, as an attention mask adds) stays finite.
  std::vector<float> values(static_cast<size_t>(x.numel()), 0.5f);
  for (size_t i = 0; i < values.size(); i += 2) values[i] = -1e30f;
  for (float v : softmax(Tensor::from_vector(values, x.shape())).to_vector<float>()) ASSERT_FALSE(std::isnan(v));
}

TEST(SoftmaxTest, StableWithHugeLogits) {
  const Tensor x = Tensor::from_list({1000, 999, -1000, 1e30f, 0, -1e30f}, {2, 3});
  const std::vector<float> y = softmax(x).to_vector<float>();
  for (float v : y) EXPECT_FALSE(std::isnan(v));
  EXPECT_NEAR(y[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(y[3], 1.0, 1e-6);
  const std::vector<float> ly = log_softmax(x).to_vector<float>();
  for (float v : ly) EXPECT_FALSE(std::isnan(v));
  EXPECT_NEAR(ly[1], -1.0 - std::log1p(std::exp(-1.0)), 1e-5);
  EXPECT_NEAR(ly[2], -2000.0 - std::log1p(std::exp(-1.0)), 1e-2);
  // Column axis too.
  for (float v : softmax(x, 0).to_vector<float>()) EXPECT_FALSE(std::isnan(v));
}

TEST(SoftmaxTest, RowsSumToOne) {
  const Tensor y = softmax(random_tensor({64, 1000}, 6, 20.0f));
  for (int64_t r = 0; r < 64; ++r) {
    double s = 0;
    for (int64_t k = 0; k < 1000; ++k) s += y.data<float>()[r * 1000 + k];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

TEST(SoftmaxTest, EmptyTensors) {
  EXPECT_EQ(softmax(Tensor::zeros({0, 5})).shape(), (Shape{0, 5}));
  EXPECT_EQ(log_softmax(Tensor::zeros({3, 0}), 1).shape(), (Shape{3, 0}));
}

TEST(SoftmaxTest, Errors) {
  try {
    softmax_backward(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}));
    ADD_FAILURE() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("softmax_backward"));
    EXPECT_THAT(e.what(), HasSubstr("[2, 3]"));
  }
  EXPECT_THROW(softmax(Tensor::zeros({2, 3}), 2), InvalidArgument);
  EXPECT_THROW(softmax(Tensor::scalar(1.0f)), InvalidArgument);
  EXPECT_THROW(log_softmax(Tensor::zeros({2}, DType::kInt32)), InvalidArgument);
  EXPECT_THROW(softmax(Tensor()), InvalidArgument);
}

}  // namespace
}  // namespace strata::kernels
