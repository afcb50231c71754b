// dropout: the kept fraction and the scaling, y = x * mask, reproducibility with a seed at any
// thread count, rate 0 as the identity, and the rates that are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/kernels.h"
#include "test_util.h"
#include "strata/random.h"
#include "strata/threading.h"

namespace strata::kernels {
namespace {

using test::random_tensor;

using ::testing::HasSubstr;

TEST(Dropout, KeepsOneMinusRateAndScales) {
  const Tensor x = random_tensor({200, 1000}, 1);
  for (float rate : {0.1f, 0.3f, 0.5f, 0.9f}) {
    SCOPED_TRACE(rate);
    Generator gen(42);
    const DropoutResult r = dropout(x, rate, gen);
    ASSERT_EQ(r.y.shape(), x.shape());
    ASSERT_EQ(r.mask.shape(), x.shape());
    const float scale = 1.0f / (1.0f - rate);
    const float* m = r.mask.data<float>();
    const float* px = x.data<float>();
    const float* py = r.y.data<float>();
    int64_t kept = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      ASSERT_TRUE(m[i] == 0.0f || m[i] == scale) << m[i];
      ASSERT_EQ(py[i], px[i] * m[i]);
      kept += m[i] != 0.0f;
    }
    // 200k Bernoulli draws: the standard deviation of the kept fraction is below 0.0012.
    EXPECT_NEAR(static_cast<double>(kept) / x.numel(), 1.0 - rate, 0.006);
  }
}

TEST(Dropout, SameSeedSameMaskAtAnyThreadCount) {
  const Tensor x = random_tensor({300, 700}, 2);
  Tensor first;
  for (int threads : {1, 2}) {
    ScopedNumThreads scoped(threads);
    Generator gen(7, 3);
    const DropoutResult r = dropout(x, 0.4f, gen);
    if (!first.defined()) {
      first = r.mask;
    } else {
      EXPECT_EQ(r.mask.to_vector<float>(), first.to_vector<float>());
    }
  }
  Generator other(8, 3);
  EXPECT_NE(dropout(x, 0.4f, other).mask.to_vector<float>(), first.to_vector<float>());
  // Consecutive calls on one generator draw new masks.
  Generator gen(7, 3);
  const Tensor m1 = dropout(x, 0.4f, gen).mask;
  const Tensor m2 = dropout(x, 0.4f, gen).mask;
  EXPECT_EQ(m1.to_vector<float>(), first.to_vector<float>());
  EXPECT_NE(m2.to_vector<float>(), m1.to_vector<float>());
}

TEST(Dropout, RateZeroIsIdentity) {
  const Tensor x = random_tensor({5, 7}, 3);
  Generator gen(1);
  const auto before = gen.state();
  const DropoutResult r = dropout(x, 0.0f, gen);
  EXPECT_EQ(r.y.to_vector<float>(), x.to_vector<float>());
  EXPECT_FALSE(r.y.shares_storage_with(x));
  EXPECT_EQ(r.mask.to_vector<float>(), std::vector<float>(35, 1.0f));
  EXPECT_EQ(gen.state(), before);
}

TEST(Dropout, EmptyInput) {
  Generator gen(1);
  const DropoutResult r = dropout(Tensor::zeros({0, 4}), 0.5f, gen);
  EXPECT_EQ(r.y.shape(), (Shape{0, 4}));
  EXPECT_EQ(r.mask.shape(), (Shape{0, 4}));
}

TEST(Dropout, BadRatesThrow) {
  const Tensor x = Tensor::zeros({4});
  Generator gen(1);
  for (float rate : {1.0f, 1.5f, -0.1f, std::numeric_limits<float>::quiet_NaN()}) {
    try {
      dropout(x, rate, gen);
      FAIL() << "no throw for " << rate;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("dropout: rate must be in [0, 1)"));
    }
  }
  EXPECT_THROW(dropout(x.to(DType::kInt32), 0.5f, gen), InvalidArgument);
}

}  // namespace
}  // namespace strata::kernels
