// `strata train --log-dir D` (TensorBoard event files, read back by the tests' own decoder) and `--log-format json`
// (each epoch line parsed as JSON and compared with the text run's progress bar), end to end on a tiny job.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "cli/json_log.h"
#include "train/event_reader.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

// The CSV log's column `name`, one value per epoch.
std::vector<double> csv_column(const fs::path& csv, const std::string& name) {
  std::ifstream in(csv);
  std::string header, row;
  std::getline(in, header);
  std::vector<std::string> columns;
  std::stringstream h(header);
  for (std::string c; std::getline(h, c, ',');) columns.push_back(c);
  std::vector<double> values;
  while (std::getline(in, row)) {
    std::stringstream r(row);
    std::string cell;
    for (size_t i = 0; std::getline(r, cell, ','); ++i) {
      if (i < columns.size() && columns[i] == name) values.push_back(std::stod(cell));
    }
  }
  return values;
}

TEST(TrainLogsTest, LogDirWritesATrainRunOfEpochScalarsThatEqualTheCsvLog) {
  TinyJob t("tb_logdir");
  const fs::path logs = t.s.dir / "tb";
  const fs::path csv = t.s.dir / "log.csv";
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + t.job + " --threads 1 --epochs 2 --log-dir " +
                       logs.string() + " --csv-log " + csv.string());
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(fs::is_directory(logs / "train")) << out;
  EXPECT_FALSE(fs::exists(logs / "validation")) << "the job does not validate";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(logs / "train")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(std::regex_match(files[0].filename().string(), std::regex(R"(events\.out\.tfevents\.[0-9]+\..+)")))
      << files[0];

  const std::vector<std::string> records = test::read_records(files[0]);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(test::decode_event(records[0]).file_version.value_or("(none)"), "brain.Event:2");
  std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars;
  for (size_t i = 1; i < records.size(); ++i) {
    const test::Event e = test::decode_event(records[i]);
    for (const auto& [tag, value] : e.values) scalars[tag].emplace_back(e.step, value);
  }
  for (const char* name : {"loss", "accuracy"}) {
    const std::vector<double> expected = csv_column(csv, name);
    ASSERT_EQ(expected.size(), 2u) << name;
    const auto& got = scalars["epoch_" + std::string(name)];
    ASSERT_EQ(got.size(), 2u) << name;
    for (size_t e = 0; e < 2; ++e) {
      EXPECT_EQ(got[e].first, static_cast<int64_t>(e));
      EXPECT_EQ(got[e].second, static_cast<float>(expected[e])) << name << " epoch " << e;
    }
  }
  for (const char* tag : {"epoch_learning_rate", "epoch_examples_per_second", "epoch_input_wait_percent"}) {
    EXPECT_EQ(scalars[tag].size(), 2u) << tag;
  }
  EXPECT_FLOAT_EQ(scalars["epoch_learning_rate"].at(0).second, 0.01f);  // the tiny job's adam rate
  EXPECT_EQ(scalars.count("batch_loss"), 0u) << "update_freq is \"epoch\"";
}

// --log-every-steps N adds the running loss and metrics every N global steps (Keras's update_freq), at that step.
TEST(TrainLogsTest, LogEveryStepsWritesBatchScalarsAtEveryNthStep) {
  TinyJob t("tb_steps");  // 512 examples, batch 32: 16 steps an epoch
  const fs::path logs = t.s.dir / "tb";
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + t.job + " --epochs 2 --log-dir " + logs.string() +
                       " --log-every-steps 4");
  ASSERT_EQ(rc, 0) << out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(logs / "train")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  std::map<std::string, std::vector<int64_t>> steps;
  const std::vector<std::string> records = test::read_records(files[0]);
  for (size_t i = 1; i < records.size(); ++i) {
    const test::Event e = test::decode_event(records[i]);
    for (const auto& [tag, value] : e.values) steps[tag].push_back(e.step);
  }
  EXPECT_EQ(steps["batch_loss"], (std::vector<int64_t>{4, 8, 12, 16, 20, 24, 28, 32}));
  EXPECT_EQ(steps["batch_accuracy"].size(), 8u);
  EXPECT_EQ(steps["epoch_loss"], (std::vector<int64_t>{0, 1}));
  std::tie(rc, out) = run(std::string(STRATA_BINARY) + " train " + t.job + " --log-every-steps 4");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--log-every-steps needs --log-dir"), std::string::npos) << out;
}

