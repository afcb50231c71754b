// The acceptance test of the multi-node `strata launch` (issue 34): two "machines" as Linux network namespaces
// joined by a veth pair, 10.77.0.1/24 and 10.77.0.2/24 (addresses that exist only inside the two namespaces this
// test creates; nothing is sent anywhere else), each running its own `strata launch --nnodes 2 --workers-per-node 2`
// through `ip netns exec`, with no --node-addr (each node finds its address from the route to the master).
// Covered: the four workers, with a job secret and mutual TLS, train `strata train --strategy multi_worker_mirrored` to what one process gets with the
// same global batch (the equivalence tests' tolerances: the first epoch's loss to the digits shown, the test loss
// to 2e-4 and the same accuracy, the weights to 1e-4 relative); a node whose launcher is killed (SIGKILL) mid-job
// ends the other's launcher within the node timeout plus the stop, naming it; a node whose link goes down mid-job
// ends both launchers, each naming the other. Needs root and `ip` (iproute2); skipped otherwise. The namespaces
// and every process in them are removed on every path (TwoMachines), each launcher has a deadline, and the
// rendezvous port (29400) is one inside the test's own namespaces.
// Thread-safety: none needed; each test uses its own scratch directory and namespaces.
#include <gmock/gmock.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include "cli/background_process.h"
#include "cli/cli_test_util.h"
#include "cli/launch_test_util.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/io/safetensors.h"

namespace strata::cli {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

const std::string kStrata = STRATA_BINARY;
constexpr auto kDeadline = std::chrono::seconds(180);
constexpr const char* kNodeAddress[2] = {"10.77.0.1", "10.77.0.2"};

// Two network namespaces joined by a veth pair, each end with its address and up. The destructor kills every
// process inside them (all of them this test's: launchers and their tasks) and deletes them (which deletes
// the veth pair).
class TwoMachines {
 public:
  TwoMachines() {
    const std::string id = std::to_string(::getpid());
    for (int n = 0; n < 2; ++n) {
      ns_[n] = "strata-mn" + std::to_string(n) + "-" + id;
      veth_[n] = "smn" + std::to_string(n) + "-" + id;  // at most 15 characters
    }
    teardown();  // what a crashed run with this pid left
    error_ = setup();
  }
  ~TwoMachines() { teardown(); }
  TwoMachines(const TwoMachines&) = delete;
  TwoMachines& operator=(const TwoMachines&) = delete;

  // Empty when both machines are ready; else what failed.
  const std::string& error() const { return error_; }
  // The prefix that runs a command on machine `n`.
  std::string on(int n) const { return "ip netns exec " + ns_[n] + " "; }
  // Takes machine `n`'s link down (its network goes away).
  void link_down(int n) const {
    const auto [rc, out] = run("ip -n " + ns_[n] + " link set " + veth_[n] + " down");
    EXPECT_EQ(rc, 0) << out;
  }

 private:
  std::string setup() {
    std::vector<std::string> steps = {"ip netns add " + ns_[0], "ip netns add " + ns_[1],
                                      "ip link add " + veth_[0] + " type veth peer name " + veth_[1]};
    for (int n = 0; n < 2; ++n) {
      steps.push_back("ip link set " + veth_[n] + " netns " + ns_[n]);
      steps.push_back("ip -n " + ns_[n] + " addr add " + kNodeAddress[n] + "/24 dev " + veth_[n]);
      steps.push_back("ip -n " + ns_[n] + " link set " + veth_[n] + " up");
      steps.push_back("ip -n " + ns_[n] + " link set lo up");
    }
    for (const auto& step : steps) {
      const auto [rc, out] = run(step);
      if (rc != 0) return "'" + step + "' failed: " + out;
    }
    return "";
  }
  void teardown() {
    for (int n = 0; n < 2; ++n) {
      // Every process in the namespace is one this test started.
      const auto [rc, pids] = run("ip netns pids " + ns_[n]);
      std::istringstream in(pids);
      for (std::string pid; rc == 0 && in >> pid;) {
        if (pid.find_first_not_of("0123456789") == std::string::npos) ::kill(std::stoi(pid), SIGKILL);
      }
      run("ip netns delete " + ns_[n]);
    }
    run("ip link delete " + veth_[0]);  // when it never moved into its namespace
  }

