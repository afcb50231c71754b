// The TensorBoard callback: the event files a fit writes, read back by a decoder of this test's own (TFRecord
// framing with both CRCs checked by a bitwise CRC-32C, then Event / Summary / Value by protobuf field number), so
// that the code under test is not its own judge.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "io/event_writer.h"
#include "strata/error.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/random.h"
#include "strata/train/callbacks.h"
#include "strata/train/model.h"
#include "test_util.h"
#include "train/event_reader.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::decode_event;
using test::Event;
using test::read_records;

// A run's one events file: its name checked, its events decoded; the first must be the version event.
struct EventRun {
  fs::path file;
  std::vector<Event> events;
  std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars;  // tag -> (step, value), in file order
};

std::string hostname() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

long long unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventRun read_run(const fs::path& dir, long long started, long long ended) {
  EventRun run;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
  EXPECT_EQ(files.size(), 1u) << dir;
  if (files.empty()) return run;
  run.file = files.front();
  std::smatch m;
  const std::string name = run.file.filename().string();
  EXPECT_TRUE(std::regex_match(name, m, std::regex(R"(events\.out\.tfevents\.([0-9]+)\.(.+))"))) << name;
  if (m.size() == 3) {
    EXPECT_GE(std::stoll(m[1]), started) << name;
    EXPECT_LE(std::stoll(m[1]), ended) << name;
    EXPECT_EQ(m[2].str(), hostname()) << name;
  }
  for (const std::string& record : read_records(run.file)) run.events.push_back(decode_event(record));
  EXPECT_FALSE(run.events.empty()) << run.file;
  if (run.events.empty()) return run;
  EXPECT_EQ(run.events.front().file_version.value_or("(none)"), "brain.Event:2");
  EXPECT_FALSE(run.events.front().has_summary);
  double last_time = 0;
  for (size_t i = 0; i < run.events.size(); ++i) {
    const Event& e = run.events[i];
    EXPECT_GE(e.wall_time, static_cast<double>(started)) << "event " << i;
    EXPECT_LE(e.wall_time, static_cast<double>(ended)) << "event " << i;
    EXPECT_GE(e.wall_time, last_time) << "event " << i;
    last_time = e.wall_time;
    if (i == 0) continue;
    EXPECT_FALSE(e.file_version.has_value()) << "event " << i;
    EXPECT_TRUE(e.has_summary) << "event " << i;
    for (const auto& [tag, value] : e.values) run.scalars[tag].emplace_back(e.step, value);
  }
  return run;
}

std::vector<std::pair<int64_t, float>> expected_epochs(const std::vector<double>& values) {
  std::vector<std::pair<int64_t, float>> out;
  for (size_t i = 0; i < values.size(); ++i) out.emplace_back(static_cast<int64_t>(i), static_cast<float>(values[i]));
  return out;
}

std::vector<std::string> tags(const EventRun& run) {
  std::vector<std::string> out;
  for (const auto& [tag, values] : run.scalars) out.push_back(tag);
  return out;
}

// ---- a tiny fit

data::Dataset regression_data(int64_t n, uint64_t seed) {
  return data::Dataset::from_tensor_slices({test::random_tensor({n, 3}, seed), test::random_tensor({n, 1}, seed + 1)})
      .batch(8);
}

std::shared_ptr<Sequential> regressor() {
  manual_seed(5);
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(1)});
  model->compile(losses::MeanSquaredError(), optim::SGD(optim::SGDOptions{.learning_rate = 0.1f}), {"mse"});
  return model;
}