// Across workers only the chief writes, and its train run counts the whole job: examples per second from every
// worker's examples (fit sums them at the epoch's end), and the chief's time in collectives.
TEST(TrainLogsTest, AcrossWorkersTheChiefWritesTheJobsRateAndItsCommunicationTime) {
  TinyJob t("tb_workers");
  const fs::path logs = t.s.dir / "tb";
  auto [rc, out] =
      run("timeout -k 5 120 " + std::string(STRATA_BINARY) + " launch --workers 2 -- " STRATA_BINARY " train " + t.job +
          " --epochs 2 --strategy multi_worker_mirrored --log-dir " + logs.string());
  ASSERT_EQ(rc, 0) << out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(logs / "train")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << "the chief's file only";
  std::map<std::string, std::vector<float>> scalars;
  const std::vector<std::string> records = test::read_records(files[0]);
  for (size_t i = 1; i < records.size(); ++i) {
    for (const auto& [tag, value] : test::decode_event(records[i]).values) scalars[tag].push_back(value);
  }
  ASSERT_EQ(scalars["epoch_examples_per_second"].size(), 2u);
  ASSERT_EQ(scalars["epoch_communication_seconds"].size(), 2u);
  for (int e = 0; e < 2; ++e) {
    EXPECT_GT(scalars["epoch_examples_per_second"][static_cast<size_t>(e)], 0.0f);
    EXPECT_GT(scalars["epoch_communication_seconds"][static_cast<size_t>(e)], 0.0f);
  }
}

// The progress bar's form of a value ("%.4f", or "%.4e" when tiny or huge).
std::string as_printed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v != 0 && (std::fabs(v) < 1e-3 || std::fabs(v) >= 1e4) ? "%.4e" : "%.4f", v);
  return buf;
}

TEST(TrainLogsTest, LogFormatJsonPrintsAnObjectPerEpochWithTheTextRunsNumbers) {
  TinyJob t("tb_json");
  const std::string command = std::string(STRATA_BINARY) + " train " + t.job + " --threads 1 --epochs 2";
  auto [rc_text, text] = run(command);
  ASSERT_EQ(rc_text, 0) << text;
  auto [rc, out] = run(command + " --log-format json");
  ASSERT_EQ(rc, 0) << out;

  // The text run's epoch lines: "... - loss: 0.1234 - accuracy: 0.5000 - input wait ...".
  std::vector<std::map<std::string, std::string>> printed;
  std::istringstream text_lines(text);
  const std::regex value(R"( - (loss|accuracy): (\S+))");
  for (std::string line; std::getline(text_lines, line);) {
    if (line.find(" - loss: ") == std::string::npos) continue;
    std::map<std::string, std::string> values;
    for (auto it = std::sregex_iterator(line.begin(), line.end(), value); it != std::sregex_iterator(); ++it) {
      values[(*it)[1]] = (*it)[2];
    }
    printed.push_back(values);
  }
  ASSERT_EQ(printed.size(), 2u) << text;

  EXPECT_EQ(out.find("Epoch 1/2"), std::string::npos) << "no progress bar in json form:\n" << out;
  EXPECT_EQ(out.find(" - loss: "), std::string::npos) << out;
  std::vector<nlohmann::json> epochs;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    EXPECT_EQ(line.rfind("{\"epoch\": ", 0), 0u) << line;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    ASSERT_TRUE(j.is_object()) << line;
    epochs.push_back(j);
  }
  ASSERT_EQ(epochs.size(), 2u) << out;
  for (size_t e = 0; e < 2; ++e) {
    const nlohmann::json& j = epochs[e];
    EXPECT_EQ(j.at("epoch").get<int>(), static_cast<int>(e + 1)) << j;
    for (const char* name : {"loss", "accuracy"}) {
      ASSERT_TRUE(j.contains(name) && j.at(name).is_number()) << j;
      EXPECT_EQ(as_printed(j.at(name).get<double>()), printed[e].at(name)) << name << " epoch " << e + 1;
    }
    ASSERT_TRUE(j.contains("input_wait_fraction")) << j;
    EXPECT_GE(j.at("input_wait_fraction").get<double>(), 0);
    EXPECT_LE(j.at("input_wait_fraction").get<double>(), 1);
  }
  // Every line but the epochs' is as in the text run: the run still ends with its test line.
  EXPECT_EQ(last_line(out), last_line(text));
}

TEST(TrainLogsTest, JsonEpochLineWritesNullForWhatJsonCannotHoldAndExactDoubles) {
  Logs logs;
  logs.set("loss", 0.1);
  logs.set("accuracy", std::nan(""));
  logs.set("val_loss", INFINITY);
  logs.set("val \"odd\" name", -1.5e-300);
  const std::string line = json_epoch_line(4, logs, 0.25);
  EXPECT_EQ(line, R"({"epoch": 5, "loss": 0.1, "accuracy": null, "val_loss": null, "val \"odd\" name": -1.5e-300, )"
                  R"("input_wait_fraction": 0.25})");
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j.at("loss").get<double>(), 0.1);
  EXPECT_TRUE(j.at("accuracy").is_null());
  EXPECT_EQ(j.at("val \"odd\" name").get<double>(), -1.5e-300);
}

}  // namespace
}  // namespace strata::cli
