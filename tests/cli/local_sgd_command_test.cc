// `strata train --strategy local_sgd` as real processes on 127.0.0.1 under `strata launch`: the workers train with
// local steps and average their weights, say so on the strategy line, and end with the same weights (the same test
// line on both). Every process runs under `timeout` and is killed on every path.
#include <gtest/gtest.h>

#include "cli/cli_test_util.h"
#include "test_util.h"

namespace strata::cli {
namespace {

TEST(LocalSgdCommandTest, LaunchedWorkersAverageTheirWeightsAndEndEqual) {
  TinyJob t("local_sgd_launch");
  auto [rc, out] = run("timeout -k 5 120 " + std::string(STRATA_BINARY) + " launch --workers 2 -- " STRATA_BINARY
                       " train " + t.job + " --strategy local_sgd --sync-every 3 --threads 1");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[worker:0] strategy: LocalSGDStrategy, 2 replicas"), std::string::npos) << out;
  EXPECT_NE(out.find("worker 1 of 2 (gloo), weights averaged every 3 steps"), std::string::npos) << out;
  const std::vector<std::string> lines = worker_test_lines(out);
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_EQ(lines[0], lines[1]);  // averaged at every epoch's end: the same weights on both workers
}

}  // namespace
}  // namespace strata::cli
