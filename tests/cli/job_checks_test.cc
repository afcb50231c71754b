// Job-file checks (src/cli/job.cc): every number the job reads is finite and in range, no mapping repeats
// a key, and an unknown name (loss, metric, activation, optimizer, padding, initializer) is reported with
// the job's file, line and key. load_job needs no data: it checks and builds the model, nothing more.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cli/job.h"
#include "strata/error.h"
#include "strata/nn/core_layers.h"
#include "strata/optim/optimizers.h"
#include "test_util.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

// Line numbers matter: the messages name them.
const char* const kJob =
    "data:\n"                                                              // 1
    "  format: idx\n"                                                      // 2
    "  directory: /nonexistent\n"                                          // 3
    "  shuffle: 512\n"                                                     // 4
    "model:\n"                                                             // 5
    "  - flatten\n"                                                        // 6
    "  - dense: {units: 10}\n"                                             // 7
    "loss: {name: sparse_categorical_crossentropy, from_logits: true}\n"   // 8
    "optimizer: {name: adam, learning_rate: 0.01}\n"                       // 9
    "metrics: [accuracy]\n"                                                // 10
    "epochs: 2\n"                                                          // 11
    "batch_size: 32\n";                                                    // 12

class JobChecksTest : public ::testing::Test {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("strata_job_checks_" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }

  // kJob with `from` (a literal substring) replaced by `to`, written to job.yaml.
  std::string job(const std::string& from = "", const std::string& to = "") {
    std::string text = kJob;
    if (!from.empty()) {
      const auto pos = text.find(from);
      EXPECT_NE(pos, std::string::npos) << from;
      if (pos != std::string::npos) text.replace(pos, from.size(), to);
    }
    const fs::path path = dir_ / "job.yaml";
    std::ofstream(path) << text;
    return path.string();
  }
  // The InvalidArgument load_job raises for the edited job; it must contain `want`.
  void expect_error(const std::string& from, const std::string& to, const std::string& want) {
    const std::string path = job(from, to);
    const std::string msg = test::message_of<InvalidArgument>([&] { load_job(path); });
    EXPECT_NE(msg.find(want), std::string::npos) << "editing '" << from << "' to '" << to << "'\nwanted: " << want
                                                 << "\ngot:    " << msg;
  }
};

TEST_F(JobChecksTest, ABadLearningRateIsAnErrorNotTheDefault) {
  const std::string adam = "optimizer: {name: adam, learning_rate: 0.01}";
  const std::string at = "job.yaml:9: optimizer.learning_rate: must be a finite number > 0, got ";
  expect_error(adam, "optimizer: {name: adam, learning_rate: -1}", at + "-1");
  expect_error(adam, "optimizer: {name: adam, learning_rate: 0.0}", at + "0.0");
  expect_error(adam, "optimizer: {name: adam, learning_rate: .nan}", at + ".nan");
  expect_error(adam, "optimizer: {name: adam, learning_rate: .inf}", at + ".inf");
  expect_error(adam, "optimizer: {name: adam, learning_rate: 1e39}", at + "1e39");  // inf as a float

  // A good rate is used; an absent one is the optimizer's default.
  EXPECT_FLOAT_EQ(make_optimizer(load_job(job(adam, "optimizer: {name: sgd, learning_rate: 0.25}")))->learning_rate(),
                  0.25f);
  EXPECT_FLOAT_EQ(make_optimizer(load_job(job(adam, "optimizer: {name: adam}")))->learning_rate(), 0.001f);
}

// Found by fuzz/job_fuzzer: a job without `optimizer` (or `loss`, or `model`) aborted on yaml-cpp's InvalidNode
// (an absent key assigned to the Job) instead of saying which key is missing.
TEST_F(JobChecksTest, AMissingModelLossOrOptimizerIsNamed) {
  expect_error("optimizer: {name: adam, learning_rate: 0.01}\n", "", "job.yaml: the job needs an 'optimizer'");
  expect_error("optimizer: {name: adam, learning_rate: 0.01}\n", "optimzier: {name: adam}\n", "needs an 'optimizer'");
  expect_error("loss: {name: sparse_categorical_crossentropy, from_logits: true}\n", "",
               "job.yaml: the job needs a 'loss'");
  expect_error("model:\n  - flatten\n  - dense: {units: 10}\n", "", "'model' must be a non-empty list of layers");
}

