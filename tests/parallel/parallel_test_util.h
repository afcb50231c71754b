// What the model-parallel tests share: models with fixed random weights, labels, the loss, the unsplit model's
// training for reference, the comparison of weights to 1e-5 relative, running one function per thread, and the
// small MLP job that pipeline replicas train (replica_job).
// Thread-safety: plain functions; each call builds its own layers.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizer.h"
#include "strata/optim/optimizers.h"
#include "test_util.h"

namespace strata::parallel::test_util {

using Layers = std::vector<std::shared_ptr<nn::Layer>>;

// Runs fn(0) .. fn(n - 1) on n threads at once (ranks, replicas or stages) and returns what each threw ("" when it
// threw nothing).
inline std::vector<std::string> on_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(i)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Builds `layers` on one example of `example_shape`, then gives every weight a value in [-0.5, 0.5] drawn from
// `seed`: the same weights every time.
inline Layers built_with_random_weights(Layers layers, const Shape& example_shape, uint64_t seed) {
  Shape one = {1};
  one.insert(one.end(), example_shape.begin(), example_shape.end());
  Variable x(test::random_tensor(one, seed), false);
  for (auto& layer : layers) x = (*layer)(x);
  uint64_t s = seed;
  for (auto& layer : layers) {
    for (Variable w : layer->trainable_variables()) w.assign(test::random_tensor(w.shape(), ++s, -0.5f, 0.5f));
  }
  return layers;
}

// Four Dense layers (16 relu, 24 tanh, 16 relu, `classes`) over `features` inputs, weights from `seed`.
inline Layers make_mlp(int64_t features, int64_t classes, uint64_t seed) {
  return built_with_random_weights(
      {std::make_shared<nn::Dense>(16, nn::ActivationSpec("relu")),
       std::make_shared<nn::Dense>(24, nn::ActivationSpec("tanh")),
       std::make_shared<nn::Dense>(16, nn::ActivationSpec("relu")), std::make_shared<nn::Dense>(classes)},
      {features}, seed);
}

// n labels in [0, classes), varied by `seed`.
inline Tensor labels(int64_t n, uint64_t seed, int64_t classes) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>((i * 7 + seed * 3) % classes);
  return Tensor::from_vector(v, {n});
}

inline std::shared_ptr<losses::Loss> logits_loss() {
  return std::make_shared<losses::SparseCategoricalCrossentropy>(
      losses::SparseCategoricalCrossentropyOptions{.from_logits = true});
}

// Every weight's value, layer by layer.
inline std::vector<Tensor> weight_values(const Layers& layers) {
  std::vector<Tensor> values;
  for (auto& layer : layers) {
    for (const Variable& w : layer->trainable_variables()) values.push_back(w.value().clone());
  }
  return values;
}

// `steps` steps of the whole model on this thread, step k on (inputs(k), labels(k)); every weight's value after.
inline std::vector<Tensor> train_unsplit(const Layers& layers, const optim::Optimizer& optimizer_proto, int steps,
                                         const std::function<Tensor(int)>& inputs,
                                         const std::function<Tensor(int)>& labels_of_step) {
  auto optimizer = optimizer_proto.clone();
  std::vector<Variable> vars;
  for (auto& layer : layers) {
    for (const Variable& w : layer->trainable_variables()) vars.push_back(w);
  }
  for (int k = 0; k < steps; ++k) {
    GradientTape tape;
    Variable out(inputs(k), false);
    for (auto& layer : layers) out = (*layer)(out, true);
    Variable l = (*logits_loss())(Variable(labels_of_step(k), false), out);
    optimizer->apply_gradients(tape.gradient(l, vars), vars);
  }
  return weight_values(layers);
}

inline void expect_same_weights(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), want[i].shape()) << what << ": weight " << i;
    const auto g = got[i].to_vector<float>(), w = want[i].to_vector<float>();
    for (size_t j = 0; j < g.size(); ++j) {
      ASSERT_NEAR(g[j], w[j], 1e-5 * std::max(1.0f, std::abs(w[j]))) << what << ": weight " << i << " element " << j;
    }
  }
}

// The job pipeline replicas train in their tests: an MLP of kFeatures -> kClasses with fixed weights, kSteps global
// batches of kBatch rows through kStages stages of kMicroBatches micro-batches, SGD with momentum.
namespace replica_job {
inline constexpr int64_t kFeatures = 12;
inline constexpr int64_t kClasses = 5;
inline constexpr int64_t kBatch = 24;
inline constexpr int kSteps = 3;
inline constexpr int kStages = 2;
inline constexpr int kMicroBatches = 2;

inline Tensor inputs(int step) { return test::random_tensor({kBatch, kFeatures}, 100 + static_cast<uint64_t>(step)); }
inline Tensor labels(int step) { return test_util::labels(kBatch, static_cast<uint64_t>(step), kClasses); }
inline Layers make_mlp() { return test_util::make_mlp(kFeatures, kClasses, 7); }
inline const optim::SGD& sgd() {
  static const optim::SGD optimizer({.learning_rate = 0.1f, .momentum = 0.9f});
  return optimizer;
}
}  // namespace replica_job

}  // namespace strata::parallel::test_util
