// TensorFlow's "Custom training with tf.distribute.Strategy" tutorial in C++: a CNN on Fashion-MNIST
// trained by a hand-written loop under MirroredStrategy. Each step, strategy.run runs train_step on every
// replica with its part of the global batch (GradientTape, compute_average_loss over the global batch,
// apply_gradients, which all-reduces the gradients); strategy.reduce(SUM) adds the replicas' losses into
// the global batch's. Every epoch ends with a test pass and a training checkpoint (CheckpointManager);
// at the end a fresh model restores the latest checkpoint and must score what the trained one did.
//
//   custom_training_loop [--replicas 2] [--epochs 10] [--steps N] [--data DIR] [--checkpoint-dir DIR]
//
// --steps N limits every epoch's training and testing to N batches (for a quick run). Exit status 77 when
// the data set is not installed (ctest reads it as "skipped"); 1 on any other error.
#include <strata/strata.h>

#include "tutorial_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

using namespace strata;
using tutorial::scale;

namespace {

// The tutorial's create_model: two conv blocks and two dense layers, each kernel with a small L2 penalty.
std::shared_ptr<Sequential> create_model() {
  const nn::Regularizer l2 = nn::l2(1e-5f);
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{
      nn::Conv2D(32, 3, {.activation = "relu", .kernel_regularizer = l2}), nn::MaxPooling2D(),
      nn::Conv2D(64, 3, {.activation = "relu", .kernel_regularizer = l2}), nn::MaxPooling2D(), nn::Flatten(),
      nn::Dense(64, {.activation = "relu", .kernel_regularizer = l2}), nn::Dense(10, {.kernel_regularizer = l2})});
  model->build_for({1, 28, 28, 1});
  return model;
}

// The replica running this code (0 on the calling thread of a one-replica strategy).
int replica_id() {
  const distribute::ReplicaContext* ctx = distribute::get_replica_context();
  return ctx ? ctx->replica_id_in_sync_group() : 0;
}

// strata's metrics are plain objects, not synchronised: each replica updates its own and the loop merges
// them (what TF's metric variables, created under the scope, do by themselves).
struct ReplicaMetrics {
  metrics::SparseCategoricalAccuracy train_accuracy{"train_accuracy"};
  metrics::Mean test_loss{"test_loss"};
  metrics::SparseCategoricalAccuracy test_accuracy{"test_accuracy"};
};

// The sum over replicas of each metric's state, as one result.
template <class Get>
double merged(std::vector<ReplicaMetrics>& per_replica, Get get) {
  auto total = get(per_replica[0]).clone();
  for (auto& m : per_replica) total->merge_state(get(m));
  return total->result();
}

