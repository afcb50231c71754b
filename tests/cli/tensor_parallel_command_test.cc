// `strata train` of a small Transformer job (two TransformerEncoder blocks) under `--strategy tensor_parallel --tp 2`
// and under `--strategy pipeline`: the same epoch losses and test result as the unsplit job, the lines that say what
// was split or cut (the pipeline cuts between whole blocks), checkpoints that `strata evaluate` and `strata export`
// read as the unsplit model; and clear errors for --tp with another strategy, heads that do not divide over the
// ranks, and a model with nothing to split.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>

#include "cli/cli_test_util.h"

namespace strata::cli {
namespace {

using ::testing::HasSubstr;

// The tiny job with a Transformer: 28 rows of 28 pixels as tokens, 2 encoder blocks of `heads` heads.
std::string transformer_job(const TinyJob& t, int heads = 2, const std::string& extra = "") {
  return write_job(t.s.dir,
                   std::regex_replace(tiny_job(t.s.dir), std::regex("  - flatten\n  - dense: \\{units: 10\\}\n"),
                                      "  - reshape: {target_shape: [28, 28]}\n"
                                      "  - dense: {units: 16}\n"
                                      "  - position_embedding: {sequence_length: 28}\n"
                                      "  - transformer_encoder: {num_heads: " +
                                          std::to_string(heads) +
                                          ", intermediate_dim: 32, activation: gelu}\n"
                                          "  - transformer_encoder: {num_heads: " +
                                          std::to_string(heads) +
                                          ", intermediate_dim: 32, activation: gelu}\n"
                                          "  - global_average_pooling1d\n"
                                          "  - dense: {units: 10}\n") +
                       extra);
}

std::pair<double, double> test_result(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("test loss ([0-9.]+) - test accuracy ([0-9.]+)"))) return {-1, -1};
  return {std::stod(m[1]), std::stod(m[2])};
}

void expect_unsplit_result(const std::string& out, const std::string& unsplit) {
  ASSERT_NE(epoch_loss(unsplit, 1), "") << unsplit;
  EXPECT_EQ(epoch_loss(out, 1), epoch_loss(unsplit, 1)) << out << unsplit;
  EXPECT_EQ(epoch_loss(out, 2), epoch_loss(unsplit, 2)) << out << unsplit;
  const auto [loss, accuracy] = test_result(out);
  const auto [unsplit_loss, unsplit_accuracy] = test_result(unsplit);
  ASSERT_GE(loss, 0) << out;
  EXPECT_NEAR(loss, unsplit_loss, 2e-4) << out << unsplit;
  EXPECT_EQ(accuracy, unsplit_accuracy) << out << unsplit;
}

TEST(TensorParallelCommandTest, TwoRanksTrainToTheUnsplitJobsResultAndCheckpointTheWholeModel) {
  TinyJob t("tp_train");
  const std::string job = transformer_job(t);
  auto [rc0, unsplit] = run("timeout -k 5 120 " STRATA_BINARY " train " + job);
  ASSERT_EQ(rc0, 0) << unsplit;
  const fs::path ckpt = t.s.dir / "ckpt";
  auto [rc, out] = run("timeout -k 5 120 " STRATA_BINARY " train " + job +
                       " --strategy tensor_parallel --tp 2 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("strategy: TensorParallelStrategy, 2 ranks (threads of this process"));
  EXPECT_THAT(out, HasSubstr("tensor_parallel: layers reshape dense position_embedding transformer_encoder[heads/2, "
                             "mlp/2] transformer_encoder_1[heads/2, mlp/2] global_average_pooling1d dense_1"));
  expect_unsplit_result(out, unsplit);
  // The checkpoint holds the whole weights: evaluate reads the unsplit model and gets the trained result.
  auto [rc_eval, evaluated] =
      run("timeout -k 5 60 " STRATA_BINARY " evaluate " + job + " --checkpoint " + ckpt.string());
  ASSERT_EQ(rc_eval, 0) << evaluated;
  EXPECT_EQ(test_result(evaluated), test_result(out)) << evaluated << out;
  const fs::path exported = t.s.dir / "model.safetensors";
  auto [rc_export, export_out] = run("timeout -k 5 60 " STRATA_BINARY " export " + job + " --checkpoint " +
                                     ckpt.string() + " -o " + exported.string());
  ASSERT_EQ(rc_export, 0) << export_out;
  EXPECT_TRUE(fs::exists(exported));
}

TEST(TensorParallelCommandTest, APipelineOfTransformerBlocksTrainsToTheUnsplitJobsResult) {
  TinyJob t("tp_pipe");
  const std::string job = transformer_job(t);
  auto [rc0, unsplit] = run("timeout -k 5 120 " STRATA_BINARY " train " + job);
  ASSERT_EQ(rc0, 0) << unsplit;
  auto [rc, out] =
      run("timeout -k 5 120 " STRATA_BINARY " train " + job + " --strategy pipeline --stages 2 --micro-batches 4");
  ASSERT_EQ(rc, 0) << out;
  // Each block is one layer: the stages hold whole blocks.
  EXPECT_TRUE(std::regex_search(
      out, std::regex(
               R"(pipeline: stages \[[a-z_0-9 ]*transformer_encoder[a-z_0-9 ]*\] \[[a-z_0-9 ]*transformer_encoder_1)")))
      << out;
  expect_unsplit_result(out, unsplit);
}

TEST(TensorParallelCommandTest, WhatCannotBeSplitIsAClearError) {
  TinyJob t("tp_errors");
  const std::string job = transformer_job(t);
  auto [rc1, other] = run(STRATA_BINARY " train " + job + " --strategy pipeline --tp 2");
  EXPECT_NE(rc1, 0);
  EXPECT_THAT(other, HasSubstr("--tp 2: only the tensor_parallel strategy splits layers over ranks (this job's "
                               "strategy is pipeline; use --strategy tensor_parallel)"));
  auto [rc2, odd] =
      run("timeout -k 5 60 " STRATA_BINARY " train " + transformer_job(t, 3) + " --strategy tensor_parallel --tp 2");
  EXPECT_NE(rc2, 0);
  EXPECT_THAT(odd, HasSubstr("num_heads 3 is not a multiple of the 2 tensor-parallel ranks"));
  TinyJob mlp("tp_mlp");  // flatten, dense: nothing to split (transformer_job rewrote t's job file)
  auto [rc3, plain] = run("timeout -k 5 60 " STRATA_BINARY " train " + mlp.job + " --strategy tensor_parallel");
  EXPECT_NE(rc3, 0);
  EXPECT_THAT(plain, HasSubstr("has no layer to split over the ranks"));
  auto [rc4, key] = run(STRATA_BINARY " train " + transformer_job(t, 2, "tp: 2\n"));
  EXPECT_NE(rc4, 0);
  EXPECT_THAT(key, HasSubstr("tp: only strategy: tensor_parallel splits layers over ranks"));
}

}  // namespace
}  // namespace strata::cli
