// Trains the Keras tutorial CNN, a 784-128-10 MLP or the Transformer of configs/fashion_mnist_transformer.yaml on
// Fashion-MNIST with Model::fit and prints the images/s of one epoch after a warm-up epoch as JSON.
// bench/models_bench.py runs it beside the same training in TensorFlow and PyTorch.
//
//   models_bench --model cnn|mlp|transformer --threads N [--mixed-precision float32|bf16] [--data DIR] [--epochs 1] [--batch 64] [--steps N]
//                [--steps-per-epoch S]
//
// --steps-per-epoch S makes each epoch (the warm-up one too) S steps of the data repeated, so that a short run times
// as many steps as its peers do (bench/models_bench.py); 0, the default, is one pass over the 60000 images.
// --steps N skips fit: it trains N steps (Model::train_step) over the first 100 batches, held in memory, and
// prints the calling thread's CPU time per step (best of 5 rounds), a figure that other work on the machine
// disturbs less than an epoch's wall time; it is the one to compare changes to the step by. piped_step_us
// is the same with each batch taken from the pipeline's iterator (its hand-over from the prefetch thread
// included); fit's train_thread_cpu_s / steps adds fit's own loop to that.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "strata/data/convert.h"
#include "strata/data/dataset.h"
#include "strata/nn/nn.h"
#include "strata/nn/policy.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/random.h"
#include "strata/threading.h"
#include "strata/train/model.h"

using namespace strata;

namespace {
data::Element normalize(const data::Element& e, bool flat) {
  const Tensor x = data::to_float(e[0], 1.0f / 255.0f);
  return data::Element({flat ? x.reshape({x.dim(0), 784}) : x, e[1]});
}

// The benched models. The transformer is configs/fashion_mnist_transformer.yaml's (28 rows as 28 tokens, a Conv1D
// stem, a learned position embedding, 2 pre-norm encoder blocks, a final norm, token average, classifier), with
// Adam at its default constant rate: the schedule changes no step's cost.
Sequential make_model(const std::string& name) {
  if (name == "mlp") return Sequential({nn::Dense(128, "relu"), nn::Dense(10)});
  if (name == "cnn") {
    return Sequential(
        {nn::Conv2D(32, 3, "relu"), nn::MaxPool2D(2), nn::Flatten(), nn::Dense(64, "relu"), nn::Dense(10)});
  }
  if (name == "transformer") {
    const nn::TransformerEncoderOptions block{.dropout = 0.1f, .activation = "gelu"};
    return Sequential({nn::Reshape({28, 28}), nn::Conv1D(64, 3, {.padding = "same"}), nn::PositionEmbedding(28),
                       nn::TransformerEncoder(128, 4, block), nn::TransformerEncoder(128, 4, block),
                       nn::LayerNormalization({.epsilon = 1e-6f}), nn::GlobalAveragePooling1D(), nn::Dense(10)});
  }
  std::fprintf(stderr, "models_bench: unknown --model '%s' (cnn, mlp or transformer)\n", name.c_str());
  std::exit(2);
}
}  // namespace

