// Pipeline stages as threads: after K steps every schedule, stage count and micro-batch count gives the weights of
// the unsplit model trained on the same batches; 1F1B keeps fewer activations alive than GPipe; a failing stage
// ends the step on every stage at once with its own error; the model is cut by parameter count.
#include "strata/parallel/pipeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "parallel/parallel_test_util.h"
#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/random.h"
#include "test_util.h"

namespace strata::parallel {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kFeatures = 12;
constexpr int64_t kClasses = 5;
constexpr int64_t kBatch = 24;

std::vector<std::shared_ptr<nn::Layer>> make_mlp(uint64_t seed) {
  return test_util::make_mlp(kFeatures, kClasses, seed);
}
Tensor labels(int64_t n, uint64_t seed) { return test_util::labels(n, seed, kClasses); }
std::shared_ptr<losses::Loss> loss() { return test_util::logits_loss(); }
Tensor inputs(int step) { return test::random_tensor({kBatch, kFeatures}, 100 + step); }
using test_util::expect_same_weights;

// K steps of the unsplit model; returns every weight's value.
std::vector<Tensor> train_unsplit(const optim::Optimizer& optimizer, int steps) {
  return test_util::train_unsplit(make_mlp(7), optimizer, steps, inputs, [](int k) { return labels(kBatch, k); });
}

std::vector<Tensor> train_pipelined(const Schedule& schedule, const optim::Optimizer& optimizer, int steps) {
  auto layers = make_mlp(7);
  ThreadPipeline pipe(split_by_parameters(layers, schedule.virtual_stages()), schedule, loss(), optimizer,
                      {.example_shape = {kFeatures}});
  for (int k = 0; k < steps; ++k) {
    const float l = pipe.train_step(inputs(k), labels(kBatch, k));
    EXPECT_TRUE(std::isfinite(l));
  }
  return test_util::weight_values(layers);
}

TEST(PipelineTest, EverySchedulePinsTheUnsplitModelsWeights) {
  const optim::SGD sgd({.learning_rate = 0.1f, .momentum = 0.9f});
  const std::vector<Tensor> want = train_unsplit(sgd, 3);
  for (int m : {1, 2, 4, 8}) {
    for (int stages : {2, 4}) {
      for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
        const Schedule s = make_schedule(name, stages, m);
        expect_same_weights(train_pipelined(s, sgd, 3), want,
                            std::string(name) + " S=" + std::to_string(stages) + " M=" + std::to_string(m));
      }
    }
    if (m % 2 == 0) {  // 2 stages of 2 chunks each: the MLP's 4 layers as 4 virtual stages
      expect_same_weights(train_pipelined(interleaved_1f1b(2, m, 2), sgd, 3), want,
                          "interleaved S=2 M=" + std::to_string(m));
    }
  }
}

TEST(PipelineTest, AdamOnStagesMatchesAdamOnTheWholeModel) {
  const optim::Adam adam({.learning_rate = 0.01f});
  expect_same_weights(train_pipelined(one_f_one_b(4, 4), adam, 3), train_unsplit(adam, 3), "adam 1f1b S=4 M=4");
}

TEST(PipelineTest, OneFOneBKeepsAtMostStagesMicroBatchesAliveWhereGPipeKeepsAll) {
  const int stages = 4, m = 8;
  for (const char* name : {"gpipe", "1f1b"}) {
    auto layers = make_mlp(7);
    const Schedule s = make_schedule(name, stages, m);
    ThreadPipeline pipe(split_by_parameters(layers, stages), s, loss(), optim::SGD({.learning_rate = 0.1f}),
                        {.example_shape = {kFeatures}});
    pipe.train_step(test::random_tensor({kBatch, kFeatures}, 1), labels(kBatch, 1));
    const auto timings = pipe.last_timings();
    for (int i = 0; i < stages; ++i) {
      const int expected = std::string(name) == "gpipe" ? m : std::min(stages - i, m);
      EXPECT_EQ(timings[i].peak_activations, expected) << name << " stage " << i;
    }
    EXPECT_GE(pipe.last_bubble_fraction(), 0.0);
    EXPECT_LT(pipe.last_bubble_fraction(), 1.0);
  }
}

