// GradientReducer (distribute/gradient_reducer.h): side values ride in the last bucket and come back summed over
// the replicas (float32 hi/lo pairs: each value exact to ~1e-14, the sum to float32's rounding of it, ~6e-8
// relative; counts below 2^24 exact), beside the gradients' sums, or in a bucket of their own when no gradient is
// reduced; compressed buckets refuse them.
#include "distribute/gradient_reducer.h"

#include <gtest/gtest.h>

#include <thread>

#include "strata/comm/local.h"
#include "strata/error.h"

namespace strata::distribute::detail {
namespace {

TEST(GradientReducerTest, SideValuesComeBackSummedOverTheReplicasWithTheGradients) {
  auto group = comm::make_local_group(2);
  const std::vector<Variable> vars = {Variable(Tensor::full({3}, 0.0)), Variable(Tensor::full({5}, 0.0))};
  std::vector<std::vector<double>> sides = {{12345.678901, 60000, 0.001}, {0.000123, 4, 98765.4321}};
  std::vector<std::vector<double>> got(2);
  std::vector<std::vector<float>> grads(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      GradientReducer reducer(*group[static_cast<size_t>(r)], "test", /*bytes_per_pack=*/16, [](const Variable&) { return true; });
      reducer.begin(vars, 0, sides[static_cast<size_t>(r)]);
      for (size_t i = 0; i < vars.size(); ++i) reducer.add(i, Tensor::full(vars[i].shape(), 1.0 + r));
      reducer.end();
      reducer.wait_all();
      EXPECT_GT(reducer.num_buckets(), 1u);  // the side values ride in the last of several buckets
      got[static_cast<size_t>(r)] = reducer.side_sums();
      grads[static_cast<size_t>(r)] = reducer.reduced(1, vars[1].shape()).to_vector<float>();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[static_cast<size_t>(r)].size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const double want = sides[0][i] + sides[1][i];
      EXPECT_NEAR(got[static_cast<size_t>(r)][i], want, 1.2e-7 * want) << i;
    }
    EXPECT_EQ(got[static_cast<size_t>(r)][1], 60004.0);  // counts exact
    EXPECT_EQ(grads[static_cast<size_t>(r)], std::vector<float>(5, 3.0f));
  }
}

TEST(GradientReducerTest, SideValuesWithoutGradientsGetABucketOfTheirOwn) {
  // A pipeline stage without weights still sums its replicas' loss and rows.
  auto group = comm::make_local_group(2);
  const std::vector<Variable> vars = {Variable(Tensor::full({3}, 0.0))};
  std::vector<std::vector<double>> got(2);
  std::vector<size_t> buckets(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const auto i = static_cast<size_t>(r);
      GradientReducer reducer(*group[i], "test", 1 << 20, [](const Variable&) { return false; });
      reducer.begin(vars, 0, {1.25 + r, 10.0 * (r + 1)});
      reducer.add(0, Tensor::full({3}, 1.0));  // not taken: left alone
      reducer.end();
      reducer.wait_all();
      buckets[i] = reducer.num_buckets();
      got[i] = reducer.side_sums();
      EXPECT_FALSE(reducer.reduced(0, vars[0].shape()).defined());
    });
  }
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(buckets[r], 1u);
    EXPECT_EQ(got[r], (std::vector<double>{3.5, 30.0}));
  }
}

TEST(GradientReducerTest, CompressedBucketsRefuseSideValues) {
  auto group = comm::make_local_group(1);
  GradientReducer reducer(*group[0], "test", 1 << 20, [](const Variable&) { return true; },
                          comm::Compression::kBFloat16);
  const std::vector<Variable> vars = {Variable(Tensor::full({3}, 0.0))};
  EXPECT_THROW(reducer.begin(vars, 0, {1.0}), InvalidArgument);
}

}  // namespace
}  // namespace strata::distribute::detail
