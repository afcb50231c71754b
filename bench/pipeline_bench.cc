// pipeline_bench: pipeline parallelism (issue 19) on this machine's cores. One model trained on one device with
// --threads intra-op threads (the plain GradientTape loop: forward, loss, gradient, SGD) against the same model cut
// by parameter count into S stages run as threads (parallel::ThreadPipeline: each stage gets cores / S threads),
// for each schedule and micro-batch count M: step time, examples/s, the pipeline's speed over one device, the
// measured bubble (last_bubble_fraction(), averaged over the timed steps) beside the simulated one (simulate() with
// the backward/forward cost ratio of the one-device loop on 1 thread, a stage's thread count) and the bound
// (S - 1) / (M + S - 1), the work the stages did (their compute summed, over the 1-thread one-device forward and
// gradient) and each stage's compute.
//   pipeline_bench [--model mlp|lstm|transformer] [--steps 5] [--warmup 1] [--batch 256|128|64]
//                  [--micro-batches 2,4,8] [--stages 2] [--schedules gpipe,1f1b,zb-h1,interleaved] [--threads 2] [--tp
//                  2]
// mlp: 8 Dense(2048, relu) + Dense(10) on 2048 random features (34M weights, 134 MB: far over any cache).
// transformer: configs/fashion_mnist_transformer.yaml's stack without dropout (Conv1D(64, 3, same), a position
// embedding, 2 TransformerEncoder(128, 4 heads, gelu) blocks, LayerNormalization, GlobalAveragePooling1D, Dense(10)) on
// random [28, 28] examples, batch 64. Its table also has a tensor-parallel section (issue 42): Model::train_step under
// OneDeviceStrategy with --threads threads against TensorParallelStrategy with --tp ranks (default 2; threads of this
// process, --threads / tp intra-op threads each): heads and MLPs split, gradients joined, SGD on the whole weights.
// lstm: configs/fashion_mnist_lstm.yaml's stack, LSTM 64 x4 (the first three return sequences) + Dense(10), on
// random [28, 28] examples (row by row). Both: SparseCategoricalCrossentropy(from_logits), SGD(0.01), data drawn
// once from a fixed seed. Every configuration starts from freshly made layers, built on one example before they are
// split (split_by_parameters counts 0 weights in a layer not built yet). Step times are the best of the timed steps
// (the cores are shared with other work: the least disturbed step); the one-device loop runs before and after the
// pipelines and its best counts. The tables print at the end; the last line is JSON with every figure, for
// bench/pipeline_bench.py.
// Thread-safety: a program (ThreadPipeline runs its stages on threads of its own).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "strata/distribute/strategies.h"
#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/parallel/pipeline.h"
#include "strata/parallel/schedule.h"
#include "strata/parallel/tensor_parallel_strategy.h"
#include "strata/threading.h"
#include "strata/train/model.h"

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;
using Layers = std::vector<std::shared_ptr<nn::Layer>>;

constexpr int64_t kClasses = 10;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
  return out;
}

std::vector<std::string> parse_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

struct BenchModel {
  std::string name;
  Shape example_shape;
  Layers (*make)();
};

Layers make_mlp() {
  Layers layers;
  for (int i = 0; i < 8; ++i) layers.push_back(std::make_shared<nn::Dense>(2048, nn::ActivationSpec("relu")));
  layers.push_back(std::make_shared<nn::Dense>(kClasses));
  return layers;
}

Layers make_lstm() {
  Layers layers;
  for (int i = 0; i < 3; ++i)
    layers.push_back(std::make_shared<nn::LSTM>(64, nn::LSTMOptions{.return_sequences = true}));
  layers.push_back(std::make_shared<nn::LSTM>(64));
  layers.push_back(std::make_shared<nn::Dense>(kClasses));
  return layers;
}

Layers make_transformer() {
  Layers layers;
  layers.push_back(std::make_shared<nn::Conv1D>(64, 3, nn::Conv1DLayerOptions{.padding = "same"}));
  layers.push_back(std::make_shared<nn::PositionEmbedding>(28));
  for (int i = 0; i < 2; ++i) {
    layers.push_back(
        std::make_shared<nn::TransformerEncoder>(128, 4, nn::TransformerEncoderOptions{.activation = "gelu"}));
  }
  layers.push_back(std::make_shared<nn::LayerNormalization>(nn::LayerNormalizationOptions{.epsilon = 1e-6f}));
  layers.push_back(std::make_shared<nn::GlobalAveragePooling1D>());
  layers.push_back(std::make_shared<nn::Dense>(kClasses));
  return layers;
}