// What fit passes after each batch, and the global step then.
struct BatchRecorder : Callback {
  std::vector<std::pair<int64_t, Logs>> batches;
  void on_train_batch_end(int64_t, const Logs& logs) override { batches.emplace_back(model()->step(), logs); }
};

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("strata_tensorboard_test_" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

TEST(TensorBoardTest, EpochAndBatchScalarsOfBothRunsEqualTheHistory) {
  TempDir dir;
  auto model = regressor();
  auto schedule = std::make_shared<callbacks::LearningRateScheduler>(
      [](int64_t epoch, double) { return 0.05 * static_cast<double>(epoch + 1); });
  auto board =
      std::make_shared<callbacks::TensorBoard>(dir.path.string(), callbacks::TensorBoard::Options{.update_freq = 1});
  auto recorder = std::make_shared<BatchRecorder>();
  // Between epochs the files are complete: a run killed then leaves files TensorBoard reads.
  struct PeekAfterFirstEpoch : Callback {
    std::shared_ptr<callbacks::TensorBoard> board;
    std::vector<std::string> tags_seen;
    void on_epoch_end(int64_t epoch, const Logs&) override {
      if (epoch != 0) return;
      for (const std::string& file : {board->train_file(), board->validation_file()}) {
        const std::vector<std::string> records = read_records(file);
        for (const std::string& r : records) {
          for (const auto& [tag, v] : decode_event(r).values)
            tags_seen.push_back(fs::path(file).parent_path().filename().string() + "/" + tag);
        }
      }
    }
  };
  // Each epoch from before TensorBoard's on_epoch_begin to after its on_epoch_end: at least its timed span.
  struct EpochTimer : Callback {
    std::vector<double> seconds;
    std::chrono::steady_clock::time_point start;
    void on_epoch_begin(int64_t, const Logs&) override { start = std::chrono::steady_clock::now(); }
    void on_epoch_end(int64_t, const Logs&) override {
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  };
  auto timer = std::make_shared<EpochTimer>();
  auto peek = std::make_shared<PeekAfterFirstEpoch>();
  peek->board = board;
  const long long started = unix_now();
  const History history = model->fit(regression_data(32, 11), {.epochs = 3,
                                                               .validation_data = regression_data(16, 21),
                                                               .callbacks = {timer, schedule, recorder, board, peek},
                                                               .verbose = 0});
  const long long ended = unix_now() + 1;
  ASSERT_EQ(history.epochs.size(), 3u);
  ASSERT_EQ(recorder->batches.size(), 12u);  // 4 batches of 8 per epoch

  const EventRun train = read_run(dir.path / "train", started, ended);
  EXPECT_EQ(train.file.string(), board->train_file());
  EXPECT_EQ(tags(train),
            (std::vector<std::string>{"batch_loss", "batch_mse", "epoch_examples_per_second",
                                      "epoch_input_wait_percent", "epoch_learning_rate", "epoch_loss", "epoch_mse"}));
  EXPECT_EQ(train.scalars.at("epoch_loss"), expected_epochs(history.history.at("loss")));
  EXPECT_EQ(train.scalars.at("epoch_mse"), expected_epochs(history.history.at("mse")));
  EXPECT_EQ(train.scalars.at("epoch_learning_rate"), expected_epochs({0.05, 0.10, 0.15}));
  std::vector<double> wait_percent;
  for (double f : history.input_wait_fraction) wait_percent.push_back(100 * f);
  EXPECT_EQ(train.scalars.at("epoch_input_wait_percent"), expected_epochs(wait_percent));
  ASSERT_EQ(train.scalars.at("epoch_examples_per_second").size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto [step, rate] = train.scalars.at("epoch_examples_per_second")[i];
    EXPECT_EQ(step, static_cast<int64_t>(i));
    // 32 examples in at most the epoch's time (a count of batches, 4, would fall short).
    EXPECT_TRUE(std::isfinite(rate)) << rate;
    EXPECT_GE(rate, 32 / timer->seconds.at(i) * (1 - 1e-6)) << "epoch " << i;
  }
  // Batch scalars at every global step 1..12, the running values fit passed at that step.
  std::vector<std::pair<int64_t, float>> batch_loss, batch_mse;
  for (const auto& [step, logs] : recorder->batches) {
    batch_loss.emplace_back(step, static_cast<float>(logs.at("loss")));
    batch_mse.emplace_back(step, static_cast<float>(logs.at("mse")));
  }
  EXPECT_EQ(batch_loss.front().first, 1);
  EXPECT_EQ(batch_loss.back().first, 12);
  EXPECT_EQ(train.scalars.at("batch_loss"), batch_loss);
  EXPECT_EQ(train.scalars.at("batch_mse"), batch_mse);

  // The validation run: the val_ logs without their prefix, at the epochs, and again (as Keras writes them at each
  // evaluation's end) against the global step at the epoch's end: 4, 8, 12.
  const EventRun validation = read_run(dir.path / "validation", started, ended);
  EXPECT_EQ(validation.file.string(), board->validation_file());
  EXPECT_EQ(tags(validation), (std::vector<std::string>{"epoch_loss", "epoch_mse", "evaluation_loss_vs_iterations",
                                                        "evaluation_mse_vs_iterations"}));
  EXPECT_EQ(validation.scalars.at("epoch_loss"), expected_epochs(history.history.at("val_loss")));
  EXPECT_EQ(validation.scalars.at("epoch_mse"), expected_epochs(history.history.at("val_mse")));
  for (const char* name : {"loss", "mse"}) {
    std::vector<std::pair<int64_t, float>> against_steps;
    for (const auto& [epoch, value] : expected_epochs(history.history.at(std::string("val_") + name))) {
      against_steps.emplace_back(4 * (epoch + 1), value);
    }
    EXPECT_EQ(validation.scalars.at(std::string("evaluation_") + name + "_vs_iterations"), against_steps) << name;
  }
  EXPECT_NE(history.history.at("val_loss"), history.history.at("loss"));

  // After the first epoch the files already held its scalars, in valid records.
  for (const char* tag :
       {"train/batch_loss", "train/epoch_loss", "train/epoch_learning_rate", "validation/epoch_loss"}) {
    EXPECT_NE(std::find(peek->tags_seen.begin(), peek->tags_seen.end(), tag), peek->tags_seen.end()) << tag;
  }
}

TEST(TensorBoardTest, UpdateFreqEpochWritesNoBatchScalarsAndStepsCountGroupsOfN) {
  TempDir dir;
  auto model = regressor();
  const long long started = unix_now();
  auto by_epoch = std::make_shared<callbacks::TensorBoard>(dir.path.string());  // Keras's update_freq="epoch"
  const History history = model->fit(regression_data(32, 11), {.epochs = 2, .callbacks = {by_epoch}, .verbose = 0});
  const EventRun train = read_run(dir.path / "train", started, unix_now() + 1);
  EXPECT_EQ(tags(train), (std::vector<std::string>{"epoch_examples_per_second", "epoch_input_wait_percent",
                                                   "epoch_learning_rate", "epoch_loss", "epoch_mse"}));
  EXPECT_EQ(train.scalars.at("epoch_loss"), expected_epochs(history.history.at("loss")));
  EXPECT_FALSE(fs::exists(dir.path / "validation")) << "no validation logs, no validation run";
  EXPECT_EQ(by_epoch->validation_file(), "");

  // update_freq 3 over 2 epochs of 4 steps: global steps 3 and 6; the run continues the model's step count (8..16).
  fs::remove_all(dir.path);
  auto every3 =
      std::make_shared<callbacks::TensorBoard>(dir.path.string(), callbacks::TensorBoard::Options{.update_freq = 3});
  model->fit(regression_data(32, 11), {.epochs = 2, .callbacks = {every3}, .verbose = 0});
  const EventRun second = read_run(dir.path / "train", started, unix_now() + 1);
  ASSERT_EQ(second.scalars.count("batch_loss"), 1u);
  std::vector<int64_t> steps;
  for (const auto& [step, value] : second.scalars.at("batch_loss")) steps.push_back(step);
  EXPECT_EQ(steps, (std::vector<int64_t>{9, 12, 15}));

  // A second fit into the same directory (in the same second, as here) opens a file of its own.
  model->fit(regression_data(32, 11), {.epochs = 1, .callbacks = {every3}, .verbose = 0});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path / "train"), fs::directory_iterator()), 2);
  EXPECT_NE(every3->train_file(), second.file.string());
  EXPECT_EQ(read_records(every3->train_file()).size(), 1u + 1 + 1);  // version, batch step 18, epoch 0
}

