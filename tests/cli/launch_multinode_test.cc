// `strata launch --nnodes N` (src/cli/launch_command.cc, launch_rendezvous.cc) with every "node" on 127.0.0.1: one
// launcher per node, all meeting at a master port the test picked free, running tiny shell tasks. Covered: where
// each task goes (node_tasks, layout_cluster) and the TF_CONFIG every task of every node sees; a parameter-server
// layout that ends when the chief does; a node that never comes (named after --rdzv-timeout, by node 0 and by
// the others), node 0 that never comes; a task failing on one node stopping every node's tasks, with the same
// status everywhere; a restart of every node; a launcher's SIGTERM stopping the others; a launcher killed with
// SIGKILL (node 1, and node 0 serving the rendezvous) named by the survivor within --node-timeout; flags that
// disagree between nodes and a rank taken twice. Every launcher runs with a deadline and is killed on every path;
// the tasks' pids are checked to be gone.
// Thread-safety: none needed; each test uses its own scratch directory.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <set>

#include "cli/background_process.h"
#include "cli/cli_test_util.h"
#include "cli/launch_test_util.h"
#include "cli/launch_rendezvous.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

const std::string kStrata = STRATA_BINARY;
constexpr auto kDeadline = std::chrono::seconds(60);  // any launcher of these tests ends well before

// The launcher of node `rank` of a job at 127.0.0.1:port, running `sh -c SCRIPT`.
std::string node_launch(int nnodes, int rank, int port, const std::string& flags, const std::string& script) {
  return kStrata + " launch --nnodes " + std::to_string(nnodes) + " --node-rank " + std::to_string(rank) +
         " --master-addr 127.0.0.1 --master-port " + std::to_string(port) + " " + flags + " -- sh -c " + shell_quote(script);
}

// One launcher per node, each its own background process with its own log.
struct Nodes {
  Scratch scratch;
  std::vector<std::unique_ptr<BackgroundProcess>> launchers;
  explicit Nodes(const std::string& name) : scratch(name) {}
  BackgroundProcess& start(const std::string& command) {
    const fs::path log = scratch.dir / ("node" + std::to_string(launchers.size()) + ".log");
    launchers.push_back(std::make_unique<BackgroundProcess>(command, log));
    return *launchers.back();
  }
  // Every launcher's exit status (-1 for one still running after the deadline, which fails the test).
  std::vector<int> wait_all() {
    std::vector<int> codes;
    for (size_t i = 0; i < launchers.size(); ++i) {
      const std::optional<int> code = launchers[i]->wait_for(kDeadline);
      EXPECT_TRUE(code.has_value()) << "node " << i << "'s launcher is still running after " << kDeadline.count()
                                    << " s:\n"
                                    << launchers[i]->output();
      codes.push_back(code.value_or(-1));
    }
    return codes;
  }
  std::string output(size_t node) const { return launchers[node]->output(); }
  std::string all_output() const {
    std::string text;
    for (size_t i = 0; i < launchers.size(); ++i) text += "---- node " + std::to_string(i) + ":\n" + output(i);
    return text;
  }
};

// Shell: record this task's pid in `pids`, then wait until `n` tasks have (so that all run before one fails).
std::string record_and_await(const fs::path& pids, int n) {
  return "echo $$ >> " + pids.string() + "; until [ $(cat " + pids.string() + " | wc -l) -ge " + std::to_string(n) +
         " ]; do sleep 0.05; done; ";
}

// Shell test of the task: `is worker 3` is true in worker:3.
const std::string kIs = "is() { echo \"$TF_CONFIG\" | grep -q \"\\\"index\\\":$2,\\\"type\\\":\\\"$1\\\"\"; }; ";

