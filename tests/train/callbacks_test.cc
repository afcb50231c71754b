// The Keras callbacks: progress bar forms, early stopping, checkpoints, learning-rate schedule and plateau, NaN stop.
// The monitoring callbacks are also driven epoch by epoch with scripted logs, to pin Keras 3's exact rules.
#include "strata/train/callbacks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/random.h"
#include "strata/train/model.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

data::Dataset regression_data(int64_t n, float nan_at = -1) {
  Tensor x = test::random_tensor({n, 3}, 11);
  Tensor y = test::random_tensor({n, 1}, 12);
  if (nan_at >= 0) x.data<float>()[static_cast<int64_t>(nan_at)] = std::numeric_limits<float>::quiet_NaN();
  return data::Dataset::from_tensor_slices({x, y}).batch(8);
}

std::shared_ptr<Sequential> regressor(float lr) {
  manual_seed(5);
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(1)});
  model->compile(losses::MeanSquaredError(), optim::SGD(optim::SGDOptions{.learning_rate = lr}));
  return model;
}

std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  return out;
}

TEST(CallbacksTest, ProgressBarLineAndTerminalForms) {
  auto model = regressor(0.01f);
  std::FILE* lines = std::tmpfile();
  auto bar = std::make_shared<callbacks::ProgressBar>(callbacks::ProgressBar::Options{.out = lines, .terminal = false});
  bar->set_steps(4);
  bar->set_epochs(2);
  model->fit(regression_data(32), {.epochs = 2, .callbacks = {bar}, .verbose = 0});
  const std::string text = read_all(lines);
  EXPECT_NE(text.find("Epoch 1/2\n4/4 - "), std::string::npos) << text;
  EXPECT_NE(text.find("Epoch 2/2\n4/4 - "), std::string::npos) << text;
  EXPECT_NE(text.find("- loss: "), std::string::npos) << text;
  EXPECT_NE(text.find("input wait "), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos) << "no redraws when not a terminal";
  std::fclose(lines);

  std::FILE* term = std::tmpfile();
  auto live = std::make_shared<callbacks::ProgressBar>(callbacks::ProgressBar::Options{.out = term, .terminal = true});
  live->set_steps(4);
  model->fit(regression_data(32), {.epochs = 1, .callbacks = {live}, .verbose = 0});
  const std::string drawn = read_all(term);
  EXPECT_NE(drawn.find("\r1/4 [======>"), std::string::npos) << drawn;  // the first step is drawn at once
  EXPECT_NE(drawn.find("ETA"), std::string::npos) << drawn;
  EXPECT_NE(drawn.find("4/4 [==============================]"), std::string::npos) << drawn;
  std::fclose(term);
}

TEST(CallbacksTest, EarlyStoppingStopsAfterPatienceAndRestoresTheBest) {
  auto model = regressor(0.0f);  // learning rate 0: the loss never improves after the first epoch
  auto stop = std::make_shared<callbacks::EarlyStopping>(
      callbacks::EarlyStopping::Options{.monitor = "loss", .min_delta = 1e-3, .patience = 2, .restore_best_weights = true});
  History h = model->fit(regression_data(32), {.epochs = 10, .callbacks = {stop}, .verbose = 0});
  EXPECT_EQ(h.epochs.size(), 3u);
  EXPECT_EQ(stop->stopped_epoch(), 2);

  // A learning rate that makes SGD diverge: the best epoch is the first, and its weights come back.
  struct Snapshot : Callback {
    std::vector<float> first_epoch;
    void on_epoch_end(int64_t epoch, const Logs&) override {
      if (epoch == 0) first_epoch = model()->variables()[0].value().to_vector<float>();
    }
  };
  auto diverging = regressor(3.0f);
  auto snapshot = std::make_shared<Snapshot>();
  auto restore = std::make_shared<callbacks::EarlyStopping>(
      callbacks::EarlyStopping::Options{.monitor = "loss", .patience = 1, .restore_best_weights = true});
  History d = diverging->fit(regression_data(32), {.epochs = 10, .callbacks = {snapshot, restore}, .verbose = 0});
  ASSERT_GT(d.history.at("loss")[1], d.history.at("loss")[0]);
  EXPECT_EQ(restore->stopped_epoch(), 1);
  EXPECT_EQ(diverging->variables()[0].value().to_vector<float>(), snapshot->first_epoch);
}

