// `strata train --checkpoint-dir D [--resume] [--checkpoint-every N]` end to end: what a resume finds (nothing,
// a damaged checkpoint, an earlier run's checkpoints without --resume) is said and never written over, a
// diverged run leaves the last good checkpoint in place, and a resume continues exactly (bitwise) where the
// checkpoint stood, also in the middle of an epoch.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <regex>

#include "cli/cli_test_util.h"
#include "strata/io/safetensors.h"

namespace strata::cli {
namespace {

std::string train(const std::string& job, const fs::path& ckpt, const std::string& flags = "") {
  return std::string(STRATA_BINARY) + " train " + job + " --threads 1 --checkpoint-dir " + ckpt.string() + " " + flags;
}

struct TinyRun {
  Scratch s;
  std::string job;
  fs::path ckpt;
  explicit TinyRun(const std::string& name) : s(name), ckpt(s.dir / "ckpt") {
    write_tiny_idx(s.dir, "train", 512, 1);
    write_tiny_idx(s.dir, "t10k", 64, 2);
    // A hidden layer with dropout: the RNG and the reshuffling shuffle buffer both matter to the result.
    job = write_job(s.dir, std::regex_replace(tiny_job(s.dir), std::regex("  - dense: \\{units: 10\\}\n"),
                                              "  - dense: {units: 16, activation: relu}\n  - dropout: {rate: 0.3}\n"
                                              "  - dense: {units: 10}\n"));
  }
};

bool same_bytes(const fs::path& a, const fs::path& b) {
  const io::NamedTensors x = io::load_safetensors(a.string()), y = io::load_safetensors(b.string());
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].first != y[i].first || x[i].second.nbytes() != y[i].second.nbytes()) return false;
    if (std::memcmp(x[i].second.raw_data(), y[i].second.raw_data(), x[i].second.nbytes()) != 0) return false;
  }
  return true;
}