TEST(LaunchLayout, TasksArePlacedByNode) {
  const launch::NodeLayout layout{.nnodes = 3, .workers_per_node = 2, .chief = true, .ps = 4};
  const auto names = [&](int node) {
    std::vector<std::string> out;
    for (const auto& t : launch::node_tasks(layout, node)) out.push_back(t.name());
    return out;
  };
  EXPECT_EQ(names(0), (std::vector<std::string>{"chief:0", "worker:0", "worker:1", "ps:0", "ps:3"}));
  EXPECT_EQ(names(1), (std::vector<std::string>{"worker:2", "worker:3", "ps:1"}));
  EXPECT_EQ(names(2), (std::vector<std::string>{"worker:4", "worker:5", "ps:2"}));
  const cluster::ClusterSpec spec = launch::layout_cluster(
      layout, {{"10.0.0.1", {1, 2, 3, 4, 5}}, {"10.0.0.2", {6, 7, 8}}, {"fe80::2", {9, 10, 11}}});
  EXPECT_EQ(spec.jobs.at("chief"), (std::vector<std::string>{"10.0.0.1:1"}));
  EXPECT_EQ(spec.jobs.at("worker"), (std::vector<std::string>{"10.0.0.1:2", "10.0.0.1:3", "10.0.0.2:6", "10.0.0.2:7",
                                                              "[fe80::2]:9", "[fe80::2]:10"}));
  EXPECT_EQ(spec.jobs.at("ps"), (std::vector<std::string>{"10.0.0.1:4", "10.0.0.2:8", "[fe80::2]:11", "10.0.0.1:5"}));
  const auto too_few_ports = [&] {
    return launch::layout_cluster(layout, {{"10.0.0.1", {1}}, {"10.0.0.2", {6, 7, 8}}, {"10.0.0.3", {9, 10, 11}}});
  };
  EXPECT_THROW(too_few_ports(), InvalidArgument);
  EXPECT_EQ(launch::route_address("127.0.0.1", 9), "127.0.0.1");
  EXPECT_EQ(launch::route_address("localhost", 9), "127.0.0.1");
}

TEST(LaunchMultiNode, EveryTaskOfEveryNodeSeesTheJobsTfConfig) {
  Nodes nodes("mn_tf_config");
  const int port = test::free_port();
  const std::string script = "echo \"TF_CONFIG=$TF_CONFIG\"";
  nodes.start(node_launch(2, 1, port, "--workers-per-node 2", script));  // node 1 first: it waits for node 0
  nodes.start(node_launch(2, 0, port, "--workers-per-node 2", script));
  const std::vector<int> codes = nodes.wait_all();
  ASSERT_EQ(codes, (std::vector<int>{0, 0})) << nodes.all_output();
  std::map<std::string, cluster::TaskInfo> seen;
  for (size_t node = 0; node < 2; ++node) {
    EXPECT_THAT(nodes.output(node),
                HasSubstr("strata launch: node " + std::to_string(1 - node) +
                          " of 2 at 127.0.0.1: " + (node == 0 ? "worker:2, worker:3" : "worker:0, worker:1")));
    for (const auto& line : lines_of(nodes.output(node))) {
      const size_t at = line.find("] TF_CONFIG=");
      if (line.rfind("[", 0) != 0 || at == std::string::npos) continue;
      const cluster::TaskInfo info = cluster::resolve_tf_config(line.substr(at + 12));
      EXPECT_EQ(info.name(), line.substr(1, at - 1)) << line;
      // Node 1's launcher was started first: its tasks are worker:2 and worker:3.
      EXPECT_EQ(info.task_index / 2, node == 0 ? 1 : 0) << line;
      seen[info.name()] = info;
    }
  }
  ASSERT_EQ(seen.size(), 4u) << nodes.all_output();
  const cluster::ClusterSpec& spec = seen["worker:0"].cluster;
  EXPECT_EQ(spec.num_tasks("worker"), 4);
  std::set<std::string> addresses;
  for (const auto& [name, info] : seen) {
    EXPECT_EQ(info.cluster, spec) << name;  // one cluster for all
    EXPECT_EQ(info.address.rfind("127.0.0.1:", 0), 0u) << info.address;
    addresses.insert(info.address);
  }
  EXPECT_EQ(addresses.size(), 4u);
}