TEST(CallbacksTest, ModelCheckpointSavesOnlyImprovementsUnderFormattedNames) {
  fs::path dir = fs::temp_directory_path() / ("strata_callbacks_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto model = regressor(0.05f);
  auto ckpt = std::make_shared<callbacks::ModelCheckpoint>(
      (dir / "w-{epoch:02d}-{loss:.3f}.safetensors").string(),
      callbacks::ModelCheckpoint::Options{.monitor = "loss", .save_best_only = true});
  History h = model->fit(regression_data(32), {.epochs = 3, .callbacks = {ckpt}, .verbose = 0});
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(entry.path().filename().string().rfind("w-0", 0), 0u) << entry.path();
  }
  EXPECT_GE(files, 1);
  ASSERT_TRUE(ckpt->best().has_value());
  EXPECT_NEAR(*ckpt->best(), *std::min_element(h.history.at("loss").begin(), h.history.at("loss").end()), 1e-12);
  char first[64];
  std::snprintf(first, sizeof first, "w-01-%.3f.safetensors", h.history.at("loss")[0]);
  EXPECT_TRUE(fs::exists(dir / first)) << first;
  fs::remove_all(dir);
}

// Drives `cb` through on_train_begin and one on_epoch_end per value of `monitor`; returns the epochs run (an epoch
// that set stop_training is the last).
int64_t drive(Callback& cb, Model& model, const std::string& monitor, const std::vector<double>& values) {
  cb.set_model(&model);
  model.stop_training = false;
  cb.on_train_begin(Logs());
  int64_t epochs = 0;
  for (size_t e = 0; e < values.size() && !model.stop_training; ++e, ++epochs) {
    Logs logs;
    logs.set(monitor, values[e]);
    cb.on_epoch_end(static_cast<int64_t>(e), logs);
  }
  cb.on_train_end(Logs());
  return epochs;
}

std::shared_ptr<Sequential> classifier() {
  manual_seed(5);
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(3)});
  model->compile(optim::SGD(optim::SGDOptions{.learning_rate = 1.0f}),
                 losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  model->build_for({1, 2});
  return model;
}

TEST(CallbacksTest, EarlyStoppingCountsPatienceMinDeltaAndBaselineAsKeras3) {
  auto model = classifier();
  using Options = callbacks::EarlyStopping::Options;
  {  // two epochs without improvement after the best (epoch 1): stops at epoch 3
    callbacks::EarlyStopping stop(Options{.monitor = "val_loss", .patience = 2});
    EXPECT_EQ(drive(stop, *model, "val_loss", {1.0, 0.9, 0.95, 0.96, 0.97}), 4);
    EXPECT_EQ(stop.stopped_epoch(), 3);
    EXPECT_EQ(stop.best_epoch(), 1);
  }
  {  // 0.85 is not better than 1.0 by more than min_delta 0.2
    callbacks::EarlyStopping stop(Options{.monitor = "val_loss", .min_delta = 0.2, .patience = 1});
    EXPECT_EQ(drive(stop, *model, "val_loss", {1.0, 0.85, 0.7}), 2);
    EXPECT_EQ(stop.stopped_epoch(), 1);
  }
  {  // improvements that never beat the baseline do not reset the wait: stops at the first epoch that does not improve
    callbacks::EarlyStopping stop(Options{.monitor = "val_loss", .patience = 2, .baseline = 0.5});
    EXPECT_EQ(drive(stop, *model, "val_loss", {1.0, 0.9, 0.95, 0.8}), 3);
    EXPECT_EQ(stop.stopped_epoch(), 2);
    callbacks::EarlyStopping without(Options{.monitor = "val_loss", .patience = 2});
    EXPECT_EQ(drive(without, *model, "val_loss", {1.0, 0.9, 0.95, 0.8}), 4) << "the baseline made the difference";
  }
  {  // mode auto: accuracy goes up (the compiled metric's direction), so 0.6 is the best and 0.55 the first miss
    callbacks::EarlyStopping stop(Options{.monitor = "val_accuracy", .patience = 1});
    EXPECT_EQ(drive(stop, *model, "val_accuracy", {0.5, 0.6, 0.55, 0.7}), 3);
    EXPECT_EQ(stop.best_epoch(), 1);
    callbacks::EarlyStopping forced_min(Options{.monitor = "val_accuracy", .patience = 1, .mode = callbacks::Mode::kMin});
    EXPECT_EQ(drive(forced_min, *model, "val_accuracy", {0.5, 0.6, 0.55, 0.7}), 2);
  }
  {  // a name auto cannot place is refused when training begins
    callbacks::EarlyStopping stop(Options{.monitor = "val_throughput"});
    stop.set_model(model.get());
    try {
      stop.on_train_begin(Logs());
      FAIL() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("val_throughput"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("mode min or max"), std::string::npos) << e.what();
    }
  }
}

