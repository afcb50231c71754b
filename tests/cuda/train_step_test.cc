// The single-GPU training step against the CPU's on the same inputs: the fused losses' values and gradients, each
// optimizer's update (clipping by norm included) over a few steps, and Model::fit of a small Dense model under
// OneDeviceStrategy("/gpu:0") against "/cpu:0" from the same initial weights (the same per-step losses, weights and
// evaluation within 1e-4), one step per execution and four (each next batch staged on the GPU ahead of its step), and
// a Conv2D + Dense model's losses under mixed_bfloat16 on the GPU close to float32's (with no warning about the CPU's
// bf16 instructions). Every test skips without a GPU (STRATA_REQUIRE_GPU). Thread-safety: test-thread only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "strata/distribute/strategies.h"
#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/nn/policy.h"
#include "strata/optim/losses.h"
#include "strata/optim/metrics.h"
#include "strata/optim/optimizers.h"
#include "strata/train/callbacks.h"
#include "strata/train/model.h"

namespace strata {
namespace {

using testing::expect_matches_cpu;
using testing::gpu;
using testing::kFloat32Tolerance;
using testing::random_host;

// Labels 0..classes-1 of `dtype` for `rows` rows.
Tensor labels_of(int64_t rows, int64_t classes, DType dtype, uint64_t seed) {
  Tensor y = Tensor::empty({rows}, DType::kInt64);
  for (int64_t i = 0; i < rows; ++i) y.data<int64_t>()[i] = static_cast<int64_t>((i * 7 + seed) % classes);
  return y.to(dtype);
}

// One-hot float targets of `labels` (int64).
Tensor one_hot_host(const Tensor& labels, int64_t classes) {
  Tensor t = Tensor::zeros({labels.numel(), classes});
  for (int64_t i = 0; i < labels.numel(); ++i) t.data<float>()[i * classes + labels.data<int64_t>()[i]] = 1.0f;
  return t;
}

struct LossResult {
  Tensor value, grad;  // the reduced loss and its gradient by y_pred, both back on the host
};

// loss(y_true, y_pred) and d loss / d y_pred with y_pred (and y_true) on `device`.
LossResult run_loss(const std::function<Variable(const Variable&, const Variable&)>& loss, const Tensor& y_true,
                    const Tensor& y_pred, Device device) {
  const Variable pred(y_pred.to(device), /*trainable=*/true, "pred");
  GradientTape tape;
  tape.watch(pred);
  const Variable value = loss(Variable(y_true.to(device)), pred);
  const std::vector<Tensor> grads = tape.gradient(value, {pred});
  EXPECT_EQ(value.value().device(), device);
  EXPECT_EQ(grads[0].device(), device);
  return {value.value().to(Device::cpu()), grads[0].to(Device::cpu())};
}

void expect_loss_matches(const std::string& what, const std::function<Variable(const Variable&, const Variable&)>& loss,
                         const Tensor& y_true, const Tensor& y_pred) {
  SCOPED_TRACE(what);
  const LossResult cpu = run_loss(loss, y_true, y_pred, Device::cpu());
  const LossResult on_gpu = run_loss(loss, y_true, y_pred, gpu());
  expect_matches_cpu(on_gpu.value, cpu.value, kFloat32Tolerance, what + " value");
  expect_matches_cpu(on_gpu.grad, cpu.grad, kFloat32Tolerance, what + " gradient");
}

TEST(GpuTrainStepTest, SparseCrossentropyMatchesTheCpu) {
  STRATA_REQUIRE_GPU();
  const int64_t rows = 70, classes = 10;  // rows not a multiple of a block's 8 rows
  const Tensor logits = random_host({rows, classes}, 1, -4.0f, 4.0f);
  for (DType dtype : {DType::kInt64, DType::kInt32, DType::kUInt8, DType::kFloat32}) {
    const Tensor y = labels_of(rows, classes, dtype, 3);
    const losses::SparseCategoricalCrossentropy from_logits({.from_logits = true});
    expect_loss_matches(
        std::string("from logits, labels ") + dtype_name(dtype),
        [&](const Variable& t, const Variable& p) { return from_logits(t, p); }, y, logits);
  }
  // Probabilities (rows not normalised: the loss normalises them), and a row width over a warp's 32 lanes.
  const Tensor probs = random_host({rows, 45}, 2, 0.01f, 1.0f);
  const losses::SparseCategoricalCrossentropy from_probs;
  expect_loss_matches(
      "from probabilities", [&](const Variable& t, const Variable& p) { return from_probs(t, p); },
      labels_of(rows, 45, DType::kInt64, 5), probs);
  const losses::SparseCategoricalCrossentropy summed({.from_logits = true, .reduction = losses::Reduction::kSum});
  expect_loss_matches(
      "sum reduction", [&](const Variable& t, const Variable& p) { return summed(t, p); },
      labels_of(rows, classes, DType::kInt64, 7), logits);
}

TEST(GpuTrainStepTest, ALabelOutOfRangeIsAnInvalidArgumentNamingIt) {
  STRATA_REQUIRE_GPU();
  Tensor y = labels_of(16, 10, DType::kInt64, 0);
  y.data<int64_t>()[11] = 10;
  try {
    losses::sparse_categorical_crossentropy(y.to(gpu()), Variable(random_host({16, 10}, 3).to(gpu())), true);
    FAIL() << "label 10 of 10 classes must fail";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("label 10 at index 11 is outside [0, 10)"), std::string::npos) << e.what();
  }
}

TEST(GpuTrainStepTest, CategoricalAndMeanLossesMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  const int64_t rows = 33, classes = 10;
  const Tensor t = one_hot_host(labels_of(rows, classes, DType::kInt64, 1), classes);
  const Tensor logits = random_host({rows, classes}, 4, -3.0f, 3.0f);
  const losses::CategoricalCrossentropy cce_logits({.from_logits = true, .label_smoothing = 0.1f});
  expect_loss_matches(
      "categorical from logits", [&](const Variable& a, const Variable& b) { return cce_logits(a, b); }, t, logits);
  const losses::CategoricalCrossentropy cce_probs;
  expect_loss_matches(
      "categorical from probabilities", [&](const Variable& a, const Variable& b) { return cce_probs(a, b); }, t,
      random_host({rows, classes}, 5, 0.01f, 1.0f));
  const losses::MeanSquaredError mse;
  expect_loss_matches(
      "mean squared error", [&](const Variable& a, const Variable& b) { return mse(a, b); }, random_host({rows, 3}, 6),
      random_host({rows, 3}, 7));
  const losses::MeanAbsoluteError mae;
  expect_loss_matches(
      "mean absolute error", [&](const Variable& a, const Variable& b) { return mae(a, b); }, random_host({rows, 3}, 8),
      random_host({rows, 3}, 9));
  const losses::BinaryCrossentropy bce({.from_logits = true, .label_smoothing = 0.2f});
  expect_loss_matches(
      "binary crossentropy from logits", [&](const Variable& a, const Variable& b) { return bce(a, b); },
      random_host({rows, 2}, 10, 0.0f, 1.0f), random_host({rows, 2}, 11, -3.0f, 3.0f));
  // Sample weights per row, on the host while the losses are on the GPU (copied there).
  const Tensor w = random_host({rows}, 12, 0.0f, 2.0f);
  expect_loss_matches(
      "weighted", [&](const Variable& a, const Variable& b) { return mse(a, b, w); }, random_host({rows, 3}, 13),
      random_host({rows, 3}, 14));
}

// `steps` updates of `optimizer` on two variables from fixed values and gradients, on `device`; the variables
// after them, on the host.
std::vector<Tensor> run_optimizer(optim::Optimizer& optimizer, Device device, int steps) {
  std::vector<Variable> vars = {Variable(random_host({300, 70}, 20).to(device), true, "w"),
                                Variable(random_host({70}, 21).to(device), true, "b")};
  for (int s = 0; s < steps; ++s) {
    const std::vector<Tensor> grads = {random_host({300, 70}, 30 + s, -0.5f, 0.5f).to(device),
                                       random_host({70}, 40 + s, -0.5f, 0.5f).to(device)};
    optimizer.apply_gradients(grads, vars);
  }
  for (const std::string& slot : optimizer.slot_names()) EXPECT_EQ(optimizer.slot(vars[0], slot).device(), device);
  // The slots checkpoint from the host whatever their device.
  for (const auto& [name, t] : optimizer.state(vars)) EXPECT_TRUE(t.device().is_cpu()) << name;
  return {vars[0].value().to(Device::cpu()), vars[1].value().to(Device::cpu())};
}

TEST(GpuTrainStepTest, OptimizerUpdatesMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  const std::vector<std::pair<std::string, std::function<std::shared_ptr<optim::Optimizer>()>>> cases = {
      {"adam", [] { return std::make_shared<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01}); }},
      {"adam amsgrad clipvalue",
       [] {
         return std::make_shared<optim::Adam>(
             optim::AdamOptions{.learning_rate = 0.01, .amsgrad = true, .clipvalue = 0.3f});
       }},
      {"adamw global_clipnorm",
       [] {
         return std::make_shared<optim::AdamW>(optim::AdamWOptions{.learning_rate = 0.01, .global_clipnorm = 1.0f});
       }},
      {"sgd nesterov clipnorm",
       [] {
         return std::make_shared<optim::SGD>(
             optim::SGDOptions{.learning_rate = 0.1, .momentum = 0.9f, .nesterov = true, .clipnorm = 2.0f});
       }},
      {"sgd weight decay",
       [] { return std::make_shared<optim::SGD>(optim::SGDOptions{.learning_rate = 0.1, .weight_decay = 0.01f}); }},
      {"rmsprop centered momentum",
       [] {
         return std::make_shared<optim::RMSprop>(
             optim::RMSpropOptions{.learning_rate = 0.01, .momentum = 0.5f, .centered = true});
       }},
      {"adagrad", [] { return std::make_shared<optim::Adagrad>(optim::AdagradOptions{.learning_rate = 0.05}); }},
  };
  for (const auto& [what, make] : cases) {
    SCOPED_TRACE(what);
    const auto on_cpu = make();
    const auto on_gpu = make();
    const std::vector<Tensor> want = run_optimizer(*on_cpu, Device::cpu(), 3);
    const std::vector<Tensor> got = run_optimizer(*on_gpu, gpu(), 3);
    for (size_t i = 0; i < want.size(); ++i) expect_matches_cpu(got[i], want[i], 1e-5, what);
  }
}