TEST(LaunchMultiNode, AParameterServerJobOnTwoNodesEndsWithItsChief) {
  Nodes nodes("mn_ps");
  const int port = test::free_port();
  // ps tasks serve until stopped; the chief ends the job after a moment, the workers by themselves.
  const std::string script = kIs +
                             "echo \"TF_CONFIG=$TF_CONFIG\"; is ps 0 && exec sleep 1000; is ps 1 && exec sleep "
                             "1000; is chief 0 && sleep 0.5; exit 0";
  const std::string flags = "--workers-per-node 1 --chief --ps 2 --stop-timeout 2";
  nodes.start(node_launch(2, 0, port, flags, script));
  nodes.start(node_launch(2, 1, port, flags, script));
  const std::vector<int> codes = nodes.wait_all();
  ASSERT_EQ(codes, (std::vector<int>{0, 0})) << nodes.all_output();
  EXPECT_THAT(nodes.output(0), HasSubstr("node 0 of 2 at 127.0.0.1: chief:0, worker:0, ps:0"));
  EXPECT_THAT(nodes.output(1), HasSubstr("node 1 of 2 at 127.0.0.1: worker:1, ps:1"));
  EXPECT_THAT(nodes.output(1), HasSubstr("[ps:1] TF_CONFIG="));
  EXPECT_THAT(nodes.all_output(), Not(HasSubstr("exited with")));
}

TEST(LaunchMultiNode, ANodeThatNeverComesIsNamedAfterTheRendezvousTimeout) {
  Nodes nodes("mn_missing");
  const int port = test::free_port();
  const auto start = Clock::now();
  // Nodes 0 and 1 of 3 come; node 2 never does.
  nodes.start(node_launch(3, 0, port, "--workers-per-node 1 --rdzv-timeout 2", "echo started"));
  nodes.start(node_launch(3, 1, port, "--workers-per-node 1 --rdzv-timeout 2", "echo started"));
  const std::vector<int> codes = nodes.wait_all();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(codes, (std::vector<int>{1, 1})) << nodes.all_output();
  for (size_t node = 0; node < 2; ++node) {
    EXPECT_THAT(nodes.output(node), HasSubstr("strata: error: launch: node 2 of 3 did not join the rendezvous at "
                                              "127.0.0.1:" +
                                              std::to_string(port) + " within 2 s (--rdzv-timeout)"))
        << nodes.all_output();
    EXPECT_THAT(nodes.output(node), Not(HasSubstr("started")));
  }
  EXPECT_LT(seconds, 15.0);
  // Without node 0 there is no rendezvous: node 1 names it.
  Nodes alone("mn_no_master");
  alone.start(node_launch(2, 1, test::free_port(), "--workers-per-node 1 --rdzv-timeout 1", "echo started"));
  EXPECT_EQ(alone.wait_all(), (std::vector<int>{1}));
  EXPECT_THAT(alone.output(0),
              HasSubstr("strata: error: launch: node 0 of 2 did not join the rendezvous at 127.0.0.1:"));
  EXPECT_THAT(alone.output(0), HasSubstr("within 1 s (--rdzv-timeout): nothing answered there"));
}

TEST(LaunchMultiNode, ATaskFailingOnOneNodeStopsTheTasksOfEveryNode) {
  Nodes nodes("mn_fail");
  const int port = test::free_port();
  const fs::path pids = nodes.scratch.dir / "pids";
  const std::string script = kIs + record_and_await(pids, 4) + "is worker 3 && exit 3; exec sleep 1000";
  const auto start = Clock::now();
  nodes.start(node_launch(2, 0, port, "--workers-per-node 2", script));
  nodes.start(node_launch(2, 1, port, "--workers-per-node 2", script));
  const std::vector<int> codes = nodes.wait_all();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(codes, (std::vector<int>{3, 3})) << nodes.all_output();  // the failed task's status, on every node
  EXPECT_THAT(nodes.output(1), HasSubstr("strata launch: worker:3 exited with status 3\n"));
  EXPECT_THAT(nodes.output(0),
              HasSubstr("strata launch: node 1: worker:3 exited with status 3; stopping this node's tasks\n"));
  EXPECT_THAT(nodes.output(0), Not(HasSubstr("exited with status 3\nstrata launch: stopping")));
  EXPECT_LT(seconds, 30.0) << "the other tasks (sleeping 1000 s) were not stopped";
  expect_all_gone(pids, 4);
}

