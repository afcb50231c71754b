// Synchronous rounds on the parameter server (max_staleness = 0) over gRPC on 127.0.0.1: a round's pushes to a shard
// are held until the round is complete and then applied as one update with their mean (for Adam: not the same as
// two updates); a step repeated inside or after its round is dropped; sparse pushes take part as dense ones; a
// sharded variable's row push reaches every shard so each completes its round; and the errors (a round's size
// disagreeing, a round push with no step id).
#include <gtest/gtest.h>

#include "kernels/kernels.h"
#include "strata/error.h"
#include "strata/optim/optimizers.h"
#include "strata/ps/server.h"
#include "strata/ps/sharded_variable.h"
#include "strata/variable.h"
#include "test_util.h"

namespace strata::ps {
namespace {

struct Running {
  ParameterServer server;
  std::shared_ptr<ParameterServerClient> client;
  Running() {
    server.start("127.0.0.1:0");
    client = std::make_shared<ParameterServerClient>("127.0.0.1:" + std::to_string(server.port()));
  }
};

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

Tensor mean_of(const Tensor& a, const Tensor& b) { return kernels::affine(kernels::add(a, b), 0.5f, 0.0f); }

TEST(SyncRoundTest, ARoundIsAppliedOnceCompleteAsTheMeanOfItsGradients) {
  Running ps;
  const OptimizerSpec adam{.name = "adam", .learning_rate = 0.01};
  const Tensor initial = test::random_tensor({5, 3}, 1);
  ps.client->create("w", initial, adam);
  Variable local(initial.clone(), true, "w");
  optim::Adam local_adam(optim::AdamOptions{.learning_rate = 0.01f});

  for (int64_t round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const Tensor g1 = test::random_tensor({5, 3}, 10 + 2 * round), g2 = test::random_tensor({5, 3}, 11 + 2 * round);
    const SyncRound r{.id = 100 + round, .size = 2};
    const std::vector<float> before = values(ps.client->pull("w"));
    EXPECT_TRUE(ps.client->push("w", g1, "step:" + std::to_string(2 * round), r));
    EXPECT_EQ(values(ps.client->pull("w")), before) << "half a round was applied";
    EXPECT_EQ(ps.server.pushes_applied(), 2 * round);
    EXPECT_TRUE(ps.client->push("w", g2, "step:" + std::to_string(2 * round + 1), r));
    local_adam.apply_gradients({mean_of(g1, g2)}, {local});
    EXPECT_EQ(values(ps.client->pull("w")), values(local.value()));  // one update with the mean, bit for bit
    EXPECT_EQ(ps.server.pushes_applied(), 2 * round + 2);
  }
  // Two Adam updates (one per gradient) would have moved elsewhere: the test above can tell them apart.
  Variable twice(initial.clone(), true, "w");
  optim::Adam twice_adam(optim::AdamOptions{.learning_rate = 0.01f});
  twice_adam.apply_gradients({test::random_tensor({5, 3}, 10)}, {twice});
  twice_adam.apply_gradients({test::random_tensor({5, 3}, 11)}, {twice});
  EXPECT_NE(values(twice.value()), values(local.value()));
  EXPECT_EQ(ps.server.pushes_dropped(), 0);
}

TEST(SyncRoundTest, AStepRepeatedInOrAfterItsRoundIsDroppedAndPushesWithoutARoundApplyAtOnce) {
  Running ps;
  ps.client->create("w", Tensor::zeros({2}), {.name = "sgd", .learning_rate = 1.0});
  const SyncRound r{.id = 7, .size = 2};
  EXPECT_TRUE(ps.client->push("w", Tensor::full({2}, 2.0), "step:1", r));
  EXPECT_FALSE(ps.client->push("w", Tensor::full({2}, 2.0), "step:1", r));  // a re-run before the round is complete
  EXPECT_EQ(values(ps.client->pull("w")), std::vector<float>(2, 0.0f));
  EXPECT_TRUE(ps.client->push("w", Tensor::full({2}, 4.0), "step:2", r));
  EXPECT_EQ(values(ps.client->pull("w")), std::vector<float>(2, -3.0f));    // the mean of 2 and 4
  EXPECT_FALSE(ps.client->push("w", Tensor::full({2}, 2.0), "step:2", r));  // a late zombie of the round
  EXPECT_TRUE(ps.client->push("w", Tensor::full({2}, 1.0), "step:3"));      // asynchronous: at once
  EXPECT_EQ(values(ps.client->pull("w")), std::vector<float>(2, -4.0f));
  EXPECT_EQ(ps.server.pushes_applied(), 3);
  EXPECT_EQ(ps.server.pushes_dropped(), 2);
}

TEST(SyncRoundTest, SparsePushesOfARoundEqualDenseOnes) {
  Running ps;
  const Tensor table = test::random_tensor({6, 2}, 3);
  const OptimizerSpec adam{.name = "adam", .learning_rate = 0.05};
  ps.client->create("emb", table, adam);
  ps.client->create("emb_dense", table, adam);
  const Tensor a = test::random_tensor({2, 2}, 4), b = test::random_tensor({1, 2}, 5);
  Tensor dense_a = Tensor::zeros({6, 2}), dense_b = Tensor::zeros({6, 2});
  for (int k = 0; k < 2; ++k) {
    dense_a.data<float>()[1 * 2 + k] = a.data<float>()[k];
    dense_a.data<float>()[4 * 2 + k] = a.data<float>()[2 + k];
    dense_b.data<float>()[4 * 2 + k] = b.data<float>()[k];
  }
  const SyncRound r{.id = 1, .size = 2};
  ps.client->push_rows("emb", {1, 4}, a, "s1", r);
  ps.client->push_rows("emb", {4}, b, "s2", r);
  ps.client->push("emb_dense", dense_a, "s1", r);
  ps.client->push("emb_dense", dense_b, "s2", r);
  EXPECT_EQ(values(ps.client->pull("emb")), values(ps.client->pull("emb_dense")));
  EXPECT_NE(values(ps.client->pull("emb")), values(table));
}

TEST(SyncRoundTest, ARowPushOfAShardedVariableCompletesTheRoundOnEveryShard) {
  Running ps;
  const Tensor initial = test::random_tensor({8, 2}, 6);
  const ShardedVariable table("emb", initial, FixedShardsPartitioner(2), {ps.client},
                              {.name = "sgd", .learning_rate = 1.0});
  const SyncRound r{.id = 3, .size = 2};
  table.push_rows({1}, Tensor::full({1, 2}, 2.0), "s1", r);  // rows of shard 0 (rows 0-3) alone
  table.push_rows({2}, Tensor::full({1, 2}, 4.0), "s2", r);
  EXPECT_EQ(ps.server.pushes_applied(), 4);  // 2 steps x 2 shards: the round is complete on both
  std::vector<float> want = values(initial);
  want[2] -= 1.0f, want[3] -= 1.0f;  // row 1: the mean of 2 and nothing
  want[4] -= 2.0f, want[5] -= 2.0f;  // row 2: the mean of 4 and nothing
  EXPECT_EQ(values(table.pull()), want);
}

TEST(SyncRoundTest, ARoundsSizeMustAgreeAndItsPushesNeedAStepId) {
  Running ps;
  ps.client->create("w", Tensor::zeros({2}), {.name = "sgd", .learning_rate = 1.0});
  EXPECT_TRUE(ps.client->push("w", Tensor::full({2}, 1.0), "step:1", {.id = 9, .size = 2}));
  const std::string m = test::message_of<InvalidArgument>(
      [&] { ps.client->push("w", Tensor::full({2}, 1.0), "step:2", {.id = 9, .size = 3}); });
  EXPECT_NE(m.find("round 9 has size 2 but step 'step:2' says 3"), std::string::npos) << m;
  EXPECT_NE(test::message_of<InvalidArgument>([&] {
              ps.client->push("w", Tensor::full({2}, 1.0), "", {.id = 9, .size = 2});
            }).find("needs a step id"),
            std::string::npos);
  EXPECT_EQ(values(ps.client->pull("w")), std::vector<float>(2, 0.0f));  // neither bad push changed anything
  EXPECT_TRUE(ps.client->push("w", Tensor::full({2}, 3.0), "step:2", {.id = 9, .size = 2}));
  EXPECT_EQ(values(ps.client->pull("w")), std::vector<float>(2, -2.0f));
}

}  // namespace
}  // namespace strata::ps
