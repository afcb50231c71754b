// Pipeline equivalence beyond the MLP (issue 19): a small CNN cut into 2 stages (a 4-D activation crosses the cut)
// and a stack of 4 LSTM layers (+ a Dense head) cut into 4 stages, with stages as threads, every schedule and
// M = 1, 2, 4, 8: after K steps of SGD with momentum (and one Adam case) the weights equal those of the unsplit model
// trained on the same batches, to 1e-5 relative. Batches are not multiples of M, so micro-batches differ in size.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "parallel/parallel_test_util.h"
#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/parallel/pipeline.h"
#include "test_util.h"

namespace strata::parallel {
namespace {

constexpr int64_t kClasses = 5;
constexpr int kSteps = 3;

using Layers = std::vector<std::shared_ptr<nn::Layer>>;

// A model under test: how to build it (built, weights drawn from a fixed seed), one example's shape, the batch.
struct ModelSpec {
  std::string name;
  std::function<Layers()> make = {};
  Shape example_shape;
  int64_t batch;
  float learning_rate;  // SGD's: large enough that every weight moves well beyond the tolerance in K steps
};

using test_util::built_with_random_weights;
using test_util::expect_same_weights;
using test_util::weight_values;

// 8x8x1 images: Conv2D 3x3 (4 filters, relu) -> MaxPooling2D 2x2 -> Flatten -> Dense 16 tanh -> Dense 5.
ModelSpec cnn() {
  ModelSpec spec{.name = "cnn", .example_shape = {8, 8, 1}, .batch = 13, .learning_rate = 0.1f};
  spec.make = [shape = spec.example_shape] {
    return built_with_random_weights(
        {std::make_shared<nn::Conv2D>(4, 3, nn::ActivationSpec("relu")), std::make_shared<nn::MaxPooling2D>(2),
         std::make_shared<nn::Flatten>(), std::make_shared<nn::Dense>(16, nn::ActivationSpec("tanh")),
         std::make_shared<nn::Dense>(kClasses)},
        shape, 11);
  };
  return spec;
}

// Sequences of 5 steps of 3 features: LSTM 6 (sequences) x3 -> LSTM 6 (last step) -> Dense 5.
ModelSpec lstm() {
  ModelSpec spec{.name = "lstm", .example_shape = {5, 3}, .batch = 12, .learning_rate = 2.0f};
  spec.make = [shape = spec.example_shape] {
    Layers layers;
    for (int i = 0; i < 3; ++i) {
      layers.push_back(std::make_shared<nn::LSTM>(6, nn::LSTMOptions{.return_sequences = true}));
    }
    layers.push_back(std::make_shared<nn::LSTM>(6));
    layers.push_back(std::make_shared<nn::Dense>(kClasses));
    return built_with_random_weights(std::move(layers), shape, 23);
  };
  return spec;
}

Tensor inputs(const ModelSpec& spec, int step) {
  Shape shape = {spec.batch};
  shape.insert(shape.end(), spec.example_shape.begin(), spec.example_shape.end());
  return test::random_tensor(shape, 100 + step);
}

Tensor labels(int64_t n, uint64_t seed) { return test_util::labels(n, seed, kClasses); }
std::shared_ptr<losses::Loss> loss() { return test_util::logits_loss(); }

// K steps of the whole model on one thread; every weight's value.
std::vector<Tensor> train_unsplit(const ModelSpec& spec, const optim::Optimizer& optimizer) {
  return test_util::train_unsplit(
      spec.make(), optimizer, kSteps, [&](int k) { return inputs(spec, k); },
      [&](int k) { return labels(spec.batch, k); });
}

// K steps of the model cut at `bounds` into the schedule's virtual stages, stages as threads.
std::vector<Tensor> train_pipelined(const ModelSpec& spec, const std::vector<int>& bounds, const Schedule& schedule,
                                    const optim::Optimizer& optimizer) {
  Layers layers = spec.make();
  PipelineOptions options;
  options.example_shape = spec.example_shape;
  ThreadPipeline pipe(split_at(layers, bounds), schedule, loss(), optimizer, options);
  for (int k = 0; k < kSteps; ++k) {
    const float l = pipe.train_step(inputs(spec, k), labels(spec.batch, k));
    EXPECT_TRUE(std::isfinite(l)) << spec.name << " " << schedule.name << " step " << k;
  }
  return weight_values(layers);
}

// Guards against a vacuous pass: training moved every weight tensor well beyond the tolerance (50x).
void expect_trained(const ModelSpec& spec, const std::vector<Tensor>& trained) {
  const std::vector<Tensor> initial = weight_values(spec.make());
  ASSERT_EQ(initial.size(), trained.size());
  for (size_t i = 0; i < trained.size(); ++i) {
    const auto a = initial[i].to_vector<float>(), b = trained[i].to_vector<float>();
    double moved = 0;
    for (size_t j = 0; j < a.size(); ++j) moved = std::max(moved, static_cast<double>(std::abs(a[j] - b[j])));
    EXPECT_GT(moved, 5e-4) << spec.name << ": weight " << i << " did not change";
  }
}

// Every schedule for `stages` stages and M = 1, 2, 4, 8 on the model cut at `bounds` (stages pieces), and
// interleaved 1F1B on 2 stages of 2 chunks on the model cut at `interleaved_bounds` (4 pieces) when M is even.
void expect_every_schedule_matches(const ModelSpec& spec, int stages, const std::vector<int>& bounds,
                                   const std::vector<int>& interleaved_bounds) {
  const optim::SGD sgd({.learning_rate = spec.learning_rate, .momentum = 0.9f});
  const std::vector<Tensor> want = train_unsplit(spec, sgd);
  expect_trained(spec, want);
  for (int m : {1, 2, 4, 8}) {
    for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
      expect_same_weights(train_pipelined(spec, bounds, make_schedule(name, stages, m), sgd), want,
                          spec.name + " " + name + " S=" + std::to_string(stages) + " M=" + std::to_string(m));
    }
    if (m % 2 == 0) {
      expect_same_weights(train_pipelined(spec, interleaved_bounds, interleaved_1f1b(2, m, 2), sgd), want,
                          spec.name + " interleaved S=2 chunks=2 M=" + std::to_string(m));
    }
  }
}

TEST(PipelineModelsTest, CnnInTwoStagesMatchesTheUnsplitModelWithEverySchedule) {
  // Cut after the pooling: the activation between the stages is [b, 3, 3, 4]. Interleaved: conv | pool (no
  // weights) | flatten + dense | dense.
  expect_every_schedule_matches(cnn(), 2, {2}, {1, 2, 4});
}

TEST(PipelineModelsTest, FourLstmLayersInFourStagesMatchTheUnsplitModelWithEverySchedule) {
  // One LSTM per stage, the head with the last one; sequences [b, 5, 6] cross the first two cuts, the last step's
  // state [b, 6] the third. Interleaved: the same 4 pieces on 2 stages of 2 chunks.
  expect_every_schedule_matches(lstm(), 4, {1, 2, 3}, {1, 2, 3});
}

TEST(PipelineModelsTest, AdamOnStagesMatchesAdamOnTheWholeModel) {
  const optim::Adam adam({.learning_rate = 0.01f});
  const ModelSpec l = lstm(), c = cnn();
  expect_same_weights(train_pipelined(l, {1, 2, 3}, one_f_one_b(4, 4), adam), train_unsplit(l, adam),
                      "lstm adam 1f1b S=4 M=4");
  expect_same_weights(train_pipelined(c, {2}, zb_h1(2, 8), adam), train_unsplit(c, adam), "cnn adam zb-h1 S=2 M=8");
}

}  // namespace
}  // namespace strata::parallel
