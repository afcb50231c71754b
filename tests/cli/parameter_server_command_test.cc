// `strata train --strategy parameter_server` as real processes on 127.0.0.1 under `strata launch --chief --workers N
// --ps M`: the chief trains asynchronously through the workers and every step's pushes are applied once (counted on
// the ps tasks); a worker SIGKILLed mid-epoch has its step re-run by the others, nothing applied twice, and, restarted
// alone, it serves steps again; a ps SIGKILLed mid-epoch is restarted alone, restores its shards from the last
// checkpoint and the job finishes without the chief restarting; the job file's reduce_lr_on_plateau lowers the rate
// the ps apply (one worker trains as one device does, reductions and all), and early_stopping's restore_best_weights
// leaves the best epoch's weights on the ps, in the final evaluate and in the ps checkpoint. Every process runs under
// `timeout` and is killed on every path.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"
#include "cli/ps_job_util.h"
#include "test_util.h"

namespace strata::cli {
namespace {

TEST(ParameterServerCommandTest, TheChiefTrainsThroughTheWorkersAndEveryStepIsAppliedOnce) {
  TinyJob t("ps_launch", 512);  // 16 steps an epoch at the batch of 32
  const auto [rc, out] = launch(t, 2, "", "", "", 0);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[chief:0] strategy: ParameterServerStrategy, chief:0 of 2 workers and 2 ps"), std::string::npos)
      << out;
  EXPECT_NE(out.find("[chief:0] Epoch 2/2"), std::string::npos) << out;
  EXPECT_NE(out.find("[chief:0] training ended after epoch 2 of 2: 32 steps on 2 workers"), std::string::npos) << out;
  EXPECT_EQ(out.find("[worker:0] Epoch"), std::string::npos) << out;  // the chief alone shows progress
  // Flatten + Dense(10): kernel and bias, each of one shard (under 256 KiB), one on each ps; every step pushes each
  // shard once.
  const PsCounts c = ps_counts(out);
  EXPECT_EQ(c.reports, 2) << out;
  EXPECT_EQ(c.shards, 2) << out;
  EXPECT_EQ(c.applied, 32 * 2) << out;
  EXPECT_EQ(c.dropped, 0) << out;
  const auto w0 = steps_served(out, "worker:0"), w1 = steps_served(out, "worker:1");
  ASSERT_EQ(w0.size(), 1u) << out;
  ASSERT_EQ(w1.size(), 1u) << out;
  EXPECT_EQ(w0[0] + w1[0], 32) << out;
  EXPECT_GT(test_accuracy(out), 0.5) << out;
}

TEST(ParameterServerCommandTest, MaxStalenessZeroRunsSynchronousRoundsOfOneStepPerWorker) {
  TinyJob t("ps_sync", 512);
  const auto [rc, out] = launch(t, 2, "--max-staleness 0", "", "", 0);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[chief:0] strategy: ParameterServerStrategy, chief:0 of 2 workers and 2 ps, synchronous rounds"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("[chief:0] training ended after epoch 2 of 2: 32 steps on 2 workers"), std::string::npos) << out;
  EXPECT_EQ(ps_counts(out).applied, 32 * 2) << out;
  // Lockstep: every round has one step on each worker.
  EXPECT_EQ(steps_served(out, "worker:0"), std::vector<int64_t>{16}) << out;
  EXPECT_EQ(steps_served(out, "worker:1"), std::vector<int64_t>{16}) << out;
  EXPECT_GT(test_accuracy(out), 0.5) << out;
}

TEST(ParameterServerCommandTest, AKilledWorkerIsRunAroundAndRestartedAloneItServesAgain) {
  TinyJob t("ps_kill_worker", 2048);  // 64 steps an epoch
  const fs::path ckpt = t.s.dir / "ckpt";
  // Worker 1 dies once the shards were first saved (step 20), mid-epoch, in the middle of its steps.
  // 40 epochs: the restarted worker must be up (about a second) well before the job ends.
  const auto [rc, out] = launch(t, 3, "--epochs 40 --checkpoint-dir " + ckpt.string() + " --checkpoint-every 20",
                                "worker:1", "[ -e " + (ckpt / "ps_checkpoint.json").string() + " ]", 1);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("worker:1 was killed by signal 9 (SIGKILL); restarting it alone"), std::string::npos) << out;
  EXPECT_EQ(count(out, "[chief:0] strategy:"), 1u) << out;  // the chief went on
  EXPECT_NE(out.find("[chief:0] training ended after epoch 40 of 40: 2560 steps on 3 workers"), std::string::npos) << out;
  // Every scheduled step applied, none twice: a step cut off with the worker was re-run and its repeats dropped.
  const PsCounts c = ps_counts(out);
  EXPECT_EQ(c.applied, 2560 * c.shards) << out;
  // The chief saw the call lost with worker 1 (and re-ran its step elsewhere).
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[chief:0\] worker:1 \(\S+\): ran \d+ steps, lost [1-9]\d* calls)")))
      << out;
  // The first run of worker 1 was killed (no report); its restart served steps again.
  const auto w1 = steps_served(out, "worker:1");
  ASSERT_EQ(w1.size(), 1u) << out;
  EXPECT_GT(w1[0], 0) << out;

