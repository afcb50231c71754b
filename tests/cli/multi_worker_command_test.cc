// `strata train --strategy multi_worker_mirrored` as real processes on 127.0.0.1: started by `strata launch`, the
// workers train together, only the chief shows progress and writes checkpoints, and all print the same test
// line; a worker killed with SIGKILL makes the other fail with an error naming it within the heartbeat timeout
// (10 s) plus 2 s, one stopped with SIGSTOP (alive but stuck) well within the collective timeout (300 s); under
// `strata launch --max-restarts 1` with backups every 50 steps (--backup-dir), a worker killed mid-epoch costs a
// restart and the job ends with the same result as an uninterrupted one. Every process runs under `timeout`
// and is killed on every path.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>

#include "cli/cli_test_util.h"
#include "cli/launch_test_util.h"
#include "test_util.h"

namespace strata::cli {
namespace {

TEST(MultiWorkerCommandTest, LaunchedWorkersTrainTogetherAndOnlyTheChiefWrites) {
  TinyJob t("mw_launch");
  const fs::path ckpt = t.s.dir / "ckpt";
  auto [rc, out] = run("timeout -k 5 120 " + std::string(STRATA_BINARY) + " launch --workers 2 -- " STRATA_BINARY
                       " train " + t.job + " --strategy multi_worker_mirrored --threads 1 --checkpoint-dir " +
                       ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[worker:0] strategy: MultiWorkerMirroredStrategy, 2 replicas"), std::string::npos) << out;
  EXPECT_NE(out.find("worker 1 of 2 (gloo)"), std::string::npos) << out;
  EXPECT_NE(out.find("[worker:0] Epoch 2/2"), std::string::npos) << out;
  EXPECT_EQ(out.find("[worker:1] Epoch"), std::string::npos) << out;  // the chief alone shows progress
  const std::regex test_line(R"(\[worker:(\d)\] (test loss [0-9.]+ - test accuracy [0-9.]+))");
  std::vector<std::string> lines;
  for (std::sregex_iterator it(out.begin(), out.end(), test_line), end; it != end; ++it) lines.push_back((*it)[2]);
  ASSERT_EQ(lines.size(), 2u) << out;
  EXPECT_EQ(lines[0], lines[1]);  // the same weights on both workers
  EXPECT_TRUE(fs::exists(ckpt / "ckpt-2")) << out;
  // --verbose 2: a line per epoch from every worker.
  auto [rc2, out2] = run("timeout -k 5 120 " + std::string(STRATA_BINARY) + " launch --workers 2 -- " STRATA_BINARY
                         " train " + t.job + " --strategy multi_worker_mirrored --threads 1 --verbose 2");
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_NE(out2.find("[worker:1] Epoch 2/2"), std::string::npos) << out2;
}

TEST(MultiWorkerCommandTest, UnderMpirunTheWorkersUseMpiAndGetWhatGlooGets) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun (openmpi-bin)";
  TinyJob t("mw_mpirun");
  const std::string train = std::string(STRATA_BINARY) + " train " + t.job + " --strategy multi_worker_mirrored --threads 1";
  auto [rc, out] = run("env -u TF_CONFIG timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np 2 " + train);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("worker 0 of 2 (mpi)"), std::string::npos) << out;
  EXPECT_NE(out.find("worker 1 of 2 (mpi)"), std::string::npos) << out;
  // Both ranks write to mpirun's one output: every line of theirs is tagged with its task, whole, and the progress
  // bar (under mpirun's pseudo-terminal) prints lines, not carriage returns.
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  const std::string lines = "\n" + out;
  for (const char* tagged : {"[worker:0] strategy: ", "[worker:1] strategy: ", "[worker:0] test loss ",
                             "[worker:1] test loss ", "[worker:0] Epoch 1/"}) {
    EXPECT_NE(lines.find(std::string("\n") + tagged), std::string::npos) << tagged << " in\n" << out;
  }
  EXPECT_EQ(lines.find("\nstrategy: "), std::string::npos) << out;
  auto [rc_gloo, out_gloo] = run("timeout -k 5 120 " + std::string(STRATA_BINARY) + " launch --workers 2 -- " + train);
  ASSERT_EQ(rc_gloo, 0) << out_gloo;
  const std::regex line(R"(test loss [0-9.]+ - test accuracy [0-9.]+)");
  std::vector<std::string> mpi_lines, gloo_lines;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) mpi_lines.push_back(it->str());
  for (std::sregex_iterator it(out_gloo.begin(), out_gloo.end(), line), end; it != end; ++it) gloo_lines.push_back(it->str());
  ASSERT_EQ(mpi_lines.size(), 2u) << out;
  ASSERT_EQ(gloo_lines.size(), 2u) << out_gloo;
  EXPECT_EQ(mpi_lines[0], gloo_lines[0]);
  EXPECT_EQ(mpi_lines[1], gloo_lines[0]);
}

