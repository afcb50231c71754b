// `strata train` / `strata evaluate` end to end on a tiny IDX data set, and job-file checking.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "cli/job.h"
#include "strata/error.h"
#include "strata/io/safetensors.h"
#include "cli/cli_test_util.h"
#include "test_util.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

TEST(TrainCommandTest, TrainsSavesAndEvaluatesToTheSameResultReadableByAnIndependentReader) {
  Scratch s("e2e");
  write_tiny_idx(s.dir, "train", 512, 1);
  write_tiny_idx(s.dir, "t10k", 128, 2);
  const std::string job = write_job(s.dir, tiny_job(s.dir));
  const fs::path ckpt = s.dir / "ckpt";
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + job + " --checkpoint-dir " + ckpt.string() +
                       " --threads 1 --csv-log " + (s.dir / "log.csv").string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("Total params: 7,850"), std::string::npos) << out;
  EXPECT_NE(out.find("Epoch 2/2"), std::string::npos) << out;
  EXPECT_NE(out.find("input wait"), std::string::npos) << out;
  const std::string trained = last_line(out);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(trained, m, std::regex(R"(test loss ([0-9.]+) - test accuracy ([0-9.]+))"))) << trained;
  EXPECT_GT(std::stod(m[2]), 0.9) << out;

  auto [rc2, out2] = run(std::string(STRATA_BINARY) + " evaluate " + job + " --checkpoint " + ckpt.string());
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_EQ(last_line(out2), trained);

  // The CSV log has a header and one row per epoch.
  std::ifstream csv(s.dir / "log.csv");
  std::string header, row1, row2;
  std::getline(csv, header);
  std::getline(csv, row1);
  std::getline(csv, row2);
  EXPECT_EQ(header, "epoch,loss,accuracy");
  EXPECT_EQ(row2.substr(0, 2), "1,");

  // An independent reader (json + numpy) sees the same tensors as strata.
  const fs::path weights = ckpt / "ckpt-2" / "model.safetensors";
  auto [rc3, listing] = run("/usr/bin/python3 tests/io/read_safetensors.py " + weights.string());
  ASSERT_EQ(rc3, 0) << listing;
  std::map<std::string, double> sums;
  std::istringstream lines(listing);
  std::string name, dtype, shape;
  double sum;
  while (lines >> name >> dtype >> shape >> sum) sums[name] = sum;
  const io::NamedTensors loaded = io::load_safetensors(weights.string());
  ASSERT_EQ(sums.size(), 2u) << listing;
  for (const auto& [tensor_name, tensor] : loaded) {
    double total = 0;
    for (float v : tensor.to_vector<float>()) total += v;
    ASSERT_TRUE(sums.count(tensor_name)) << tensor_name << "\n" << listing;
    EXPECT_NEAR(sums[tensor_name], total, 1e-6 * (1 + std::fabs(total))) << tensor_name;
  }
  EXPECT_TRUE(sums.count("dense/kernel"));

  // --resume continues after the last epoch instead of starting over.
  auto [rc4, out4] = run(std::string(STRATA_BINARY) + " train " + job + " --checkpoint-dir " + ckpt.string() +
                         " --resume --epochs 3 --threads 1");
  ASSERT_EQ(rc4, 0) << out4;
  EXPECT_NE(out4.find("2 epoch(s) done"), std::string::npos) << out4;
  EXPECT_EQ(out4.find("Epoch 1/3"), std::string::npos) << out4;
  EXPECT_NE(out4.find("Epoch 3/3"), std::string::npos) << out4;
}

TEST(TrainCommandTest, TrainsFromTFRecordShardsThatDataConvertWrote) {
  Scratch s("tfrecord");
  write_tiny_idx(s.dir, "train", 512, 3);
  write_tiny_idx(s.dir, "t10k", 128, 4);
  const std::string job_text = tiny_tfrecord_job(s.dir, 3, "gzip");
  const std::string job = write_job(s.dir, job_text);
  auto [rc2, out2] = run(std::string(STRATA_BINARY) + " train " + job + " --threads 1");
  ASSERT_EQ(rc2, 0) << job_text << "\n" << out2;
  std::smatch m;
  const std::string line = last_line(out2);
  ASSERT_TRUE(std::regex_match(line, m, std::regex(R"(test loss ([0-9.]+) - test accuracy ([0-9.]+))"))) << out2;
  EXPECT_GT(std::stod(m[2]), 0.9) << out2;
}

