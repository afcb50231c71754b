// What a lost task of a parameter-server job costs, as real processes under `strata launch --chief --workers 2
// --ps P`, each task SIGKILLed on purpose: with 2 ps (each shard backed up on the other), ps:0 killed before the
// first checkpoint, while a checkpoint is written, and twice in one job, costs no update; with 1 ps the job rolls
// back to its initial values, saying so; a killed chief restarts the job, which resumes from its ps checkpoint. Every
// run ends with the job's step count, and every shard with exactly one update a step (counted on the ps). Every
// process runs under `timeout` and is killed on every path.
#include <gtest/gtest.h>

#include <filesystem>
#include <iterator>
#include <regex>
#include <set>
#include <string>

#include "cli/cli_test_util.h"
#include "cli/ps_job_util.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

// 2048 examples at the batch of 32: 64 steps an epoch; 12 epochs.
constexpr int64_t kSteps = 768;
const char* const kTwelveEpochs = "training ended after epoch 12 of 12: 768 steps on 2 workers";

TEST(PsFailoverTest, PsZeroKilledBeforeAnyCheckpointIsTakenOverByItsBackup) {
  TinyJob t("ps_failover_early", 2048);
  const fs::path csv = t.s.dir / "log.csv";
  // Killed once the chief logged epoch 1: 64 steps in, and no checkpoint (there is no checkpoint directory).
  const auto [rc, out] = launch(t, 2, "--epochs 12 --csv-log " + csv.string(), "ps:0", "[ -s " + csv.string() + " ]", 1);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ps:0 was killed by signal 9 (SIGKILL); restarting it alone"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[chief:0\] ps:1 \(\S+\): 2 shards, .*took over 1 shard\n)"))) << out;
  EXPECT_EQ(count(out, " [taken over here]"), 1u) << out;  // ps:0's shard, on ps:1
  EXPECT_EQ(out.find("rolled back"), std::string::npos) << out;
  EXPECT_NE(out.find(std::string("[chief:0] ") + kTwelveEpochs), std::string::npos) << out;
  expect_every_shard_updated(out, 2, kSteps);
  EXPECT_GT(test_accuracy(out), 0.5) << out;
}

TEST(PsFailoverTest, PsZeroKilledTwiceInOneJobIsTakenOverEachTime) {
  TinyJob t("ps_failover_twice", 2048);
  const fs::path ckpt = t.s.dir / "ckpt";
  // The first run dies at checkpoint 2, its restart at checkpoint 4 (a checkpoint every 20 steps).
  const auto [rc, out] =
      launch(t, 2, "--epochs 12 --checkpoint-dir " + ckpt.string() + " --checkpoint-every 20", "ps:0",
             committed_at_least(ckpt, "$((2 + 2 * STRATA_LAUNCH_RESTART))"), 2, /*ps=*/2, /*kills=*/2);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "ps:0 was killed by signal 9 (SIGKILL); restarting it alone"), 2u) << out;
  EXPECT_EQ(count(out, "[chief:0] strategy:"), 1u) << out;
  EXPECT_EQ(out.find("rolled back"), std::string::npos) << out;
  EXPECT_NE(out.find(std::string("[chief:0] ") + kTwelveEpochs), std::string::npos) << out;
  expect_every_shard_updated(out, 2, kSteps);
  EXPECT_GT(test_accuracy(out), 0.5) << out;
}

