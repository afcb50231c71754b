// Philox generator and initializers: reproducibility, disjoint streams, distribution moments.
#include "strata/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "strata/init.h"
#include "strata/threading.h"

namespace strata {
namespace {

std::vector<float> draw_normal(Generator g, int n) {
  std::vector<float> v(n);
  g.fill_normal(v.data(), n, 0.0f, 1.0f);
  return v;
}

TEST(RandomTest, SameSeedSameNumbersDifferentStreamDifferentNumbers) {
  EXPECT_EQ(draw_normal(Generator(42), 100), draw_normal(Generator(42), 100));
  EXPECT_NE(draw_normal(Generator(42), 100), draw_normal(Generator(43), 100));
  EXPECT_NE(draw_normal(Generator(42, 0), 100), draw_normal(Generator(42, 1), 100));
}

TEST(RandomTest, KnownAnswerPinsTheAlgorithm) {
  // Philox4x32-10 with key 0 and counter 0 (Random123's known-answer test vector).
  Generator g(0, 0);
  const auto b = g.next_block();
  EXPECT_EQ(b[0], 0x6627e8d5u);
  EXPECT_EQ(b[1], 0xe169c58du);
  EXPECT_EQ(b[2], 0xbc57ac4cu);
  EXPECT_EQ(b[3], 0x9b00dbd8u);
}

TEST(RandomTest, BernoulliEqualsTheSequentialDrawAtAnyThreadCount) {
  // Element i is word i % 4 of block i / 4: the definition, drawn block by block.
  for (const float p : {0.4f, 0.5f, 0.0f, 1.0f, -0.5f, 2.0f, std::nanf("")})
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{63}, int64_t{65}, int64_t{100003}}) {
    Generator reference(11, 3);
    std::vector<float> expected(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i += 4) {
      const auto b = reference.next_block();
      for (int64_t j = 0; j < 4 && i + j < n; ++j)
        expected[static_cast<size_t>(i + j)] = static_cast<float>(b[j] >> 8) / 16777216.0f < p ? 1.0f : 0.0f;
    }
    for (int threads : {1, 2, 3}) {
      ScopedNumThreads scoped(threads);
      Generator g(11, 3);
      std::vector<float> got(static_cast<size_t>(n), -1.0f);
      g.fill_bernoulli(got.data(), n, p);
      EXPECT_EQ(got, expected) << "p " << p << ", n " << n << ", " << threads << " threads";
      EXPECT_EQ(g.state(), reference.state()) << "n " << n << ": the offset advances by the blocks drawn";
    }
  }
}

TEST(RandomTest, StateSavesAndRestores) {
  Generator g(7);
  std::vector<float> first(10);
  g.fill_uniform(first.data(), 10, 0, 1);
  const auto saved = g.state();
  std::vector<float> a(10), b(10);
  g.fill_uniform(a.data(), 10, 0, 1);
  Generator h(saved);
  h.fill_uniform(b.data(), 10, 0, 1);
  EXPECT_EQ(a, b);
}

TEST(RandomTest, MomentsOfDistributions) {
  constexpr int n = 200000;
  std::vector<float> v(n);
  Generator g(1);
  g.fill_normal(v.data(), n, 1.0f, 2.0f);
  double mean = 0, var = 0;
  for (float x : v) mean += x;
  mean /= n;
  for (float x : v) var += (x - mean) * (x - mean);
  var /= n;
  EXPECT_NEAR(mean, 1.0, 0.02);
  EXPECT_NEAR(var, 4.0, 0.05);

  g.fill_uniform(v.data(), n, -1.0f, 3.0f);
  mean = 0;
  for (float x : v) {
    ASSERT_GE(x, -1.0f);
    ASSERT_LT(x, 3.0f);
    mean += x;
  }
  EXPECT_NEAR(mean / n, 1.0, 0.02);

  g.fill_truncated_normal(v.data(), n, 0.0f, 1.0f);
  for (float x : v) ASSERT_LE(std::fabs(x), 2.0f);

  g.fill_bernoulli(v.data(), n, 0.3f);
  mean = 0;
  for (float x : v) mean += x;
  EXPECT_NEAR(mean / n, 0.3, 0.01);
}

TEST(RandomTest, DefaultGeneratorIsPerThread) {
  manual_seed(5);
  const float here = default_generator().uniform();
  float there = 0;
  std::thread t([&] {
    manual_seed(5);
    there = default_generator().uniform();
  });
  t.join();
  EXPECT_EQ(here, there);
}

TEST(InitTest, FansAndScalesFollowKeras) {
  EXPECT_EQ(init::compute_fans({784, 128}), (std::pair<double, double>{784, 128}));
  EXPECT_EQ(init::compute_fans({3, 3, 1, 32}), (std::pair<double, double>{9, 288}));
  Generator g(3);
  Tensor w = init::glorot_uniform({300, 200}, g);
  const float limit = std::sqrt(6.0f / 500.0f);
  double sq = 0;
  for (float x : w.to_vector<float>()) {
    ASSERT_LE(std::fabs(x), limit);
    sq += double(x) * x;
  }
  EXPECT_NEAR(sq / w.numel(), limit * limit / 3.0, 2e-4);  // variance of U(-l, l)
  Tensor h = init::he_normal({3, 3, 16, 64}, g);
  sq = 0;
  for (float x : h.to_vector<float>()) sq += double(x) * x;
  EXPECT_NEAR(sq / h.numel(), 2.0 / 144.0, 1.5e-3);  // truncation-corrected stddev keeps the variance
  EXPECT_THROW(init::by_name("glorot"), InvalidArgument);
  EXPECT_EQ(init::by_name("ones")({2}, g).to_vector<float>(), (std::vector<float>{1, 1}));
}

// Keras's Orthogonal: the fewer of rows and columns are orthonormal (times gain); rank > 2 is [prod(all but last), last].
TEST(InitializerTest, OrthogonalHasOrthonormalRowsOrColumns) {
  Generator g(5);
  auto gram_is_identity = [](const Tensor& w, int64_t rows, int64_t cols, bool of_rows, double gain) {
    const auto v = w.to_vector<double>();
    const int64_t n = of_rows ? rows : cols, len = of_rows ? cols : rows;
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t b = 0; b < n; ++b) {
        double dot = 0;
        for (int64_t k = 0; k < len; ++k) {
          dot += of_rows ? v[a * cols + k] * v[b * cols + k] : v[k * cols + a] * v[k * cols + b];
        }
        ASSERT_NEAR(dot, a == b ? gain * gain : 0.0, 1e-5) << a << "," << b;
      }
    }
  };
  gram_is_identity(init::orthogonal({8, 32}, g), 8, 32, true, 1.0);          // wide: rows
  gram_is_identity(init::orthogonal({32, 8}, g), 32, 8, false, 1.0);         // tall: columns
  gram_is_identity(init::orthogonal({2, 3, 4, 5}, g, 2.0f), 24, 5, false, 2.0);
  gram_is_identity(init::by_name("orthogonal")({6, 6}, g), 6, 6, true, 1.0);
  EXPECT_THROW(init::orthogonal({7}, g), InvalidArgument);
}

TEST(ThreadingTest, SettingIsPerThreadAndScoped) {
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  {
    ScopedNumThreads guard(2);
    EXPECT_EQ(num_threads(), 2);
    int other = 0;
    std::thread t([&] { other = num_threads(); });
    t.join();
    EXPECT_NE(other, 0);
  }
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(0);
  std::vector<int> hits(1000, 0);
  parallel_for(0, 1000, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (int h : hits) ASSERT_EQ(h, 1);
}

}  // namespace
}  // namespace strata
