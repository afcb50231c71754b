// End-to-end tests of `strata launch` (src/cli/launch_command.cc): the real binary starts tiny shell tasks.
// Each command runs under `timeout`, so a launcher that hangs fails its test instead of the suite.
// Covered: the TF_CONFIG each task sees (and no other launcher's variables: torchrun's, mpirun's, SLURM's), line
// prefixing on both streams, the exit status of a failing task and of one killed by a signal, SIGTERM passed to
// every task, SIGKILL for a task that ignores SIGTERM, restarts, ps tasks stopped when the job is done,
// --port-base (and a port in use), and that no process (task or task's child) is left behind on any of these
// paths. Many machines: launch_multinode_test.cc and launch_netns_slow_test.cc.
// Thread-safety: none needed; each test uses its own scratch directory.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <map>
#include <set>

#include "cli/cli_test_util.h"
#include "cli/launch_test_util.h"
#include "strata/cluster/cluster_resolver.h"

namespace strata::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kStrata = STRATA_BINARY;

std::string launch(const std::string& flags, const std::string& script) {
  return "timeout 60 " + kStrata + " launch " + flags + " -- sh -c '" + script + "'";
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// A task's script that records its shell's pid and a background child's pid in `pids`.
std::string record_pids(const fs::path& pids) {
  return "echo $$ >> " + pids.string() + "; sleep 1000 & echo $! >> " + pids.string() + "; ";
}

// Shell: wait until `pids` lists n pids (so that every task has started before one fails).
std::string await_pids(const fs::path& pids, int n) {
  return "until [ $(cat " + pids.string() + " | wc -l) -ge " + std::to_string(n) + " ]; do sleep 0.05; done; ";
}

// Shell test of the task type and index: `is worker 1` -> true in worker:1.
const std::string kIs = "is() { echo \"$TF_CONFIG\" | grep -q \"\\\"index\\\":$2,\\\"type\\\":\\\"$1\\\"\"; }; ";

TEST(Launch, EachTaskSeesItsTfConfig) {
  Scratch scratch("launch_tf_config");
  const fs::path pids = scratch.dir / "pids";
  // Every task waits for the others to print: the ps task is stopped as soon as the others are done.
  const auto [rc, out] = run(launch("--workers 2 --chief --ps 1", "echo \"TF_CONFIG=$TF_CONFIG\"; echo $$ >> " +
                                                                      pids.string() + "; " + await_pids(pids, 4)));
  ASSERT_EQ(rc, 0) << out;
  std::map<std::string, cluster::TaskInfo> seen;
  for (const auto& line : lines_of(out)) {
    const size_t at = line.find("] TF_CONFIG=");
    if (line.rfind("[", 0) != 0 || at == std::string::npos) continue;
    const std::string prefix = line.substr(1, at - 1);
    const cluster::TaskInfo info = cluster::resolve_tf_config(line.substr(at + 12));
    EXPECT_EQ(info.name(), prefix) << line;
    seen[prefix] = info;
  }
  ASSERT_EQ(seen.size(), 4u) << out;
  const cluster::ClusterSpec& spec = seen["chief:0"].cluster;
  EXPECT_EQ(spec.num_tasks("chief"), 1);
  EXPECT_EQ(spec.num_tasks("worker"), 2);
  EXPECT_EQ(spec.num_tasks("ps"), 1);
  std::set<std::string> addresses;
  for (const auto& [name, info] : seen) {
    EXPECT_EQ(info.cluster, spec) << name;  // one cluster for all
    EXPECT_EQ(info.address.rfind("127.0.0.1:", 0), 0u) << info.address;
    addresses.insert(info.address);
  }
  EXPECT_EQ(addresses.size(), 4u);
  EXPECT_TRUE(seen["chief:0"].is_chief);
  EXPECT_EQ(seen["worker:1"].id_in_cluster, 2);
  EXPECT_FALSE(seen["ps:0"].id_in_cluster.has_value());
}

TEST(Launch, StaleClusterVariablesAreNotPassedOn) {
  const auto [rc, out] =
      run("RANK=3 WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=1 " +
          launch("--workers 1", "echo \"rank=[$RANK$OMPI_COMM_WORLD_RANK] restart=$STRATA_LAUNCH_RESTART\""));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("[worker:0] rank=[] restart=0\n"));
  // Inside an sbatch allocation or an srun step: the tasks get TF_CONFIG, not SLURM's task variables (the job's stay).
  const auto [rc2, out2] =
      run("LOCAL_WORLD_SIZE=2 SLURM_PROCID=1 SLURM_LOCALID=1 SLURM_NODEID=0 SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 "
          "SLURM_STEP_NODELIST=n[1-2] SLURM_STEP_NUM_TASKS=2 SLURM_CPUS_PER_TASK=4 STRATA_SLURM_JOBS=worker:2 "
          "SLURM_JOB_ID=77 " +
          launch("--workers 1", "echo \"left=[$LOCAL_WORLD_SIZE$SLURM_PROCID$SLURM_LOCALID$SLURM_NODEID$SLURM_NTASKS"
                                "$SLURM_NTASKS_PER_NODE$SLURM_STEP_NODELIST$SLURM_STEP_NUM_TASKS$SLURM_CPUS_PER_TASK"
                                "$STRATA_SLURM_JOBS] job=$SLURM_JOB_ID\""));
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_THAT(out2, HasSubstr("[worker:0] left=[] job=77\n"));
}

