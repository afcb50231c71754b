// Elastic synchronous training as real processes on 127.0.0.1: `strata launch --workers 3 --min-workers M` runs
// `strata train --strategy multi_worker_mirrored`, and worker:2 kills itself with SIGKILL once the chief has saved
// the backup of step 100 (mid-epoch 2). With M = 2 the other two regroup without it (no process restarts): they
// say so within the heartbeat timeout (10 s) + 2 s of the discarded step's start, train every remaining step of the
// same global batches, and end with the uninterrupted job's result. With M = 3 the launcher ends the job naming the
// lost worker. Every process runs under
// `timeout` and the launcher kills what is left on every path.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "cli/elastic_test_util.h"

namespace strata::cli {
namespace {

TEST(ElasticCommandTest, TheSurvivorsOfAKilledWorkerGoOnWithoutRestarting) {
  TinyJob t("elastic_kill");
  write_tiny_idx(t.s.dir, "train", 2048, 1);  // 64 steps an epoch at the global batch of 32
  const auto [rc_whole, out_whole] = elastic_job(t, {.backups = t.s.dir / "whole"});
  ASSERT_EQ(rc_whole, 0) << out_whole;
  const auto [rc, out] = elastic_job(t, {.backups = t.s.dir / "killed", .fault_after = 100});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(
      out.find("worker:2 was killed by signal 9 (SIGKILL); 2 workers go on without it (elastic, --min-workers 2)"),
      std::string::npos)
      << out;
  expect_two_survivors_went_on(out);
  // The interrupted epoch's mean loss (the job's sum over every example of it, the lost worker's share before the
  // kill included) and the next epoch's are the uninterrupted run's.
  for (int epoch : {2, 3}) {
    ASSERT_NE(epoch_loss(out_whole, epoch), "") << out_whole;
    EXPECT_EQ(epoch_loss(out, epoch), epoch_loss(out_whole, epoch)) << "epoch " << epoch << "\n" << out;
  }
  const auto expected = worker_test_lines(out_whole), got = worker_test_lines(out);
  ASSERT_EQ(expected.size(), 3u) << out_whole;
  ASSERT_EQ(got.size(), 2u) << out;
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[0], expected[0]);  // the uninterrupted job's weights (to float rounding): its result
}

TEST(ElasticCommandTest, BelowMinWorkersTheJobEndsNamingTheLostWorkerAndResumesFromTheBackup) {
  TinyJob t("elastic_below");
  write_tiny_idx(t.s.dir, "train", 2048, 1);
  const auto [rc, out] = elastic_job(t, {.backups = t.s.dir / "ckpt", .fault_after = 100, .min_workers = 3});
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("worker:2 was killed by signal 9 (SIGKILL); 2 workers remain, fewer than --min-workers 3"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("stopping the other tasks"), std::string::npos) << out;
  // Relaunched, the job resumes from the last backup and completes.
  expect_resumed_to_the_end(elastic_job(t, {.backups = t.s.dir / "ckpt", .min_workers = 3}));
}

TEST(ElasticCommandTest, LosingTheChiefEndsTheJobWhichResumesFromTheBackup) {
  // The coordination service lives on the chief (worker:0): its loss ends the job; a relaunch resumes.
  TinyJob t("elastic_chief");
  write_tiny_idx(t.s.dir, "train", 2048, 1);
  const auto [rc, out] = elastic_job(t, {.backups = t.s.dir / "ckpt", .fault_after = 100, .victim = 0});
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("worker:0 was killed by signal 9 (SIGKILL)"), std::string::npos) << out;
  EXPECT_NE(out.find("stopping the other tasks"), std::string::npos) << out;
  expect_resumed_to_the_end(elastic_job(t, {.backups = t.s.dir / "ckpt"}));
}

TEST(ElasticCommandTest, AStoppedWorkerIsEvictedAndTheOthersGoOn) {
  // worker:2 stops (SIGSTOP) for 12 s: the others' step ends at the collective bound (the heartbeat timeout), they
  // regroup without it, and when it wakes it learns that it was evicted and exits, while the job goes on.
  TinyJob t("elastic_stop");
  write_tiny_idx(t.s.dir, "train", 16384, 1);  // 512 steps an epoch: the others still train when it wakes
  const auto [rc, out] = elastic_job(
      t, {.backups = t.s.dir / "ckpt", .fault_after = 100, .fault = "kill -STOP $$; sleep 12; kill -CONT $$"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[worker:0] membership: worker:2 left; 2 workers go on (membership epoch 1)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("this task (worker:2) is no longer a member of the group"), std::string::npos) << out;
  EXPECT_NE(out.find("worker:2 exited with status 1; 2 workers go on without it"), std::string::npos) << out;
  EXPECT_NE(out.find("[worker:1] training ended after epoch 3 of 3: 1536 optimizer steps in all"), std::string::npos)
      << out;
}

TEST(ElasticCommandTest, ARestartedWorkerRejoinsAndTheJobEndsAsIfNothingHappened) {
  // worker:2 is killed after step 100 and restarted alone by the launcher: the others go on without it, admit it at
  // a step boundary, and the chief sends it the weights, the optimizer state and the input position; all three end
  // with the uninterrupted job's steps and result.
  TinyJob t("elastic_rejoin");
  write_tiny_idx(t.s.dir, "train", 2048, 1);
  const auto [rc_whole, out_whole] = elastic_job(t, {.backups = t.s.dir / "whole"});
  ASSERT_EQ(rc_whole, 0) << out_whole;
  const auto [rc, out] = elastic_job(t, {.backups = t.s.dir / "killed", .fault_after = 100, .max_restarts = 1});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("worker:2 was killed by signal 9 (SIGKILL); restarting it alone"), std::string::npos) << out;
  EXPECT_NE(out.find("worker:2 restarted: it joins the running job at a step boundary"), std::string::npos) << out;
  EXPECT_NE(out.find("[worker:0] membership: worker:2 joined; 3 workers"), std::string::npos) << out;
  EXPECT_NE(out.find("[worker:2] membership: worker:2 joined; 3 workers"), std::string::npos) << out;
  for (const char* w : {"[worker:0]", "[worker:1]", "[worker:2]"}) {
    EXPECT_NE(out.find(std::string(w) + " training ended after epoch 3 of 3: 192 optimizer steps in all"),
              std::string::npos)
        << out;
  }
  for (int epoch : {2, 3}) EXPECT_EQ(epoch_loss(out, epoch), epoch_loss(out_whole, epoch)) << out;
  const auto expected = worker_test_lines(out_whole), got = worker_test_lines(out);
  ASSERT_EQ(got.size(), 3u) << out;
  for (const std::string& line : got) EXPECT_EQ(line, expected[0]) << out;
}

}  // namespace
}  // namespace strata::cli
