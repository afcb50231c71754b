// A job's ps and worker services with a job secret (the process's credentials, as `strata launch` hands them),
// driven from outside the job (tests/rogue_client.h): every method without the secret is refused (UNAUTHENTICATED)
// and does nothing. A NaN pushed into a shard is not applied, Save writes no checkpoint, and no worker function
// runs; the job's own clients still work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>

#include "io/io_test_util.h"
#include "ps/proto/parameter_server.pb.h"
#include "ps/worker_client.h"
#include "rogue_client.h"
#include "strata/cluster/job_credentials.h"
#include "strata/ps/server.h"
#include "strata/ps/worker_server.h"
#include "strata/tensor.h"
#include "test_util.h"

namespace strata::ps {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

class RogueClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster::set_process_job_credentials({.secret = cluster::JobCredentials::generate_secret()});
  }
  static void TearDownTestSuite() { cluster::set_process_job_credentials({}); }
};

TEST_F(RogueClientTest, EveryPsMethodWithoutTheSecretIsRefusedAndTheShardsStayAsTheJobLeftThem) {
  test::ScratchDir dir;
  ParameterServer server;
  server.start("127.0.0.1:0", {.checkpoint_directory = dir / "ps-0"});
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  ParameterServerClient job(address);
  const Tensor initial = Tensor::full({4}, 0.5);
  job.create("model/var_4/part_0", initial, {.name = "sgd", .learning_rate = 1.0});

  proto::PushRequest nan_push;
  nan_push.set_name("model/var_4/part_0");
  nan_push.mutable_gradient()->add_shape(4);
  const float nans[4] = {NAN, NAN, NAN, NAN};
  nan_push.mutable_gradient()->set_data(std::string(reinterpret_cast<const char*>(nans), sizeof nans));
  proto::SaveRequest save;
  save.set_checkpoint(1);
  testing::RogueClient rogue(address);
  const std::vector<std::string> paths = testing::method_paths("strata.ps.proto.ParameterServer");
  ASSERT_EQ(paths.size(), 11u);  // 6 for clients, 4 between the ps tasks (replication), Rebackup from the chief
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    std::string request;
    if (path.ends_with("/Push")) request = nan_push.SerializeAsString();
    if (path.ends_with("/Save") || path.ends_with("/Restore")) request = save.SerializeAsString();
    const grpc::Status status = rogue.call(path, request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(status.error_message(), HasSubstr("the ps (job "));
  }
  test::expect_near(job.pull("model/var_4/part_0"), initial);
  EXPECT_EQ(server.pushes_applied(), 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "ps-0"));  // no checkpoint written
  EXPECT_EQ(job.save(1), 1);                              // the job's own client saves
  EXPECT_TRUE(std::filesystem::exists(dir / "ps-0/ckpt-1"));
}

TEST_F(RogueClientTest, EveryWorkerMethodWithoutTheSecretIsRefusedAndRunsNothing) {
  WorkerServer server;
  std::atomic<int> runs{0};
  server.register_function("train_step", [&](int64_t, const std::string&) {
    ++runs;
    return std::string("done");
  });
  server.start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  testing::RogueClient rogue(address);
  const std::vector<std::string> paths = testing::method_paths("strata.ps.proto.Worker");
  ASSERT_EQ(paths.size(), 2u);
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    EXPECT_EQ(rogue.call(path).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(runs.load(), 0);
  detail::WorkerClient job(address, 1000ms, 100ms);
  const detail::WorkerClient::Outcome out = job.run("train_step", 1, "", 10s);
  ASSERT_EQ(out.kind, detail::WorkerClient::Outcome::kOk) << out.lost_reason;
  EXPECT_EQ(out.result, "done");
  EXPECT_EQ(runs.load(), 1);
}

}  // namespace
}  // namespace strata::ps