// Records the running loss after every training batch.
class StepLosses final : public Callback {
 public:
  void on_train_batch_end(int64_t, const Logs& logs) override { losses.push_back(*logs.get("loss")); }
  std::vector<double> losses;
};

struct FitResult {
  std::vector<double> step_losses;
  History history;
  Logs evaluation;
  Tensor predictions;
  std::vector<Tensor> weights;  // on the host
};

FitResult fit_on(const std::string& device, int64_t steps_per_execution = 1) {
  distribute::OneDeviceStrategy strategy(device);
  Tensor x = random_host({72, 12}, 50);
  Tensor y = labels_of(72, 4, DType::kInt64, 3);
  const auto dataset = data::Dataset::from_tensor_slices({x, y}).batch(8);
  auto scope = strategy.scope();
  manual_seed(1234);  // the same initial weights on both devices (drawn on the host)
  Sequential model(std::vector<nn::LayerRef>{nn::Dense(16, "relu"), nn::Dense(4)});
  model.build_for({1, 12});
  model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                optim::Adam(optim::AdamOptions{.learning_rate = 0.01}), {"accuracy"});
  for (const Variable& v : model.variables()) EXPECT_EQ(v.value().device(), strategy.replica_device(0)) << v.name();
  auto steps = std::make_shared<StepLosses>();
  FitResult r;
  r.history =
      model.fit(dataset, {.epochs = 3, .callbacks = {steps}, .verbose = 0, .steps_per_execution = steps_per_execution});
  r.step_losses = steps->losses;
  r.evaluation = model.evaluate(dataset);
  r.predictions = model.predict(dataset);
  for (const Variable& v : model.variables()) r.weights.push_back(v.value().to(Device::cpu()));
  return r;
}