// One test pass over `dataset` (at most `steps` batches): the merged test loss and accuracy.
std::pair<double, double> test(distribute::Strategy& strategy, Sequential& model, const data::Dataset& dataset,
                               int64_t steps, std::vector<ReplicaMetrics>& per_replica) {
  losses::SparseCategoricalCrossentropy loss_object({.from_logits = true, .reduction = losses::Reduction::kNone});
  auto test_step = [&](const data::Element& batch) {
    if (batch[0].dim(0) == 0) return;  // this replica got no rows of an uneven last batch
    NoGradGuard no_grad;
    ReplicaMetrics& m = per_replica[static_cast<size_t>(replica_id())];
    const Variable predictions = model(Variable(batch[0]), /*training=*/false);
    const Variable t_loss = loss_object(batch[1], predictions);
    m.test_loss.update_state(t_loss.value(), Tensor());
    m.test_accuracy.update_state(batch[1], predictions.value());
  };
  for (auto& m : per_replica) {
    m.test_loss.reset_state();
    m.test_accuracy.reset_state();
  }
  distribute::DistributedIterator it = strategy.experimental_distribute_dataset(dataset).make_iterator();
  for (int64_t step = 0; steps == 0 || step < steps; ++step) {
    const auto batch = it.next();
    if (!batch) break;
    strategy.run(test_step, *batch);
  }
  return {merged(per_replica, [](ReplicaMetrics& m) -> metrics::Metric& { return m.test_loss; }),
          merged(per_replica, [](ReplicaMetrics& m) -> metrics::Metric& { return m.test_accuracy; })};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const tutorial::Args args = tutorial::parse_args(argc, argv, 10);
    if (tutorial::report_missing_fashion_mnist("custom_training_loop", args.data)) return 77;

    distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(args.replicas));
    std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());

    const int64_t batch_size_per_replica = 64;
    const int64_t global_batch_size = batch_size_per_replica * strategy.num_replicas_in_sync();
    const data::Dataset train_dataset = data::Dataset::from_idx(args.data, data::Split::kTrain)
                                            .shuffle(60000, /*seed=*/1)
                                            .batch(global_batch_size)
                                            .map(scale)
                                            .prefetch(data::kAutotune);
    const data::Dataset test_dataset =
        data::Dataset::from_idx(args.data, data::Split::kTest).batch(global_batch_size).map(scale);
    // Each element of the distributed dataset is a global batch split into one part per replica.
    const distribute::DistributedDataset train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset);

    std::shared_ptr<Sequential> model;
    {
      auto scope = strategy.scope();  // the model's variables are mirrored
      model = create_model();
    }
    optim::Adam optimizer({.learning_rate = 0.001});
    losses::SparseCategoricalCrossentropy loss_object({.from_logits = true, .reduction = losses::Reduction::kNone});
    std::vector<ReplicaMetrics> per_replica(static_cast<size_t>(strategy.num_replicas_in_sync()));
    io::CheckpointManager manager(args.checkpoint_dir, /*max_to_keep=*/3);

    // Rows in the global batch being trained: compute_average_loss divides by it, so the replicas' losses
    // (and gradients) sum to the mean over the whole batch, also for a last batch smaller than the rest.
    int64_t global_rows = 0;
    auto train_step = [&](const data::Element& inputs) {
      const std::vector<Variable> vars = model->trainable_variables();
      GradientTape tape;
      if (inputs[0].dim(0) == 0) {
        // No rows for this replica in an uneven last batch: it still takes part in the all-reduce.
        optimizer.apply_gradients(tape.gradient(Variable(Tensor::scalar(0.0f)), vars, UnconnectedGradients::kZero),
                                  vars);
        return 0.0;
      }
      const Variable predictions = (*model)(Variable(inputs[0]), /*training=*/true);
      const Variable per_example_loss = loss_object(inputs[1], predictions);
      Variable loss = distribute::compute_average_loss(per_example_loss, global_rows);
      loss = loss + distribute::scale_regularization_loss(model->regularization_loss());
      optimizer.apply_gradients(tape.gradient(loss, vars), vars);
      per_replica[static_cast<size_t>(replica_id())].train_accuracy.update_state(inputs[1], predictions.value());
      return static_cast<double>(loss.value().item<float>());
    };

    double test_loss = 0, test_accuracy = 0;
    for (int64_t epoch = 0; epoch < args.epochs; ++epoch) {
      for (auto& m : per_replica) m.train_accuracy.reset_state();
      double total_loss = 0;
      int64_t num_batches = 0;
      distribute::DistributedIterator it = train_dist_dataset.make_iterator();
      while (args.steps == 0 || num_batches < args.steps) {
        const auto batch = it.next();
        if (!batch) break;
        global_rows = it.last_global_batch_size();
        // distributed_train_step: every replica runs train_step; their losses are summed.
        total_loss += strategy.reduce(distribute::ReduceOp::kSum, strategy.run(train_step, *batch));
        ++num_batches;
      }
      const double train_loss = total_loss / static_cast<double>(std::max<int64_t>(num_batches, 1));
      const double train_accuracy =
          merged(per_replica, [](ReplicaMetrics& m) -> metrics::Metric& { return m.train_accuracy; });
      std::tie(test_loss, test_accuracy) = test(strategy, *model, test_dataset, args.steps, per_replica);

      // tf.train.Checkpoint(optimizer=optimizer, model=model) + CheckpointManager.save().
      io::TrainingCheckpoint checkpoint;
      checkpoint.weights = model->named_weights();
      checkpoint.optimizer = optimizer.state(model->trainable_variables());
      checkpoint.step = optimizer.iterations();
      checkpoint.epoch = epoch + 1;
      checkpoint.rng = default_generator().state();
      const std::string saved = manager.save(checkpoint, epoch + 1);

      std::printf("Epoch %lld, Loss: %.4f, Accuracy: %.2f%%, Test Loss: %.4f, Test Accuracy: %.2f%% (saved %s)\n",
                  static_cast<long long>(epoch + 1), train_loss, 100 * train_accuracy, test_loss, 100 * test_accuracy,
                  saved.c_str());
    }

    // Restore the latest checkpoint into a new model under the same strategy and test it again.
    const std::optional<std::string> latest = manager.latest();
    STRATA_CHECK(latest.has_value(), IoError, "no checkpoint in " << args.checkpoint_dir);
    std::shared_ptr<Sequential> restored;
    {
      auto scope = strategy.scope();
      restored = create_model();
    }
    optim::Adam new_optimizer;
    const io::TrainingCheckpoint checkpoint = io::CheckpointManager::restore(*latest);
    restored->load_weights(*latest + "/model.safetensors");
    new_optimizer.load_state(checkpoint.optimizer, restored->trainable_variables());
    const auto [restored_loss, restored_accuracy] = test(strategy, *restored, test_dataset, args.steps, per_replica);
    std::printf("Restored %s (step %lld): test loss %.4f, test accuracy %.2f%%\n", latest->c_str(),
                static_cast<long long>(new_optimizer.iterations()), restored_loss, 100 * restored_accuracy);
    STRATA_CHECK(std::fabs(restored_loss - test_loss) < 1e-6 && restored_accuracy == test_accuracy, Error,
                 "the restored model scores " << restored_loss << " / " << restored_accuracy << ", the trained one "
                                              << test_loss << " / " << test_accuracy);
    std::printf("test loss %.4f - test accuracy %.4f\n", test_loss, test_accuracy);
  } catch (const Error& e) {
    std::fprintf(stderr, "custom_training_loop: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_training_loop: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