// `strata launch --workers 2 --max-restarts R -- sh -c '...strata train --backup-dir D --backup-every-steps 50...'`,
// where the first run of worker 1 kills itself (SIGKILL) once the chief has saved backup ckpt-<kill_at> (0: never).
std::pair<int, std::string> restartable_job(const TinyJob& t, const fs::path& ckpt, int kill_at, int max_restarts) {
  const std::string train = std::string(STRATA_BINARY) + " train " + t.job +
                            " --strategy multi_worker_mirrored --threads 1 --epochs 3 --backup-every-steps 50"
                            " --backup-dir " + ckpt.string();
  std::string script = "exec " + train;
  if (kill_at > 0) {
    script = "if [ \"$STRATA_LAUNCH_RESTART\" = 0 ] && echo \"$TF_CONFIG\" | grep -q '\"index\": *1'; then "
             "(while [ ! -e " + (ckpt / ("ckpt-" + std::to_string(kill_at))).string() + " ]; do sleep 0.005; done; "
             "kill -9 $$) & fi; " + script;
  }
  std::ofstream(t.s.dir / "worker.sh") << script << "\n";
  return run("timeout -k 5 240 " + std::string(STRATA_BINARY) + " launch --workers 2 --max-restarts " +
             std::to_string(max_restarts) + " -- sh " + (t.s.dir / "worker.sh").string());
}


TEST(MultiWorkerCommandTest, AKilledWorkerIsRestartedAndTheJobEndsAsIfNothingHappened) {
  TinyJob t("mw_restart");
  write_tiny_idx(t.s.dir, "train", 2048, 1);  // 64 steps an epoch at the global batch of 32
  const fs::path whole = t.s.dir / "whole", killed = t.s.dir / "killed";
  const auto [rc_whole, out_whole] = restartable_job(t, whole, 0, 0);
  ASSERT_EQ(rc_whole, 0) << out_whole;
  const auto [rc, out] = restartable_job(t, killed, 100, 1);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("restart 1 of 1"), std::string::npos) << out;
  // The restarted workers resumed mid-epoch from the backup of step 100 (epoch 2, step 36 of 64).
  EXPECT_NE(out.find("ckpt-100: epoch 2 at step 36 of it (global step 100)"), std::string::npos) << out;
  // The same optimizer steps (3 epochs of 64) on both workers of both runs.
  for (const std::string* o : {&out_whole, &out}) {
    for (const char* w : {"[worker:0]", "[worker:1]"}) {
      EXPECT_NE(o->find(std::string(w) + " training ended after epoch 3 of 3: 192 optimizer steps in all"),
                std::string::npos)
          << *o;
    }
  }
  // Both runs completed, so their backups are gone; the same result, to the digit.
  EXPECT_FALSE(fs::exists(whole)) << out_whole;
  EXPECT_FALSE(fs::exists(killed)) << out;
  const auto expected = worker_test_lines(out_whole), got = worker_test_lines(out);
  ASSERT_EQ(expected.size(), 2u) << out_whole;
  ASSERT_EQ(got.size(), 2u) << out;
  EXPECT_EQ(got[0], expected[0]);
  EXPECT_EQ(got[1], expected[1]);
}

TEST(MultiWorkerCommandTest, WithoutRestartsAKilledWorkerEndsTheJobNamingIt) {
  TinyJob t("mw_norestart");
  write_tiny_idx(t.s.dir, "train", 2048, 1);
  const auto [rc, out] = restartable_job(t, t.s.dir / "ckpt", 100, 0);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("worker:1"), std::string::npos) << out;
  EXPECT_NE(out.find("SIGKILL"), std::string::npos) << out;
}