// "test loss X - test accuracy Y" -> {X, Y}.
std::pair<double, double> test_result(const std::string& output) {
  std::smatch m;
  const std::string line = last_line(output);
  EXPECT_TRUE(std::regex_match(line, m, std::regex(R"(test loss ([0-9.]+) - test accuracy ([0-9.]+))"))) << output;
  if (m.size() != 3) return {-1, -1};
  return {std::stod(m[1]), std::stod(m[2])};
}

TEST(TrainCommandTest, MirroredAndCentralStorageTrainToTheOneDeviceResult) {
  Scratch s("strategy");
  write_tiny_idx(s.dir, "train", 256, 5);
  write_tiny_idx(s.dir, "t10k", 96, 6);
  const std::string job = write_job(s.dir, tiny_job(s.dir));
  const std::string train = std::string(STRATA_BINARY) + " train " + job + " --threads 2 ";
  auto [rc1, one] = run(train + "--strategy one_device");
  ASSERT_EQ(rc1, 0) << one;
  EXPECT_NE(one.find("strategy: OneDeviceStrategy, 1 replica (2 threads), global batch 32; 2 threads: --threads 2\n"), std::string::npos)
      << one;
  const auto expected = test_result(one);
  EXPECT_GT(expected.second, 0.8) << one;

  const fs::path ckpt = s.dir / "ckpt";
  auto [rc2, mirrored] = run(train + "--strategy mirrored --replicas 2 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(rc2, 0) << mirrored;
  EXPECT_NE(mirrored.find("strategy: MirroredStrategy, 2 replicas (1 thread each), reduction_to_one_device all-reduce, global batch 32 "
                          "(16 per replica); 2 threads: --threads 2\n"),
            std::string::npos)
      << mirrored;
  EXPECT_NE(mirrored.find("Epoch 2/2"), std::string::npos) << mirrored;
  // N replicas with the global batch train like one replica with it (to float tolerance).
  const auto got = test_result(mirrored);
  EXPECT_NEAR(got.first, expected.first, 2e-4) << mirrored;
  EXPECT_NEAR(got.second, expected.second, 1.5 / 96) << mirrored;

  // A mirrored checkpoint evaluates to the same line under any strategy.
  auto [rc3, eval] = run(std::string(STRATA_BINARY) + " evaluate " + job + " --checkpoint " + ckpt.string() +
                         " --strategy mirrored --replicas 3 --threads 2");
  ASSERT_EQ(rc3, 0) << eval;
  EXPECT_NE(eval.find("strategy: MirroredStrategy, 3 replicas"), std::string::npos) << eval;
  EXPECT_EQ(last_line(eval), last_line(mirrored));
  auto [rc4, eval1] = run(std::string(STRATA_BINARY) + " evaluate " + job + " --checkpoint " + ckpt.string());
  ASSERT_EQ(rc4, 0) << eval1;
  EXPECT_EQ(last_line(eval1), last_line(mirrored));

  // The job file's keys work as the flags do, and lr_scaling says what it did.
  const std::string job2 =
      write_job(s.dir, tiny_job(s.dir) + "strategy: central_storage\nreplicas: 3\nlr_scaling: linear\n"
                                         "base_batch_size: 32\nwarmup_epochs: 1\nsteps_per_execution: 3\n");
  EXPECT_EQ(load_job(job2).steps_per_execution, 3);
  auto [rc5, central] = run(std::string(STRATA_BINARY) + " train " + job2 + " --threads 2");
  ASSERT_EQ(rc5, 0) << central;
  EXPECT_NE(central.find("strategy: CentralStorageStrategy, 3 replicas (1 thread each), global batch 32 (11 or fewer "
                         "per replica)"),
            std::string::npos)
      << central;
  EXPECT_NE(central.find("learning rate: 0.01 -> 0.01 (linear scaling: global batch 32 / base 32), warmup 1 epoch "
                         "(8 steps) from 0.01"),
            std::string::npos)
      << central;
  const auto central_result = test_result(central);
  EXPECT_NEAR(central_result.first, expected.first, 2e-4) << central;
}

TEST(TrainCommandTest, BadStrategyFlagsNameTheFlagAndTheChoices) {
  Scratch s("strategy_flags");
  const std::string job = write_job(s.dir, tiny_job(s.dir));
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + job + " --strategy mirorred");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("strata: error: --strategy: unknown strategy 'mirorred'; choose one of one_device, mirrored, "
                     "central_storage"),
            std::string::npos)
      << out;
  auto [rc2, out2] = run(std::string(STRATA_BINARY) + " train " + job + " --strategy one_device --replicas 2");
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_NE(out2.find("--replicas 2: one_device has one replica"), std::string::npos) << out2;
  auto [rc3, out3] = run(std::string(STRATA_BINARY) + " evaluate " + job +
                         " --checkpoint /nonexistent --strategy mirrored --cross-device-ops nccl");
  EXPECT_EQ(rc3, 1) << out3;
  EXPECT_NE(out3.find("cross-device ops nccl: all-reduces across GPU replicas; add --device gpu"), std::string::npos)
      << out3;
}