TEST(GpuTrainStepTest, FitOnTheGpuFollowsTheCpu) {
  STRATA_REQUIRE_GPU();
  const FitResult cpu = fit_on("/cpu:0");
  const FitResult on_gpu = fit_on("/gpu:0");
  ASSERT_EQ(on_gpu.step_losses.size(), cpu.step_losses.size());
  for (size_t i = 0; i < cpu.step_losses.size(); ++i)
    EXPECT_NEAR(on_gpu.step_losses[i], cpu.step_losses[i], 1e-4) << "step " << i;
  EXPECT_LT(cpu.history.history.at("loss").back(), cpu.history.history.at("loss").front());  // it learned
  for (const char* key : {"loss", "accuracy"}) {
    EXPECT_NEAR(*on_gpu.evaluation.get(key), *cpu.evaluation.get(key), 1e-4) << key;
  }
  EXPECT_TRUE(on_gpu.predictions.device().is_cpu());
  expect_matches_cpu(on_gpu.predictions, cpu.predictions, 1e-4, "predictions");
  ASSERT_EQ(on_gpu.weights.size(), cpu.weights.size());
  for (size_t i = 0; i < cpu.weights.size(); ++i)
    expect_matches_cpu(on_gpu.weights[i], cpu.weights[i], 1e-4, "weights");
}

