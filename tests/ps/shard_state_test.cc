// ShardState without gRPC: a push is applied once per step id, a repeat is dropped (before its shape is checked),
// the window forgets its oldest id at its edge, a synchronous round applies its mean once every step pushed,
// asynchronous pushes (bounded staleness: the coordinator bounds it, the shard applies each at once) go through
// while a round waits, sparse rows equal a dense gradient zero elsewhere, pulls of rows, save/restore, a push's
// learning rate (applied, kept, saved; a round's), an assign that keeps the optimizer's state, and errors.
#include "ps/shard_state.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernels.h"
#include "strata/error.h"
#include "strata/optim/optimizers.h"
#include "test_util.h"

namespace strata::ps {
namespace {

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }
std::vector<float> value_of(const ShardState& s) { return values(s.pull({}).value); }

ShardState sgd_shard(const Tensor& initial, int64_t window = 100) {
  return ShardState("w", initial.clone(), std::make_unique<optim::SGD>(optim::SGDOptions{.learning_rate = 0.5f}), "sgd",
                    window);
}

TEST(ShardStateTest, APushIsAppliedOncePerStepId) {
  const Tensor initial = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  ShardState shard = sgd_shard(initial);
  const Tensor grad = Tensor::from_vector(std::vector<float>{2, 2, 2, 2}, {2, 2});
  const ShardState::PushResult first = shard.push(grad, {}, "step:1");
  EXPECT_TRUE(first.taken);
  EXPECT_EQ(first.applied, 1);
  EXPECT_EQ(first.version, 1);
  EXPECT_EQ(value_of(shard), (std::vector<float>{0, 1, 2, 3}));
  const ShardState::PushResult repeat = shard.push(grad, {}, "step:1");
  EXPECT_FALSE(repeat.taken);
  EXPECT_EQ(repeat.applied, 0);
  EXPECT_EQ(repeat.version, 1);
  EXPECT_EQ(value_of(shard), (std::vector<float>{0, 1, 2, 3}));
  // A repeat is dropped before its shape is checked; a push with no step id never repeats.
  EXPECT_FALSE(shard.push(Tensor::zeros({3}), {}, "step:1").taken);
  EXPECT_TRUE(shard.push(grad, {}, "").taken);
  EXPECT_TRUE(shard.push(grad, {}, "").taken);
  EXPECT_EQ(shard.pull({}).version, 3);
  EXPECT_EQ(shard.steps_remembered(), 1);
}

TEST(ShardStateTest, TheWindowForgetsItsOldestIdAtItsEdge) {
  ShardState shard = sgd_shard(Tensor::zeros({2}), /*window=*/3);
  const Tensor grad = Tensor::ones({2});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(shard.push(grad, {}, std::to_string(i)).taken);
  EXPECT_EQ(shard.steps_remembered(), 3);
  EXPECT_FALSE(shard.push(grad, {}, "0").taken);  // still inside: 3 ids remembered
  EXPECT_TRUE(shard.push(grad, {}, "3").taken);   // "0" leaves the window
  EXPECT_EQ(shard.steps_remembered(), 3);
  EXPECT_FALSE(shard.push(grad, {}, "1").taken);
  EXPECT_TRUE(shard.push(grad, {}, "0").taken);  // forgotten: applied again
  EXPECT_EQ(shard.pull({}).version, 5);
}

TEST(ShardStateTest, ARoundAppliesTheMeanOnceEveryStepPushed) {
  const Tensor initial = test::random_tensor({4, 3}, 1);
  ShardState shard("w", initial.clone(), std::make_unique<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01f}),
                   "adam", 100);
  Variable local(initial.clone(), true, "w");
  optim::Adam local_adam(optim::AdamOptions{.learning_rate = 0.01f});
  const Tensor a = test::random_tensor({4, 3}, 2), b = test::random_tensor({4, 3}, 3);
  const SyncRound round{.id = 7, .size = 2};
  const ShardState::PushResult first = shard.push(a, {}, "7", round);
  EXPECT_TRUE(first.taken);
  EXPECT_EQ(first.applied, 0);
  EXPECT_EQ(first.version, 0);
  EXPECT_EQ(value_of(shard), values(initial));        // held until the round is complete
  EXPECT_FALSE(shard.push(a, {}, "7", round).taken);  // a repeat inside the round
  const ShardState::PushResult second = shard.push(b, {}, "8", round);
  EXPECT_TRUE(second.taken);
  EXPECT_EQ(second.applied, 2);
  EXPECT_EQ(second.version, 1);
  local_adam.apply_gradients({kernels::affine(kernels::add(a, b), 0.5f, 0.0f)}, {local});
  EXPECT_EQ(value_of(shard), values(local.value()));
  EXPECT_FALSE(shard.push(b, {}, "8", round).taken);  // a repeat after the round: applied steps
  EXPECT_EQ(shard.steps_remembered(), 2);
}