TEST(TrainCommandTest, BadJobKeysNameTheKeyAndLine) {
  Scratch s("keys");
  write_tiny_idx(s.dir, "train", 8, 1);
  std::string body = tiny_job(s.dir);
  auto expect_error = [&](const std::string& job_text, const std::string& needle) {
    const std::string path = write_job(s.dir, job_text);
    const std::string msg = test::message_of<InvalidArgument>([&] { load_job(path); });
    EXPECT_NE(msg.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << msg;
  };
  // line 7 is "  - dense: {units: 10}"
  expect_error(std::regex_replace(body, std::regex("units: 10"), "unit: 10"), "job.yaml:7: unknown key 'model[1].dense.unit'");
  expect_error(std::regex_replace(body, std::regex("units: 10"), "units: ten"), "model[1].dense.units: expected an integer");
  expect_error(std::regex_replace(body, std::regex("- flatten"), "- flaten"), "unknown layer type 'flaten'");
  expect_error(std::regex_replace(body, std::regex("name: adam"), "name: adamm"), "unknown optimizer 'adamm'");
  expect_error(std::regex_replace(body, std::regex("epochs: 2"), "epochs: -2"), "epochs: must be positive");
  expect_error(body + "learning_rate: 3\n", "unknown key 'learning_rate'");
  expect_error(body + "steps_per_execution: 0\n", "steps_per_execution: must be positive");
  expect_error("data: [1, 2\n", "not valid YAML");
  expect_error(std::regex_replace(body, std::regex("metrics: \\[accuracy\\]"), "metrics: [acuracy]"), "acuracy");
}

TEST(TrainCommandTest, ALossThatBecomesNaNOrInfStopsTrainingAndFails) {
  Scratch s("nan");
  write_tiny_idx(s.dir, "train", 256, 7);
  write_tiny_idx(s.dir, "t10k", 64, 8);
  // SGD at 1e38: the first update brings weights near the float maximum, so the next step's logits
  // overflow and the loss turns NaN (at 1e30 the loss stays huge but finite).
  const std::string job = write_job(s.dir, std::regex_replace(tiny_job(s.dir), std::regex("name: adam, learning_rate: 0.01"),
                                                              "name: sgd, learning_rate: 1e38"));
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + job + " --threads 1 --epochs 3 --csv-log " +
                       (s.dir / "log.csv").string());
  EXPECT_EQ(rc, 1) << out;
  std::smatch m;
  const std::string error = last_line(out);
  ASSERT_TRUE(std::regex_search(error, m, std::regex(R"(^strata: error: the loss became (NaN|inf|-inf) at epoch 1, step ([0-9]+); training stopped \(TerminateOnNaN\))")))
      << out;
  EXPECT_GE(std::stoi(m[2]), 1) << out;
  EXPECT_LE(std::stoi(m[2]), 8) << out;  // 256 examples in batches of 32
  EXPECT_EQ(out.find("Epoch 2/3"), std::string::npos) << "training went on after the loss was " << m[1] << "\n" << out;
  EXPECT_EQ(out.find("test loss"), std::string::npos) << out;
}

