// `strata train --strategy pipeline`: the stages, micro-batches and schedule from flags or the job file, the
// line that says how the model was cut and how idle the stages were, the same test result as the unsplit job, and
// clear errors for pipeline settings that do not fit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>

#include "cli/cli_test_util.h"

namespace strata::cli {
namespace {

using ::testing::HasSubstr;

// The tiny job with four layers to cut.
std::string deep_job(const TinyJob& t, const std::string& extra = "") {
  return write_job(t.s.dir, std::regex_replace(tiny_job(t.s.dir), std::regex("  - dense: \\{units: 10\\}\n"),
                                               "  - dense: {units: 32, activation: relu}\n"
                                               "  - dense: {units: 32, activation: relu}\n"
                                               "  - dense: {units: 10}\n") +
                                extra);
}

// The test loss and accuracy a run printed ({-1, -1} when it printed none).
std::pair<double, double> test_result(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("test loss ([0-9.]+) - test accuracy ([0-9.]+)"))) return {-1, -1};
  return {std::stod(m[1]), std::stod(m[2])};
}

TEST(PipelineCommandTest, StagesTrainToTheUnsplitJobsResult) {
  TinyJob t("pipe_train");
  const std::string job = deep_job(t);
  auto [rc0, unsplit] = run("timeout -k 5 120 " STRATA_BINARY " train " + job);
  ASSERT_EQ(rc0, 0) << unsplit;
  auto [rc, out] = run("timeout -k 5 120 " STRATA_BINARY " train " + job +
                       " --strategy pipeline --stages 2 --micro-batches 4 --schedule zb-h1 --recompute");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("strategy: PipelineStrategy, 2 stages, 4 micro-batches, schedule zb-h1, activations "
                             "recomputed, simulated bubble"));
  EXPECT_THAT(out, HasSubstr("global batch 32 (8 per micro-batch)"));
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(pipeline: stages \[[a-z_0-9 ]+\] \[[a-z_0-9 ]+\]; idle [0-9.]+% )")))
      << out;
  // The same weights to float rounding, so the same test result.
  const auto [loss, accuracy] = test_result(out);
  const auto [unsplit_loss, unsplit_accuracy] = test_result(unsplit);
  ASSERT_GE(loss, 0) << out;
  EXPECT_NEAR(loss, unsplit_loss, 2e-4) << out << unsplit;
  EXPECT_EQ(accuracy, unsplit_accuracy) << out << unsplit;
}

TEST(PipelineCommandTest, LaunchedWorkersEachRunAReplicaAndTrainAsOnePipeline) {
  // Pipeline × data parallelism: 2 worker processes, each the whole 2-stage pipeline on half of every global batch,
  // their gradients all-reduced: the unsplit single-process job's result, on both workers; the chief alone writes.
  TinyJob t("pipe_launch");
  const std::string job = deep_job(t);
  auto [rc0, unsplit] = run("timeout -k 5 120 " STRATA_BINARY " train " + job);
  ASSERT_EQ(rc0, 0) << unsplit;
  const fs::path ckpt = t.s.dir / "ckpt";
  auto [rc, out] =
      run("timeout -k 5 180 " STRATA_BINARY " launch --workers 2 -- " STRATA_BINARY " train " + job +
          " --strategy pipeline --stages 2 --micro-batches 2 --threads 1 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("[worker:0] strategy: PipelineStrategy, 2 stages, 2 micro-batches, schedule 1f1b, "
                             "simulated bubble 33.3%, a replica on each of 2 workers (gloo), global batch 32 (16 per "
                             "worker, 8 per micro-batch)"));
  // The first epoch's mean training loss, summed over the workers' shares, is the unsplit job's to 4 decimals.
  ASSERT_NE(epoch_loss(unsplit, 1), "") << unsplit;
  EXPECT_EQ(epoch_loss(out, 1), epoch_loss(unsplit, 1)) << out << unsplit;
  EXPECT_THAT(out, HasSubstr("[worker:0] Epoch 2/2"));
  EXPECT_EQ(out.find("[worker:1] Epoch"), std::string::npos) << out;  // the chief alone shows progress
  const std::vector<std::string> lines = worker_test_lines(out);
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_EQ(lines[0], lines[1]);  // the same weights on both workers
  const auto [loss, accuracy] = test_result(out);
  const auto [unsplit_loss, unsplit_accuracy] = test_result(unsplit);
  EXPECT_NEAR(loss, unsplit_loss, 2e-4) << out << unsplit;
  EXPECT_EQ(accuracy, unsplit_accuracy) << out << unsplit;
  EXPECT_TRUE(fs::exists(ckpt / "ckpt-2")) << out;
}

TEST(PipelineCommandTest, TheJobFileCanAskForAPipeline) {
  TinyJob t("pipe_yaml");
  const std::string job = deep_job(t, "strategy: pipeline\nstages: 2\nmicro_batches: 2\nschedule: interleaved\n");
  auto [rc, out] = run("timeout -k 5 120 " STRATA_BINARY " train " + job + " --epochs 1");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("schedule interleaved (2 chunks per stage)"));
  // Four virtual stages over the four layers.
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(pipeline: stages \[\w+\] \[\w+\] \[\w+\] \[\w+\];)"))) << out;
}

TEST(PipelineCommandTest, SettingsThatDoNotFitAreClearErrors) {
  TinyJob t("pipe_errors");
  const std::string job = deep_job(t);
  auto [rc1, out1] = run(STRATA_BINARY " train " + job + " --stages 2");
  EXPECT_NE(rc1, 0);
  EXPECT_THAT(out1, HasSubstr("--stages 2: only the pipeline strategy cuts the model into stages"));
  auto [rc5, out5] = run(STRATA_BINARY " train " + job + " --recompute");
  EXPECT_NE(rc5, 0);
  EXPECT_THAT(out5, HasSubstr("--recompute: only the pipeline strategy"));
  auto [rc2, out2] = run(STRATA_BINARY " train " + job + " --strategy pipeline --schedule fifo");
  EXPECT_NE(rc2, 0);
  EXPECT_THAT(out2,
              HasSubstr("--schedule: unknown pipeline schedule 'fifo'; choose one of gpipe, 1f1b, interleaved, zb-h1"));
  auto [rc3, out3] = run(STRATA_BINARY " train " + job + " --strategy pipeline --stages 5");
  EXPECT_NE(rc3, 0);
  EXPECT_THAT(out3, HasSubstr("cannot cut 4 layers into 5 stages"));
  auto [rc4, out4] = run(STRATA_BINARY " train " + deep_job(t, "strategy: mirrored\nmicro_batches: 4\n"));
  EXPECT_NE(rc4, 0);
  EXPECT_THAT(out4, HasSubstr("micro_batches: only strategy: pipeline cuts the model into stages"));
  EXPECT_THAT(out4, HasSubstr("job.yaml:"));
}

}  // namespace
}  // namespace strata::cli