TEST(Launch, PrefixesWholeLinesOnEachStream) {
  Scratch scratch("launch_prefix");
  const fs::path err = scratch.dir / "stderr.txt";
  // Half a line, a pause, the rest: one line. A last line without a newline gets one.
  const std::string script = "printf \"half\"; sleep 0.3; printf \" line\\nsecond\\n\"; echo oops >&2; printf tail";
  const auto [rc, out] = run("{ " + launch("--workers 2", script) + " 2>" + err.string() + "; }");
  ASSERT_EQ(rc, 0) << out;
  for (const std::string task : {"worker:0", "worker:1"}) {
    EXPECT_THAT(out, HasSubstr("[" + task + "] half line\n")) << out;
    EXPECT_THAT(out, HasSubstr("[" + task + "] second\n"));
    EXPECT_THAT(out, HasSubstr("[" + task + "] tail\n"));
    EXPECT_THAT(read_text(err), HasSubstr("[" + task + "] oops\n"));
  }
  EXPECT_THAT(out, Not(HasSubstr("oops")));  // stderr stays stderr
  for (const auto& line : lines_of(out)) EXPECT_EQ(line.rfind("[worker:", 0), 0u) << "unprefixed: " << line;
}

TEST(Launch, FailingTaskStopsTheOthersAndGivesItsStatus) {
  Scratch scratch("launch_fail");
  const fs::path pids = scratch.dir / "pids";
  const auto start = std::chrono::steady_clock::now();
  const auto [rc, out] =
      run(launch("--workers 3", kIs + record_pids(pids) + await_pids(pids, 6) + "is worker 1 && exit 3; wait"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(rc, 3) << out;
  EXPECT_THAT(out, HasSubstr("strata launch: worker:1 exited with status 3\n"));
  EXPECT_EQ(count(out, "exited with status"), 1u) << "only the failed task is reported: " << out;
  EXPECT_LT(seconds, 30.0) << "the other tasks (sleeping 1000 s) were not stopped";
  expect_all_gone(pids, 6);  // every task and the child each one left running
}

TEST(Launch, ALoneSurvivorIsOneWorkerNotOneWorkers) {
  // Elastic, 2 workers, at least 2: worker 1 fails and worker 0 is left alone, fewer than --min-workers.
  const auto [rc, out] = run(launch("--workers 2 --min-workers 2", kIs + "is worker 1 && exit 3; sleep 1000"));
  EXPECT_EQ(rc, 3) << out;
  EXPECT_THAT(out, HasSubstr("worker:1 exited with status 3; 1 worker remains, fewer than --min-workers 2")) << out;
}

TEST(Launch, TaskKilledBySignal) {
  const auto [rc, out] = run(launch("--workers 2", kIs + "is worker 1 && kill -9 $$; sleep 1000"));
  EXPECT_EQ(rc, 128 + 9) << out;
  EXPECT_THAT(out, HasSubstr("strata launch: worker:1 was killed by signal 9 (SIGKILL)\n"));
}

// A task that dies at once makes the launcher stop the others while some may not have reached exec yet; a SIGTERM
// such a child gets must not reach the launcher's handler (the child inherits it until exec) and look like the
// launcher's own (it did, in about 1 run in 6, before the fork blocked signals).
TEST(Launch, StoppingTasksThatHaveNotStartedYetIsNotTheLaunchersSignal) {
  for (int i = 0; i < 20; ++i) {
    const auto [rc, out] = run(launch("--workers 8", kIs + "is worker 0 && kill -9 $$; sleep 1000"));
    ASSERT_EQ(rc, 128 + 9) << out;
    ASSERT_THAT(out, Not(HasSubstr("got SIGTERM"))) << "run " << i;
  }
}

TEST(Launch, TaskIgnoringSigtermIsKilled) {
  Scratch scratch("launch_ignore");
  const fs::path pids = scratch.dir / "pids";
  const auto [rc, out] =
      run(launch("--workers 2 --stop-timeout 1", kIs + "trap \"\" TERM; " + record_pids(pids) + await_pids(pids, 4) +
                                                     "is worker 0 && exit 7; wait; wait"));
  EXPECT_EQ(rc, 7) << out;
  EXPECT_THAT(out, HasSubstr("strata launch: worker:0 exited with status 7\n"));
  EXPECT_THAT(out, HasSubstr("strata launch: worker:0, worker:1 did not stop within 1 s of SIGTERM; sending SIGKILL"));
  expect_all_gone(pids, 4);
}

// Starts a 2-worker launch in the background, sends `sig` (TERM or INT) to the launcher once both tasks
// are up, and checks that each task got it, the launcher exited 128 + the signal, and nothing is left.
void expect_signal_passed_on(const std::string& sig, int number) {
  Scratch scratch("launch_signal_" + sig);
  const fs::path log = scratch.dir / "log", pids = scratch.dir / "pids";
  const std::string task = "trap \"echo got " + sig + "; exit 0\" " + sig + "; " + record_pids(pids) +
                           "echo ready; while :; do sleep 0.05; done";
  const std::string script = kStrata + " launch --workers 2 -- sh -c '" + task + "' > " + log.string() +
                             " 2>&1 & L=$!; until [ \"$(grep -c ready " + log.string() +
                             ")\" = 2 ]; do sleep 0.05; done; kill -" + sig + " $L; wait $L; echo launcher=$?";
  const auto [rc, out] = run("timeout 60 sh -c '" + std::regex_replace(script, std::regex("'"), "'\\''") + "'");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("launcher=" + std::to_string(128 + number)));
  const std::string text = read_text(log);
  EXPECT_THAT(text, HasSubstr("strata launch: got SIG" + sig + "; passing it to every task\n"));
  EXPECT_THAT(text, HasSubstr("[worker:0] got " + sig + "\n"));
  EXPECT_THAT(text, HasSubstr("[worker:1] got " + sig + "\n"));
  EXPECT_THAT(text, Not(HasSubstr("restart")));
  EXPECT_THAT(text, Not(HasSubstr("exited with")));
  expect_all_gone(pids, 4);
}

TEST(Launch, ForwardsSigtermToEveryTask) { expect_signal_passed_on("TERM", SIGTERM); }

// A background job of a shell ignores SIGINT; the launcher handles it all the same and resets it for tasks.
TEST(Launch, ForwardsSigintToEveryTask) { expect_signal_passed_on("INT", SIGINT); }

TEST(Launch, RestartsTheClusterUpToMaxRestarts) {
  // worker:1 fails a moment after it started, so that worker:0 has said which run it is before it is stopped.
  const auto [rc, out] = run(launch("--workers 2 --max-restarts 2", kIs + "echo \"run $STRATA_LAUNCH_RESTART\"; "
                                                                          "is worker 1 && sleep 0.3 && exit 5; "
                                                                          "sleep 1000"));
  EXPECT_EQ(rc, 5) << out;
  EXPECT_EQ(count(out, "strata launch: worker:1 exited with status 5\n"), 3u) << out;
  EXPECT_THAT(out, HasSubstr("strata launch: restart 1 of 2\n"));
  EXPECT_THAT(out, HasSubstr("strata launch: restart 2 of 2\n"));
  EXPECT_THAT(out, Not(HasSubstr("restart 3")));
  EXPECT_THAT(out, HasSubstr("strata launch: giving up after 2 restarts\n"));
  for (const std::string run_line : {"[worker:0] run 0", "[worker:0] run 1", "[worker:0] run 2"}) {
    EXPECT_THAT(out, HasSubstr(run_line));
  }
}

TEST(Launch, RestartThatSucceedsExitsZero) {
  const auto [rc, out] = run(launch("--workers 2 --max-restarts 3",
                                    kIs + "is worker 0 && [ \"$STRATA_LAUNCH_RESTART\" = 0 ] && exit 2; echo done"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "restart "), 1u) << out;
  EXPECT_THAT(out, HasSubstr("strata launch: restart 1 of 3\n"));
  EXPECT_GE(count(out, "] done"), 2u) << out;  // both tasks of the second run (worker:1 of the first may too)
}

TEST(Launch, SuccessStopsPsTasksAndLeftoverChildren) {
  Scratch scratch("launch_ps");
  const fs::path pids = scratch.dir / "pids";
  const auto [rc, out] =
      run(launch("--workers 2 --ps 1", kIs + record_pids(pids) + await_pids(pids, 6) + "is ps 0 && wait; exit 0"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, Not(HasSubstr("exited with")));
  expect_all_gone(pids, 6);
}

// A free port on 127.0.0.1 with the next one free too (a probe, then released).
int free_port_pair() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    const int port = ntohs(addr.sin_port);
    ::close(fd);
    const int fd2 = ::socket(AF_INET, SOCK_STREAM, 0);
    addr.sin_port = htons(static_cast<uint16_t>(port + 1));
    const bool ok = port < 65535 && ::bind(fd2, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd2);
    if (ok) return port;
  }
  return 0;
}