// Found by fuzz/job_fuzzer: a key that is not a name ("? [a, b]" in YAML) aborted on yaml-cpp's TypedBadConversion when
// the unknown-key check or the layer list read it as a string.
TEST_F(JobChecksTest, AKeyThatIsNotANameIsAnUnknownKey) {
  expect_error("batch_size: 32\n", "batch_size: 32\n? [a, b]\n: 1\n", "job.yaml:13: unknown key '[a, b]'");
  expect_error("  - dense: {units: 10}\n", "  - {? [dense]: {units: 10}}\n", "job.yaml:7: model[1]");
}

TEST_F(JobChecksTest, EveryOptimizerNumberIsCheckedWithItsRange) {
  const std::string adam = "optimizer: {name: adam, learning_rate: 0.01}";
  const std::string at = "job.yaml:9: optimizer.";
  expect_error(adam, "optimizer: {name: sgd, momentum: 1}", at + "momentum: must be a finite number in [0, 1), got 1");
  expect_error(adam, "optimizer: {name: sgd, momentum: -0.5}", at + "momentum: must be a finite number in [0, 1)");
  expect_error(adam, "optimizer: {name: adam, beta_1: -0.1}", at + "beta_1: must be a finite number in [0, 1), got -0.1");
  expect_error(adam, "optimizer: {name: adam, beta_2: 1.0}", at + "beta_2: must be a finite number in [0, 1), got 1.0");
  expect_error(adam, "optimizer: {name: adam, epsilon: 0}", at + "epsilon: must be a finite number > 0, got 0");
  expect_error(adam, "optimizer: {name: adamw, weight_decay: -0.1}",
               at + "weight_decay: must be a finite number >= 0, got -0.1");
  expect_error(adam, "optimizer: {name: rmsprop, rho: 1}", at + "rho: must be a finite number in [0, 1), got 1");
  expect_error(adam, "optimizer: {name: rmsprop, momentum: .nan}", at + "momentum: must be a finite number in [0, 1)");
  expect_error(adam, "optimizer: {name: adagrad, initial_accumulator_value: -1}",
               at + "initial_accumulator_value: must be a finite number >= 0, got -1");
  expect_error(adam, "optimizer: {name: sgd, clipnorm: 0}", at + "clipnorm: must be a finite number > 0, got 0");
  expect_error(adam, "optimizer: {name: sgd, clipvalue: -1}", at + "clipvalue: must be a finite number > 0, got -1");
  expect_error(adam, "optimizer: {name: sgd, global_clipnorm: .inf}",
               at + "global_clipnorm: must be a finite number > 0, got .inf");
  expect_error(adam, "optimizer: {name: sgd, momentum: fast}", at + "momentum: expected a number, got 'fast'");
  // In range: accepted.
  EXPECT_NO_THROW(load_job(job(adam, "optimizer: {name: sgd, momentum: 0.9, clipnorm: 1, nesterov: true}")));
  EXPECT_NO_THROW(load_job(job(adam, "optimizer: {name: adamw, beta_1: 0, weight_decay: 0}")));
}

