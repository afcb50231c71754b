// The tape's relu fusion (autograd/node.h, BackwardNeeds): when a relu's output feeds only a max pool,
// the pool masks its own (smaller) gradient and the relu skips its pass. Checks when the tape offers it
// (one consumer, not a requested source) and that the gradients equal the unfused ones exactly.
#include <gtest/gtest.h>

#include <functional>

#include "autograd/node.h"
#include "grad_check.h"
#include "strata/gradient_tape.h"
#include "strata/init.h"
#include "strata/ops.h"

namespace strata {
namespace {

// What one gradient walk told two probe ops.
struct Seen {
  bool relu_told_masked = false;
  bool pool_asked_to_mask = false;
};

// A stand-in for a relu-ending op: the identity, flagged relu_output, noting what the tape said.
Variable probe_relu(const Variable& x, Seen* seen) {
  return detail::make_result(
      x.value().clone(), "probe_relu", {x},
      [seen](const Tensor& dy, const detail::BackwardNeeds& needs) -> std::vector<Tensor> {
        seen->relu_told_masked = needs.dy_relu_masked;
        return {dy};
      },
      {.relu_output = true});
}

// A stand-in for a max pool: the identity, flagged premasks_relu_input.
Variable probe_pool(const Variable& x, Seen* seen) {
  return detail::make_result(
      x.value().clone(), "probe_pool", {x},
      [seen](const Tensor& dy, const detail::BackwardNeeds& needs) -> std::vector<Tensor> {
        seen->pool_asked_to_mask = needs.premask_relu_input;
        return {dy};
      },
      {.premasks_relu_input = true});
}

Variable input(Shape shape, uint64_t seed) {
  Generator gen(seed);
  return Variable(init::uniform(shape, gen, -1.0f, 1.0f), true, "x");
}

// One gradient walk of `loss` (made from x by `build`) for x and any extra sources build asks for;
// returns what the probes were told.
struct Graph {
  Variable loss;
  std::vector<Variable> extra_sources;
};
Seen walk(const std::function<Graph(const Variable& x, Seen* seen)>& build) {
  Variable x = input({4}, 1);
  Seen seen;
  GradientTape tape;
  Graph g = build(x, &seen);
  std::vector<Variable> sources = {x};
  sources.insert(sources.end(), g.extra_sources.begin(), g.extra_sources.end());
  tape.gradient(g.loss, sources);
  return seen;
}

TEST(ReluFusionTest, OfferedWhenThePoolIsTheReluOutputsOnlyConsumer) {
  const Seen seen = walk([](const Variable& x, Seen* s) { return Graph{sum(probe_pool(probe_relu(x, s), s)), {}}; });
  EXPECT_TRUE(seen.pool_asked_to_mask);
  EXPECT_TRUE(seen.relu_told_masked);
}

TEST(ReluFusionTest, NotOfferedWhenTheReluOutputHasAnotherConsumer) {
  const Seen seen = walk([](const Variable& x, Seen* s) {
    Variable r = probe_relu(x, s);
    return Graph{sum(probe_pool(r, s) + r), {}};
  });
  EXPECT_FALSE(seen.pool_asked_to_mask);
  EXPECT_FALSE(seen.relu_told_masked);
}

TEST(ReluFusionTest, NotOfferedWhenTheReluOutputIsARequestedSource) {
  const Seen seen = walk([](const Variable& x, Seen* s) {
    Variable r = probe_relu(x, s);
    return Graph{sum(probe_pool(r, s)), {r}};
  });
  EXPECT_FALSE(seen.pool_asked_to_mask);
  EXPECT_FALSE(seen.relu_told_masked);
}

TEST(ReluFusionTest, NotOfferedWhenThePoolsInputIsNoRelu) {
  const Seen seen = walk([](const Variable& x, Seen* s) { return Graph{sum(probe_pool(x * 2.0f, s)), {}}; });
  EXPECT_FALSE(seen.pool_asked_to_mask);
}

// Gradients of sum(max_pool(relu_part(x)) * R) with the fusion, and with it disabled by also asking for
// the relu output's gradient (a source is never premasked). Same kernels, same order of sums: equal bits.
void expect_fused_equals_unfused(const std::function<Variable(const std::vector<Variable>&)>& relu_part,
                                 const std::vector<Variable>& sources) {
  auto run = [&](bool fused) {
    GradientTape tape;
    Variable r = relu_part(sources);
    Variable pooled = max_pool2d(r);
    Generator gen(7);
    const Tensor weights = init::uniform(pooled.shape(), gen, -1.0f, 1.0f);
    std::vector<Variable> wanted = sources;
    if (!fused) wanted.push_back(r);
    std::vector<Tensor> grads = tape.gradient(pooled, wanted, weights);
    grads.resize(sources.size());
    return grads;
  };
  const std::vector<Tensor> fused = run(true), unfused = run(false);
  for (size_t i = 0; i < sources.size(); ++i) {
    EXPECT_EQ(fused[i].to_vector<float>(), unfused[i].to_vector<float>()) << "gradient of " << sources[i].name();
    double norm = 0;
    for (float v : fused[i].to_vector<float>()) norm += std::abs(v);
    EXPECT_GT(norm, 0.0) << sources[i].name();
  }
}

TEST(ReluFusionTest, ConvWithFusedReluThenMaxPoolEqualsTheUnfusedGradients) {
  // Values centred below zero so that many 2x2 windows are all negative (pooled value 0, gradient 0).
  Generator gen(11);
  Variable x(init::uniform({2, 6, 6, 3}, gen, -1.0f, 0.6f), true, "x");
  Variable w(init::uniform({3, 3, 3, 4}, gen, -0.5f, 0.5f), true, "kernel");
  Variable b(init::uniform({4}, gen, -0.3f, 0.1f), true, "bias");
  expect_fused_equals_unfused(
      [](const std::vector<Variable>& v) { return conv2d(v[0], v[1], v[2], {.fused_relu = true}); }, {x, w, b});
}

TEST(ReluFusionTest, ReluOpThenMaxPoolEqualsTheUnfusedGradients) {
  Variable x = input({2, 4, 4, 3}, 12);
  expect_fused_equals_unfused([](const std::vector<Variable>& v) { return relu(v[0] * 1.0f - 0.2f); }, {x});
}

TEST(ReluFusionTest, FusedGradientsMatchFiniteDifferences) {
  Generator gen(13);
  const Tensor x = init::uniform({1, 6, 6, 2}, gen, -1.0f, 0.6f);
  const Tensor w = init::uniform({3, 3, 2, 2}, gen, -0.5f, 0.5f);
  const Tensor b = init::uniform({2}, gen, -0.2f, 0.2f);
  testing::check_gradients(
      [](const std::vector<Variable>& v) { return max_pool2d(conv2d(v[0], v[1], v[2], {.fused_relu = true})); },
      {x, w, b});
  testing::check_gradients([](const std::vector<Variable>& v) { return max_pool2d(relu(v[0])); }, {x});
}

TEST(ReluFusionTest, ASourceReluOutputGetsItsUnmaskedGradient) {
  // One 2x2 window, all negative before the relu: the pooled value is 0 and dL/dr still reaches the
  // argmax cell, while dL/dx is 0 there.
  Variable x(Tensor::from_vector(std::vector<float>{-1, -2, -3, -4}, Shape{1, 2, 2, 1}), true, "x");
  GradientTape tape;
  Variable r = relu(x);
  Variable loss = sum(max_pool2d(r));
  std::vector<Tensor> g = tape.gradient(loss, {x, r});
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  const std::vector<float> dr = g[1].to_vector<float>();
  float total = 0;
  for (float v : dr) total += v;
  EXPECT_EQ(total, 1.0f);
}

}  // namespace
}  // namespace strata
