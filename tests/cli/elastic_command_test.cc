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

#include "cli/cli_test_util.h"

namespace strata::cli {
namespace {

// `strata launch --workers 3 --min-workers M -- sh worker.sh`; after backup ckpt-<kill_at> (0: never) worker:2 does
// `fault` to itself: "kill -9 $$", or "kill -STOP $$; sleep 12; kill -CONT $$".
std::pair<int, std::string> elastic_job(const TinyJob& t, const fs::path& ckpt, int kill_at, int min_workers,
                                        const std::string& fault = "kill -9 $$", int max_restarts = 0) {
  const std::string train = std::string(STRATA_BINARY) + " train " + t.job +
                            " --strategy multi_worker_mirrored --threads 1 --epochs 3 --backup-every-steps 50"
                            " --backup-dir " +
                            ckpt.string();
  std::string script = "exec " + train;
  if (kill_at > 0) {
    script =
        "if [ \"$STRATA_LAUNCH_RESTART\" = 0 ] && echo \"$TF_CONFIG\" | grep -q '\"index\": *2'; then "
        "(while [ ! -e " +
        (ckpt / ("ckpt-" + std::to_string(kill_at))).string() + " ]; do sleep 0.005; done; " + fault + ") & fi; " +
        script;
  }
  std::ofstream(t.s.dir / "worker.sh") << script << "\n";
  return run("timeout -k 5 240 " + std::string(STRATA_BINARY) + " launch --workers 3 --min-workers " +
             std::to_string(min_workers) + " --max-restarts " + std::to_string(max_restarts) + " -- sh " +
             (t.s.dir / "worker.sh").string());
}

TEST(ElasticCommandTest, TheSurvivorsOfAKilledWorkerGoOnWithoutRestarting) {
  TinyJob t("elastic_kill");
  write_tiny_idx(t.s.dir, "train", 2048, 1);  // 64 steps an epoch at the global batch of 32
  const auto [rc_whole, out_whole] = elastic_job(t, t.s.dir / "whole", 0, 2);
  ASSERT_EQ(rc_whole, 0) << out_whole;
  const auto [rc, out] = elastic_job(t, t.s.dir / "killed", 100, 2);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(
      out.find("worker:2 was killed by signal 9 (SIGKILL); 2 workers go on without it (elastic, --min-workers 2)"),
      std::string::npos)
      << out;
  EXPECT_EQ(out.find("restart"), std::string::npos) << out;  // no process restarted
  // One line per survivor about the change, within the heartbeat timeout + 2 s.
  const std::regex change(R"(\[worker:([01])\] membership: worker:2 left; 2 workers go on \(membership epoch 1\), )"
                          R"(regrouped in ([0-9.]+) s)");
  int changes = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), change), end; it != end; ++it) {
    ++changes;
    EXPECT_LT(std::stod((*it)[2]), 12.0) << out;
  }
  EXPECT_EQ(changes, 2) << out;
  // Every step of the 3 epochs was trained (the interrupted one again), on the same global batches.
  for (const char* w : {"[worker:0]", "[worker:1]"}) {
    EXPECT_NE(out.find(std::string(w) + " training ended after epoch 3 of 3: 192 optimizer steps in all; examples "
                                        "trained per epoch: 2048 2048 2048"),
              std::string::npos)
        << out;
  }
  // The interrupted epoch's mean loss (the job's sum over every example of it, the lost worker's share before the
  // kill included) and the next epoch's are the uninterrupted run's: no example lost or trained twice.
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
  const auto [rc, out] = elastic_job(t, t.s.dir / "ckpt", 100, 3);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("worker:2 was killed by signal 9 (SIGKILL); 2 workers remain, fewer than --min-workers 3"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("stopping the other tasks"), std::string::npos) << out;
  // Relaunched, the job resumes from the last backup (step 100 or later) and completes.
  const auto [rc2, out2] = elastic_job(t, t.s.dir / "ckpt", 0, 3);
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_TRUE(std::regex_search(out2, std::regex(R"(\[worker:0\] Restored .*ckpt-[0-9]+: epoch [0-9] at step)")))
      << out2;
  EXPECT_NE(out2.find("[worker:0] training ended after epoch 3 of 3: 192 optimizer steps in all"), std::string::npos)
      << out2;
}

TEST(ElasticCommandTest, LosingTheChiefEndsTheJobWhichResumesFromTheBackup) {
  // The coordination service lives on the chief (worker:0): its loss ends the job; a relaunch resumes.
  TinyJob t("elastic_chief");
  write_tiny_idx(t.s.dir, "train", 2048, 1);
  const fs::path ckpt = t.s.dir / "ckpt";
  const std::string script = "if echo \"$TF_CONFIG\" | grep -q '\"index\": *0'; then (while [ ! -e " +
                             (ckpt / "ckpt-100").string() + " ]; do sleep 0.005; done; kill -9 $$) & fi; exec " +
                             std::string(STRATA_BINARY) + " train " + t.job +
                             " --strategy multi_worker_mirrored --threads 1 --epochs 3 --backup-every-steps 50"
                             " --backup-dir " +
                             ckpt.string();
  std::ofstream(t.s.dir / "chief.sh") << script << "\n";
  const auto [rc, out] = run("timeout -k 5 120 " + std::string(STRATA_BINARY) +
                             " launch --workers 3 --min-workers 2 -- sh " + (t.s.dir / "chief.sh").string());
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("worker:0 was killed by signal 9 (SIGKILL)"), std::string::npos) << out;
  EXPECT_NE(out.find("stopping the other tasks"), std::string::npos) << out;
  const auto [rc2, out2] = elastic_job(t, ckpt, 0, 2);
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_TRUE(std::regex_search(out2, std::regex(R"(\[worker:0\] Restored .*ckpt-[0-9]+: epoch [0-9] at step)")))
      << out2;
  EXPECT_NE(out2.find("[worker:1] training ended after epoch 3 of 3: 192 optimizer steps in all"), std::string::npos)
      << out2;
}

TEST(ElasticCommandTest, AStoppedWorkerIsEvictedAndTheOthersGoOn) {
  // worker:2 stops (SIGSTOP) for 12 s: the others' step ends at the collective bound (the heartbeat timeout), they
  // regroup without it, and when it wakes it learns that it was evicted and exits, while the job goes on.
  TinyJob t("elastic_stop");
  write_tiny_idx(t.s.dir, "train", 16384, 1);  // 512 steps an epoch: the others still train when it wakes
  const auto [rc, out] = elastic_job(t, t.s.dir / "ckpt", 100, 2, "kill -STOP $$; sleep 12; kill -CONT $$");
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
  const auto [rc_whole, out_whole] = elastic_job(t, t.s.dir / "whole", 0, 2);
  ASSERT_EQ(rc_whole, 0) << out_whole;
  const auto [rc, out] = elastic_job(t, t.s.dir / "killed", 100, 2, "kill -9 $$", 1);
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