  EXPECT_GT(test_accuracy(out), 0.5) << out;
}

// Each shard has a backup on the other ps: ps:1 killed mid-job, ps:0 takes its shard over, and ps:1 restarted copies
// the shards back from ps:0 as their backup; the chief never stops.
TEST(ParameterServerCommandTest, AKilledPsIsTakenOverByItsBackupAndComesBackAsTheBackup) {
  TinyJob t("ps_kill_ps", 2048);
  const fs::path ckpt = t.s.dir / "ckpt";
  const std::string shard_saved = "[ -e " + (ckpt / "ps_checkpoint.json").string() + " ]";
  const auto [rc, out] =
      launch(t, 2, "--epochs 12 --checkpoint-dir " + ckpt.string() + " --checkpoint-every 20", "ps:1", shard_saved, 1);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ps:1 was killed by signal 9 (SIGKILL); restarting it alone"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(
      out, std::regex(R"(\[ps:1\] serving variables on \S+ \(copied 2 shards from the other ps tasks, as their backup\))")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[chief:0\] ps:0 \(\S+\): 2 shards, .*took over 1 shard\n)"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[chief:0\] ps:1 \(\S+\): 0 shards, .*backs up 2 shards)"))) << out;
  EXPECT_EQ(count(out, "[chief:0] strategy:"), 1u) << out;
  EXPECT_NE(out.find("[chief:0] training ended after epoch 12 of 12: 768 steps on 2 workers"), std::string::npos) << out;
  EXPECT_EQ(out.find("rolled back"), std::string::npos) << out;  // nothing acknowledged was lost
  expect_every_shard_updated(out, 2, 768);
  EXPECT_GT(test_accuracy(out), 0.5) << out;
}

// Without backups (--no-ps-backups), a killed ps comes back from the job's last committed checkpoint, and the job
// rolls back to it whole, without restarting the chief.
TEST(ParameterServerCommandTest, AKilledPsWithoutBackupsRollsTheJobBackToItsCheckpointWithoutRestartingTheChief) {
  TinyJob t("ps_kill_ps_nobackup", 2048);
  const fs::path ckpt = t.s.dir / "ckpt";
  // ps:1 (the bias's shard) dies once the first checkpoint was committed (the chief's manifest, written after every
  // ps saved its shards).
  const std::string shard_saved = "[ -e " + (ckpt / "ps_checkpoint.json").string() + " ]";
  const auto [rc, out] = launch(t, 2, "--epochs 12 --no-ps-backups --checkpoint-dir " + ckpt.string() +
                                          " --checkpoint-every 20",
                                "ps:1", shard_saved, 1);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ps:1 was killed by signal 9 (SIGKILL); restarting it alone"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[ps:1\] serving variables on \S+ \(restored 1 shard from \S+/ps-1/ckpt-\d+\))")))
      << out;
  // Its shard is older than ps:0's: the whole job goes back to that checkpoint, saying so, and runs the steps since
  // again, so that every shard has every step's update once.
  std::smatch said;
  ASSERT_TRUE(std::regex_search(
      out, said,
      std::regex(R"(\[chief:0\] fit: ps:1 \(\S+\) restarted from checkpoint (\d+); the job rolled back to step (\d+) \(ckpt-(\d+)\), and runs the (\d+) steps since again)")))
      << out;
  EXPECT_EQ(said[1], said[3]) << out;
  EXPECT_GE(std::stoll(said[2]), 20) << out;  // the first checkpoint (at 20 steps, and those finished by then) or later
  EXPECT_NE(out.find("[chief:0] rolled back 1 time after a ps lost the job's state: " + said[4].str() +
                     " steps run again"),
            std::string::npos)
      << out;
  EXPECT_EQ(count(out, "[chief:0] strategy:"), 1u) << out;
  EXPECT_NE(out.find("[chief:0] training ended after epoch 12 of 12: 768 steps on 2 workers"), std::string::npos) << out;
  expect_every_shard_updated(out, 2, 768);
  EXPECT_GT(test_accuracy(out), 0.5) << out;
}