std::shared_ptr<losses::Loss> make_loss() {
  return std::make_shared<losses::SparseCategoricalCrossentropy>(
      losses::SparseCategoricalCrossentropyOptions{.from_logits = true});
}

std::vector<Variable> weights_of(const Layers& layers) {
  std::vector<Variable> vars;
  for (const auto& layer : layers) {
    for (const Variable& w : layer->trainable_variables()) vars.push_back(w);
  }
  return vars;
}

int64_t count_weights(const Layers& layers) {
  int64_t n = 0;
  for (const Variable& w : weights_of(layers)) n += w.value().numel();
  return n;
}

struct OneDevice {
  double step = 0, forward = 0, backward = 0;  // the best of the timed steps, seconds; forward includes the loss
};

// The plain loop on this thread with `threads` intra-op threads.
OneDevice run_one_device(const BenchModel& model, const Tensor& x, const Tensor& y, int threads, int warmup,
                         int steps) {
  ScopedNumThreads cores(threads);
  Layers layers = model.make();
  const auto loss = make_loss();
  optim::SGD sgd({.learning_rate = 0.01});
  std::vector<Variable> vars;
  std::vector<double> step, fwd, bwd;
  for (int k = 0; k < warmup + steps; ++k) {
    const auto t0 = Clock::now();
    GradientTape tape;
    Variable out(x, /*trainable=*/false);
    for (auto& layer : layers) out = (*layer)(out, /*training=*/true);
    Variable l = (*loss)(Variable(y, /*trainable=*/false), out);
    (void)l.value().item<float>();
    const double f = seconds_since(t0);
    if (vars.empty()) vars = weights_of(layers);  // built by the first forward
    const auto t1 = Clock::now();
    const std::vector<Tensor> grads = tape.gradient(l, vars);
    const double b = seconds_since(t1);
    sgd.apply_gradients(grads, vars);
    if (k >= warmup) {
      step.push_back(seconds_since(t0));
      fwd.push_back(f);
      bwd.push_back(b);
    }
  }
  return {best(step), best(fwd), best(bwd)};
}

// Model::train_step under a strategy (TensorParallelStrategy with `tp` ranks, or OneDeviceStrategy for tp 0), on this
// thread with `threads` intra-op threads (the ranks share them out): the best step, seconds.
double run_model_steps(const BenchModel& model, const Tensor& x, const Tensor& y, int threads, int tp, int warmup,
                       int steps) {
  ScopedNumThreads cores(threads);
  std::unique_ptr<distribute::Strategy> strategy;
  if (tp > 0) {
    strategy = std::make_unique<parallel::TensorParallelStrategy>(parallel::TensorParallelStrategyOptions{.tp = tp});
  } else {
    strategy = std::make_unique<distribute::OneDeviceStrategy>();
  }
  std::shared_ptr<Sequential> sequential;
  {
    auto scope = strategy->scope();
    std::vector<nn::LayerRef> refs;
    for (const auto& layer : model.make()) refs.emplace_back(layer);
    sequential = std::make_shared<Sequential>(refs);
    Shape one = {1};
    one.insert(one.end(), model.example_shape.begin(), model.example_shape.end());
    sequential->build_for(one);
    sequential->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                        optim::SGD({.learning_rate = 0.01}));
  }
  const data::Element batch({x, y});
  std::vector<double> step;
  for (int k = 0; k < warmup + steps; ++k) {
    const auto t0 = Clock::now();
    strategy->run([&](const data::Element& b) { return sequential->train_step(b); }, batch);
    if (k >= warmup) step.push_back(seconds_since(t0));
  }
  return best(step);
}