TEST(ShardStateTest, AsynchronousPushesApplyAtOnceWhileARoundWaits) {
  ShardState shard = sgd_shard(Tensor::zeros({2}));
  EXPECT_TRUE(shard.push(Tensor::ones({2}), {}, "r1", {.id = 1, .size = 2}).taken);
  const ShardState::PushResult async = shard.push(Tensor::ones({2}), {}, "a1");
  EXPECT_EQ(async.applied, 1);
  EXPECT_EQ(async.version, 1);
  EXPECT_EQ(value_of(shard), (std::vector<float>{-0.5f, -0.5f}));
  EXPECT_EQ(shard.push(Tensor::ones({2}), {}, "r2", {.id = 1, .size = 2}).applied, 2);
  EXPECT_EQ(value_of(shard), (std::vector<float>{-1.0f, -1.0f}));
}

TEST(ShardStateTest, SparseRowsEqualADenseGradientZeroElsewhere) {
  const Tensor initial = test::random_tensor({5, 2}, 4);
  auto adam = [] { return std::make_unique<optim::Adam>(optim::AdamOptions{.learning_rate = 0.1f}); };
  ShardState sparse("w", initial.clone(), adam(), "adam", 100);
  ShardState dense("w", initial.clone(), adam(), "adam", 100);
  const std::vector<int64_t> rows = {3, 1, 3};  // repeated rows add up
  const Tensor grad = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor full = Tensor::from_vector(std::vector<float>{0, 0, 3, 4, 0, 0, 6, 8, 0, 0}, {5, 2});
  for (int step = 0; step < 3; ++step) {
    EXPECT_TRUE(sparse.push(grad, rows, std::to_string(step)).taken);
    EXPECT_TRUE(dense.push(full, {}, std::to_string(step)).taken);
  }
  EXPECT_EQ(value_of(sparse), value_of(dense));
  // In a round, too.
  const SyncRound round{.id = 9, .size = 2};
  sparse.push(grad, rows, "r1", round);
  sparse.push(grad, rows, "r2", round);
  dense.push(full, {}, "r1", round);
  dense.push(full, {}, "r2", round);
  EXPECT_EQ(value_of(sparse), value_of(dense));
  const std::vector<int64_t> pulled = {4, 0};
  EXPECT_EQ(values(sparse.pull(pulled).value),
            (std::vector<float>{value_of(dense)[8], value_of(dense)[9], value_of(dense)[0], value_of(dense)[1]}));
}

TEST(ShardStateTest, SaveAndRestoreCarryTheValueSlotsVersionAndSteps) {
  auto adam = [] { return std::make_unique<optim::Adam>(optim::AdamOptions{.learning_rate = 0.1f}); };
  ShardState shard("w", test::random_tensor({3}, 5), adam(), "adam", 100);
  shard.push(test::random_tensor({3}, 6), {}, "a");
  shard.push(test::random_tensor({3}, 7), {}, "b");
  Tensor value;
  std::vector<std::pair<std::string, Tensor>> state;
  int64_t version = 0;
  std::vector<std::string> steps;
  shard.save([&](const ShardState::Saved& saved) {
    value = saved.value.clone();
    state = saved.optimizer_state;
    version = saved.version;
    steps.assign(saved.applied_steps.begin(), saved.applied_steps.end());
  });
  EXPECT_EQ(version, 2);
  EXPECT_EQ(steps, (std::vector<std::string>{"a", "b"}));
  ShardState restored("w", value, adam(), "adam", 100);
  restored.restore(version, steps, state);
  EXPECT_FALSE(restored.push(test::random_tensor({3}, 7), {}, "b").taken);
  const Tensor next = test::random_tensor({3}, 8);
  EXPECT_EQ(restored.push(next, {}, "c").version, 3);
  shard.push(next, {}, "c");
  EXPECT_EQ(value_of(restored), value_of(shard));
}

// The rate a push names is the rate of its update, bit for bit as the same optimizer at that rate locally; the shard
// keeps it for pushes naming none (0) and records it in what it saves. A round applies at the rate its pushes name.
TEST(ShardStateTest, APushsLearningRateIsAppliedAndKeptAndARoundAppliesAtItsPushesRate) {
  const Tensor initial = test::random_tensor({4, 3}, 11);
  ShardState shard("w", initial.clone(), std::make_unique<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01f}),
                   "adam", 100);
  Variable local(initial.clone(), true, "w");
  optim::Adam local_adam(optim::AdamOptions{.learning_rate = 0.01f});
  const auto step = [&](uint64_t seed, double rate) {
    const Tensor grad = test::random_tensor({4, 3}, seed);
    EXPECT_TRUE(shard.push(grad, {}, std::to_string(seed), {}, rate).taken);
    return grad;
  };
  local_adam.apply_gradients({step(20, 0)}, {local});  // 0: the shard's own rate, 0.01
  EXPECT_EQ(value_of(shard), values(local.value()));
  const Tensor lowered = step(21, 0.002);
  local_adam.set_learning_rate(0.002f);
  local_adam.apply_gradients({lowered}, {local});
  EXPECT_EQ(value_of(shard), values(local.value()));
  local_adam.apply_gradients({step(22, 0)}, {local});  // kept: 0 now means 0.002
  EXPECT_EQ(value_of(shard), values(local.value()));
  EXPECT_DOUBLE_EQ(shard.learning_rate(), 0.002f);
  double saved_rate = 0;
  shard.save([&](const ShardState::Saved& saved) { saved_rate = saved.learning_rate; });
  EXPECT_DOUBLE_EQ(saved_rate, 0.002f);

  // A synchronous round at 0.0005: its mean applied once, at that rate.
  const Tensor a = test::random_tensor({4, 3}, 23), b = test::random_tensor({4, 3}, 24);
  const SyncRound round{.id = 5, .size = 2};
  EXPECT_EQ(shard.push(a, {}, "r1", round, 0.0005).applied, 0);
  EXPECT_EQ(shard.push(b, {}, "r2", round, 0.0005).applied, 2);
  local_adam.set_learning_rate(0.0005f);
  local_adam.apply_gradients({kernels::affine(kernels::add(a, b), 0.5f, 0.0f)}, {local});
  EXPECT_EQ(value_of(shard), values(local.value()));
  EXPECT_EQ(shard.version(), 4);
}

