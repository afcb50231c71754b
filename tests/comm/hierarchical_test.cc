// The hierarchical communicator over threads: W "workers", each a local group of L ranks, joined by a local
// group of W ranks standing in for the network. Every collective gives every one of the W x L ranks the result
// of one flat group, in global rank order; a failure across the workers reaches every local rank.
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "strata/comm/hierarchical.h"
#include "strata/comm/local.h"
#include "test_util.h"

namespace strata::comm {
namespace {

struct Grid {
  int workers, local;
  std::vector<std::shared_ptr<Communicator>> ranks;  // by global rank
};

Grid make_grid(int workers, int local) {
  Grid g{workers, local, {}};
  auto cross = make_local_group(workers, {.timeout = std::chrono::seconds(10)});
  for (int w = 0; w < workers; ++w) {
    auto group = make_hierarchical_group(make_local_group(local, {.timeout = std::chrono::seconds(10)}),
                                         cross[static_cast<size_t>(w)]);
    for (auto& r : group) g.ranks.push_back(r);
  }
  return g;
}

// Runs fn(global rank, its communicator) on a thread per rank.
void on_every_rank(Grid& g, const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < g.ranks.size(); ++r) threads.emplace_back([&, r] { fn(static_cast<int>(r), *g.ranks[r]); });
  for (auto& t : threads) t.join();
}

TEST(HierarchicalTest, EveryCollectiveGivesTheFlatGroupsResultInGlobalRankOrder) {
  for (const auto& [workers, local] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}, std::pair{1, 2}}) {
    SCOPED_TRACE(std::to_string(workers) + " x " + std::to_string(local));
    Grid g = make_grid(workers, local);
    const int n = workers * local;
    on_every_rank(g, [&](int r, Communicator& c) {
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), n);
      EXPECT_EQ(c.backend(), "hierarchical");
      Tensor sum = Tensor::full({3}, r + 1.0);
      c.all_reduce({sum}, ReduceOp::kSum)->wait();
      EXPECT_EQ(sum.to_vector<float>(), std::vector<float>(3, n * (n + 1) / 2.0f));
      Tensor mean = Tensor::full({2}, 2.0 * r);
      c.all_reduce({mean}, ReduceOp::kMean)->wait();
      EXPECT_EQ(mean.to_vector<float>(), std::vector<float>(2, n - 1.0f));
      Tensor most = Tensor::from_vector(std::vector<int64_t>{r, -r});
      c.all_reduce({most}, AllReduceOptions{.op = ReduceOp::kMax})->wait();
      EXPECT_EQ(most.to_vector<int64_t>(), (std::vector<int64_t>{n - 1, 0}));
      for (int root = 0; root < n; ++root) {
        Tensor b = Tensor::full({2}, r == root ? 100.0 + root : -1.0);
        c.broadcast({b}, root)->wait();
        EXPECT_EQ(b.to_vector<float>(), std::vector<float>(2, 100.0f + root)) << "root " << root;
      }
      Tensor in = Tensor::from_vector(std::vector<float>{10.0f * r, 10.0f * r + 1}, {2});
      Tensor out = Tensor::empty({2 * n});
      c.all_gather(in, out)->wait();
      std::vector<float> want;
      for (int q = 0; q < n; ++q) {
        want.push_back(10.0f * q);
        want.push_back(10.0f * q + 1);
      }
      EXPECT_EQ(out.to_vector<float>(), want);
      c.barrier();
    });
  }
}

TEST(HierarchicalTest, AFailureAcrossTheWorkersReachesEveryLocalRank) {
  Grid g = make_grid(2, 2);
  std::vector<std::string> errors(4);
  on_every_rank(g, [&](int r, Communicator& c) {
    if (r >= 2) return;  // worker 1 never comes
    Tensor t = Tensor::full({1}, 1.0);
    try {
      c.all_reduce({t}, AllReduceOptions{.op = ReduceOp::kSum, .timeout = std::chrono::milliseconds(300)})->wait();
    } catch (const Timeout& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_NE(errors[static_cast<size_t>(r)], "") << "rank " << r << " did not fail";
  EXPECT_THROW(make_hierarchical_group({}, nullptr), InvalidArgument);
  EXPECT_THROW(g.ranks[0]->reduce_scatter(Tensor::zeros({4}), Tensor::zeros({1})), Unavailable);
}

}  // namespace
}  // namespace strata::comm