TEST_F(JobChecksTest, ACosineScheduleWarmsUpThenDecaysOverTheJobsEpochs) {
  const std::string adam = "optimizer: {name: adam, learning_rate: 0.01}";
  const Job job_ = load_job(
      job(adam, "optimizer: {name: adam, learning_rate: 0.01, schedule: {name: cosine_decay, warmup_epochs: 0.5, "
                "alpha: 0.1}}"));
  EXPECT_EQ(job_.schedule.name, "cosine_decay");
  // 2 epochs of 10 steps: 5 warmup steps from 0, then a cosine from 0.01 to 0.001 over the other 15.
  const optim::LearningRate lr = scheduled_learning_rate(job_, 0.01f, 10);
  EXPECT_FLOAT_EQ(lr(0), 0.0f);
  EXPECT_FLOAT_EQ(lr(2), 0.004f);
  EXPECT_FLOAT_EQ(lr(5), 0.01f);
  EXPECT_NEAR(lr(5 + 15 / 2.0), 0.01f * (0.9f * 0.5f * (1 + std::cos(3.14159265f * 7 / 15)) + 0.1f), 1e-6);
  EXPECT_FLOAT_EQ(lr(20), 0.001f);
  EXPECT_FLOAT_EQ(lr(100), 0.001f);
  // compile_model puts it on the optimizer when it knows the steps; without them the peak stays constant.
  auto model = build_model(job_);
  compile_model(job_, *model, 10);
  EXPECT_FLOAT_EQ(model->optimizer().learning_rate(), 0.0f);
  compile_model(job_, *model, 0);
  EXPECT_FLOAT_EQ(model->optimizer().learning_rate(), 0.01f);

  const std::string at = "job.yaml:9: optimizer.schedule";
  expect_error(adam, "optimizer: {name: adam, schedule: {name: cosine}}",
               at + ".name: unknown schedule 'cosine'; known: cosine_decay");
  expect_error(adam, "optimizer: {name: adam, schedule: {warmup_epochs: 1}}", at + ".name is required");
  expect_error(adam, "optimizer: {name: adam, schedule: {name: cosine_decay, warmup_epochs: 2}}",
               at + ".warmup_epochs: 2 leaves nothing of the job's 2 epochs to decay over");
  expect_error(adam, "optimizer: {name: adam, schedule: {name: cosine_decay, alpha: 1.5}}",
               at + ".alpha: must be a finite number in [0, 1], got 1.5");
  expect_error(adam, "optimizer: {name: adam, schedule: {name: cosine_decay, decay_steps: 100}}", "decay_steps");
  expect_error(adam, "optimizer: {name: adam, schedule: [cosine_decay]}", at + ": expected a mapping of keys");
}

TEST_F(JobChecksTest, DenseAndConvolutionsTakeKerasBiasKeys) {
  const Job dense = load_job(job("{units: 10}", "{units: 10, bias_initializer: ones, bias_regularizer: l2}"));
  const auto model = build_model(dense);
  const auto* layer = dynamic_cast<const nn::Dense*>(model->layers().back().get());
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(layer->options().bias_initializer.name(), "ones");
  EXPECT_EQ(layer->options().bias_regularizer.name(), "l2");
  expect_error("{units: 10}", "{units: 10, bias_initializer: sometimes}", "bias_initializer");
}