// A worker whose step diverges (SGD at a learning rate of 3e38 overflows the weights) pushes NaN: the ps refuses it,
// and the chief ends the job naming the worker, the variable and where in the fit, instead of blaming the data.
TEST(ParameterServerCommandTest, ANonFinitePushIsRefusedAndTheChiefNamesTheWorkerAndTheVariable) {
  TinyJob t("ps_nan_push", 512);
  std::string job = tiny_job(t.s.dir);
  job.replace(job.find("{name: adam, learning_rate: 0.01}"), 33, "{name: sgd, learning_rate: 3.0e+38}");
  const std::string path = write_job(t.s.dir, job);
  const auto [rc, out] = run("timeout -k 5 120 " + std::string(STRATA_BINARY) + " launch --chief --workers 1 --ps 1 -- " +
                             STRATA_BINARY + " train " + path + " --strategy parameter_server --threads 1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[chief:0\] strata: error: fit: epoch 1, step \d+ failed: )"
                                                R"(.*worker:0 pushed NaN \(\d+ of \d+ values non-finite\) into )"
                                                R"(model/var_\d/part_0 \(push step:\d+\): refused)")))
      << out;
  EXPECT_EQ(out.find("the loss became NaN"), std::string::npos) << out;
}

// Started by hand with TF_CONFIG (no launcher to stop the others), a job whose chief is SIGKILLed mid-fit: its worker
// stops serving within the heartbeat timeout (10 s) plus a beat, naming the chief, instead of serving forever.
TEST(ParameterServerCommandTest, AWorkerWhoseChiefIsGoneStopsNamingIt) {
  TinyJob t("ps_chief_gone", 2048);
  const auto port = [] { return "\"127.0.0.1:" + std::to_string(test::free_port()) + "\""; };
  const std::string cluster =
      "{\"chief\": [" + port() + "], \"worker\": [" + port() + "], \"ps\": [" + port() + "]}";
  const auto task = [&](const std::string& type, const std::string& log) {
    return "TF_CONFIG='{\"cluster\": " + cluster + ", \"task\": {\"type\": \"" + type +
           "\", \"index\": 0}}' timeout -k 5 90 " + STRATA_BINARY + " train " + t.job +
           " --strategy parameter_server --threads 1 --epochs 100000 > " + (t.s.dir / log).string() + " 2>&1 &\n";
  };
  const fs::path dir = t.s.dir;
  const std::string script =
      task("ps", "ps.log") + "P=$!\n" + task("worker", "worker.log") + "W=$!\n" + task("chief", "chief.log") +
      "C=$!\n"
      "for i in $(seq 300); do grep -q 'Epoch 3/' " + (dir / "chief.log").string() + " && break; sleep 0.1; done\n" +
      "T0=$(date +%s.%N); kill -KILL $(pgrep -P $C)\n"
      "wait $W; RC=$?; T1=$(date +%s.%N)\n"
      "kill -KILL $(pgrep -P $P) $P 2>/dev/null; wait\n"
      "echo \"$RC $(echo \"$T1 - $T0\" | bc)\" > " + (dir / "outcome").string() + "\n";
  std::ofstream(dir / "run.sh") << script;
  run("timeout -k 5 120 bash " + (dir / "run.sh").string());
  int rc = -1;
  double seconds = -1;
  std::istringstream(read_file(dir / "outcome")) >> rc >> seconds;
  const std::string log = read_file(dir / "worker.log");
  EXPECT_EQ(rc, 1) << log << read_file(dir / "chief.log");
  EXPECT_GE(seconds, 0) << log;
  EXPECT_LT(seconds, 14.0) << log;
  EXPECT_NE(log.find("fit: worker:0 stops serving: "), std::string::npos) << log;
  EXPECT_NE(log.find("training cannot go on without the chief"), std::string::npos) << log;
}