TEST(CallbacksTest, EarlyStoppingRestoresTheBestWeightsEvenWithoutStopping) {
  auto model = classifier();
  callbacks::EarlyStopping stop({.monitor = "loss", .patience = 5, .restore_best_weights = true});
  stop.set_model(model.get());
  stop.on_train_begin(Logs());
  Variable kernel = model->variables()[0];
  std::vector<std::vector<float>> at_epoch;
  const std::vector<double> losses = {1.0, 0.5, 0.7};
  for (int64_t e = 0; e < 3; ++e) {
    kernel.assign(Tensor::full(kernel.shape(), static_cast<float>(e + 1)));
    at_epoch.push_back(kernel.value().to_vector<float>());
    Logs logs;
    logs.set("loss", losses[static_cast<size_t>(e)]);
    stop.on_epoch_end(e, logs);
  }
  stop.on_train_end(Logs());
  EXPECT_EQ(stop.stopped_epoch(), -1);
  EXPECT_EQ(model->variables()[0].value().to_vector<float>(), at_epoch[1]);
}

TEST(CallbacksTest, ReduceLROnPlateauWaitsCoolsDownAndStopsAtMinLr) {
  auto model = classifier();  // SGD at rate 1
  callbacks::ReduceLROnPlateau plateau(
      {.monitor = "val_loss", .factor = 0.5, .patience = 1, .min_delta = 0.1, .cooldown = 2, .min_lr = 0.3});
  plateau.set_model(model.get());
  plateau.on_train_begin(Logs());
  std::vector<double> rates;
  for (int64_t e = 0; e < 6; ++e) {
    Logs logs;
    logs.set("val_loss", e == 0 ? 1.0 : 0.95);  // 0.95 is not better than 1.0 by more than 0.1
    plateau.on_epoch_end(e, logs);
    rates.push_back(model->optimizer().learning_rate());
  }
  // epoch 1: halved; epochs 2 and 3 cool down (Keras counts the cooldown down at an epoch's start, so the second
  // of them already counts towards the patience); epoch 3: halved to 0.25, raised to min_lr; then no lower.
  const std::vector<double> expected = {1.0, 0.5, 0.5, 0.3, 0.3, 0.3};
  ASSERT_EQ(rates.size(), expected.size());
  for (size_t i = 0; i < rates.size(); ++i) EXPECT_NEAR(rates[i], expected[i], 1e-7) << "epoch " << i;
  EXPECT_EQ(plateau.reductions(), 2);

  // "acc" in the name: it goes up (Keras's rule for this callback), so rising accuracy never lowers the rate.
  auto rising = classifier();
  callbacks::ReduceLROnPlateau on_accuracy({.monitor = "val_accuracy", .patience = 1});
  EXPECT_EQ(drive(on_accuracy, *rising, "val_accuracy", {0.1, 0.2, 0.3, 0.4}), 4);
  EXPECT_EQ(on_accuracy.reductions(), 0);
  EXPECT_THROW(callbacks::ReduceLROnPlateau({.factor = 1.0}), InvalidArgument);
}

