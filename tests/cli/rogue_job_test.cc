// A parameter-server job under `strata launch` driven from outside while it trains (issue 36's hostile test): the
// test process, with the project's generated stubs (tests/rogue_client.h) and no secret, calls every method of the
// ps and of the worker over and over: pushes NaN into a shard, asks for a checkpoint in a directory of its choosing,
// runs the worker's training step. Every call is refused (UNAUTHENTICATED), no directory appears, and the job ends
// with the test line of an undisturbed run (one worker, synchronous rounds: a run is deterministic). The launcher
// hands every task the same job secret in its environment, never on its command line. Every process runs under
// `timeout` and is killed on every path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "cli/background_process.h"
#include "cli/cli_test_util.h"
#include "ps/proto/parameter_server.pb.h"
#include "ps/proto/worker.pb.h"
#include "rogue_client.h"
#include "test_util.h"

namespace strata::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string test_line(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex(R"(\[chief:0\] (test loss [0-9.]+ - test accuracy [0-9.]+))"))
             ? m[1].str()
             : "";
}

// The address of `type`:0 in the TF_CONFIG the chief's task printed; "" before it did.
std::string address_of(const std::string& out, const std::string& type) {
  std::smatch m;
  const std::regex config("\\[chief:0\\] TF_CONFIG=.*\"" + type + "\":\\[\"([0-9.:]+)\"");
  return std::regex_search(out, m, config) ? m[1].str() : "";
}

TEST(RogueJobTest, CallsFromOutsideTheJobAreRefusedAndTheJobEndsAsAnUndisturbedRun) {
  TinyJob t("rogue_job", 2048);  // 64 steps an epoch at the batch of 32
  const std::string script = "echo \"TF_CONFIG=$TF_CONFIG\"; echo \"secret=${#STRATA_JOB_SECRET}\"; ps -o args= -p $$; "
                             "exec " + std::string(STRATA_BINARY) + " train " + t.job +
                             " --strategy parameter_server --max-staleness 0 --threads 1 --verbose 2 --epochs 2";
  std::ofstream(t.s.dir / "task.sh") << script << "\n";
  const std::string launch = "timeout -k 5 240 " + std::string(STRATA_BINARY) +
                             " launch --chief --workers 1 --ps 1 -- sh " + (t.s.dir / "task.sh").string();
  const auto [rc_quiet, quiet] = run(launch);
  ASSERT_EQ(rc_quiet, 0) << quiet;
  ASSERT_NE(test_line(quiet), "") << quiet;

  BackgroundProcess job(launch, t.s.dir / "job.log");
  ASSERT_TRUE(job.wait_for_output("[chief:0] Epoch 1/", std::chrono::seconds(120))) << job.output();
  const std::string ps = address_of(job.output(), "ps"), worker = address_of(job.output(), "worker");
  ASSERT_NE(ps, "") << job.output();
  ASSERT_NE(worker, "") << job.output();

  ps::proto::PushRequest nan_push;
  nan_push.set_name("model/var_0/part_0");
  const float nans[2] = {NAN, NAN};
  nan_push.mutable_gradient()->add_shape(2);
  nan_push.mutable_gradient()->set_data(std::string(reinterpret_cast<const char*>(nans), sizeof nans));
  ps::proto::SaveRequest save;
  save.set_checkpoint(1);
  std::map<std::string, std::string> requests;  // path -> request
  for (const std::string& path : testing::method_paths("strata.ps.proto.ParameterServer")) {
    requests[ps + path] = path.ends_with("/Push")                                     ? nan_push.SerializeAsString()
                          : path.ends_with("/Save") || path.ends_with("/Restore") ? save.SerializeAsString()
                                                                                   : "";
  }
  ps::proto::RunFunctionRequest step;  // the training step, as the chief asks for it
  step.set_function("train_step");
  for (const std::string& path : testing::method_paths("strata.ps.proto.Worker")) {
    requests[worker + path] = path.ends_with("/RunFunction") ? step.SerializeAsString() : "";
  }
  ASSERT_EQ(requests.size(), 13u);  // the ps's 11 methods (4 of them between ps tasks) and the worker's 2
  testing::RogueClient ps_rogue(ps), worker_rogue(worker);
  std::set<std::string> refused;
  int calls = 0;
  while (!job.wait_for(std::chrono::seconds(0))) {  // until the job ends
    for (const auto& [target, request] : requests) {
      const std::string path = target.substr(target.find('/'));
      const grpc::Status status = (target.rfind(ps, 0) == 0 ? ps_rogue : worker_rogue).call(path, request);
      ++calls;
      EXPECT_NE(status.error_code(), grpc::StatusCode::OK) << path;
      if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) refused.insert(target);
    }
  }
  const std::optional<int> rc = job.wait_for(std::chrono::seconds(0));
  const std::string out = job.output();
  ASSERT_EQ(rc, std::optional<int>(0)) << out;
  EXPECT_EQ(refused.size(), requests.size()) << calls << " calls\n" << out;
  EXPECT_EQ(test_line(out), test_line(quiet)) << out;
  // One secret of 64 characters for every task, handed in the environment: no command line shows it.
  EXPECT_EQ(std::regex_search(out, std::regex(R"(\[(chief:0|worker:0|ps:0)\] secret=64)")), true) << out;
  EXPECT_THAT(out, Not(HasSubstr("STRATA_JOB_SECRET=")));
}

}  // namespace
}  // namespace strata::cli
