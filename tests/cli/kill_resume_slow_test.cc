// Kill and resume the real `strata train`: scripts/kill_and_resume.py kills it with SIGKILL at 10 random
// moments across 3 epochs of Fashion-MNIST, resumes it each time, and compares the final weights and
// optimizer slots byte for byte with a run never killed: once with a checkpoint per epoch, once with one
// every 100 steps (a kill mid-epoch then loses at most 100 steps and the resume continues mid-epoch).
// The job is a small MLP with dropout (the RNG), a reshuffling shuffle buffer and Adam (slots), so that a
// resume that misses any of them ends with other weights. The script kills its children on every way
// out and has its own time limit; `timeout` stops the script itself if that ever fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/cli_test_util.h"

namespace strata::cli {
namespace {

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

class KillResumeTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fs::path(kFashionMnist) / "train-images-idx3-ubyte.gz"))
      GTEST_SKIP() << "Fashion-MNIST is not installed (scripts/setup.sh installs dataset-fashion-mnist)";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "job.yaml") << "data: {format: idx, directory: " << kFashionMnist << ", shuffle: 10000}\n"
                                     << "model:\n  - flatten\n  - dense: {units: 128, activation: relu}\n"
                                        "  - dropout: {rate: 0.2}\n  - dense: {units: 10}\n"
                                        "loss: {name: sparse_categorical_crossentropy, from_logits: true}\n"
                                        "optimizer: {name: adam, learning_rate: 0.001}\n"
                                        "metrics: [accuracy]\nepochs: 3\nbatch_size: 64\nseed: 4\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::pair<int, std::string> kill_and_resume(const std::string& extra) {
    return run("timeout -s TERM -k 10 560 /usr/bin/python3 scripts/kill_and_resume.py --strata " STRATA_BINARY
               " --job " + (dir_ / "job.yaml").string() + " --work " + (dir_ / "work").string() +
               " --epochs 3 --kills 10 --time-limit 540 " + extra);
  }

  fs::path dir_ = fs::temp_directory_path() / ("strata_kill_resume_test_" + std::to_string(::getpid()));
};

TEST_F(KillResumeTest, TenKillsWithACheckpointPerEpochEndBitwiseEqual) {
  const auto [status, out] = kill_and_resume("--seed 11");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("model.safetensors: bitwise equal"), std::string::npos) << out;
  EXPECT_NE(out.find("kill 10:"), std::string::npos) << out;
}

TEST_F(KillResumeTest, TenKillsWithACheckpointEvery100StepsResumeMidEpochAndEndBitwiseEqual) {
  const auto [status, out] = kill_and_resume("--checkpoint-every 100 --seed 12");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("optimizer.safetensors: bitwise equal"), std::string::npos) << out;
  EXPECT_NE(out.find("resume(s) continued in the middle of an epoch"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::cli