// The val_loss column of a CSV log, one value per epoch.
std::vector<double> csv_val_losses(const std::filesystem::path& csv) {
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  size_t column = 0;
  for (size_t at = 0, next; (next = header.find(',', at)) != std::string::npos || at < header.size(); ++column) {
    next = next == std::string::npos ? header.size() : next;
    if (header.substr(at, next - at) == "val_loss") break;
    at = next + 1;
  }
  std::vector<double> out;
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::string field;
    for (size_t i = 0; i <= column && std::getline(fields, field, ','); ++i) {
    }
    out.push_back(std::stod(field));
  }
  return out;
}

// A plateau every epoch (nothing improves by 100): the rate halves at the end of epochs 2 and 3. The chief's steps
// carry the lowered rate to the ps, so one worker (steps one after another on the training set in file order)
// trains exactly as one device does: the same validation losses every epoch and the same test result. Were the ps
// to keep its own rate, epochs 3 and 4 would differ.
TEST(ParameterServerCommandTest, ReduceLROnPlateauLowersTheRateTheParameterServersApply) {
  TinyJob t("ps_reduce_lr", 512);
  const std::string job = std::regex_replace(tiny_job(t.s.dir), std::regex("shuffle: 512"), "shuffle: 0") +
                          "validation: {split: 0.25}\n"
                          "reduce_lr_on_plateau: {monitor: val_loss, min_delta: 100, patience: 1, factor: 0.5}\n";
  write_job(t.s.dir, job);
  const auto [rc, out] = launch(t, 1, "--epochs 4 --csv-log " + (t.s.dir / "ps.csv").string(), "", "", 0);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(count(out, "[chief:0] Epoch 2: ReduceLROnPlateau reducing learning rate to 0.005."), 1u) << out;
  EXPECT_EQ(count(out, "[chief:0] Epoch 3: ReduceLROnPlateau reducing learning rate to 0.0025."), 1u) << out;
  EXPECT_EQ(count(out, "ReduceLROnPlateau"), 3u) << "the chief alone decides and prints\n" << out;
  const auto [rc1, one] = run("timeout 60 " + std::string(STRATA_BINARY) + " train " + t.job +
                              " --threads 1 --verbose 2 --epochs 4 --csv-log " + (t.s.dir / "one.csv").string());
  ASSERT_EQ(rc1, 0) << one;
  EXPECT_EQ(count(one, "Epoch 3: ReduceLROnPlateau reducing learning rate to 0.0025."), 1u) << one;
  const std::vector<double> ps = csv_val_losses(t.s.dir / "ps.csv"), reference = csv_val_losses(t.s.dir / "one.csv");
  ASSERT_EQ(ps.size(), 4u);
  ASSERT_EQ(reference.size(), 4u);
  for (size_t e = 0; e < ps.size(); ++e) EXPECT_NEAR(ps[e], reference[e], 1e-5 * reference[e]) << "epoch " << e + 1;
  std::smatch chief_test, one_test;
  ASSERT_TRUE(std::regex_search(out, chief_test, std::regex(R"(\[chief:0\] (test loss \S+ - test accuracy \S+))")));
  ASSERT_TRUE(std::regex_search(one, one_test, std::regex(R"((test loss \S+ - test accuracy \S+))")));
  EXPECT_EQ(chief_test[1], one_test[1]) << out << one;
}

