// Test jobs that thread-level and process-level multi-worker tests both run: a small dense model fit on 36 rows in
// global batches of 8 (an uneven last one), and the tf.distribute tutorial's custom loop on the same data.
// Thread-safety: each call builds its own model; training_data() is made once (thread-safe static).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "strata/distribute/strategy.h"
#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/train/model.h"
#include "test_util.h"

namespace strata::distribute::test_jobs {

struct Trained {
  std::vector<std::pair<std::string, Tensor>> weights;
  History history;
};

inline const data::Dataset& training_data() {
  static const data::Dataset dataset = [] {
    const Tensor x = test::random_tensor({36, 12}, 5);
    Tensor y = Tensor::empty({36}, DType::kInt64);
    for (int64_t i = 0; i < 36; ++i) y.data<int64_t>()[i] = (i * 7 + 3) % 4;
    return data::Dataset::from_tensor_slices({x, y}).batch(8);  // 36 rows: batches of 8 end with an uneven 4
  }();
  return dataset;
}

// Builds (seeded with `seed`), compiles and fits the test model under `strategy`.
inline Trained train(Strategy& strategy, uint64_t seed) {
  auto scope = strategy.scope();
  manual_seed(seed);
  Sequential model({nn::Dense(16, "relu"), nn::Dense(4)});
  model.build_for({1, 12});
  model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                optim::SGD({.learning_rate = 0.1, .momentum = 0.9f}), {"accuracy"});
  Trained out;
  out.history = model.fit(training_data(), {.epochs = 2, .verbose = 0});
  for (auto& [name, t] : model.named_weights()) out.weights.emplace_back(name, t.clone());
  return out;
}

// The tf.distribute tutorial's custom loop: experimental_distribute_dataset, strategy.run with the tape and
// apply_gradients, strategy.reduce(SUM) of the per-replica losses. Returns the weights and the loss sums.
inline std::pair<std::vector<Tensor>, std::vector<double>> train_custom(Strategy& strategy, uint64_t seed) {
  auto scope = strategy.scope();
  manual_seed(seed);
  Sequential model({nn::Dense(16, "relu"), nn::Dense(4)});
  model.build_for({1, 12});
  optim::Adam adam({.learning_rate = 0.01});
  losses::SparseCategoricalCrossentropy loss_fn({.from_logits = true, .reduction = losses::Reduction::kNone});
  std::vector<double> losses;
  const DistributedDataset dist = strategy.experimental_distribute_dataset(training_data());
  for (int epoch = 0; epoch < 2; ++epoch) {
    DistributedIterator it = dist.make_iterator();
    while (auto batch = it.next()) {
      const int64_t global_rows = it.last_global_batch_size();
      auto step = [&](const data::Element& b) {
        const std::vector<Variable> vars = model.trainable_variables();
        GradientTape tape;
        Variable loss = b[0].dim(0) == 0 ? Variable(Tensor::scalar(0.0f))
                                         : compute_average_loss(loss_fn(b[1], model(Variable(b[0]), true)), global_rows);
        adam.apply_gradients(tape.gradient(loss, vars, UnconnectedGradients::kZero), vars);
        return loss.value().clone();
      };
      losses.push_back(strategy.reduce(ReduceOp::kSum, strategy.run(step, *batch)).item<float>());
    }
  }
  std::vector<Tensor> weights;
  for (auto& [name, t] : model.named_weights()) weights.push_back(t.clone());
  return {weights, losses};
}

}  // namespace strata::distribute::test_jobs
