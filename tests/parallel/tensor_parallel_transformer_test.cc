// Tensor-parallel Transformer layers (strata/parallel/tensor_parallel_transformer.h), ranks as threads of this
// process over a local group:
// (a) TensorParallelMultiHeadAttention on 2 ranks (and 1) gives the unsplit MultiHeadAttention's output, input
//     gradients and weight gradients (the ranks' slices joined by unshard) to 1e-5: self-attention with a causal
//     mask, and cross-attention with a padding mask;
// (b) TensorParallelTransformerEncoder on 2 ranks gives the unsplit block's output and gradients, pre- and post-norm,
//     and after 3 Adam steps on each rank's slices the weights joined are the unsplit block's after 3 steps;
// (c) the collectives each issues: one all-reduce forward and one backward for the attention, two of each for the
//     block;
// (d) heads or an MLP width that do not divide over the ranks, and a mismatched unsplit layer, are InvalidArgument.
#include "strata/parallel/tensor_parallel_transformer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "forwarding_communicator.h"
#include "parallel_test_util.h"
#include "strata/comm/local.h"
#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/ops.h"
#include "strata/optim/optimizers.h"
#include "test_util.h"

namespace strata::parallel {
namespace {

using ::testing::HasSubstr;
using CommPtr = std::shared_ptr<comm::Communicator>;
using test_util::on_threads;

constexpr int64_t kBatch = 3, kSteps = 5, kFeatures = 8;

// Every weight of `layer` set to values in [-0.5, 0.5] from `seed` (biases too, so that their slices matter).
void randomize(nn::Layer& layer, uint64_t seed) {
  for (Variable w : layer.trainable_variables()) w.assign(test::random_tensor(w.shape(), ++seed, -0.5f, 0.5f));
}

// A fixed projection of the output, so that every output element has its own gradient.
Variable objective(const Variable& y, uint64_t seed) {
  return sum(y * Variable(test::random_tensor(y.shape(), seed), false));
}

void expect_near(const Tensor& got, const Tensor& want, const std::string& what, float tol = 1e-5f) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], tol * std::max(1.0f, std::abs(w[i]))) << what << " element " << i;
  }
}

// The ranks' gradients of their weight_shards' parts joined, one per shard, against the unsplit gradients of the
// shards' wholes.
void expect_joined_gradients(const std::vector<std::vector<WeightShard>>& shards,
                             const std::vector<std::vector<Tensor>>& rank_grads, const std::vector<Variable>& whole,
                             const std::vector<Tensor>& whole_grads, const std::string& what) {
  const size_t n = shards[0].size();
  ASSERT_EQ(n, whole.size()) << what << ": every weight of the unsplit layer has a slice";
  for (size_t k = 0; k < n; ++k) {
    int w = -1;
    for (size_t i = 0; i < whole.size(); ++i) {
      if (whole[i].same_as(shards[0][k].whole)) w = static_cast<int>(i);
    }
    ASSERT_GE(w, 0) << what << ": shard " << k;
    std::vector<Tensor> parts;
    for (size_t r = 0; r < shards.size(); ++r) parts.push_back(rank_grads[r][k]);
    expect_near(unshard(parts, shards[0][k].axis), whole_grads[static_cast<size_t>(w)],
                what + ": gradient of " + shards[0][k].whole.name());
  }
}

// (a) ------------------------------------------------------------------------------------------------------------

void check_attention(int ranks, bool cross) {
  const std::string what = std::to_string(ranks) + (cross ? " ranks, cross-attention" : " ranks, self-attention");
  nn::MultiHeadAttention full(4, 3, {.value_dim = 2, .use_causal_mask = !cross});
  const Tensor q = test::random_tensor({kBatch, kSteps, kFeatures}, 1);
  const Tensor v = test::random_tensor({kBatch, kSteps + 2, 6}, 2);
  const Tensor padding = Tensor::from_vector(
      std::vector<float>{1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1}, {kBatch, kSteps + 2});
  auto inputs = [&](const Variable& qv, const Variable& vv) {
    return cross ? std::vector<Variable>{qv, vv, vv, Variable(padding, false)} : std::vector<Variable>{qv};
  };
  full.build(cross ? std::vector<Shape>{q.shape(), v.shape(), v.shape()} : std::vector<Shape>{q.shape()});
  randomize(full, 10);
  Variable qw(q, true), vw(v, true);
  std::vector<Variable> whole = full.trainable_variables();
  Tensor want_y;
  std::vector<Tensor> want_grads;
  {
    GradientTape tape;
    const Variable y = full(inputs(qw, vw));
    want_y = y.value();
    std::vector<Variable> sources = whole;
    sources.push_back(qw);
    sources.push_back(vw);
    want_grads = tape.gradient(objective(y, 99), sources, UnconnectedGradients::kZero);
  }
  const std::vector<CommPtr> group = comm::make_local_group(ranks);
  std::vector<std::vector<WeightShard>> shards(ranks);
  std::vector<std::vector<Tensor>> grads(ranks);
  std::vector<Tensor> outputs(ranks), q_grads(ranks), v_grads(ranks);
  const auto errors = on_threads(ranks, [&](int r) {
    TensorParallelMultiHeadAttention split(4, 3, group[r], {.value_dim = 2, .use_causal_mask = !cross});
    split.load_shard_of(full);
    shards[r] = split.weight_shards(full);
    EXPECT_EQ(split.local_heads(), 4 / ranks);
    Variable qr(q, true), vr(v, true);
    GradientTape tape;
    const Variable y = split(inputs(qr, vr));
    outputs[r] = y.value();
    std::vector<Variable> sources;
    for (const WeightShard& s : shards[r]) sources.push_back(s.part);
    sources.push_back(qr);
    sources.push_back(vr);
    std::vector<Tensor> g = tape.gradient(objective(y, 99), sources, UnconnectedGradients::kZero);
    v_grads[r] = g.back();
    g.pop_back();
    q_grads[r] = g.back();
    g.pop_back();
    grads[r] = g;
  });
  for (const auto& e : errors) ASSERT_EQ(e, "") << what;
  for (int r = 0; r < ranks; ++r) {
    expect_near(outputs[r], want_y, what + ": output on rank " + std::to_string(r));
    expect_near(q_grads[r], want_grads[whole.size()], what + ": query gradient on rank " + std::to_string(r));
    if (cross) expect_near(v_grads[r], want_grads[whole.size() + 1], what + ": value gradient");
  }
  expect_joined_gradients(shards, grads, whole,
                          std::vector<Tensor>(want_grads.begin(), want_grads.begin() + whole.size()), what);
}