TEST_F(JobChecksTest, LayerDataAndTopLevelNumbersAreChecked) {
  expect_error("  - flatten\n", "  - dropout: {rate: 1}\n",
               "job.yaml:6: model[0].dropout.rate: must be a finite number in [0, 1), got 1");
  expect_error("  - flatten\n", "  - dropout: {rate: 0.5, seed: -3}\n",
               "job.yaml:6: model[0].dropout.seed: must be an integer >= 0, got -3");
  expect_error("  - flatten\n", "  - batch_normalization: {momentum: 1.5}\n",
               "job.yaml:6: model[0].batch_normalization.momentum: must be a finite number in [0, 1], got 1.5");
  expect_error("  - flatten\n", "  - batch_normalization: {epsilon: 0}\n",
               "model[0].batch_normalization.epsilon: must be a finite number > 0, got 0");
  expect_error("  - flatten\n", "  - conv2d: {filters: 4, kernel_size: 0}\n",
               "job.yaml:6: model[0].conv2d.kernel_size: must be positive, got 0");
  expect_error("  - flatten\n", "  - max_pooling2d: {pool_size: [2, -2]}\n",
               "model[0].max_pooling2d.pool_size: must be positive, got -2");
  expect_error("  shuffle: 512\n", "  shuffle: -1\n", "job.yaml:4: data.shuffle: must be an integer >= 0, got -1");
  expect_error("  shuffle: 512\n", "  shuffle: 512\n  scale: 0\n",
               "job.yaml:5: data.scale: must be a finite number > 0, got 0");
  expect_error("  shuffle: 512\n", "  shuffle: 512\n  scale: .nan\n", "data.scale: must be a finite number > 0, got .nan");
  expect_error("  shuffle: 512\n", "  shuffle: 512\n  seed: -1\n", "job.yaml:5: data.seed: must be an integer >= 0, got -1");
  expect_error("batch_size: 32\n", "batch_size: 32\nseed: -7\n", "job.yaml:13: seed: must be an integer >= 0, got -7");
  expect_error("batch_size: 32\n", "batch_size: 32\nlr_scaling: linear\nwarmup_epochs: .inf\n",
               "job.yaml:14: warmup_epochs: must be a finite number >= 0, got .inf");
  expect_error("batch_size: 32\n", "batch_size: 32\nlr_scaling: linear\nwarmup_epochs: -1\n",
               "warmup_epochs: must be a finite number >= 0, got -1");
  expect_error("  format: idx\n  directory: /nonexistent\n",
               "  format: tfrecord\n  train: [a]\n  test: [b]\n  image_shape: [28, 0, 1]\n",
               "job.yaml:5: data.image_shape: dimensions must be positive, got 0");

  // shuffle: 0 (no shuffling) and in-range values load.
  const Job ok = load_job(job("  shuffle: 512\n", "  shuffle: 0\n  scale: 0.5\n  seed: 3\n"));
  EXPECT_EQ(ok.data.shuffle, 0);
  EXPECT_EQ(ok.data.scale, 0.5);
  EXPECT_EQ(ok.data.seed, 3u);
}

TEST_F(JobChecksTest, ARepeatedKeyInAnyMappingIsAnError) {
  expect_error("epochs: 2\n", "epochs: 2\nepochs: 5\n", "job.yaml:12: epochs: repeated key (first on line 11)");
  expect_error("learning_rate: 0.01}", "learning_rate: 0.01, learning_rate: 1}",
               "job.yaml:9: optimizer.learning_rate: repeated key (first on line 9)");
  expect_error("  shuffle: 512\n", "  shuffle: 512\n  shuffle: 0\n", "job.yaml:5: data.shuffle: repeated key (first on line 4)");
  expect_error("{units: 10}", "{units: 10, units: 3}", "job.yaml:7: model[1].dense.units: repeated key (first on line 7)");
  EXPECT_NO_THROW(load_job(job()));
}

TEST_F(JobChecksTest, UnknownNamesGiveTheFileLineAndKey) {
  expect_error("{units: 10}", "{units: 10, activation: relux}",
               "job.yaml:7: model[1].dense.activation: unknown activation 'relux'");
  expect_error("{units: 10}", "{units: 10, kernel_initializer: glorot}", "job.yaml:7: model[1].dense.kernel_initializer: ");
  expect_error("  - flatten\n", "  - conv2d: {filters: 4, kernel_size: 3, padding: full}\n",
               "job.yaml:6: model[0].conv2d.padding: unknown padding 'full'");
  expect_error("  - flatten\n", "  - activation: {activation: foo}\n",
               "job.yaml:6: model[0].activation.activation: unknown activation 'foo'");
  expect_error("name: sparse_categorical_crossentropy", "name: sparse_cat", "job.yaml:8: loss.name: ");
  expect_error("name: sparse_categorical_crossentropy", "name: sparse_cat", "unknown loss 'sparse_cat'");
  expect_error("loss: {name: sparse_categorical_crossentropy, from_logits: true}", "loss: msee",
               "job.yaml:8: loss: ");
  expect_error("metrics: [accuracy]", "metrics: [accuracy, acuracy]", "job.yaml:10: metrics[1]: ");
  expect_error("metrics: [accuracy]", "metrics: [acuracy]", "unknown metric 'acuracy'");
  expect_error("optimizer: {name: adam, learning_rate: 0.01}", "optimizer: adamm", "job.yaml:9: optimizer: ");
}

}  // namespace
}  // namespace strata::cli