TEST(TrainCommandTest, UnusableOutputPathsFailBeforeTraining) {
  Scratch s("outputs");
  write_tiny_idx(s.dir, "train", 64, 9);
  write_tiny_idx(s.dir, "t10k", 32, 10);
  const std::string job = write_job(s.dir, tiny_job(s.dir));
  const std::string train = std::string(STRATA_BINARY) + " train " + job + " --threads 1 ";
  const std::string file = (s.dir / "a_file").string();
  std::ofstream(file) << "x";
  auto expect_io_error = [&](const std::string& flags, const std::string& needle) {
    auto [rc, out] = run(train + flags);
    EXPECT_EQ(rc, 1) << flags << "\n" << out;
    EXPECT_NE(last_line(out).find("strata: error: " + needle), std::string::npos) << flags << "\n" << out;
    EXPECT_EQ(out.find("Epoch 1/"), std::string::npos) << "training started: " << flags << "\n" << out;
  };
  expect_io_error("--checkpoint-dir " + file, "--checkpoint-dir: '" + file + "' exists and is not a directory");
  expect_io_error("--checkpoint-dir " + file + "/ckpt", "--checkpoint-dir: cannot create directory '" + file + "/ckpt'");
  // A directory nobody can create files in, root included.
  expect_io_error("--checkpoint-dir /proc", "--checkpoint-dir: cannot write in directory '/proc'");
  expect_io_error("--csv-log " + s.dir.string(), "--csv-log: '" + s.dir.string() + "' is a directory");
  expect_io_error("--csv-log " + file + "/log.csv", "--csv-log: cannot write '" + file + "/log.csv'");
  expect_io_error("--csv-log /proc/log.csv", "--csv-log: cannot write '/proc/log.csv'");

  // A checkpoint directory that does not exist yet is created (with its parents) before training.
  const fs::path nested = s.dir / "runs" / "a" / "ckpt";
  auto [rc, out] = run(train + "--epochs 1 --checkpoint-dir " + nested.string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(fs::exists(nested / "ckpt-1")) << out;
}

TEST(TrainCommandTest, ACorruptTestShardFailsBeforeTrainingAndTheErrorIsTheLastLine) {
  Scratch s("corrupt");
  write_tiny_idx(s.dir, "train", 128, 11);
  write_tiny_idx(s.dir, "t10k", 64, 12);
  const std::string job = write_job(s.dir, tiny_tfrecord_job(s.dir, 2));
  // Flip one byte in the middle of the second test shard: the record there fails its CRC.
  const fs::path bad = s.dir / "shards" / "test-00001-of-00002.tfrecord";
  ASSERT_TRUE(fs::exists(bad));
  flip_byte(bad, static_cast<std::streamoff>(fs::file_size(bad) / 2), 0x5a);
  // The whole output goes to one pipe: the summary on stdout must come out before the error, not after it.
  auto [rc2, out2] = run(std::string(STRATA_BINARY) + " train " + job + " --threads 1");
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_EQ(out2.find("Epoch 1/"), std::string::npos) << "trained before finding the bad test record\n" << out2;
  EXPECT_NE(out2.find("Total params"), std::string::npos) << out2;
  const std::string error = last_line(out2);
  EXPECT_EQ(error.rfind("strata: error: " + job + ": data.test: ", 0), 0u) << out2;
  EXPECT_NE(error.find(bad.filename().string()), std::string::npos) << out2;
}

TEST(TrainCommandTest, FlagErrorsAndWarningsAreReadable) {
  Scratch s("flags");
  write_tiny_idx(s.dir, "train", 64, 13);
  write_tiny_idx(s.dir, "t10k", 32, 14);
  const std::string job = write_job(s.dir, tiny_job(s.dir));
  const std::string bin = std::string(STRATA_BINARY);

  auto [rc, out] = run(bin + " trian " + job);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown command 'trian'; did you mean 'train'?"), std::string::npos) << out;
  auto [rc1, out1] = run(bin + " data convrt");
  EXPECT_NE(rc1, 0);
  EXPECT_NE(out1.find("unknown command 'data convrt'; did you mean 'data convert'?"), std::string::npos) << out1;
  auto [rc2, out2] = run(bin + " frobnicate");
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("unknown command 'frobnicate'; the commands are: train, evaluate, export, predict, data"), std::string::npos)
      << out2;

  for (const char* flag : {"--epochs 0", "--batch-size -3", "--threads x", "--strategy mirrored --replicas 0"}) {
    auto [rc3, out3] = run(bin + " train " + job + " " + flag);
    EXPECT_NE(rc3, 0) << flag;
    const std::string name = std::string(flag).substr(std::string(flag).rfind("--"));
    const std::string value = name.substr(name.find(' ') + 1);
    EXPECT_NE(out3.find(name.substr(0, name.find(' ')) + ": must be a positive integer, got '" + value + "'"),
              std::string::npos)
        << flag << "\n" << out3;
    EXPECT_EQ(out3.find("1.797"), std::string::npos) << out3;
    EXPECT_EQ(out3.find("Epoch 1/"), std::string::npos) << out3;
  }
  auto [rc4, out4] = run(bin + " train " + job + " --verbose 5");
  EXPECT_NE(rc4, 0);
  EXPECT_NE(out4.find("--verbose: must be 0, 1 or 2, got '5'"), std::string::npos) << out4;

  // More replicas than cores trains, with a warning.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  auto [rc5, out5] = run(bin + " train " + job + " --threads 1 --epochs 1 --strategy mirrored --replicas " +
                         std::to_string(cores + 1));
  EXPECT_EQ(rc5, 0) << out5;
  EXPECT_NE(out5.find("strata: warning: more replicas (" + std::to_string(cores + 1) + ") than CPU cores (" +
                      std::to_string(cores) + ")"),
            std::string::npos)
      << out5;
  auto [rc6, out6] = run(bin + " train " + job + " --threads 1 --epochs 1");
  EXPECT_EQ(rc6, 0) << out6;
  EXPECT_EQ(out6.find("strata: warning"), std::string::npos) << out6;
}