// Starts two workers of a long job with their TF_CONFIGs, does `signal` to worker 1 after it has trained a
// while, and returns worker 0's output, exit status and the seconds from the signal to its exit.
struct Outcome {
  std::string log;
  int rc = -1;
  double seconds = -1;
};
Outcome signal_worker(const std::string& name, const std::string& signal) {
  TinyJob t(name);
  const std::string cluster = "{\"worker\": [\"127.0.0.1:" + std::to_string(test::free_port()) + "\", \"127.0.0.1:" +
                              std::to_string(test::free_port()) + "\"]}";
  auto tf_config = [&](int i) {
    return "'{\"cluster\": " + cluster + ", \"task\": {\"type\": \"worker\", \"index\": " + std::to_string(i) + "}}'";
  };
  const std::string train = " timeout -k 5 90 " STRATA_BINARY " train " + t.job +
                            " --strategy multi_worker_mirrored --threads 1 --epochs 100000";
  const fs::path dir = t.s.dir;
  const std::string script =
      "TF_CONFIG=" + tf_config(0) + train + " > " + (dir / "w0.log").string() + " 2>&1 &\n" +
      "W0=$!\n"
      "TF_CONFIG=" + tf_config(1) + train + " > " + (dir / "w1.log").string() + " 2>&1 &\n" +
      "W1=$!\n"
      "for i in $(seq 100); do grep -q 'Epoch 3/' " + (dir / "w0.log").string() + " && break; sleep 0.1; done\n" +
      "S1=$(pgrep -P $W1)\n"  // worker 1's strata, the child of its `timeout`
      "T0=$(date +%s.%N); kill -" + signal + " $S1\n"
      "wait $W0; RC=$?; T1=$(date +%s.%N)\n"
      "kill -KILL $S1 $W1 2>/dev/null; kill -CONT $S1 2>/dev/null; wait $W1 2>/dev/null\n"
      "echo \"$RC $(echo \"$T1 - $T0\" | bc)\" > " + (dir / "outcome").string() + "\n";
  std::ofstream(dir / "run.sh") << script;
  run("timeout -k 5 120 bash " + (dir / "run.sh").string());
  Outcome o;
  o.log = read_file(dir / "w0.log");
  std::istringstream(read_file(dir / "outcome")) >> o.rc >> o.seconds;
  return o;
}

TEST(MultiWorkerCommandTest, AKilledWorkerIsNamedByTheOtherWithinTheHeartbeatTimeout) {
  const Outcome o = signal_worker("mw_kill", "KILL");
  EXPECT_EQ(o.rc, 1) << o.log;
  EXPECT_GE(o.seconds, 0) << o.log;
  EXPECT_LT(o.seconds, 12.0) << o.log;
  // Two detectors race, and either names the dead worker: Gloo's broken connection ("rank 1") when the survivor
  // is inside a collective, the coordination service's heartbeat ("worker:1") when it waits elsewhere (the store).
  EXPECT_TRUE(o.log.find("rank 1") != std::string::npos || o.log.find("worker:1") != std::string::npos) << o.log;
}

TEST(MultiWorkerCommandTest, AStoppedWorkerIsDeclaredLostAndNamedWithinTheHeartbeatTimeout) {
  const Outcome o = signal_worker("mw_stop", "STOP");
  EXPECT_EQ(o.rc, 1) << o.log;
  EXPECT_GE(o.seconds, 0) << o.log;
  // Declared lost after the 10 s heartbeat timeout (plus up to a 1 s heartbeat period), then the blocked
  // collective ends the process 1 s later: far inside the 300 s collective timeout.
  EXPECT_LT(o.seconds, 15.0) << o.log;
  EXPECT_NE(o.log.find("worker:1"), std::string::npos) << o.log;
}

// Workers given different jobs (worker 1: another learning rate and --batch-size 64; or a wider layer) are told at
// the rendezvous, every one of them within seconds, naming the keys and the tasks, instead of training apart in
// silence or aborting inside Gloo.
TEST(MultiWorkerCommandTest, WorkersGivenDifferentJobsAreToldAtTheRendezvous) {
  TinyJob t("mwms_fingerprint", 512);
  std::string other = tiny_job(t.s.dir);
  other.replace(other.find("learning_rate: 0.01"), 19, "learning_rate: 0.02");
  const std::string other_job = (t.s.dir / "other.yaml").string();
  std::ofstream(other_job) << other;
  const std::string script =
      "if echo \"$TF_CONFIG\" | grep -q '\"index\":1'; then J=" + other_job + "; B='--batch-size 64'; else J=" + t.job +
      "; B=''; fi; exec " + STRATA_BINARY + " train $J $B --strategy multi_worker_mirrored --threads 1";
  const auto start = std::chrono::steady_clock::now();
  const auto [rc, out] = run("timeout -k 5 120 " + std::string(STRATA_BINARY) + " launch --workers 2 -- sh -c " +
                             shell_quote(script));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(rc, 1) << out;
  EXPECT_LT(seconds, 30) << out;
  // Whichever worker compares first names the other's value and its own (the launcher then stops the other).
  EXPECT_TRUE(std::regex_search(
      out, std::regex("the tasks were not given the same job: (worker:1 has batch_size 64, worker:0 has 32|"
                      "worker:0 has batch_size 32, worker:1 has 64)")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("worker:[01] has optimizer \\{name: adam, learning_rate: 0.0[12]\\}, "
                                                "worker:[01] has \\{name: adam, learning_rate: 0.0[12]\\}")))
      << out;
  EXPECT_EQ(out.find("Epoch 1/"), std::string::npos) << out;  // no step ran
}

}  // namespace
}  // namespace strata::cli