// Validation on the test set itself: the final evaluate is the best epoch's val_loss when its weights came back.
// Nothing improves by 100, so epoch 1 is the best and training stops after epoch 2; the chief writes epoch 1's
// weights back to both ps (each shard's backup too) and saves them as the job's last ps checkpoint, which
// `strata evaluate` then reads back to the same result.
TEST(ParameterServerCommandTest, EarlyStoppingRestoresTheBestWeightsOnTheParameterServers) {
  TinyJob t("ps_restore_best", 512);
  const std::filesystem::path ckpt = t.s.dir / "ckpt";
  write_job(t.s.dir, tiny_job(t.s.dir) + "validation: {format: idx, directory: " + t.s.dir.string() +
                         "}\nearly_stopping: {monitor: val_loss, min_delta: 100, patience: 1, "
                         "restore_best_weights: true}\n");
  const auto [rc, out] = launch(t, 2, "--epochs 5 --checkpoint-dir " + ckpt.string() + " --csv-log " +
                                          (t.s.dir / "log.csv").string(), "", "", 0);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[chief:0] training ended after epoch 2 of 5"), std::string::npos) << out;
  EXPECT_NE(out.find("[chief:0] Restoring model weights from the end of the best epoch: 1"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[chief:0\] fit: a callback changed 2 of the chief's 2 variables )"
                                                R"(after the last epoch \(EarlyStopping's restore_best_weights\): )"
                                                R"(written back to the ps tasks and saved as ps checkpoint 3\n)")))
      << out;
  const std::vector<double> val = csv_val_losses(t.s.dir / "log.csv");
  ASSERT_EQ(val.size(), 2u);
  char best[32], last[32];
  std::snprintf(best, sizeof best, "%.4f", val[0]);
  std::snprintf(last, sizeof last, "%.4f", val[1]);
  ASSERT_STRNE(best, last) << "the epochs' weights must differ for the test to tell them apart";
  std::smatch chief_test;
  ASSERT_TRUE(std::regex_search(out, chief_test, std::regex(R"(\[chief:0\] (test loss (\S+) - test accuracy \S+))")));
  EXPECT_EQ(chief_test[2], best) << out;
  // The ps checkpoint holds them too.
  const auto [rc2, evaluated] = run("timeout 60 " + std::string(STRATA_BINARY) + " evaluate " + t.job +
                                    " --threads 1 --checkpoint " + ckpt.string());
  ASSERT_EQ(rc2, 0) << evaluated;
  EXPECT_EQ(last_line(evaluated), chief_test[1].str()) << evaluated;
}

TEST(ParameterServerCommandTest, WhatAParameterServerJobCannotDoIsAClearError) {
  TinyJob t("ps_errors", 64);
  const std::string train = std::string(STRATA_BINARY) + " train " + t.job + " --strategy parameter_server";
  auto [rc, out] = run("timeout 60 " + train);  // no cluster
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("needs a cluster with a chief"), std::string::npos) << out;
  // The chief resumes only from a committed ps checkpoint (checked before anything starts).
  const std::string chief_config =
      R"(TF_CONFIG='{"cluster":{"chief":["127.0.0.1:1"],"worker":["127.0.0.1:2"],"ps":["127.0.0.1:3"]},)"
      R"("task":{"type":"chief","index":0}}' )";
  std::tie(rc, out) =
      run("timeout 60 env " + chief_config + train + " --resume --checkpoint-dir " + (t.s.dir / "c").string());
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("holds no committed parameter-server checkpoint"), std::string::npos) << out;
  std::tie(rc, out) = run("timeout 60 " + train + " --replicas 2");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("each parameter_server worker is one replica"), std::string::npos) << out;
  std::tie(rc, out) = run("timeout 60 " + train + " --max-staleness -1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--max-staleness: must be 0"), std::string::npos) << out;
  std::tie(rc, out) = run("timeout 60 " + std::string(STRATA_BINARY) + " train " + t.job + " --max-staleness 1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("only parameter_server workers"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::cli