TEST(TrainCommandTest, HelpIsCompleteAndUsageErrorsFail) {
  auto [rc, out] = run(std::string(STRATA_BINARY) + " --help");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("train"), std::string::npos);
  EXPECT_NE(out.find("evaluate"), std::string::npos);
  EXPECT_NE(out.find("data"), std::string::npos);
  auto [rc2, out2] = run(std::string(STRATA_BINARY) + " train --help");
  EXPECT_EQ(rc2, 0);
  for (const char* flag : {"--epochs", "--batch-size", "--checkpoint-dir", "--resume", "--csv-log", "--threads",
                           "--strategy", "--replicas", "--cross-device-ops"}) {
    EXPECT_NE(out2.find(flag), std::string::npos) << flag << "\n" << out2;
  }
  auto [rc3, out3] = run(std::string(STRATA_BINARY) + " train /nonexistent.yaml");
  EXPECT_NE(rc3, 0);
  auto [rc4, out4] = run(std::string(STRATA_BINARY) + " evaluate configs/fashion_mnist_cnn.yaml --checkpoint /nonexistent");
  EXPECT_NE(rc4, 0);
  EXPECT_NE(out4.find("strata: error"), std::string::npos) << out4;
}

}  // namespace
}  // namespace strata::cli

namespace strata::cli {
namespace {
// A job whose model ends in logits with a loss that expects probabilities trains badly (Keras too): the run says so
// once on stderr, and says nothing when the loss is told (from_logits: true) or the model ends in a softmax.
TEST(TrainCommandTest, WarnsOnceWhenLogitsFeedALossThatExpectsProbabilities) {
  TinyJob t("logits_warning");
  const std::string told = tiny_job(t.s.dir);
  std::string untold = told;
  untold.replace(untold.find("{name: sparse_categorical_crossentropy, from_logits: true}"),
                 std::string("{name: sparse_categorical_crossentropy, from_logits: true}").size(),
                 "sparse_categorical_crossentropy");
  std::string softmax = untold;
  softmax.replace(softmax.find("dense: {units: 10}"), std::string("dense: {units: 10}").size(),
                  "dense: {units: 10, activation: softmax}");
  const std::string warning = "has from_logits false and expects probabilities";
  for (const auto& [body, warnings] :
       std::vector<std::pair<std::string, size_t>>{{untold, 1}, {told, 0}, {softmax, 0}}) {
    const std::string job = write_job(t.s.dir, body);
    auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + job + " --threads 1 --epochs 1");
    ASSERT_EQ(rc, 0) << out;
    size_t n = 0;
    for (size_t pos = out.find(warning); pos != std::string::npos; pos = out.find(warning, pos + 1)) ++n;
    EXPECT_EQ(n, warnings) << body << "\n" << out;
  }
}
}  // namespace
}  // namespace strata::cli