TEST(ResumeCommandTest, ResumeWithNothingToResumeFromSaysSoAndStartsAtEpochOne) {
  TinyRun r("nothing");
  auto [rc, out] = run(train(r.job, r.ckpt, "--resume"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("No checkpoint to resume from in " + r.ckpt.string() + ": starting at epoch 1"), std::string::npos)
      << out;
  EXPECT_NE(out.find("Epoch 1/2"), std::string::npos) << out;
}

TEST(ResumeCommandTest, ADamagedCheckpointIsAnErrorNamingItAndIsNeverWrittenOver) {
  TinyRun r("damaged");
  ASSERT_EQ(run(train(r.job, r.ckpt, "--epochs 1")).first, 0);
  fs::remove(r.ckpt / "ckpt-1" / "manifest.json");
  for (const char* flags : {"--resume --epochs 2", "--epochs 2"}) {
    auto [rc, out] = run(train(r.job, r.ckpt, flags));
    EXPECT_EQ(rc, 1) << flags << "\n" << out;
    EXPECT_NE(last_line(out).find("ckpt-1"), std::string::npos) << flags << "\n" << out;
    EXPECT_NE(last_line(out).find("is incomplete (it has no manifest.json)"), std::string::npos) << flags << "\n" << out;
    EXPECT_EQ(out.find("Epoch 1/2"), std::string::npos) << "trained over a damaged checkpoint\n" << out;
  }
  EXPECT_FALSE(fs::exists(r.ckpt / "ckpt-1" / "manifest.json"));
  EXPECT_FALSE(fs::exists(r.ckpt / "ckpt-2"));

  // A flipped bit in the weights: the checksum names the file and the tensor.
  TinyRun flipped("flipped");
  ASSERT_EQ(run(train(flipped.job, flipped.ckpt, "--epochs 1")).first, 0);
  const fs::path weights = flipped.ckpt / "ckpt-1" / "model.safetensors";
  flip_byte(weights, -7, 0x40, /*from_end=*/true);  // in dense_1/bias, the last tensor's data
  auto [rc, out] = run(train(flipped.job, flipped.ckpt, "--resume --epochs 2"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(last_line(out).find(weights.string()), std::string::npos) << out;
  EXPECT_NE(last_line(out).find("dense_1/bias"), std::string::npos) << out;
  EXPECT_EQ(out.find("Epoch 2/2"), std::string::npos) << out;
}

TEST(ResumeCommandTest, AFreshRunRefusesToWriteOverAnEarlierRunsCheckpoints) {
  TinyRun r("fresh");
  ASSERT_EQ(run(train(r.job, r.ckpt, "--epochs 1")).first, 0);
  auto [rc, out] = run(train(r.job, r.ckpt));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(last_line(out).find("already holds " + (r.ckpt / "ckpt-1").string() + " of an earlier run: pass --resume"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("Epoch 1/2"), std::string::npos) << out;
  auto [rc2, out2] = run(train(r.job, r.ckpt, "--checkpoint-every 0"));
  EXPECT_NE(rc2, 0) << out2;
  auto [rc3, out3] = run(std::string(STRATA_BINARY) + " train " + r.job + " --checkpoint-every 5");
  EXPECT_EQ(rc3, 1) << out3;
  EXPECT_NE(last_line(out3).find("--checkpoint-every needs --checkpoint-dir"), std::string::npos) << out3;
  auto [rc4, out4] = run(std::string(STRATA_BINARY) + " train " + r.job + " --backup-every-steps 5");
  EXPECT_EQ(rc4, 1) << out4;
  EXPECT_NE(last_line(out4).find("--backup-every-steps needs --backup-dir"), std::string::npos) << out4;
  auto [rc5, out5] = run(train(r.job, r.ckpt, "--resume --backup-dir " + (r.s.dir / "backup").string()));
  EXPECT_EQ(rc5, 1) << out5;
  EXPECT_NE(last_line(out5).find("--backup-dir resumes from its backup by itself"), std::string::npos) << out5;
}

TEST(ResumeCommandTest, ABackupDirResumesByItselfAndIsGoneWhenTrainingCompletes) {
  TinyRun r("backup");
  const fs::path backup = r.s.dir / "backup";
  const std::string cmd = std::string(STRATA_BINARY) + " train " + r.job + " --backup-dir " + backup.string();
  ASSERT_EQ(run(cmd + " --epochs 1").first, 0);
  EXPECT_FALSE(fs::exists(backup)) << "a completed run deletes its backup";
  // What an interrupted run leaves: a backup of epoch 1 (a kept checkpoint, copied in). The next run resumes from it.
  fs::create_directories(backup);
  ASSERT_EQ(run(train(r.job, r.ckpt, "--epochs 1")).first, 0);
  fs::copy(r.ckpt, backup, fs::copy_options::recursive);
  auto [rc, out] = run(cmd + " --epochs 2");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("Restored " + (backup / "ckpt-1").string() + ": 1 epoch(s) done"), std::string::npos) << out;
  EXPECT_EQ(out.find("Epoch 1/2"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(backup)) << out;
}

TEST(ResumeCommandTest, ADivergedRunLeavesTheLastGoodCheckpointInPlace) {
  TinyRun r("diverged");
  ASSERT_EQ(run(train(r.job, r.ckpt, "--epochs 1")).first, 0);
  // The same job at a learning rate that makes the loss NaN within the second epoch.
  fs::create_directories(r.s.dir / "hot");
  std::ifstream in(r.job);
  std::stringstream body;
  body << in.rdbuf();
  const std::string diverging = write_job(
      r.s.dir / "hot", std::regex_replace(body.str(), std::regex("name: adam, learning_rate: 0.01"),
                                          "name: adam, learning_rate: 1e38"));
  auto [rc, out] = run(train(diverging, r.ckpt, "--resume --epochs 2"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("no checkpoint is saved while it is not finite"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(r.ckpt / "ckpt-2")) << out;
  // The pointer still names a checkpoint whose weights are finite.
  auto [rc2, out2] = run(std::string(STRATA_BINARY) + " evaluate " + r.job + " --checkpoint " + r.ckpt.string());
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_EQ(last_line(out2).find("nan"), std::string::npos) << out2;
}

TEST(ResumeCommandTest, AResumedRunSaysFromWhichEpochItCountedExamples) {
  TinyRun r("examples");
  ASSERT_EQ(run(train(r.job, r.ckpt, "--epochs 1")).first, 0);
  auto [rc, out] = run(train(r.job, r.ckpt, "--resume --epochs 2"));
  ASSERT_EQ(rc, 0) << out;
  // Only epoch 2 ran here: its count alone would read as the whole job's.
  EXPECT_NE(out.find("examples trained per epoch (from epoch 2, where this run resumed): 512\n"), std::string::npos)
      << out;
}

TEST(ResumeCommandTest, ResumedMidEpochEndsBitwiseAsTheRunNeverStopped) {
  TinyRun r("exact");
  const fs::path whole = r.s.dir / "whole";
  ASSERT_EQ(run(train(r.job, whole, "--epochs 3")).first, 0);
  // Stop after epoch 1 (a checkpoint every 5 steps), then resume twice to 3 epochs: 16 steps an epoch.
  ASSERT_EQ(run(train(r.job, r.ckpt, "--epochs 1 --checkpoint-every 5")).first, 0);
  // Drop the epoch's final checkpoint so that the resume starts from the one at step 15, mid-epoch.
  fs::remove_all(r.ckpt / "ckpt-16");
  fs::remove(r.ckpt / "checkpoint");
  auto [rc, out] = run(train(r.job, r.ckpt, "--resume --epochs 3 --checkpoint-every 5"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("Restored " + (r.ckpt / "ckpt-15").string() + ": epoch 1 at step 15 of it"), std::string::npos)
      << out;
  EXPECT_TRUE(same_bytes(whole / "ckpt-3" / "model.safetensors", r.ckpt / "ckpt-48" / "model.safetensors"));
  EXPECT_TRUE(same_bytes(whole / "ckpt-3" / "optimizer.safetensors", r.ckpt / "ckpt-48" / "optimizer.safetensors"));
}

}  // namespace
}  // namespace strata::cli
