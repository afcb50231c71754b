// TensorFlow's "Distributed training with Keras" tutorial in C++: the Fashion-MNIST CNN trained with
// Model::fit under MirroredStrategy on CPU replicas (each a thread with its share of the cores), with the
// tutorial's callbacks (ModelCheckpoint every epoch, a LearningRateScheduler that decays the rate, and one
// that prints it), then the latest checkpoint loaded back and evaluated.
//
//   distributed_keras [--replicas 2] [--epochs 12] [--steps N] [--data DIR] [--checkpoint-dir DIR]
//
// --steps N limits every epoch, and the evaluation, to N batches (for a quick run). Exit status 77 when the
// data set is not installed (ctest reads it as "skipped"); 1 on any other error.
#include <strata/strata.h>

#include "tutorial_common.h"

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace strata;
using tutorial::scale;

namespace {

// The tutorial's PrintLR: the learning rate at the end of every epoch.
class PrintLR : public Callback {
 public:
  void on_epoch_end(int64_t epoch, const Logs&) override {
    std::printf("Learning rate for epoch %lld is %g\n", static_cast<long long>(epoch + 1),
                model()->optimizer().learning_rate());
  }
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const tutorial::Args args = tutorial::parse_args(argc, argv, 12);
    if (tutorial::report_missing_fashion_mnist("distributed_keras", args.data)) return 77;

    // One replica per CPU "device"; each replica's kernels get num_threads() / replicas threads.
    distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(args.replicas));
    std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());

    // The global batch grows with the replicas, so each replica keeps a batch of 64.
    const int64_t batch_size_per_replica = 64;
    const int64_t global_batch = batch_size_per_replica * strategy.num_replicas_in_sync();
    const data::Dataset train = data::Dataset::from_idx(args.data, data::Split::kTrain)
                                    .cache()
                                    .shuffle(10000, /*seed=*/1)
                                    .batch(global_batch)
                                    .map(scale)
                                    .prefetch(data::kAutotune);
    const data::Dataset eval = data::Dataset::from_idx(args.data, data::Split::kTest).batch(global_batch).map(scale);

    // Variables made inside the scope are mirrored: one copy per replica, kept identical.
    const float learning_rate = optim::scale_lr(1e-3f, global_batch, batch_size_per_replica);
    std::shared_ptr<Sequential> model;
    {
      auto scope = strategy.scope();
      model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{
          nn::Conv2D(32, 3, "relu"), nn::MaxPooling2D(), nn::Flatten(), nn::Dense(64, "relu"), nn::Dense(10)});
      model->build_for({1, 28, 28, 1});
      model->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     optim::Adam({.learning_rate = learning_rate}), {"accuracy"});
    }

    // The tutorial's decay: the (scaled) rate for 3 epochs, a tenth of it until epoch 7, then a hundredth.
    auto decay = [learning_rate](int64_t epoch, double) -> double {
      if (epoch < 3) return learning_rate;
      if (epoch < 7) return learning_rate * 0.1;
      return learning_rate * 0.01;
    };
    const std::string checkpoint_prefix = args.checkpoint_dir + "/ckpt_{epoch}.safetensors";
    std::filesystem::create_directories(args.checkpoint_dir);
    FitOptions fit;
    fit.epochs = args.epochs;
    fit.steps_per_epoch = args.steps;
    fit.callbacks = {std::make_shared<callbacks::ModelCheckpoint>(
                         checkpoint_prefix, callbacks::ModelCheckpoint::Options{.monitor = "loss"}),
                     std::make_shared<callbacks::LearningRateScheduler>(decay), std::make_shared<PrintLR>()};
    // fit runs outside the scope: the model remembers the strategy that made it.
    model->fit(train, fit);

    // The tutorial's tf.train.latest_checkpoint + load_weights, then evaluate (still on both replicas).
    const std::string latest = args.checkpoint_dir + "/ckpt_" + std::to_string(args.epochs) + ".safetensors";
    model->load_weights(latest);
    EvaluateOptions evaluate;
    evaluate.steps = args.steps;
    const Logs result = model->evaluate(eval, evaluate);
    std::printf("Restored %s\n", latest.c_str());
    std::printf("test loss %.4f - test accuracy %.4f\n", result.at("loss"), result.at("accuracy"));
  } catch (const Error& e) {
    std::fprintf(stderr, "distributed_keras: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distributed_keras: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