  std::string ns_[2], veth_[2];
  std::string error_;
};

// Why the test cannot run here, or "".
std::string cannot_run() {
  if (::geteuid() != 0) return "needs root (it creates network namespaces)";
  if (std::system("command -v ip > /dev/null 2>&1") != 0) return "needs `ip` (Debian package iproute2)";
  return "";
}

// Node `rank`'s launcher on its machine: `strata launch --nnodes 2 ... -- sh -c SCRIPT`.
std::string node_launch(const TwoMachines& m, int rank, const std::string& flags, const std::string& script) {
  return m.on(rank) + kStrata + " launch --nnodes 2 --node-rank " + std::to_string(rank) +
         " --master-addr 10.77.0.1 --master-port 29400 --workers-per-node 2 " + flags + " -- sh -c " + shell_quote(script);
}

// A job secret (mode 600) and TLS for the two machines' job, in `dir`: a self-signed certificate for both
// addresses, made by the openssl tool, that is also the CA (mutual TLS). The launcher flags that use them.
std::string tls_flags(const fs::path& dir) {
  const std::string key = (dir / "key.pem").string(), cert = (dir / "cert.pem").string();
  const std::string secret = (dir / "job.secret").string();
  const std::string make = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=strata-test -addext "
                           "subjectAltName=IP:10.77.0.1,IP:10.77.0.2,IP:127.0.0.1 -keyout " + key + " -out " + cert +
                           " >/dev/null 2>&1 && openssl rand -hex 32 > " + secret + " && chmod 600 " + secret;
  EXPECT_EQ(std::system(make.c_str()), 0) << make;
  return "--job-secret-file " + secret + " --tls-cert " + cert + " --tls-key " + key + " --tls-ca " + cert;
}

std::pair<double, double> test_result(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("test loss ([0-9.]+) - test accuracy ([0-9.]+)"))) return {-1, -1};
  return {std::stod(m[1]), std::stod(m[2])};
}

TEST(LaunchTwoMachines, FourWorkersOnTwoMachinesTrainToWhatOneProcessGets) {
  if (const std::string why = cannot_run(); !why.empty()) GTEST_SKIP() << why;
  TwoMachines machines;
  if (!machines.error().empty()) GTEST_SKIP() << "cannot create the namespaces: " << machines.error();
  TinyJob t("netns_train");  // 512 examples: 16 steps an epoch at the global batch of 32, 2 epochs
  const fs::path reference = t.s.dir / "reference", ckpt = t.s.dir / "ckpt";
  const auto [rc_one, one] =
      run("timeout -k 5 120 " + kStrata + " train " + t.job + " --threads 1 --checkpoint-dir " + reference.string());
  ASSERT_EQ(rc_one, 0) << one;

  const std::string script = "echo \"TF_CONFIG=$TF_CONFIG\"; exec " + kStrata + " train " + t.job +
                             " --strategy multi_worker_mirrored --threads 1 --checkpoint-dir " + ckpt.string();
  const std::string tls = tls_flags(t.s.dir);  // the job's services across the two machines talk TLS
  BackgroundProcess node1(node_launch(machines, 1, tls, script), t.s.dir / "node1.log");
  BackgroundProcess node0(node_launch(machines, 0, tls, script), t.s.dir / "node0.log");
  const std::optional<int> rc0 = node0.wait_for(kDeadline), rc1 = node1.wait_for(kDeadline);
  const std::string out0 = node0.output(), out1 = node1.output();
  ASSERT_EQ(rc0, std::optional<int>(0)) << out0 << "---- node 1:\n" << out1;
  ASSERT_EQ(rc1, std::optional<int>(0)) << out1 << "---- node 0:\n" << out0;

  // Each node found its own address, and its tasks listen on it.
  EXPECT_THAT(out0, HasSubstr("strata launch: node 0 of 2 at 10.77.0.1: worker:0, worker:1"));
  EXPECT_THAT(out1, HasSubstr("strata launch: node 1 of 2 at 10.77.0.2: worker:2, worker:3"));
  int seen = 0;
  for (const std::string* out : {&out0, &out1}) {
    const std::regex line(R"(\[(worker:\d)\] TF_CONFIG=(.*))");
    for (std::sregex_iterator it(out->begin(), out->end(), line), end; it != end; ++it) {
      const cluster::TaskInfo info = cluster::resolve_tf_config((*it)[2]);
      EXPECT_EQ(info.name(), (*it)[1]);
      EXPECT_EQ(info.num_workers, 4);
      EXPECT_EQ(cluster::parse_address(info.address, "address").host, kNodeAddress[info.task_index / 2]);
      ++seen;
    }
  }
  EXPECT_EQ(seen, 4) << out0 << out1;

  // One process's result: the first epoch's loss as shown, the same test result on all four workers.
  ASSERT_NE(epoch_loss(one, 1), "") << one;
  EXPECT_EQ(epoch_loss(out0, 1), epoch_loss(one, 1)) << out0 << one;
  std::vector<std::string> lines = worker_test_lines(out0);
  for (const auto& l : worker_test_lines(out1)) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u) << out0 << out1;
  for (const auto& l : lines) EXPECT_EQ(l, lines[0]);
  const auto [loss, accuracy] = test_result(out0);
  const auto [one_loss, one_accuracy] = test_result(one);
  ASSERT_GE(loss, 0) << out0;
  EXPECT_NEAR(loss, one_loss, 2e-4) << out0 << one;
  EXPECT_EQ(accuracy, one_accuracy) << out0 << one;
  expect_same_weights(reference / "ckpt-2" / "model.safetensors", ckpt / "ckpt-2" / "model.safetensors");
}

