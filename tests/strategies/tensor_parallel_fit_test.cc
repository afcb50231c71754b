// Model::fit under TensorParallelStrategy (and, for the same model, PipelineStrategy with stages of whole blocks): a
// small Transformer (a Dense embedding, a position embedding, a
// MultiHeadAttention layer, a TransformerEncoder block, pooling, then a Dense pair and a classifier) trained on 2 and 4
// rank threads has the unsplit fit's history, weights and evaluation to float tolerance; the split layers are the ones
// the layout names; the model's own variables hold the whole weights (what checkpoints and export save); and what the
// strategy cannot split is a clear error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/distribute/strategies.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/parallel/pipeline_strategy.h"
#include "strata/parallel/tensor_parallel_strategy.h"
#include "strata/random.h"
#include "strata/train/model.h"
#include "test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kSteps = 4, kFeatures = 6;

// Sequences [n, 4, 6] whose class (of 3) shifts some features up.
data::Dataset sequences(int64_t n, uint64_t seed, int64_t batch) {
  Generator gen(seed);
  Tensor x = Tensor::empty({n, kSteps, kFeatures}), y = Tensor::empty({n}, DType::kInt64);
  for (int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<int64_t>(gen.uniform_int(3));
    y.data<int64_t>()[i] = label;
    for (int64_t j = 0; j < kSteps * kFeatures; ++j) {
      float noise;
      gen.fill_normal(&noise, 1, 0.0f, 0.7f);
      x.data<float>()[i * kSteps * kFeatures + j] = noise + (j % 3 == label ? 1.0f : 0.0f);
    }
  }
  return data::Dataset::from_tensor_slices({x, y}).batch(batch);
}

std::vector<nn::LayerRef> transformer_layers(int64_t heads = 4) {
  return {nn::Dense(8),
          nn::PositionEmbedding(kSteps),
          nn::MultiHeadAttention(heads, 2),
          nn::TransformerEncoder(16, heads, {.activation = "gelu"}),
          nn::GlobalAveragePooling1D(),
          nn::Dense(12, "relu"),
          nn::Dense(3)};
}

// Adam's epsilon at 1e-4: the attention's key bias has a zero gradient but for rounding (the softmax ignores a shift of
// a query's scores), which the default 1e-7 would turn into whole steps of noise that differ with the summation order.
void compile(Model& model) {
  model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                optim::Adam({.learning_rate = 0.01f, .epsilon = 1e-4f}), {"accuracy"});
}

struct FitRun {
  History history;
  std::vector<Tensor> weights;
  std::vector<std::string> names;
  Logs evaluation;
};

FitRun fit_with(distribute::Strategy& strategy) {
  manual_seed(11);
  auto scope = strategy.scope();
  auto model = std::make_shared<Sequential>(transformer_layers());
  compile(*model);
  FitRun r;
  r.history = model->fit(sequences(192, 1, 24), {.epochs = 2, .validation_data = sequences(64, 2, 32), .verbose = 0});
  for (const Variable& v : model->trainable_variables()) {
    r.weights.push_back(v.value().clone());
    r.names.push_back(v.name());
  }
  r.evaluation = model->evaluate(sequences(64, 2, 32));
  return r;
}

TEST(TensorParallelFitTest, FitOnRanksIsTheUnsplitFit) {
  distribute::OneDeviceStrategy one_device;
  const FitRun want = fit_with(one_device);
  for (int tp : {2, 4}) {
    parallel::TensorParallelStrategy strategy({.tp = tp});
    const FitRun got = fit_with(strategy);
    const std::string what = "tp " + std::to_string(tp);
    for (const char* key : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
      ASSERT_EQ(got.history.history.at(key).size(), 2u) << what << " " << key;
      for (size_t e = 0; e < 2; ++e) {
        EXPECT_NEAR(got.history.history.at(key)[e], want.history.history.at(key)[e], 1e-5) << what << " " << key;
      }
    }
    ASSERT_EQ(got.weights.size(), want.weights.size());
    for (size_t i = 0; i < got.weights.size(); ++i) {
      SCOPED_TRACE(what + " " + want.names[i]);
      test::expect_near(got.weights[i], want.weights[i], 1e-5f);
    }
    EXPECT_NEAR(got.evaluation.at("loss"), want.evaluation.at("loss"), 1e-5) << what;
    const std::string n = std::to_string(tp);
    EXPECT_EQ(strategy.layout(), "dense position_embedding multi_head_attention[heads/" + n +
                                     "] transformer_encoder[heads/" + n + ", mlp/" + n +
                                     "] global_average_pooling1d "
                                     "dense_1[columns/" +
                                     n + "] dense_2[rows/" + n + "]");
  }
}

TEST(TensorParallelFitTest, PipelineStagesOfWholeTransformerBlocksAreTheUnsplitFit) {
  distribute::OneDeviceStrategy one_device;
  const FitRun want = fit_with(one_device);
  // Cut before the attention layer and before the pooling: the blocks stay whole in their stages.
  parallel::PipelineStrategy strategy({.stages = 3, .micro_batches = 4, .schedule = "1f1b", .bounds = {2, 4}});
  const FitRun got = fit_with(strategy);
  EXPECT_EQ(strategy.layout(),
            "[dense position_embedding] [multi_head_attention transformer_encoder] [global_average_pooling1d dense_1 "
            "dense_2]");
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_NEAR(got.history.history.at("loss")[e], want.history.history.at("loss")[e], 1e-5);
  }
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (size_t i = 0; i < got.weights.size(); ++i) {
    SCOPED_TRACE(want.names[i]);
    test::expect_near(got.weights[i], want.weights[i], 1e-5f);
  }
}

std::string fit_error(parallel::TensorParallelStrategy& strategy, std::vector<nn::LayerRef> layers) {
  auto scope = strategy.scope();
  auto model = std::make_shared<Sequential>(std::move(layers));
  compile(*model);
  return test::message_of<InvalidArgument>([&] { model->fit(sequences(48, 1, 24), {.epochs = 1, .verbose = 0}); });
}

TEST(TensorParallelFitTest, WhatTheRanksCannotSplitIsAClearError) {
  EXPECT_THAT(test::message_of<InvalidArgument>([] { parallel::TensorParallelStrategy({.tp = 0}); }),
              HasSubstr("tp must be a positive number of ranks, got 0"));
  parallel::TensorParallelStrategy strategy({.tp = 2});
  EXPECT_THAT(fit_error(strategy, {nn::Dense(8), nn::GlobalAveragePooling1D(), nn::Dense(3)}),
              HasSubstr("has no layer to split over the ranks"));
  EXPECT_THAT(fit_error(strategy, transformer_layers(3)),
              HasSubstr("num_heads 3 is not a multiple of the 2 tensor-parallel ranks"));
  EXPECT_THAT(fit_error(strategy, {nn::Dense(8), nn::GlobalAveragePooling1D(), nn::Dense(5, "relu"), nn::Dense(3)}),
              HasSubstr("Dense 'dense_1' of 5 units (the first of a Megatron pair with 'dense_2') is not a multiple "
                        "of the 2 ranks"));
}

}  // namespace
}  // namespace strata