TEST(LaunchMultiNode, MaxRestartsRestartsEveryNode) {
  Nodes nodes("mn_restart");
  const int port = test::free_port();
  // worker:3 fails in the first run, a moment after it started; every task says which run it is.
  const std::string script = kIs +
                             "echo \"run $STRATA_LAUNCH_RESTART\"; "
                             "is worker 3 && [ $STRATA_LAUNCH_RESTART = 0 ] && sleep 0.3 && exit 5; "
                             "[ $STRATA_LAUNCH_RESTART = 0 ] && exec sleep 1000; echo done";
  nodes.start(node_launch(2, 0, port, "--workers-per-node 2 --max-restarts 1", script));
  nodes.start(node_launch(2, 1, port, "--workers-per-node 2 --max-restarts 1", script));
  const std::vector<int> codes = nodes.wait_all();
  ASSERT_EQ(codes, (std::vector<int>{0, 0})) << nodes.all_output();
  for (size_t node = 0; node < 2; ++node) {
    EXPECT_THAT(nodes.output(node), HasSubstr("strata launch: restart 1 of 1 (every node)\n"));
    EXPECT_THAT(nodes.output(node), HasSubstr("(restart 1)\n"));
    for (const int w : {0, 1}) {
      const std::string task = "[worker:" + std::to_string(node * 2 + w) + "] ";
      EXPECT_THAT(nodes.output(node), HasSubstr(task + "run 1\n"));
      EXPECT_THAT(nodes.output(node), HasSubstr(task + "done\n"));
    }
  }
  EXPECT_THAT(nodes.output(0), HasSubstr("node 1: worker:3 exited with status 5; stopping this node's tasks"));
}

TEST(LaunchMultiNode, ASignalToOneLauncherStopsEveryNode) {
  Nodes nodes("mn_signal");
  const int port = test::free_port();
  const std::string script = "echo ready; exec sleep 1000";
  nodes.start(node_launch(2, 0, port, "--workers-per-node 1", script));
  BackgroundProcess& node1 = nodes.start(node_launch(2, 1, port, "--workers-per-node 1", script));
  ASSERT_TRUE(node1.wait_for_output("[worker:1] ready", kDeadline)) << nodes.all_output();
  node1.signal(SIGTERM);
  const std::vector<int> codes = nodes.wait_all();
  EXPECT_EQ(codes, (std::vector<int>{128 + SIGTERM, 128 + SIGTERM})) << nodes.all_output();
  EXPECT_THAT(nodes.output(1), HasSubstr("strata launch: got SIGTERM; passing it to every task\n"));
  EXPECT_THAT(nodes.output(0),
              HasSubstr("strata launch: node 1: its launcher got SIGTERM; stopping this node's tasks"));
}

// Starts two nodes running `exec sleep 1000` with --node-timeout 3, kills node `victim`'s launcher with SIGKILL once
// every task runs, and returns the survivor's exit status, output and how long it took to end after the kill.
struct AfterKill {
  int code = -1;
  std::string output;
  double seconds = 0;
};
AfterKill kill_node(int victim) {
  Nodes nodes("mn_kill" + std::to_string(victim));
  const int port = test::free_port();
  const std::string flags = "--workers-per-node 1 --node-timeout 3 --stop-timeout 2";
  const fs::path pids = nodes.scratch.dir / "pids";
  const std::string script = record_and_await(pids, 2) + "echo ready; exec sleep 1000";
  nodes.start(node_launch(2, 0, port, flags, script));
  nodes.start(node_launch(2, 1, port, flags, script));
  BackgroundProcess& dead = *nodes.launchers[victim];
  BackgroundProcess& survivor = *nodes.launchers[1 - victim];
  EXPECT_TRUE(dead.wait_for_output("] ready", kDeadline)) << nodes.all_output();
  EXPECT_TRUE(survivor.wait_for_output("] ready", kDeadline)) << nodes.all_output();
  dead.signal(SIGKILL);
  const auto killed = Clock::now();
  AfterKill after;
  const std::optional<int> code = survivor.wait_for(kDeadline);
  after.seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  after.code = code.value_or(-1);
  after.output = survivor.output();
  EXPECT_EQ(dead.wait_for(kDeadline), std::optional<int>(128 + SIGKILL));
  // The victim's task died with its launcher (PR_SET_PDEATHSIG), the survivor's was stopped.
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (const auto& p : lines_of(read_text(pids))) {
    while (::kill(std::stoi(p), 0) == 0 && Clock::now() < deadline) ::usleep(10000);
  }
  expect_all_gone(pids, 2);
  return after;
}