// Starts a long job on both machines and, once the chief trains its second epoch, does `strike` (kill node 1's
// launcher, or take a link down). Returns both launchers' exit statuses and outputs and how long each took to end
// after the strike (the launchers of the job run with --node-timeout 3 and the default --stop-timeout 5).
struct Struck {
  std::optional<int> code[2];
  std::string out[2];
  double seconds[2] = {0, 0};
};
Struck strike_mid_job(const TwoMachines& machines, const std::string& name,
                      const std::function<void(BackgroundProcess& node1)>& strike) {
  TinyJob t(name, 2048);  // 64 steps an epoch; far more epochs than the test waits for
  const std::string script =
      "exec " + kStrata + " train " + t.job + " --strategy multi_worker_mirrored --threads 1 --epochs 100";
  // (Unauthenticated, as --insecure allows beyond loopback.)
  BackgroundProcess node0(node_launch(machines, 0, "--node-timeout 3 --insecure", script), t.s.dir / "node0.log");
  BackgroundProcess node1(node_launch(machines, 1, "--node-timeout 3 --insecure", script), t.s.dir / "node1.log");
  Struck s;
  if (!node0.wait_for_output("[worker:0] Epoch 2/", kDeadline)) {
    ADD_FAILURE() << "the job did not reach its second epoch:\n"
                  << node0.output() << "---- node 1:\n"
                  << node1.output();
    return s;
  }
  strike(node1);
  const auto struck = Clock::now();
  BackgroundProcess* nodes[2] = {&node0, &node1};
  bool ended[2] = {false, false};
  while (!(ended[0] && ended[1]) && Clock::now() - struck < std::chrono::seconds(120)) {
    for (int n = 0; n < 2; ++n) {
      if (!ended[n] && nodes[n]->wait_for(std::chrono::seconds(0))) {
        ended[n] = true;
        s.seconds[n] = std::chrono::duration<double>(Clock::now() - struck).count();
      }
    }
    ::usleep(10000);
  }
  for (int n = 0; n < 2; ++n) {
    s.code[n] = nodes[n]->wait_for(std::chrono::seconds(0));
    s.out[n] = nodes[n]->output();
  }
  return s;
}

TEST(LaunchTwoMachines, ANodeKilledMidJobEndsTheOtherNamingIt) {
  if (const std::string why = cannot_run(); !why.empty()) GTEST_SKIP() << why;
  TwoMachines machines;
  if (!machines.error().empty()) GTEST_SKIP() << "cannot create the namespaces: " << machines.error();
  const Struck s = strike_mid_job(machines, "netns_kill", [](BackgroundProcess& node1) { node1.signal(SIGKILL); });
  if (HasFailure()) return;
  EXPECT_EQ(s.code[1], std::optional<int>(128 + SIGKILL)) << s.out[1];
  ASSERT_TRUE(s.code[0].has_value()) << "node 0's launcher did not end:\n" << s.out[0];
  EXPECT_NE(*s.code[0], 0) << s.out[0];
  // Its workers may fail first (their peers are gone), but the launcher ends naming the lost node.
  EXPECT_THAT(s.out[0], HasSubstr("strata: error: launch: node 1 of 2 (10.77.0.2) was lost: no heartbeat for "))
      << s.out[0];
  // The node timeout (3 s), the heartbeat monitor's period, and the stop (SIGTERM; SIGKILL after 5 s).
  EXPECT_LT(s.seconds[0], 3 + 5 + 4.0) << s.out[0];
  std::printf("node 1's launcher killed mid-job: node 0's launcher ended %.2f s later\n", s.seconds[0]);
}

TEST(LaunchTwoMachines, ANodeWhoseLinkGoesDownMidJobEndsBothLaunchersEachNamingTheOther) {
  if (const std::string why = cannot_run(); !why.empty()) GTEST_SKIP() << why;
  TwoMachines machines;
  if (!machines.error().empty()) GTEST_SKIP() << "cannot create the namespaces: " << machines.error();
  const Struck s = strike_mid_job(machines, "netns_link", [&](BackgroundProcess&) { machines.link_down(1); });
  if (HasFailure()) return;
  for (int n = 0; n < 2; ++n) {
    ASSERT_TRUE(s.code[n].has_value()) << "node " << n << "'s launcher did not end:\n" << s.out[n];
    EXPECT_NE(*s.code[n], 0) << s.out[n];
    EXPECT_LT(s.seconds[n], 3 + 5 + 4.0) << s.out[n];
  }
  EXPECT_THAT(s.out[0], HasSubstr("strata: error: launch: node 1 of 2 (10.77.0.2) was lost: no heartbeat for "))
      << s.out[0];
  EXPECT_THAT(s.out[1], HasSubstr("strata: error: launch: node 0 of 2 (the master, serving the rendezvous at "
                                  "10.77.0.1:29400) is gone: no heartbeat answered for "))
      << s.out[1];
  std::printf("node 1's link down mid-job: node 0's launcher ended %.2f s later, node 1's %.2f s later\n", s.seconds[0],
              s.seconds[1]);
}

}  // namespace
}  // namespace strata::cli