TEST(PipelineTest, AFailingStageEndsTheStepEverywhereWithItsOwnError) {
  auto layers = make_mlp(7);
  ThreadPipeline pipe(split_by_parameters(layers, 4), one_f_one_b(4, 4), loss(), optim::SGD({.learning_rate = 0.1f}),
                      {.example_shape = {kFeatures}});
  // Labels out of range fail the loss on the last stage, while the others wait for its gradients.
  std::vector<int64_t> bad(kBatch, kClasses + 3);
  const auto start = std::chrono::steady_clock::now();
  const std::string message = test::message_of<Error>([&] {
    pipe.train_step(test::random_tensor({kBatch, kFeatures}, 1), Tensor::from_vector(bad, {kBatch}));
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  // The loss's own complaint about the labels, not a neighbour's report of the abort it caused.
  EXPECT_THAT(message, HasSubstr("label"));
  EXPECT_THAT(message, Not(HasSubstr("abort")));
}

TEST(PipelineTest, BadShapesAndCountsAreClearErrors) {
  auto layers = make_mlp(7);
  EXPECT_THAT(test::message_of<InvalidArgument>([&] { split_by_parameters(layers, 5); }),
              HasSubstr("cannot cut 4 layers into 5 stages"));
  EXPECT_THAT(test::message_of<InvalidArgument>([&] {
                ThreadPipeline(split_by_parameters(layers, 2), one_f_one_b(4, 4), loss(),
                               optim::SGD({.learning_rate = 0.1f}), {.example_shape = {kFeatures}});
              }),
              HasSubstr("runs 4 virtual stages, the model is cut into 2"));
  ThreadPipeline pipe(split_by_parameters(layers, 2), gpipe(2, 8), loss(), optim::SGD({.learning_rate = 0.1f}),
                      {.example_shape = {kFeatures}});
  EXPECT_THAT(test::message_of<InvalidArgument>([&] {
                pipe.train_step(test::random_tensor({4, kFeatures}, 1), labels(4, 1));
              }),
              HasSubstr("a batch of 4 examples cannot make 8 micro-batches"));
}

TEST(PipelineTest, SplitByParametersBalancesTheLargestStage) {
  // Parameter counts 12*16+16=208, 16*24+24=408, 24*16+16=400, 16*5+5=85.
  auto layers = make_mlp(7);
  const auto two = split_by_parameters(layers, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].size(), 2u);  // 616 | 485: the best cut
  const auto three = split_by_parameters(layers, 3);
  EXPECT_EQ(three[0].size(), 1u);  // 208 | 408 | 485 beats 616 | 400 | 85 and 208 | 808 | 85
  EXPECT_EQ(three[1].size(), 1u);
  const auto at = split_at(layers, {1, 3});
  EXPECT_EQ(at[0].size(), 1u);
  EXPECT_EQ(at[1].size(), 2u);
  EXPECT_EQ(at[2].size(), 1u);
  EXPECT_THAT(test::message_of<InvalidArgument>([&] { split_at(layers, {2, 2}); }), HasSubstr("rise strictly"));
}

}  // namespace
}  // namespace strata::parallel

namespace strata::parallel {
namespace {

TEST(PipelineTest, TheLossStageShowsEachMicroBatchsPredictions) {
  auto layers = make_mlp(7);
  int calls = 0;
  int64_t rows = 0;
  PipelineOptions options{.example_shape = {kFeatures}};
  options.on_predictions = [&](const Tensor& y_true, const Tensor& y_pred) {
    ++calls;
    rows += y_true.dim(0);
    EXPECT_EQ(y_pred.shape(), (Shape{y_true.dim(0), kClasses}));
  };
  ThreadPipeline pipe(split_by_parameters(layers, 2), one_f_one_b(2, 5), loss(), optim::SGD({.learning_rate = 0.1f}),
                      options);
  pipe.train_step(test::random_tensor({kBatch, kFeatures}, 1), labels(kBatch, 1));
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(rows, kBatch);  // 24 over 5: 5, 5, 5, 5, 4
}

TEST(PipelineTest, OneOptimizerStepsOncePerStepForEveryStage) {
  auto layers = make_mlp(7);
  auto adam = std::make_shared<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01f});
  ThreadPipeline pipe(split_by_parameters(layers, 4), zb_h1(4, 4), loss(), adam, {.example_shape = {kFeatures}});
  for (int k = 0; k < 3; ++k) pipe.train_step(test::random_tensor({kBatch, kFeatures}, 100 + k), labels(kBatch, k));
  EXPECT_EQ(adam->iterations(), 3);  // not 3 per stage: the learning-rate schedule and Adam's bias see 3 steps
  expect_same_weights(test_util::weight_values(layers), train_unsplit(optim::Adam({.learning_rate = 0.01f}), 3),
                      "one adam, zb-h1 S=4 M=4");
}

}  // namespace
}  // namespace strata::parallel

namespace strata::parallel {
namespace {

TEST(PipelineTest, SplitByTimeCutsWhereTheTimeIsNotWhereTheParametersAre) {
  // Two Dense(256) over 64 positions (66k parameters, 4.2M multiply-adds an example each), then Flatten and a
  // Dense(16) over 16384 features (262k parameters, 0.26M multiply-adds). By time the cut falls after the first
  // layer (4.5 against 8.4 for any later cut); by parameters it falls later (262k against 328k).
  std::vector<std::shared_ptr<nn::Layer>> layers = {std::make_shared<nn::Dense>(256), std::make_shared<nn::Dense>(256),
                                                    std::make_shared<nn::Flatten>(), std::make_shared<nn::Dense>(16)};
  const Tensor sample = test::random_tensor({8, 64, 256}, 3);
  Variable x(sample, false);
  for (auto& layer : layers) x = (*layer)(x);
  // The fastest of 20 runs per layer: with 3, a busy moment on a loaded 2-core machine once moved the cut.
  EXPECT_EQ(split_by_time(layers, 2, sample, 20)[0].size(), 1u);
  EXPECT_GE(split_by_parameters(layers, 2)[0].size(), 2u);
}

}  // namespace
}  // namespace strata::parallel