TEST(LaunchMultiNode, ANodeWhoseLauncherDiesIsNamedByTheOthersWithinTheNodeTimeout) {
  const AfterKill after = kill_node(1);
  EXPECT_EQ(after.code, 1) << after.output;
  EXPECT_THAT(after.output, HasSubstr("strata launch: node 1 of 2 (127.0.0.1) was lost: no heartbeat for "));
  EXPECT_THAT(after.output, HasSubstr("strata: error: launch: node 1 of 2 (127.0.0.1) was lost:"));
  // The node timeout (3 s), the heartbeat monitor's period and the stop: well under 3 + 2 + 3 s.
  EXPECT_LT(after.seconds, 8.0) << after.output;
  std::printf("node 1's launcher killed: node 0 ended %.2f s later\n", after.seconds);
}

TEST(LaunchMultiNode, WhenNodeZerosLauncherDiesTheOthersNameIt) {
  const AfterKill after = kill_node(0);
  EXPECT_EQ(after.code, 1) << after.output;
  EXPECT_THAT(after.output, HasSubstr("strata: error: launch: node 0 of 2 (the master, serving the rendezvous at "
                                      "127.0.0.1:"));
  EXPECT_THAT(after.output, HasSubstr(") is gone: no heartbeat answered for "));
  EXPECT_LT(after.seconds, 8.0) << after.output;
  std::printf("node 0's launcher killed: node 1 ended %.2f s later\n", after.seconds);
}

TEST(LaunchMultiNode, NodesMustAgreeOnTheJobAndEachHaveItsOwnRank) {
  {
    Nodes nodes("mn_disagree");
    const int port = test::free_port();
    nodes.start(node_launch(2, 0, port, "--workers-per-node 2 --rdzv-timeout 2", "echo started"));
    ASSERT_TRUE(nodes.launchers[0]->wait_for_output("joined the rendezvous", kDeadline)) << nodes.all_output();
    // Node 1 comes with another layout; node 0 then misses it.
    nodes.start(node_launch(2, 1, port, "--workers-per-node 3 --rdzv-timeout 2", "echo started"));
    const std::vector<int> codes = nodes.wait_all();
    EXPECT_EQ(codes, (std::vector<int>{1, 1})) << nodes.all_output();
    EXPECT_THAT(nodes.output(1), HasSubstr("strata: error: launch: node 1 was started with --nnodes 2 "
                                           "--workers-per-node 3 --ps 0 --max-restarts 0, but the rendezvous at "
                                           "127.0.0.1:" +
                                           std::to_string(port) +
                                           " holds a job of --nnodes 2 "
                                           "--workers-per-node 2 --ps 0 --max-restarts 0"))
        << nodes.all_output();
    EXPECT_THAT(nodes.output(0), HasSubstr("node 1 of 2 did not join the rendezvous"));
  }
  {
    Nodes nodes("mn_rank_twice");
    const int port = test::free_port();
    nodes.start(node_launch(3, 0, port, "--workers-per-node 1 --rdzv-timeout 2", "echo started"));
    nodes.start(node_launch(3, 1, port, "--workers-per-node 1 --rdzv-timeout 2", "echo started"));
    ASSERT_TRUE(nodes.launchers[1]->wait_for_output("joined the rendezvous", kDeadline)) << nodes.all_output();
    nodes.start(node_launch(3, 1, port, "--workers-per-node 1 --rdzv-timeout 2", "echo started"));
    const std::vector<int> codes = nodes.wait_all();
    EXPECT_EQ(codes[2], 1) << nodes.all_output();
    EXPECT_THAT(nodes.output(2), HasSubstr("strata: error: launch: node rank 1 is taken: another launcher joined the "
                                           "rendezvous at 127.0.0.1:" +
                                           std::to_string(port) + " as node 1"))
        << nodes.all_output();
  }
}