// The writer's own encoding (a negative step takes protobuf's 10-byte varint), and this test's reader rejecting a
// damaged record, so that its CRC checks are known to bite.
TEST(TensorBoardTest, EventFileWriterRecordsReadBackAndADamagedOneIsCaught) {
  static TempDir dir;
  static std::string path;
  {
    io::detail::EventFileWriter writer(dir.path.string());
    writer.add_scalars(-2, {{"a", 1.5f}, {"b", -0.25f}});
    writer.add_scalars(1LL << 40, {{"c", 0.0f}});
    writer.add_scalars(7, {});  // nothing
    writer.close();
    path = writer.path();
  }
  const std::vector<std::string> records = read_records(path);
  ASSERT_EQ(records.size(), 3u);
  const Event first = decode_event(records[1]), second = decode_event(records[2]);
  EXPECT_EQ(first.step, -2);
  EXPECT_EQ(first.values, (std::vector<std::pair<std::string, float>>{{"a", 1.5f}, {"b", -0.25f}}));
  EXPECT_EQ(second.step, 1LL << 40);
  EXPECT_EQ(second.values, (std::vector<std::pair<std::string, float>>{{"c", 0.0f}}));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-6, std::ios::end);  // inside the last record's data
    f.put('\x7f');
  }
  EXPECT_NONFATAL_FAILURE(read_records(path), "data CRC");
}

TEST(TensorBoardTest, RejectsANegativeUpdateFreqAndAFitWithoutAModel) {
  EXPECT_THROW(callbacks::TensorBoard("d", callbacks::TensorBoard::Options{.update_freq = -1}), InvalidArgument);
  callbacks::TensorBoard unattached("d");
  EXPECT_THROW(unattached.on_train_begin(Logs()), InvalidArgument);
}

}  // namespace
}  // namespace strata