TEST(TensorParallelTransformerTest, AttentionGivesTheUnsplitOutputAndGradients) {
  check_attention(2, false);
  check_attention(2, true);
  check_attention(1, false);
}

// (b) ------------------------------------------------------------------------------------------------------------

void check_encoder(bool normalize_first) {
  const std::string what = normalize_first ? "pre-norm" : "post-norm";
  const nn::TransformerEncoderOptions options{.activation = "gelu", .normalize_first = normalize_first};
  nn::TransformerEncoder full(12, 4, options);
  const Shape shape{kBatch, kSteps, kFeatures};
  full.build({shape});
  randomize(full, 20);
  const std::vector<Variable> whole = full.trainable_variables();
  const auto x_of_step = [&](int k) { return test::random_tensor(shape, 50 + static_cast<uint64_t>(k)); };
  // The output and gradients at the start, then the weights after 3 Adam steps.
  const std::vector<CommPtr> group = comm::make_local_group(2);
  std::vector<std::vector<WeightShard>> shards(2);
  std::vector<std::vector<Tensor>> grads(2);
  std::vector<Tensor> outputs(2), x_grads(2);
  std::vector<std::vector<Tensor>> trained(2);
  constexpr int kAdamSteps = 3;
  // The key bias's gradient is zero but for rounding (the softmax ignores a shift of a query's scores), and Adam with
  // its default epsilon would turn that rounding noise into whole steps: an epsilon of 1e-4 keeps them negligible
  // while the other weights (gradients of 1e-2 and more) take full Adam steps.
  const optim::Adam adam_proto({.learning_rate = 0.01f, .epsilon = 1e-4f});
  const auto errors = on_threads(2, [&](int r) {
    TensorParallelTransformerEncoder split(12, 4, group[r], options);
    split.load_shard_of(full);
    shards[r] = split.weight_shards(full);
    std::vector<Variable> parts;
    for (const WeightShard& s : shards[r]) parts.push_back(s.part);
    auto adam = adam_proto.clone();
    for (int k = 0; k < kAdamSteps; ++k) {
      Variable x(x_of_step(k), true);
      GradientTape tape;
      const Variable y = split(x, true);
      std::vector<Variable> sources = parts;
      sources.push_back(x);
      std::vector<Tensor> g = tape.gradient(objective(y, 77), sources, UnconnectedGradients::kZero);
      if (k == 0) {
        outputs[r] = y.value();
        x_grads[r] = g.back();
        grads[r] = std::vector<Tensor>(g.begin(), g.end() - 1);
      }
      g.pop_back();
      adam->apply_gradients(g, parts);
    }
    for (const Variable& p : parts) trained[r].push_back(p.value().clone());
  });
  for (const auto& e : errors) ASSERT_EQ(e, "") << what;

  // The unsplit block (after the ranks read its starting weights).
  auto adam = adam_proto.clone();
  for (int k = 0; k < kAdamSteps; ++k) {
    Variable x(x_of_step(k), true);
    GradientTape tape;
    const Variable y = full(x, true);
    std::vector<Variable> sources = whole;
    sources.push_back(x);
    std::vector<Tensor> g = tape.gradient(objective(y, 77), sources, UnconnectedGradients::kZero);
    if (k == 0) {
      for (int r = 0; r < 2; ++r) {
        expect_near(outputs[r], y.value(), what + ": output on rank " + std::to_string(r));
        expect_near(x_grads[r], g.back(), what + ": input gradient on rank " + std::to_string(r));
      }
      expect_joined_gradients(shards, grads, whole, std::vector<Tensor>(g.begin(), g.end() - 1), what);
    }
    g.pop_back();
    adam->apply_gradients(g, whole);
  }
  for (size_t k = 0; k < shards[0].size(); ++k) {
    const Tensor joined = unshard({trained[0][k], trained[1][k]}, shards[0][k].axis);
    expect_near(joined, shards[0][k].whole.value(), what + ": weight after Adam steps " + shards[0][k].whole.name());
    if (shards[0][k].axis < 0) expect_near(trained[1][k], trained[0][k], what + ": replicated weight on rank 1");
  }
}