TEST(LaunchMultiNode, BadFlagsAreClearErrors) {
  const auto error = [](const std::string& flags) {
    const auto [rc, out] = run("timeout 60 " + kStrata + " launch " + flags + " -- true");
    EXPECT_EQ(rc, 1) << flags << "\n" << out;
    return out;
  };
  EXPECT_THAT(error("--nnodes 2 --node-rank 2 --master-addr 127.0.0.1 --master-port 9 --workers-per-node 1"),
              HasSubstr("launch: --node-rank 2 is out of range for --nnodes 2 (0..1)"));
  EXPECT_THAT(error("--workers 1 --node-rank 1"), HasSubstr("launch: --node-rank 1 is out of range for --nnodes 1"));
  EXPECT_THAT(error("--nnodes 2 --workers-per-node 1 --master-port 9"),
              HasSubstr("launch: --nnodes 2 needs --master-addr HOST"));
  EXPECT_THAT(error("--nnodes 2 --workers-per-node 1 --master-addr 127.0.0.1"),
              HasSubstr("launch: --nnodes 2 needs --master-port P (1..65535)"));
  EXPECT_THAT(error("--nnodes 2 --master-addr 127.0.0.1 --master-port 9"),
              HasSubstr("launch: --nnodes 2 needs --workers-per-node K >= 1"));
  EXPECT_THAT(error("--nnodes 2 --workers 4 --master-addr 127.0.0.1 --master-port 9"),
              HasSubstr("launch: with --nnodes 2 give --workers-per-node K"));
  EXPECT_THAT(error("--nnodes 2 --workers-per-node 2 --master-addr 127.0.0.1 --master-port 9 --min-workers 1"),
              HasSubstr("launch: --min-workers (elastic training) is for one machine"));
  EXPECT_THAT(error("--nnodes 2 --workers-per-node 2 --master-addr 'no such host' --master-port 9"),
              HasSubstr("bad address"));
  EXPECT_THAT(error("--nnodes 2 --workers-per-node 2 --master-addr 127.0.0.1 --master-port 9 --node-addr 192.0.2.7 "
                    "--rdzv-timeout 1"),
              HasSubstr("launch: cannot bind 192.0.2.7:0 for worker:0: Cannot assign requested address (is it an "
                        "address of this machine?)"));
  // Beyond loopback a job needs TLS with a secret (or mutual TLS), or --insecure.
  EXPECT_THAT(error("--nnodes 2 --workers-per-node 1 --master-addr 192.0.2.7 --master-port 9"),
              HasSubstr("the rendezvous at 192.0.2.7:9 is beyond loopback, and the job has no TLS: anyone who reaches "
                        "it could drive the job. Give --tls-cert, --tls-key and --tls-ca (docs/cluster.md), or "
                        "--insecure"));
  EXPECT_THAT(error("--nnodes 0 --workers 1"), HasSubstr("launch: --nnodes must be >= 1, got 0"));
  EXPECT_THAT(error(""), HasSubstr("launch: --workers N is required"));
  // One node: --workers-per-node is --workers, and the rendezvous flags change nothing.
  const auto [rc, out] = run("timeout 60 " + kStrata +
                             " launch --nnodes 1 --workers-per-node 2 --master-addr 10.9.9.9 "
                             "--master-port 9 -- sh -c 'echo \"$TF_CONFIG\"'");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("[worker:1] {\"cluster\":{\"worker\":[\"127.0.0.1:"));
  EXPECT_THAT(out, Not(HasSubstr("strata launch:")));
}

}  // namespace
}  // namespace strata::cli