struct PipelineResult {
  std::string schedule;
  int stages = 0, chunks = 1, micro_batches = 0;
  double step = 0, bubble = 0, simulated = 0, bound = 0;
  double compute_share_max = 0;       // the busiest stage's compute over the sum of compute: 1/S when balanced
  double compute = 0;                 // all stages' compute (forward and backward actions), summed, seconds
  std::vector<double> stage_compute;  // per stage, seconds
  int peak_activations = 0;           // stage 0's
};

// Fresh layers, built by one example: split_by_parameters counts the weights a layer has, none before it is built.
Layers make_built(const BenchModel& model) {
  Layers layers = model.make();
  Shape one = {1};
  one.insert(one.end(), model.example_shape.begin(), model.example_shape.end());
  NoGradGuard no_grad;
  Variable out(Tensor::zeros(one), /*trainable=*/false);
  for (auto& layer : layers) out = (*layer)(out);
  return layers;
}

PipelineResult run_pipeline(const BenchModel& model, const Tensor& x, const Tensor& y,
                            const parallel::Schedule& schedule, const parallel::ActionCosts& costs, int warmup,
                            int steps) {
  Layers layers = make_built(model);
  parallel::PipelineOptions options;
  options.example_shape = model.example_shape;
  parallel::ThreadPipeline pipe(parallel::split_by_parameters(layers, schedule.virtual_stages()), schedule, make_loss(),
                                optim::SGD({.learning_rate = 0.01}), options);
  std::vector<double> step, bubble, share, compute;
  std::vector<std::vector<double>> stage_compute(schedule.stages);
  int peak = 0;
  for (int k = 0; k < warmup + steps; ++k) {
    const auto t0 = Clock::now();
    pipe.train_step(x, y);
    const double t = seconds_since(t0);
    if (k < warmup) continue;
    step.push_back(t);
    bubble.push_back(pipe.last_bubble_fraction());
    double most = 0, sum = 0;
    const auto timings = pipe.last_timings();
    for (size_t s = 0; s < timings.size(); ++s) {
      most = std::max(most, timings[s].compute_seconds);
      sum += timings[s].compute_seconds;
      stage_compute[s].push_back(timings[s].compute_seconds);
    }
    share.push_back(sum > 0 ? most / sum : 0);
    compute.push_back(sum);
    peak = pipe.last_timings()[0].peak_activations;
  }
  PipelineResult r;
  r.schedule = schedule.name;
  r.stages = schedule.stages;
  r.chunks = schedule.chunks;
  r.micro_batches = schedule.micro_batches;
  r.step = best(step);
  r.bubble = mean(bubble);
  r.simulated = parallel::simulate(schedule, costs).bubble_fraction;
  // GPipe's and 1F1B's bound; interleaving divides the fill and drain by the chunks: (S-1) / (c M + S-1).
  r.bound = parallel::pipeline_bubble_bound(schedule.stages, schedule.micro_batches * schedule.chunks);
  r.compute_share_max = mean(share);
  r.compute = median(compute);
  for (const auto& c : stage_compute) r.stage_compute.push_back(median(c));
  r.peak_activations = peak;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "mlp", schedules_arg = "gpipe,1f1b,zb-h1,interleaved", micro_arg = "2,4,8", stages_arg = "2";
  int steps = 5, warmup = 1, threads = 2, tp = 2;
  int64_t batch = 0;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (value && flag == "--model")
      model_name = value;
    else if (value && flag == "--steps")
      steps = std::atoi(value);
    else if (value && flag == "--warmup")
      warmup = std::atoi(value);
    else if (value && flag == "--batch")
      batch = std::atoll(value);
    else if (value && flag == "--micro-batches")
      micro_arg = value;
    else if (value && flag == "--stages")
      stages_arg = value;
    else if (value && flag == "--schedules")
      schedules_arg = value;
    else if (value && flag == "--threads")
      threads = std::atoi(value);
    else if (value && flag == "--tp")
      tp = std::max(1, std::atoi(value));
    else {
      std::fprintf(stderr,
                   "usage: pipeline_bench [--model mlp|lstm|transformer] [--steps 5] [--warmup 1] [--batch 256|128|64] "
                   "[--micro-batches 2,4,8] [--stages 2] [--schedules gpipe,1f1b,zb-h1,interleaved] [--threads 2] "
                   "[--tp 2]\n");
      return 2;
    }
  }
  BenchModel model;
  if (model_name == "mlp") {
    model = {"mlp", {2048}, make_mlp};
    if (batch == 0) batch = 256;
  } else if (model_name == "lstm") {
    model = {"lstm", {28, 28}, make_lstm};
    if (batch == 0) batch = 128;
  } else if (model_name == "transformer") {
    model = {"transformer", {28, 28}, make_transformer};
    if (batch == 0) batch = 64;
  } else {
    std::fprintf(stderr, "pipeline_bench: --model mlp, lstm or transformer, not '%s'\n", model_name.c_str());
    return 2;
  }
  steps = std::max(steps, 1);

  // One batch, drawn once: features uniform in [-1, 1], labels uniform over the classes.
  std::mt19937 rng(1);
  Shape x_shape = {batch};
  x_shape.insert(x_shape.end(), model.example_shape.begin(), model.example_shape.end());
  int64_t features = 1;
  for (int64_t d : model.example_shape) features *= d;
  std::vector<float> xs(static_cast<size_t>(batch * features));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : xs) v = uniform(rng);
  std::vector<int64_t> ys(static_cast<size_t>(batch));
  for (int64_t& v : ys) v = static_cast<int64_t>(rng() % kClasses);
  const Tensor x = Tensor::from_vector(xs, x_shape), y = Tensor::from_vector(ys, {batch});

  const int64_t weights = count_weights(make_built(model));
  std::printf("# %s: %lld weights (%.0f MB), batch %lld, SGD; %d warm-up + %d timed steps each, the best; %d cores\n",
              model.name.c_str(), static_cast<long long>(weights), weights * 4.0 / 1e6, static_cast<long long>(batch),
              warmup, steps, hardware_threads());
  std::fflush(stdout);

  // The one-device loop runs before and after the pipelines, and its best counts: it is every ratio's yardstick.
  // A stage's thread runs its kernels on cores / S threads (1 with 2 stages on 2 cores): the work a pipeline does
  // (its stages' compute summed) compares with the one-device loop on 1 thread, whose backward/forward ratio also
  // gives simulate()'s costs (a split backward's two halves taken as equal).
  const auto run_both = [&] {
    const OneDevice n = run_one_device(model, x, y, threads, warmup, steps);
    return std::pair{n, threads == 1 ? n : run_one_device(model, x, y, 1, warmup, steps)};
  };
  auto [one, single] = run_both();
  const double b_over_f = single.forward > 0 ? single.backward / single.forward : 2.0;
  const parallel::ActionCosts costs{.forward = 1.0, .backward_input = b_over_f / 2, .backward_weight = b_over_f / 2};

  std::vector<PipelineResult> results;
  for (int stages : parse_ints(stages_arg)) {
    for (const std::string& name : parse_names(schedules_arg)) {
      for (int m : parse_ints(micro_arg)) {
        const bool interleaved = name == "interleaved";
        const int chunks = interleaved ? 2 : 1;
        if (interleaved && m % stages != 0) continue;  // Megatron's condition
        if (m > batch || static_cast<size_t>(stages * chunks) > model.make().size()) continue;
        const parallel::Schedule schedule = parallel::make_schedule(name, stages, m, interleaved ? chunks : 0);
        results.push_back(run_pipeline(model, x, y, schedule, costs, warmup, steps));
      }
    }
  }
  {
    const auto [one_after, single_after] = run_both();
    const auto merge = [](OneDevice& a, const OneDevice& b) {
      a = {std::min(a.step, b.step), std::min(a.forward, b.forward), std::min(a.backward, b.backward)};
    };
    merge(one, one_after);
    merge(single, single_after);
  }

  const auto print_one_device = [&](int n, const OneDevice& d) {
    std::printf(
        "# one device, %d thread%s: step %.1f ms (forward+loss %.1f ms, gradient %.1f ms, backward/forward "
        "%.2f), %.1f examples/s\n",
        n, n == 1 ? "" : "s", d.step * 1e3, d.forward * 1e3, d.backward * 1e3, d.backward / d.forward, batch / d.step);
  };
  print_one_device(threads, one);
  if (threads != 1) print_one_device(1, single);
  std::string per_stage_threads;
  for (int st : parse_ints(stages_arg)) {
    per_stage_threads += (per_stage_threads.empty() ? "" : ", ") + std::to_string(std::max(1, hardware_threads() / st));
  }
  std::printf(
      "# pipelines: stages as threads, cores/S = %s thread(s) per stage; speedup = the %d-thread one-device\n"
      "# step over the pipeline's; bubble = measured last_bubble_fraction(), mean over steps (waiting and\n"
      "# the optimizer's apply count as idle); sim = simulate() with F = 1, B = %.2f (1 thread; BI = BW = B/2);\n"
      "# bound = (S-1)/(M+S-1) ((S-1)/(cM+S-1) interleaved, c chunks); work = all stages' compute over the\n"
      "# 1-thread one-device forward+gradient; compute_ms = per stage; peak0 = stage 0's live micro-batches\n",
      per_stage_threads.c_str(), threads, b_over_f);
  std::printf("%-12s %2s %2s %2s %9s %10s %7s %6s %6s %6s %6s  %-s\n", "schedule", "S", "c", "M", "step_ms",
              "examples/s", "speedup", "bubble", "sim", "bound", "work", "compute_ms (peak0)");
  for (const PipelineResult& r : results) {
    std::string per_stage;
    for (double c : r.stage_compute) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.0f", per_stage.empty() ? "" : "/", c * 1e3);
      per_stage += buf;
    }
    std::printf("%-12s %2d %2d %2d %9.1f %10.1f %7.2f %6.3f %6.3f %6.3f %6.2f  %s (%d)\n", r.schedule.c_str(), r.stages,
                r.chunks, r.micro_batches, r.step * 1e3, batch / r.step, one.step / r.step, r.bubble, r.simulated,
                r.bound, r.compute / (single.forward + single.backward), per_stage.c_str(), r.peak_activations);
  }

  // Tensor parallelism (the transformer): the same step through Model::train_step, on one device and on tp ranks.
  double model_one = 0, model_tp = 0;
  if (model_name == "transformer") {
    model_one = run_model_steps(model, x, y, threads, 0, warmup, steps);
    model_tp = run_model_steps(model, x, y, threads, tp, warmup, steps);
    model_one = std::min(model_one, run_model_steps(model, x, y, threads, 0, warmup, steps));  // before and after
    std::printf(
        "# tensor parallel (Model::train_step, SGD): one device %d thread%s %.1f ms; TensorParallelStrategy tp %d "
        "(%d thread%s per rank) %.1f ms, speedup %.2f\n",
        threads, threads == 1 ? "" : "s", model_one * 1e3, tp, std::max(1, threads / tp),
        std::max(1, threads / tp) == 1 ? "" : "s", model_tp * 1e3, model_one / model_tp);
  }

  std::printf(
      "{\"model\": \"%s\", \"batch\": %lld, \"weights\": %lld, \"threads\": %d, \"one_device\": {\"step_s\": %.6f, "
      "\"forward_s\": %.6f, \"backward_s\": %.6f}, \"one_thread\": {\"step_s\": %.6f, \"forward_s\": %.6f, "
      "\"backward_s\": %.6f}, \"pipelines\": [",
      model.name.c_str(), static_cast<long long>(batch), static_cast<long long>(weights), threads, one.step,
      one.forward, one.backward, single.step, single.forward, single.backward);
  for (size_t i = 0; i < results.size(); ++i) {
    const PipelineResult& r = results[i];
    std::printf(
        "%s{\"schedule\": \"%s\", \"stages\": %d, \"chunks\": %d, \"micro_batches\": %d, \"step_s\": %.6f, "
        "\"bubble\": %.4f, \"simulated\": %.4f, \"bound\": %.4f, \"busiest\": %.4f, \"compute_s\": %.6f, "
        "\"peak0\": %d}",
        i ? ", " : "", r.schedule.c_str(), r.stages, r.chunks, r.micro_batches, r.step, r.bubble, r.simulated, r.bound,
        r.compute_share_max, r.compute, r.peak_activations);
  }
  std::printf("]");
  if (model_tp > 0) {
    std::printf(", \"tensor_parallel\": {\"tp\": %d, \"one_device_step_s\": %.6f, \"step_s\": %.6f}", tp, model_one,
                model_tp);
  }
  std::printf("}\n");
  return 0;
}