// assign writes the value and nothing else: the optimizer's slots and step count go on (the next update equals the
// local optimizer's after the same assign), as do the version, the step ids and the rate.
TEST(ShardStateTest, AssignWritesTheValueAndKeepsTheOptimizerStateVersionAndSteps) {
  const Tensor initial = test::random_tensor({4, 3}, 30);
  ShardState shard("w", initial.clone(), std::make_unique<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01f}),
                   "adam", 100);
  Variable local(initial.clone(), true, "w");
  optim::Adam local_adam(optim::AdamOptions{.learning_rate = 0.01f});
  for (uint64_t seed : {31, 32}) {
    const Tensor grad = test::random_tensor({4, 3}, seed);
    shard.push(grad, {}, std::to_string(seed), {}, 0.004);
    local_adam.set_learning_rate(0.004f);
    local_adam.apply_gradients({grad}, {local});
  }
  const Tensor best = test::random_tensor({4, 3}, 33);
  shard.assign(best);
  EXPECT_EQ(value_of(shard), values(best));
  EXPECT_EQ(shard.version(), 2);
  EXPECT_FALSE(shard.push(test::random_tensor({4, 3}, 31), {}, "31").taken);  // its step ids stay
  local.assign(best);
  const Tensor next = test::random_tensor({4, 3}, 34);
  shard.push(next, {}, "34");
  local_adam.apply_gradients({next}, {local});  // Adam's third step (bias correction), at the kept rate
  EXPECT_EQ(value_of(shard), values(local.value()));
  EXPECT_EQ(test::message_of<InvalidArgument>([&] { shard.assign(Tensor::zeros({3, 4})); }),
            "Assign w: the value is float32[3, 4], the shard float32[4, 3]");
}

TEST(ShardStateTest, ErrorsNameTheShardAndWhatDoesNotFit) {
  ShardState shard = sgd_shard(Tensor::zeros({4, 2}));
  auto message = [&](auto f) { return test::message_of<InvalidArgument>(f); };
  EXPECT_EQ(message([&] {
              shard.push(Tensor::zeros({2, 2}), {}, "x");
            }),
            "Push w: the gradient is [2, 2], the shard [4, 2]");
  const std::vector<int64_t> rows = {0, 4};
  EXPECT_EQ(message([&] { shard.push(Tensor::zeros({2, 2}), rows, "x"); }), "Push w: row 4 is outside [0, 4)");
  EXPECT_EQ(message([&] {
              shard.push(Tensor::zeros({3, 2}), rows, "x");
            }),
            "Push w: the gradient of 2 rows is [3, 2], wants [2, 2]");
  EXPECT_EQ(message([&] { shard.pull(rows); }), "Pull w: row 4 is outside [0, 4)");
  EXPECT_EQ(message([&] {
              shard.push(Tensor::zeros({4, 2}), {}, "", {.id = 3, .size = 2});
            }),
            "Push w: a push of round 3 needs a step id and a positive round size (got 2)");
  shard.push(Tensor::zeros({4, 2}), {}, "a", {.id = 3, .size = 2});
  EXPECT_EQ(message([&] {
              shard.push(Tensor::zeros({4, 2}), {}, "b", {.id = 3, .size = 3});
            }),
            "Push w: round 3 has size 2 but step 'b' says 3 (pushes of one round must agree)");
  EXPECT_EQ(message([&] {
              shard.push(Tensor::zeros({4, 2}), {}, "b", {.id = 3, .size = 2}, 0.25);
            }),
            "Push w: round 3 has learning rate 0 but step 'b' says 0.25 (pushes of one round must agree; 0: the "
            "shard's own)");
  EXPECT_EQ(message([&] { shard.push(Tensor::zeros({4, 2}), {}, "c", {}, -0.5); }),
            "Push w: learning rate -0.5 must be finite and >= 0 (0: the shard's own)");
  EXPECT_EQ(message([&] { shard.push(Tensor::zeros({4, 2}), {}, "c", {}, std::nan("")); }),
            "Push w: learning rate nan must be finite and >= 0 (0: the shard's own)");
  EXPECT_EQ(shard.pull({}).version, 0);  // nothing was applied by a failed push
}

}  // namespace
}  // namespace strata::ps
