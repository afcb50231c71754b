// The coordination service of a job with a secret, called from outside the job (tests/rogue_client.h: the generated
// paths over a plaintext channel): every method without the secret, with another job's, with a wrong proof or a stale
// one is refused (UNAUTHENTICATED) and changes nothing: no key is written and a Heartbeat for a task outside the
// cluster declares nobody lost (nor does one from a task of the job naming itself worker:7). A client of the job works; a client of another job is told that two jobs crossed.
// With TLS (a self-signed certificate made by the openssl tool, used as the CA: mutual TLS), the job's client works
// and a plaintext caller gets nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "cluster/proto/coordination.pb.h"
#include "cluster/rpc_credentials.h"
#include "io/io_test_util.h"
#include "rogue_client.h"
#include "strata/cluster/coordination.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::cluster {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

std::shared_ptr<const JobCredentials> job_with_secret(const std::string& secret) {
  return std::make_shared<const JobCredentials>(JobCredentials{.secret = secret});
}

class AuthenticatedCoordinationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_.start("127.0.0.1:0",
                   {.heartbeat_timeout = 500ms, .tasks = {"chief:0", "worker:0"}, .credentials = job_});
    address_ = "127.0.0.1:" + std::to_string(service_.port());
  }
  CoordinationClient::Options client_options(std::shared_ptr<const JobCredentials> credentials) {
    CoordinationClient::Options o;
    o.connect_timeout = 10s;
    o.credentials = std::move(credentials);
    return o;
  }

  const std::shared_ptr<const JobCredentials> job_ = job_with_secret(JobCredentials::generate_secret());
  CoordinationService service_;
  std::string address_;
};

TEST_F(AuthenticatedCoordinationTest, EveryMethodCalledWithoutTheSecretIsRefusedAndChangesNothing) {
  CoordinationClient chief(address_, "chief:0", client_options(job_));
  chief.set("model/step", "7");
  testing::RogueClient rogue(address_);
  const std::vector<std::string> paths = testing::method_paths("strata.cluster.Coordination");
  ASSERT_GE(paths.size(), 12u);
  SetRequest set;
  set.set_key("model/step");
  set.set_value("666");
  HeartbeatRequest heartbeat;
  heartbeat.set_task("worker:7");
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    std::string request;
    if (path.ends_with("/Set")) request = set.SerializeAsString();
    if (path.ends_with("/Heartbeat")) request = heartbeat.SerializeAsString();
    const grpc::Status status = rogue.call(path, request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(status.error_message(), HasSubstr("takes only calls that carry the job's secret"));
    EXPECT_THAT(status.error_message(), HasSubstr("(job " + job_->job_id() + ")"));
  }
  std::this_thread::sleep_for(1200ms);  // over twice the heartbeat timeout: a registered worker:7 would be lost now
  EXPECT_EQ(chief.get("model/step"), "7");
  EXPECT_EQ(chief.num_keys(), 1);
  EXPECT_TRUE(chief.lost_tasks().empty());
}

TEST_F(AuthenticatedCoordinationTest, AForgedOrStaleProofIsRefused) {
  testing::RogueClient rogue(address_);
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const std::string path = "/strata.cluster.Coordination/NumKeys";
  const JobCredentials wrong{.secret = "0123456789abcdef0123"};
  grpc::Status status = rogue.call(path, "", {{"x-strata-job-id", job_->job_id()},
                                              {"x-strata-auth", std::to_string(now_ms) + ":" +
                                                                    call_proof(wrong, "NumKeys", now_ms)}});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("does not match the job's secret"));
  // The job's own proof, recorded ten minutes ago: a replay.
  const int64_t old = now_ms - 600'000;
  status = rogue.call(path, "", {{"x-strata-job-id", job_->job_id()},
                                 {"x-strata-auth", std::to_string(old) + ":" + call_proof(*job_, "NumKeys", old)}});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("a replayed call, or clocks apart"));
  // The proof of another method does not pass for this one.
  status = rogue.call(path, "", {{"x-strata-job-id", job_->job_id()},
                                 {"x-strata-auth", std::to_string(now_ms) + ":" + call_proof(*job_, "Set", now_ms)}});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // And the right one does.
  status = rogue.call(path, "", {{"x-strata-job-id", job_->job_id()},
                                 {"x-strata-auth",
                                  std::to_string(now_ms) + ":" + call_proof(*job_, "NumKeys", now_ms)}});
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(AuthenticatedCoordinationTest, ATaskOfAnotherJobIsToldThatTwoJobsCrossed) {
  const auto other = job_with_secret(JobCredentials::generate_secret());
  CoordinationClient stranger(address_, "worker:0", client_options(other));
  test::expect_error_containing<Unauthenticated>(
      [&] { stranger.set("k", "v"); },
      {"refused by", "a task of another job (job " + other->job_id() + ")", "give each job its own ports"});
  CoordinationClient unauthenticated(address_, "worker:0", client_options(std::make_shared<JobCredentials>()));
  test::expect_error_containing<Unauthenticated>([&] { unauthenticated.check({"k"}); }, {"carried none"});
  CoordinationClient member(address_, "worker:0", client_options(job_));
  member.set("k", "v");
  EXPECT_EQ(member.get("k"), "v");
}

TEST_F(AuthenticatedCoordinationTest, ATaskNameOutsideTheClusterIsRefusedEvenWithTheSecret) {
  CoordinationClient outsider(address_, "worker:7", client_options(job_));
  test::expect_error_containing<InvalidArgument>([&] { outsider.barrier("start", 2, 2s); },
                                                 {"task worker:7 is not in this job's cluster (chief:0, worker:0)"});
}

// A certificate for 127.0.0.1 made by the openssl tool; it is its own CA.
class TlsCoordinationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string command = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
                                "-addext subjectAltName=IP:127.0.0.1 -keyout " + dir_ / "key.pem" + " -out " +
                                dir_ / "cert.pem" + " >/dev/null 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    tls_ = std::make_shared<const JobCredentials>(JobCredentials{.secret = JobCredentials::generate_secret(),
                                                                 .tls_cert_file = dir_ / "cert.pem",
                                                                 .tls_key_file = dir_ / "key.pem",
                                                                 .tls_ca_file = dir_ / "cert.pem"});
  }
  test::ScratchDir dir_;
  std::shared_ptr<const JobCredentials> tls_;
};

TEST_F(TlsCoordinationTest, TheJobsClientTalksTlsAndAPlaintextCallerGetsNothing) {
  CoordinationService service;
  service.start("127.0.0.1:0", {.tasks = {"chief:0"}, .credentials = tls_});
  const std::string address = "127.0.0.1:" + std::to_string(service.port());
  CoordinationClient::Options o;
  o.connect_timeout = 10s;
  o.credentials = tls_;
  CoordinationClient client(address, "chief:0", o);
  client.set("k", "v");
  EXPECT_EQ(client.get("k"), "v");
  testing::RogueClient rogue(address);
  const grpc::Status status = rogue.call("/strata.cluster.Coordination/Set");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(client.num_keys(), 1);
}

}  // namespace
}  // namespace strata::cluster