TEST(Launch, PortBase) {
  const int port = free_port_pair();
  ASSERT_GT(port, 0);
  const auto [rc, out] = run(launch("--workers 2 --port-base " + std::to_string(port), "echo \"$TF_CONFIG\""));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("\"worker\":[\"127.0.0.1:" + std::to_string(port) +
                             "\",\"127.0.0.1:" + std::to_string(port + 1) + "\"]"));
}

TEST(Launch, PortInUseIsAnError) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const auto [rc, out] = run(launch("--workers 1 --port-base " + std::to_string(port), "echo started"));
  ::close(fd);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(
      out, HasSubstr("strata: error: launch: port " + std::to_string(port) + " (for worker:0) is in use on 127.0.0.1"));
  EXPECT_THAT(out, Not(HasSubstr("started")));
}

TEST(Launch, BadArguments) {
  auto [rc, out] = run("timeout 60 " + kStrata + " launch --workers 1 -- no-such-command-xyz");
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("launch: command not found: 'no-such-command-xyz'"));
  std::tie(rc, out) = run("timeout 60 " + kStrata + " launch --workers 0 -- true");
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("the cluster needs a chief or a worker"));
  std::tie(rc, out) = run("timeout 60 " + kStrata + " launch --workers 1 --max-restarts -1 -- true");
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("--max-restarts must be >= 0, got -1"));
  std::tie(rc, out) = run("timeout 60 " + kStrata + " launch --workers 0 --chief -- true");
  EXPECT_EQ(rc, 0) << out;  // a chief alone is a cluster
}

}  // namespace
}  // namespace strata::cli