TEST(CallbacksTest, OutputPathsAreCheckedWhenTrainingBegins) {
  const fs::path dir = fs::temp_directory_path() / ("strata_ckpt_dir_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "a_file") << "x";
  auto model = regressor(0.05f);
  auto blocked = std::make_shared<callbacks::ModelCheckpoint>((dir / "a_file" / "ckpt_{epoch}.safetensors").string());
  EXPECT_THROW(model->fit(regression_data(32), {.epochs = 1, .callbacks = {blocked}, .verbose = 0}), IoError);
  EXPECT_EQ(model->step(), 0) << "refused before the first step";
  auto csv = std::make_shared<callbacks::CSVLogger>((dir / "a_file" / "log.csv").string());
  EXPECT_THROW(model->fit(regression_data(32), {.epochs = 1, .callbacks = {csv}, .verbose = 0}), IoError);
  auto board = std::make_shared<callbacks::TensorBoard>((dir / "a_file" / "tb").string());
  EXPECT_THROW(model->fit(regression_data(32), {.epochs = 1, .callbacks = {board}, .verbose = 0}), Error);
  EXPECT_EQ(model->step(), 0) << "each refused before the first step";

  auto nested = std::make_shared<callbacks::ModelCheckpoint>((dir / "new" / "sub" / "w.safetensors").string());
  nested->set_model(model.get());
  nested->on_train_begin(Logs());
  EXPECT_TRUE(fs::is_directory(dir / "new" / "sub")) << "made when training begins, as Keras makes it on save";
  fs::remove_all(dir);
}

TEST(CallbacksTest, LearningRateSchedulerSetsTheRateEachEpoch) {
  auto model = regressor(0.1f);
  std::vector<double> seen;
  auto schedule = std::make_shared<callbacks::LearningRateScheduler>([&](int64_t epoch, double lr) {
    seen.push_back(lr);
    return 0.1 / static_cast<double>(epoch + 1);
  });
  model->fit(regression_data(16), {.epochs = 3, .callbacks = {schedule}, .verbose = 0});
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_NEAR(seen[1], 0.1, 1e-7);
  EXPECT_NEAR(seen[2], 0.05, 1e-7);
  EXPECT_NEAR(model->optimizer().learning_rate(), 0.1 / 3, 1e-7);
}

TEST(CallbacksTest, TerminateOnNaNStopsAtTheFirstBadBatch) {
  auto model = regressor(0.01f);
  History h = model->fit(regression_data(32, /*nan_at=*/0),
                         {.epochs = 5, .callbacks = {std::make_shared<callbacks::TerminateOnNaN>()}, .verbose = 0});
  EXPECT_EQ(h.epochs.size(), 1u);
  EXPECT_EQ(model->step(), 1);
}

TEST(CallbacksTest, TerminateOnNaNRecordsTheEpochAndBatchItStoppedAt) {
  // x[16][0] is NaN: sample 16 is in batch 2 (batches of 8), so the epoch's running loss turns NaN there.
  auto model = regressor(0.01f);
  auto nan = std::make_shared<callbacks::TerminateOnNaN>(callbacks::TerminateOnNaN::Options{.verbose = false});
  model->fit(regression_data(32, /*nan_at=*/16 * 3), {.epochs = 5, .callbacks = {nan}, .verbose = 0});
  EXPECT_TRUE(nan->fired());
  EXPECT_EQ(nan->epoch(), 0);
  EXPECT_EQ(nan->batch(), 2);
  EXPECT_TRUE(std::isnan(nan->loss()));
  EXPECT_EQ(model->step(), 3);

  // The next fit starts clean: a finite run does not fire.
  model = regressor(0.01f);
  model->fit(regression_data(32), {.epochs = 2, .callbacks = {nan}, .verbose = 0});
  EXPECT_FALSE(nan->fired());

  // The epoch comes from on_epoch_begin; an infinite loss fires as NaN does.
  Logs finite, infinite;
  finite.set("loss", 0.5);
  infinite.set("loss", std::numeric_limits<double>::infinity());
  nan->set_model(model.get());
  model->stop_training = false;
  nan->on_train_begin(Logs());
  nan->on_epoch_begin(3, Logs());
  nan->on_train_batch_end(0, finite);
  EXPECT_FALSE(nan->fired());
  EXPECT_FALSE(model->stop_training);
  nan->on_train_batch_end(4, infinite);
  EXPECT_TRUE(nan->fired());
  EXPECT_TRUE(model->stop_training);
  EXPECT_EQ(nan->epoch(), 3);
  EXPECT_EQ(nan->batch(), 4);
  EXPECT_EQ(nan->loss(), std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace strata