// With several steps per execution the GPU replica stages each next batch through a pinned block while the step
// before it runs (distribute/device_prefetch.h); the steps, the accuracy reduced on the device and the weights
// follow the CPU's all the same.
TEST(GpuTrainStepTest, FitWithBatchesStagedAheadFollowsTheCpu) {
  STRATA_REQUIRE_GPU();
  const FitResult cpu = fit_on("/cpu:0", 4);
  const FitResult on_gpu = fit_on("/gpu:0", 4);
  for (const char* key : {"loss", "accuracy"}) {
    const std::vector<double>& want = cpu.history.history.at(key);
    const std::vector<double>& got = on_gpu.history.history.at(key);
    ASSERT_EQ(got.size(), want.size()) << key;
    for (size_t e = 0; e < want.size(); ++e) EXPECT_NEAR(got[e], want[e], 1e-4) << key << ", epoch " << e;
  }
  for (size_t i = 0; i < cpu.weights.size(); ++i)
    expect_matches_cpu(on_gpu.weights[i], cpu.weights[i], 1e-4, "weights");
}

// Puts the policy back to float32 (and the CPU's bf16 answer to oneDNN's) on every way out of a test.
struct PolicyReset {
  ~PolicyReset() {
    nn::detail::reset_cpu_bf16_for_testing();
    nn::set_global_policy("float32");
  }
};

// The per-step losses of fitting a small Conv2D + Dense model on the GPU under `policy`, from the same initial
// weights each time; the variables must stay float32 on the GPU.
std::vector<double> gpu_step_losses(const std::string& policy) {
  nn::set_global_policy(policy);
  distribute::OneDeviceStrategy strategy("/gpu:0");
  const Tensor x = random_host({48, 8, 8, 3}, 70);
  const auto dataset = data::Dataset::from_tensor_slices({x, labels_of(48, 4, DType::kInt64, 5)}).batch(8);
  auto scope = strategy.scope();
  manual_seed(4321);
  Sequential model(std::vector<nn::LayerRef>{nn::Conv2D(8, 3, {.padding = "same", .activation = "relu"}),
                                             nn::Conv2D(8, 3, {.strides = 2}), nn::Flatten(), nn::Dense(16, "relu"),
                                             nn::Dense(4)});
  model.build_for({1, 8, 8, 3});
  model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                optim::Adam(optim::AdamOptions{.learning_rate = 0.01}));
  auto steps = std::make_shared<StepLosses>();
  model.fit(dataset, {.epochs = 3, .callbacks = {steps}, .verbose = 0});
  for (const Variable& v : model.variables()) {
    EXPECT_EQ(v.value().dtype(), DType::kFloat32) << v.name();
    EXPECT_EQ(v.value().device(), gpu()) << v.name();
  }
  return steps->losses;
}

TEST(GpuTrainStepTest, MixedBfloat16TrainsLikeFloat32OnTheGpuWithoutTheCpusWarning) {
  STRATA_REQUIRE_GPU();
  const PolicyReset reset;
  const std::vector<double> f32 = gpu_step_losses("float32");
  // A CPU without bf16 instructions does not matter to a model on the GPU: no warning, and bf16 computes there.
  nn::detail::set_cpu_bf16_for_testing(false);
  ::testing::internal::CaptureStderr();
  const std::vector<double> bf16 = gpu_step_losses("mixed_bfloat16");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("strata: warning"), std::string::npos) << err;
  ASSERT_EQ(bf16.size(), f32.size());
  ASSERT_FALSE(f32.empty());
  EXPECT_LT(f32.back(), f32.front());  // it learned
  double largest = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_NEAR(bf16[i], f32[i], 0.05 * f32.front()) << "step " << i;  // as the CPU's mixed precision test
    largest = std::max(largest, std::fabs(bf16[i] - f32[i]));
  }
  EXPECT_GT(largest, 1e-7) << "bf16 trained bit for bit as float32: it did not compute in bf16";
}

TEST(GpuTrainStepTest, ADistributedIteratorHandsTheGpuReplicaItsBatchThere) {
  STRATA_REQUIRE_GPU();
  distribute::OneDeviceStrategy strategy("/gpu:0");
  EXPECT_EQ(strategy.replica_device(0), gpu());
  const Tensor x = random_host({10, 3}, 60);
  const auto dataset = data::Dataset::from_tensor_slices({x, labels_of(10, 2, DType::kInt64, 1)}).batch(4);
  auto it = strategy.experimental_distribute_dataset(dataset).make_iterator();
  const auto batch = it.next();
  ASSERT_TRUE(batch.has_value());
  const data::Element& mine = (*batch)[0];
  EXPECT_EQ(mine[0].device(), gpu());
  EXPECT_EQ(mine[1].device(), gpu());
  EXPECT_EQ(mine[0].to(Device::cpu()).to_vector<float>(), x.slice(0, 4).to_vector<float>());
}

}  // namespace
}  // namespace strata