TEST(TensorParallelTransformerTest, EncoderBlockGivesTheUnsplitOutputGradientsAndAdamSteps) {
  check_encoder(true);
  check_encoder(false);
}

// (c) ------------------------------------------------------------------------------------------------------------

// Counts all-reduces; forwards everything to its rank of a local group.
class CountingCommunicator : public test::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::all_reduce;
  using ForwardingCommunicator::ForwardingCommunicator;
  std::shared_ptr<comm::Work> all_reduce(std::vector<Tensor> tensors, comm::ReduceOp op) override {
    ++all_reduces;
    return ForwardingCommunicator::all_reduce(std::move(tensors), op);
  }
  int all_reduces = 0;
};

TEST(TensorParallelTransformerTest, CountsOneAllReduceEachWayForAttentionAndTwoForTheBlock) {
  nn::TransformerEncoder full(8, 2);
  full.build({Shape{kBatch, kSteps, kFeatures}});
  const std::vector<CommPtr> group = comm::make_local_group(2);
  std::vector<int> attention_forward(2), attention_backward(2), block_forward(2), block_backward(2);
  const auto errors = on_threads(2, [&](int r) {
    auto counting = std::make_shared<CountingCommunicator>(group[r]);
    TensorParallelMultiHeadAttention mha(2, 4, counting);
    mha.load_shard_of(*full.attention());
    TensorParallelTransformerEncoder block(8, 2, counting);
    block.load_shard_of(full);
    for (auto* layer : std::vector<nn::Layer*>{&mha, &block}) {
      Variable x(test::random_tensor({kBatch, kSteps, kFeatures}, 3), true);
      GradientTape tape;
      const int before = counting->all_reduces;
      const Variable y = (*layer)(x);
      const int forward = counting->all_reduces - before;
      tape.gradient(sum(y), {x});
      const int backward = counting->all_reduces - before - forward;
      (layer == &mha ? attention_forward : block_forward)[r] = forward;
      (layer == &mha ? attention_backward : block_backward)[r] = backward;
    }
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(attention_forward[r], 1);
    EXPECT_EQ(attention_backward[r], 1);
    EXPECT_EQ(block_forward[r], 2);
    EXPECT_EQ(block_backward[r], 2);
  }
}

// (d) ------------------------------------------------------------------------------------------------------------

TEST(TensorParallelTransformerTest, SizesThatDoNotDivideOverTheRanksAreInvalid) {
  const std::vector<CommPtr> group = comm::make_local_group(2);
  try {
    TensorParallelMultiHeadAttention(3, 4, group[0]);
    FAIL() << "3 heads over 2 ranks";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("num_heads 3 is not a multiple of the 2 tensor-parallel ranks"));
  }
  try {
    TensorParallelTransformerEncoder(16, 3, group[0]);
    FAIL() << "3 heads over 2 ranks";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("num_heads 3 is not a multiple of the 2 tensor-parallel ranks"));
  }
  try {
    TensorParallelTransformerEncoder(15, 2, group[0]);
    FAIL() << "an MLP of 15 over 2 ranks";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("intermediate_dim 15 (the MLP's width) is not a multiple of the 2"));
  }
  EXPECT_THROW(TensorParallelMultiHeadAttention(2, 4, group[0], {.kernel_regularizer = "l2"}), InvalidArgument);
}

TEST(TensorParallelTransformerTest, AMismatchedOrUnbuiltUnsplitLayerIsInvalid) {
  const std::vector<CommPtr> group = comm::make_local_group(1);
  TensorParallelTransformerEncoder block(8, 2, group[0]);
  nn::TransformerEncoder unbuilt(8, 2);
  EXPECT_THROW(block.load_shard_of(unbuilt), InvalidArgument);
  nn::TransformerEncoder other(16, 2);
  other.build({Shape{1, kSteps, kFeatures}});
  try {
    block.load_shard_of(other);
    FAIL() << "intermediate_dim 16 against 8";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("intermediate_dim 8"));
  }
  TensorParallelMultiHeadAttention mha(2, 4, group[0]);
  nn::MultiHeadAttention three(2, 3);
  three.build({Shape{1, kSteps, kFeatures}});
  EXPECT_THROW(mha.load_shard_of(three), InvalidArgument);
}

}  // namespace
}  // namespace strata::parallel
