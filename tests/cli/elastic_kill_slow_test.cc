// Elastic training under kills at many steps (issue 20's done-when), as real processes on 127.0.0.1 under
// `strata launch --workers 3 --min-workers 2` with no restarts: worker:2 is SIGKILLed after the chief's backup of
// step k, for five k across the epochs. Each job finishes with the two others and no process restarted; each
// survivor's regroup takes at most the heartbeat timeout (10 s) + 2 s from the discarded step's start; every epoch
// from the interrupted one on trains on each of the 2048 examples once (counted) and shows the uninterrupted run's
// mean loss, and the test result is the same. And after 48 steps with a kill after step 20, the
// weights equal the uninterrupted run's to 1e-4 relative (the last checkpoint's model.safetensors).
// Every process runs under `timeout`; the launcher kills what is left on every path.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>

#include "cli/elastic_test_util.h"
#include "strata/io/safetensors.h"

namespace strata::cli {
namespace {

// 3 workers of the tiny job, backups every 10 steps; worker:2 kills itself after backup ckpt-<kill_at> (0: never).
std::pair<int, std::string> run_job(const TinyJob& t, const fs::path& backups, int kill_at,
                                    const std::string& extra = "") {
  return elastic_job(t, {.backups = backups, .fault_after = kill_at, .backup_every = 10, .extra = extra});
}

TEST(ElasticKillTest, FiveKillsAtDifferentStepsEachCostOneStepAndChangeNothing) {
  TinyJob t("elastic_kills");
  write_tiny_idx(t.s.dir, "train", 2048, 1);  // 64 steps an epoch at the global batch of 32
  const auto [rc_whole, whole] = run_job(t, t.s.dir / "whole", 0);
  ASSERT_EQ(rc_whole, 0) << whole;
  const std::vector<std::string> expected = worker_test_lines(whole);
  ASSERT_EQ(expected.size(), 3u) << whole;
  for (int kill_at : {20, 60, 110, 140, 170}) {
    SCOPED_TRACE("killed after step " + std::to_string(kill_at));
    const auto [rc, out] = run_job(t, t.s.dir / ("killed-" + std::to_string(kill_at)), kill_at);
    ASSERT_EQ(rc, 0) << out;
    expect_two_survivors_went_on(out);  // counted: every example once in each epoch
    for (int epoch = 1 + kill_at / 64; epoch <= 3; ++epoch) {
      EXPECT_EQ(epoch_loss(out, epoch), epoch_loss(whole, epoch)) << "epoch " << epoch << "\n" << out;
    }
    const std::vector<std::string> got = worker_test_lines(out);
    ASSERT_EQ(got.size(), 2u) << out;
    for (const std::string& line : got) EXPECT_EQ(line, expected[0]) << out;
  }
}

TEST(ElasticKillTest, AfterAKillAtStep20TheWeightsAreTheUninterruptedRunsTo1e4) {
  TinyJob t("elastic_weights");  // 512 examples: 16 steps an epoch, 48 in all
  const fs::path whole_ckpt = t.s.dir / "whole-ckpt", killed_ckpt = t.s.dir / "killed-ckpt";
  const auto [rc_whole, whole] = run_job(t, t.s.dir / "whole", 0, "--checkpoint-dir " + whole_ckpt.string());
  ASSERT_EQ(rc_whole, 0) << whole;
  const auto [rc, out] = run_job(t, t.s.dir / "killed", 20, "--checkpoint-dir " + killed_ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  ASSERT_NE(out.find("membership: worker:2 left"), std::string::npos) << out;
  expect_same_weights(whole_ckpt / "ckpt-3" / "model.safetensors", killed_ckpt / "ckpt-3" / "model.safetensors");
}

}  // namespace
}  // namespace strata::cli