TEST(PsFailoverTest, PsZeroKilledWhileWritingACheckpointCostsNothingAndLeavesNoLitter) {
  TinyJob t("ps_failover_saving", 2048);
  const fs::path ckpt = t.s.dir / "ckpt";
  // Killed while its shards of a checkpoint are written (their temporary directory exists), after one was committed.
  const std::string writing =
      committed_at_least(ckpt, "1") + " && ls " + (ckpt / "ps-0").string() + " | grep -q '\\.tmp-'";
  const auto [rc, out] =
      launch(t, 2, "--epochs 12 --checkpoint-dir " + ckpt.string() + " --checkpoint-every 5", "ps:0", writing, 1);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ps:0 was killed by signal 9 (SIGKILL); restarting it alone"), std::string::npos) << out;
  EXPECT_EQ(out.find("rolled back"), std::string::npos) << out;
  EXPECT_NE(out.find(std::string("[chief:0] ") + kTwelveEpochs), std::string::npos) << out;
  expect_every_shard_updated(out, 2, kSteps);
  // Later saves removed what the killed writer left: each ps keeps the committed checkpoint and the one before.
  const int64_t committed = committed_number(ckpt).value_or(0);
  for (const char* ps : {"ps-0", "ps-1"}) {
    std::set<std::string> entries;
    for (const auto& e : fs::directory_iterator(ckpt / ps)) entries.insert(e.path().filename().string());
    EXPECT_EQ(entries.count("ckpt-" + std::to_string(committed)), 1u) << ps << ": " << ::testing::PrintToString(entries);
    for (const std::string& e : entries) {
      EXPECT_TRUE(e == "ckpt-" + std::to_string(committed) || e == "ckpt-" + std::to_string(committed - 1))
          << ps << ": " << ::testing::PrintToString(entries);
    }
  }
  EXPECT_GT(test_accuracy(out), 0.5) << out;
}

TEST(PsFailoverTest, TheOnlyPsKilledRollsTheJobBackToItsInitialValuesAndSaysSo) {
  TinyJob t("ps_failover_one_ps", 2048);
  const fs::path csv = t.s.dir / "log.csv";
  const auto [rc, out] =
      launch(t, 2, "--epochs 12 --csv-log " + csv.string(), "ps:0", "[ -s " + csv.string() + " ]", 1, /*ps=*/1);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ps:0 was killed by signal 9 (SIGKILL); restarting it alone"), std::string::npos) << out;
  // No backup, no checkpoint: it came back empty, and the whole job went back to step 0.
  std::smatch said;
  ASSERT_TRUE(std::regex_search(
      out, said,
      std::regex(R"(\[chief:0\] fit: ps:0 \(\S+\) restarted with 0 of its 2 shards; the job rolled back to step 0 \(the initial values\), and runs the (\d+) steps since again)")))
      << out;
  EXPECT_GE(std::stoll(said[1]), 64) << out;  // epoch 1 at least
  EXPECT_NE(out.find("[chief:0] rolled back 1 time after a ps lost the job's state: " + said[1].str() + " steps run again"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(std::string("[chief:0] ") + kTwelveEpochs), std::string::npos) << out;
  expect_every_shard_updated(out, 2, kSteps);
  EXPECT_GT(test_accuracy(out), 0.5) << out;
}

TEST(PsFailoverTest, AKilledChiefRestartsTheJobWhichResumesFromItsPsCheckpoint) {
  TinyJob t("ps_failover_chief", 2048);
  const fs::path ckpt = t.s.dir / "ckpt";
  const auto [rc, out] = launch(t, 2, "--epochs 12 --checkpoint-dir " + ckpt.string() + " --checkpoint-every 20",
                                "chief:0", committed_at_least(ckpt, "3"), 1);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("chief:0 was killed by signal 9 (SIGKILL)"), std::string::npos) << out;
  EXPECT_EQ(count(out, "[chief:0] strategy:"), 2u) << out;  // the job started again
  std::smatch said;
  ASSERT_TRUE(std::regex_search(
      out, said,
      std::regex(R"(\[chief:0\] fit: the job resumes from its ps checkpoint (\d+), at step (\d+) \(epoch (\d+), step (\d+)\))")))
      << out;
  EXPECT_GE(std::stoll(said[1]), 3) << out;
  EXPECT_EQ(std::stoll(said[2]), (std::stoll(said[3]) - 1) * 64 + std::stoll(said[4])) << out;
  EXPECT_NE(out.find(std::string("[chief:0] ") + kTwelveEpochs), std::string::npos) << out;
  // Every shard: the checkpoint's updates, then one a step after it; and backed up on the other ps again (a
  // checkpoint holds each shard once: the ps were paired anew after the restore).
  expect_every_shard_updated(out, 2, kSteps);
  const std::regex paired(R"(\[chief:0\] ps:\d \(\S+\): 1 shard, .*; backs up 1 shard \()");
  EXPECT_EQ(std::distance(std::sregex_iterator(out.begin(), out.end(), paired), std::sregex_iterator()), 2) << out;
  EXPECT_GT(test_accuracy(out), 0.5) << out;
}

}  // namespace
}  // namespace strata::cli