namespace strata::parallel {
namespace {

// The MLP with Dropout and BatchNormalization between its layers: random numbers and layer state in the stages.
test_util::Layers make_noisy_mlp() {
  return test_util::built_with_random_weights(
      {std::make_shared<nn::Dense>(16, nn::ActivationSpec("relu")), std::make_shared<nn::Dropout>(0.3f),
       std::make_shared<nn::Dense>(24, nn::ActivationSpec("tanh")), std::make_shared<nn::BatchNormalization>(),
       std::make_shared<nn::Dense>(16, nn::ActivationSpec("relu")), std::make_shared<nn::Dropout>(0.2f),
       std::make_shared<nn::Dense>(kClasses)},
      {kFeatures}, 7);
}

std::vector<Tensor> all_variables(const test_util::Layers& layers) {
  std::vector<Tensor> out;
  for (const auto& layer : layers) {
    for (const Variable& v : layer->variables()) out.push_back(v.value().clone());
  }
  return out;
}

struct NoisyRun {
  std::vector<Tensor> variables;  // weights and moving statistics
  std::vector<StageTiming> timings;
};

NoisyRun train_noisy(const Schedule& schedule, std::vector<int> recompute) {
  manual_seed(5);
  auto layers = make_noisy_mlp();
  PipelineOptions options{.example_shape = {kFeatures}};
  options.recompute_stages = std::move(recompute);
  ThreadPipeline pipe(split_at(layers, {2, 4}), schedule, loss(), optim::SGD({.learning_rate = 0.1f, .momentum = 0.9f}),
                      options);
  NoisyRun r;
  for (int k = 0; k < 3; ++k) pipe.train_step(inputs(k), labels(kBatch, k));
  r.variables = all_variables(layers);
  r.timings = pipe.last_timings();
  return r;
}

TEST(PipelineTest, RecomputedActivationsGiveTheSameTrainingWithLessKept) {
  for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
    const Schedule s = make_schedule(name, 3, 4);
    const NoisyRun kept = train_noisy(s, {});
    const NoisyRun recomputed = train_noisy(s, {0, 1, 2});
    // The same Dropout masks and one update of the moving statistics per micro-batch: the same numbers exactly.
    ASSERT_EQ(kept.variables.size(), recomputed.variables.size());
    for (size_t i = 0; i < kept.variables.size(); ++i) {
      EXPECT_EQ(kept.variables[i].to_vector<float>(), recomputed.variables[i].to_vector<float>()) << name << " " << i;
    }
    for (int stage = 0; stage < 3; ++stage) {
      EXPECT_EQ(recomputed.timings[stage].peak_activations, kept.timings[stage].peak_activations) << name;
      EXPECT_LT(recomputed.timings[stage].peak_activation_bytes, kept.timings[stage].peak_activation_bytes) << name;
    }
  }
  // And the masks differ from step to step and stage to stage: training with Dropout is not training without it.
  const NoisyRun a = train_noisy(one_f_one_b(3, 4), {});
  manual_seed(6);
  auto layers = make_noisy_mlp();
  ThreadPipeline pipe(split_at(layers, {2, 4}), one_f_one_b(3, 4), loss(),
                      optim::SGD({.learning_rate = 0.1f, .momentum = 0.9f}), {.example_shape = {kFeatures}});
  for (int k = 0; k < 3; ++k) pipe.train_step(inputs(k), labels(kBatch, k));
  EXPECT_NE(all_variables(layers)[0].to_vector<float>(), a.variables[0].to_vector<float>());
}

TEST(PipelineTest, EachStageThreadCarriesItsRandomNumbersAcrossSteps) {
  // One Dropout layer per stage: a stage's masks change from step to step (a fresh thread's generator would repeat
  // them), and its numbers differ from the other stage's.
  auto layers = test_util::built_with_random_weights(
      {std::make_shared<nn::Dropout>(0.5f), std::make_shared<nn::Dense>(kClasses)}, {kFeatures}, 3);
  std::vector<Tensor> seen;
  PipelineOptions options{.example_shape = {kFeatures}};
  options.on_predictions = [&](const Tensor&, const Tensor& y_pred) { seen.push_back(y_pred.clone()); };
  ThreadPipeline pipe(split_at(layers, {1}), gpipe(2, 1), loss(), optim::SGD({.learning_rate = 0.0f}), options);
  const Tensor x = inputs(0);
  pipe.train_step(x, labels(kBatch, 0));
  pipe.train_step(x, labels(kBatch, 0));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NE(seen[0].to_vector<float>(), seen[1].to_vector<float>());  // learning rate 0: only the masks changed
}

}  // namespace
}  // namespace strata::parallel
