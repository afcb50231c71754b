// Reductions: sum/mean/max over axis sets with keepdims, accuracy of long sums, argmax ties and
// NaN, broadcast_to and sum_to_shape; empty tensors and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/kernels.h"
#include "test_util.h"
#include "strata/threading.h"

namespace strata::kernels {
namespace {

using test::random_tensor;

using ::testing::HasSubstr;

enum class Red { kSum, kMean, kMax };

// Reference reduction in double: walks every input element and folds it into its output slot.
std::vector<double> reference(const Tensor& x, std::vector<int> axes, Red red, Shape* out_shape, bool keepdims) {
  const int r = x.rank();
  std::vector<bool> flag(r, axes.empty());
  for (int a : axes) flag[a < 0 ? a + r : a] = true;
  out_shape->clear();
  for (int j = 0; j < r; ++j) {
    if (!flag[j])
      out_shape->push_back(x.shape()[j]);
    else if (keepdims)
      out_shape->push_back(1);
  }
  Shape kept;
  for (int j = 0; j < r; ++j) kept.push_back(flag[j] ? 1 : x.shape()[j]);
  const int64_t n_out = shape_numel(kept);
  std::vector<double> out(n_out, red == Red::kMax ? -INFINITY : 0.0);
  std::vector<int64_t> count(n_out, 0);
  std::vector<int64_t> idx(r, 0);
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t rem = e;
    for (int j = r - 1; j >= 0; --j) {
      idx[j] = rem % x.shape()[j];
      rem /= x.shape()[j];
    }
    int64_t o = 0;
    for (int j = 0; j < r; ++j) o = o * kept[j] + (flag[j] ? 0 : idx[j]);
    const double v = x.data<float>()[e];
    out[o] = red == Red::kMax ? std::max(out[o], v) : out[o] + v;
    ++count[o];
  }
  if (red == Red::kMean)
    for (int64_t o = 0; o < n_out; ++o) out[o] /= count[o];
  return out;
}

void expect_reduction(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  for (Red red : {Red::kSum, Red::kMean, Red::kMax}) {
    Shape want;
    const std::vector<double> ref = reference(x, axes, red, &want, keepdims);
    const Tensor y = red == Red::kSum    ? sum(x, axes, keepdims)
                     : red == Red::kMean ? mean(x, axes, keepdims)
                                         : max(x, axes, keepdims);
    ASSERT_EQ(y.shape(), want) << "red " << static_cast<int>(red);
    for (int64_t i = 0; i < y.numel(); ++i)
      ASSERT_NEAR(y.data<float>()[i], ref[i], 1e-5 * (1.0 + std::fabs(ref[i])))
          << "red " << static_cast<int>(red) << " at " << i;
  }
}

TEST(ReduceTest, AxisSetsMatchReference) {
  const Tensor x = random_tensor({2, 3, 4, 5}, 1);
  const std::vector<std::vector<int>> axis_sets = {{},     {0},    {1},      {2},    {3},          {-1},   {0, 1},
                                                   {1, 3}, {0, 2}, {-3, -1}, {2, 3}, {0, 1, 2, 3}, {3, 0}, {0, 2, 3}};
  for (const auto& axes : axis_sets)
    for (bool keepdims : {false, true}) expect_reduction(x, axes, keepdims);
  expect_reduction(random_tensor({3, 1, 4}, 2), {1}, false);  // a unit axis only
  expect_reduction(random_tensor({3, 1, 4}, 2), {0, 1}, true);
  expect_reduction(Tensor::scalar(2.5f), {}, false);
}

TEST(ReduceTest, LargeShapesEveryPathAtOneAndTwoThreads) {
  const Tensor a = random_tensor({200000, 3}, 3);  // long strided columns: chunked partials
  const Tensor b = random_tensor({300, 1000}, 4);
  const Tensor c = random_tensor({40, 300, 30}, 5);
  std::vector<float> first;
  for (int threads : {1, 2}) {
    ScopedNumThreads scope(threads);
    expect_reduction(a, {0}, false);
    expect_reduction(b, {1}, false);
    expect_reduction(b, {0}, true);
    expect_reduction(c, {0, 2}, false);
    expect_reduction(c, {1}, false);
    const std::vector<float> s = sum(a, {0}).to_vector<float>();
    if (first.empty())
      first = s;
    else
      EXPECT_EQ(s, first) << "sums must not depend on the thread count";
  }
}

TEST(ReduceTest, LongSumsStayAccurate) {
  const int64_t n = 1000000;
  const Tensor x = random_tensor({n}, 6, 0.0f, 1.0f);
  double ref = 0;
  for (int64_t i = 0; i < n; ++i) ref += x.data<float>()[i];
  EXPECT_NEAR(sum(x).item<float>(), ref, 1e-6 * ref);
  EXPECT_NEAR(mean(x).item<float>(), ref / n, 1e-6 * ref / n);
  const Tensor ones = Tensor::full({n}, 0.1);
  EXPECT_NEAR(sum(ones).item<float>(), 0.1f * static_cast<double>(n), 1e-6 * 0.1 * n);
  const Tensor col = Tensor::full({n, 1, 2}, 0.1);
  for (float v : sum(col, {0}).to_vector<float>()) EXPECT_NEAR(v, 0.1f * static_cast<double>(n), 1e-6 * 0.1 * n);
}

TEST(ReduceTest, EmptyTensors) {
  const Tensor e = Tensor::zeros({0, 3});
  EXPECT_EQ(sum(e, {0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_TRUE(std::isnan(mean(e, {0}).to_vector<float>()[0]));
  EXPECT_EQ(sum(e, {1}).shape(), (Shape{0}));
  EXPECT_EQ(sum(e, {1}, true).shape(), (Shape{0, 1}));
  EXPECT_EQ(sum(e).item<float>(), 0.0f);
  EXPECT_THAT([&] { max(e, {0}); }, ::testing::Throws<InvalidArgument>());
  EXPECT_EQ(max(e, {1}).shape(), (Shape{0}));
}

TEST(ReduceTest, MaxPropagatesNaN) {
  const Tensor x = Tensor::from_list({1, NAN, 3, 4, 5, 6}, {2, 3});
  const std::vector<float> m = max(x, {1}).to_vector<float>();
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_EQ(m[1], 6.0f);
}

TEST(ReduceTest, AxisErrors) {
  const Tensor x = Tensor::zeros({2, 3});
  EXPECT_THAT([&] { sum(x, {2}); }, ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("sum")));
  EXPECT_THAT([&] { mean(x, {0, -2}); }, ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("twice")));
  EXPECT_THROW(sum(Tensor::zeros({2}, DType::kInt32)), InvalidArgument);
}

TEST(ArgmaxTest, EveryAxisFirstOnTies) {
  const Tensor x = Tensor::from_list({1, 3, 3, 2, 0, 5, 5, 1}, {2, 4});
  const Tensor a = argmax(x);
  EXPECT_EQ(a.dtype(), DType::kInt64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(argmax(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(argmax(Tensor::full({3, 2}, 1.0), -2).to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(argmax(Tensor::from_list({1, NAN, 7, NAN}, {4})).item<int64_t>(), 1);
  // Against a reference over a middle axis wider than one column block.
  const Tensor r = random_tensor({3, 17, 300}, 7);
  const Tensor got = argmax(r, 1);
  ASSERT_EQ(got.shape(), (Shape{3, 300}));
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t i = 0; i < 300; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < 17; ++k)
        if (r.data<float>()[(o * 17 + k) * 300 + i] > r.data<float>()[(o * 17 + best) * 300 + i]) best = k;
      ASSERT_EQ(got.data<int64_t>()[o * 300 + i], best);
    }
  EXPECT_THROW(argmax(Tensor::zeros({2, 0}), 1), InvalidArgument);
  EXPECT_EQ(argmax(Tensor::zeros({0, 2}), 1).shape(), (Shape{0}));
}

TEST(BroadcastToTest, RepeatsAlongBroadcastAxes) {
  const Tensor x = Tensor::from_list({1, 2, 3}, {3, 1});
  const Tensor y = broadcast_to(x, {2, 3, 4});
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(y.data<float>()[(i * 3 + j) * 4 + k], j + 1.0f);
  const Tensor row = broadcast_to(Tensor::from_vector(std::vector<int32_t>{7, 8}), {3, 2});
  EXPECT_EQ(row.to_vector<int32_t>(), (std::vector<int32_t>{7, 8, 7, 8, 7, 8}));
  EXPECT_EQ(broadcast_to(Tensor::scalar(4.0f), {2, 2}).to_vector<float>(), (std::vector<float>{4, 4, 4, 4}));
  const Tensor big = broadcast_to(random_tensor({1, 513}, 8), {300, 513});
  EXPECT_EQ(big.to_vector<float>()[299 * 513 + 512], big.to_vector<float>()[512]);
  EXPECT_THAT([&] { broadcast_to(x, {3, 2, 2}); }, ::testing::ThrowsMessage<ShapeError>(HasSubstr("broadcast_to")));
  EXPECT_THROW(broadcast_to(x, {3}), ShapeError);
}

TEST(SumToShapeTest, UndoesBroadcasting) {
  const Tensor x = random_tensor({2, 3, 4}, 9);
  for (const Shape& target : {Shape{3, 1}, Shape{4}, Shape{}, Shape{1, 1, 4}, Shape{2, 3, 4}, Shape{2, 1, 1}}) {
    const Tensor y = sum_to_shape(x, target);
    ASSERT_EQ(y.shape(), target);
    // Reference: broadcasting y's shape back up and summing x into it.
    std::vector<double> ref(shape_numel(target), 0.0);
    const int lead = 3 - static_cast<int>(target.size());
    for (int64_t e = 0; e < x.numel(); ++e) {
      const int64_t idx[3] = {e / 12, e / 4 % 3, e % 4};
      int64_t o = 0;
      for (int j = 0; j < static_cast<int>(target.size()); ++j)
        o = o * target[j] + (target[j] == 1 ? 0 : idx[j + lead]);
      ref[o] += x.data<float>()[e];
    }
    for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(y.data<float>()[i], ref[i], 1e-5);
  }
  Tensor same = sum_to_shape(x, {2, 3, 4});
  EXPECT_FALSE(same.shares_storage_with(x));
  EXPECT_THAT([&] { sum_to_shape(x, {5}); }, ::testing::ThrowsMessage<ShapeError>(HasSubstr("sum_to_shape")));
  EXPECT_THROW(sum_to_shape(x, {1, 2, 3, 4}), ShapeError);
}

}  // namespace
}  // namespace strata::kernels
