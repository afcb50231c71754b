// Model::fit under PipelineStrategy: the history, metrics and weights of the unsplit fit, for several schedules;
// evaluate after it runs the whole model; a checkpoint holds the optimizer the stages shared; clear errors for what
// a pipeline cannot take.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "strata/distribute/strategies.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/parallel/pipeline_strategy.h"
#include "strata/random.h"
#include "strata/train/model.h"
#include "test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

data::Dataset blobs(int64_t n, uint64_t seed, int64_t batch) {
  Generator gen(seed);
  Tensor x = Tensor::empty({n, 6}), y = Tensor::empty({n}, DType::kInt64);
  for (int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<int64_t>(gen.uniform_int(3));
    y.data<int64_t>()[i] = label;
    for (int j = 0; j < 6; ++j) {
      float noise;
      gen.fill_normal(&noise, 1, 0.0f, 0.7f);
      x.data<float>()[i * 6 + j] = noise + (j % 3 == label ? 1.5f : 0.0f);
    }
  }
  return data::Dataset::from_tensor_slices({x, y}).batch(batch);
}

std::vector<nn::LayerRef> mlp_layers() {
  return {nn::Dense(16, "relu"), nn::Dense(16, "tanh"), nn::Dense(12, "relu"), nn::Dense(3)};
}

void compile(Model& model) {
  model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                optim::SGD({.learning_rate = 0.05f, .momentum = 0.9f}), {"accuracy"});
}

struct FitRun {
  History history;
  std::vector<Tensor> weights;
  Logs evaluation;
};

FitRun fit_with(distribute::Strategy& strategy) {
  manual_seed(11);
  auto scope = strategy.scope();
  auto model = std::make_shared<Sequential>(mlp_layers());
  compile(*model);
  FitRun r;
  r.history = model->fit(blobs(240, 1, 24), {.epochs = 3, .validation_data = blobs(96, 2, 32), .verbose = 0});
  for (const Variable& v : model->trainable_variables()) r.weights.push_back(v.value().clone());
  r.evaluation = model->evaluate(blobs(96, 2, 32));
  return r;
}

TEST(PipelineFitTest, FitOnStagesIsTheUnsplitFit) {
  distribute::OneDeviceStrategy one_device;
  const FitRun want = fit_with(one_device);
  for (const auto& [schedule, stages, micro_batches] : std::vector<std::tuple<std::string, int, int>>{
           {"1f1b", 2, 4}, {"gpipe", 4, 3}, {"zb-h1", 3, 8}, {"interleaved", 2, 4}}) {
    parallel::PipelineStrategy strategy({.stages = stages, .micro_batches = micro_batches, .schedule = schedule});
    const FitRun got = fit_with(strategy);
    const std::string what = schedule + " S=" + std::to_string(stages) + " M=" + std::to_string(micro_batches);
    for (const char* key : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
      ASSERT_EQ(got.history.history.at(key).size(), 3u) << what << " " << key;
      for (size_t e = 0; e < 3; ++e) {
        EXPECT_NEAR(got.history.history.at(key)[e], want.history.history.at(key)[e], 1e-5) << what << " " << key;
      }
    }
    ASSERT_EQ(got.weights.size(), want.weights.size());
    for (size_t i = 0; i < got.weights.size(); ++i) test::expect_near(got.weights[i], want.weights[i], 1e-5f);
    EXPECT_NEAR(got.evaluation.at("accuracy"), want.evaluation.at("accuracy"), 1e-9) << what;
    // The steps ran on the stages: 10 batches a epoch, 3 epochs.
    EXPECT_EQ(strategy.measured().steps, 30) << what;
    EXPECT_EQ(strategy.measured().peak_activations.size(), static_cast<size_t>(stages)) << what;
    EXPECT_GT(strategy.measured().mean_bubble_fraction(), 0.0) << what;
  }
  EXPECT_GT(want.history.history.at("val_accuracy").back(), 0.8);
}

// A custom loop: each global batch through strategy.run of the model's train_step, as Keras's make_train_function
// does. Under PipelineStrategy the strategy takes the step over, so it runs on the stages (measured, with a bubble)
// and trains exactly as the same loop under OneDeviceStrategy.
std::vector<Tensor> custom_loop(distribute::Strategy& strategy) {
  manual_seed(11);
  auto scope = strategy.scope();
  auto model = std::make_shared<Sequential>(mlp_layers());
  model->build_for({1, 6});
  compile(*model);
  data::Iterator it = blobs(240, 1, 24).make_iterator();
  while (std::optional<data::Element> batch = it.next()) {
    strategy.run([&](const data::Element& b) { return model->train_step(b); }, *batch);
  }
  std::vector<Tensor> weights;
  for (const Variable& v : model->trainable_variables()) weights.push_back(v.value().clone());
  return weights;
}

TEST(PipelineFitTest, ACustomLoopsStrategyRunPipelinesTheTrainStep) {
  distribute::OneDeviceStrategy one_device;
  const std::vector<Tensor> want = custom_loop(one_device);
  parallel::PipelineStrategy strategy({.stages = 2, .micro_batches = 4, .schedule = "1f1b"});
  const std::vector<Tensor> got = custom_loop(strategy);
  EXPECT_EQ(strategy.measured().steps, 10);  // every step ran on the stages
  EXPECT_EQ(strategy.measured().peak_activations.size(), 2u);
  EXPECT_GT(strategy.measured().mean_bubble_fraction(), 0.0);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) test::expect_near(got[i], want[i], 1e-5f);
}

TEST(PipelineFitTest, WhatAPipelineCannotTakeIsAClearError) {
  EXPECT_THAT(test::message_of<InvalidArgument>(
                  [] { parallel::PipelineStrategy({.stages = 2, .micro_batches = 3, .schedule = "interleaved"}); }),
              HasSubstr("interleaved"));
  EXPECT_THAT(test::message_of<InvalidArgument>(
                  [] { parallel::PipelineStrategy({.stages = 2, .micro_batches = 2, .schedule = "fifo"}); }),
              HasSubstr("gpipe"));
  EXPECT_THAT(test::message_of<InvalidArgument>([] {
                parallel::PipelineStrategy({.stages = 2, .micro_batches = 2, .bounds = {1, 2}});
              }),
              HasSubstr("2 virtual stages need 1 bounds, got 2"));

  parallel::PipelineStrategy strategy({.stages = 2, .micro_batches = 2});
  {
    auto scope = strategy.scope();
    auto model = std::make_shared<Sequential>(mlp_layers());
    compile(*model);
    // A batch smaller than the micro-batch count.
    EXPECT_THAT(test::message_of<InvalidArgument>([&] { model->fit(blobs(9, 1, 1), {.epochs = 1, .verbose = 0}); }),
                HasSubstr("a batch of 1 examples cannot make 2 micro-batches"));
  }
  {
    auto scope = strategy.scope();
    auto model = std::make_shared<Sequential>(mlp_layers());
    compile(*model);
    Tensor x = Tensor::zeros({8, 6}), y = Tensor::zeros({8}, DType::kInt64), w = Tensor::ones({8});
    EXPECT_THAT(test::message_of<InvalidArgument>([&] {
                  model->fit(data::Dataset::from_tensor_slices({x, y, w}).batch(4), {.epochs = 1, .verbose = 0});
                }),
                HasSubstr("sample weights are not pipelined yet"));
  }
}

}  // namespace
}  // namespace strata