// CPU time of the calling thread, in seconds.
double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int main(int argc, char** argv) {
  std::string model_name = "cnn", dir = "/usr/share/datasets/fashion-mnist";
  int threads = 1;
  int64_t epochs = 1, batch = 64;
  int64_t steps = 0;
  int64_t steps_per_epoch = 0;
  bool pipeline_only = false;  // --pipeline-only 1: time one epoch of the input pipeline, no training
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--model") model_name = argv[i + 1];
    else if (flag == "--threads") threads = std::stoi(argv[i + 1]);
    else if (flag == "--data") dir = argv[i + 1];
    else if (flag == "--epochs") epochs = std::stoll(argv[i + 1]);
    else if (flag == "--batch") batch = std::stoll(argv[i + 1]);
    else if (flag == "--steps") steps = std::stoll(argv[i + 1]);
    else if (flag == "--steps-per-epoch") steps_per_epoch = std::stoll(argv[i + 1]);
    else if (flag == "--mixed-precision") nn::set_global_policy(argv[i + 1]);  // strata/nn/policy.h
    else if (flag == "--pipeline-only") pipeline_only = std::string(argv[i + 1]) == "1";
    else {
      std::fprintf(stderr, "models_bench: unknown flag '%s'\n", flag.c_str());
      return 2;
    }
  }
  set_num_threads(threads);
  manual_seed(0);
  const bool mlp = model_name == "mlp";
  Sequential model = make_model(model_name);
  model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::Adam(), {"accuracy"});
  // Decoded and cached in memory first, so the epoch times training (as the PyTorch side does).
  auto prep = [&](data::Split split, bool shuffle) {
    data::Dataset ds = data::Dataset::from_idx(dir, split);
    if (shuffle) ds = ds.shuffle(60000, 0);
    if (shuffle && steps_per_epoch > 0) ds = ds.repeat();  // fit's iterator then runs on across the epochs
    return ds.batch(batch).map([mlp](const data::Element& e) { return normalize(e, mlp); }).prefetch(data::kAutotune);
  };
  data::Dataset train = prep(data::Split::kTrain, true);
  data::Dataset test = prep(data::Split::kTest, false);
  if (pipeline_only) {
    for (int round = 0; round < 3; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      data::Iterator it = train.make_iterator();
      const auto first = it.next();
      const double fill = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      int64_t n = first ? first->components()[0].dim(0) : 0;
      while (auto e = it.next()) n += (*e)[0].dim(0);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("{\"pipeline_images_per_s\": %.1f, \"first_batch_s\": %.4f}\n", static_cast<double>(n) / s, fill);
    }
    return 0;
  }
  model.build_for(mlp ? Shape{batch, 784} : Shape{batch, 28, 28, 1});
  if (steps > 0) {
    std::vector<data::Element> batches;
    data::Iterator it = train.make_iterator();
    while (batches.size() < 100)
      if (auto e = it.next()) batches.push_back(*e);
    for (int64_t i = 0; i < 200; ++i) model.train_step(batches[i % batches.size()]);  // warm-up
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      const double t0 = thread_seconds();
      for (int64_t i = 0; i < steps; ++i) model.train_step(batches[i % batches.size()]);
      best = std::min(best, (thread_seconds() - t0) / static_cast<double>(steps));
    }
    // The same steps fed straight from the input pipeline (a fresh iterator per round, so the batches
    // come off the prefetch thread as in fit, without fit's loop around train_step).
    double best_piped = 1e30;
    for (int round = 0; round < 5; ++round) {
      data::Iterator piped = train.make_iterator();
      for (int i = 0; i < 5; ++i) piped.next();  // past the shuffle buffer's fill
      const double t0 = thread_seconds();
      int64_t n = 0;
      for (; n < steps; ++n) {
        auto e = piped.next();
        if (!e) break;
        model.train_step(*e);
      }
      best_piped = std::min(best_piped, (thread_seconds() - t0) / static_cast<double>(std::max<int64_t>(n, 1)));
    }
    std::printf("{\"model\": \"%s\", \"threads\": %d, \"step_us\": %.2f, \"piped_step_us\": %.2f}\n",
                model_name.c_str(), threads, best * 1e6, best_piped * 1e6);
    return 0;
  }
  // Epoch 1 warms up (oneDNN primitives, allocator, the first shuffle fill); the figure is the epochs after
  // it, in steady state, where fit opens each epoch's input pass while the previous one trains.
  struct EpochTimer : Callback {
    std::chrono::steady_clock::time_point start;
    double seconds = 0, cpu_start = 0, cpu_seconds = 0;
    void on_epoch_begin(int64_t epoch, const Logs&) override {
      if (epoch == 1) {
        start = std::chrono::steady_clock::now();
        cpu_start = thread_seconds();
      }
    }
    void on_train_end(const Logs&) override {
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      cpu_seconds = thread_seconds() - cpu_start;
    }
  };
  auto timer = std::make_shared<EpochTimer>();
  History h =
      model.fit(train, {.epochs = epochs + 1, .steps_per_epoch = steps_per_epoch, .callbacks = {timer}, .verbose = 0});
  const double seconds = timer->seconds;
  const double images = steps_per_epoch > 0 ? static_cast<double>(steps_per_epoch * batch) : 60000.0;
  const Logs logs = model.evaluate(test);
  std::printf("{\"model\": \"%s\", \"threads\": %d, \"images_per_s\": %.1f, \"seconds\": %.3f, "
              "\"train_thread_cpu_s\": %.3f, \"input_wait\": %.4f, \"test_accuracy\": %.4f}\n",
              model_name.c_str(), threads, images * static_cast<double>(epochs) / seconds, seconds, timer->cpu_seconds,
              h.input_wait_fraction.back(), logs.at("accuracy"));
  return 0;
}
