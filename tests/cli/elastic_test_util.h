// What the elastic-training CLI tests share: a 3-worker `strata launch --min-workers` run of the tiny job in which
// one worker does something to itself once the chief has saved a given backup, and the checks that the two others
// went on alone.
// Thread-safety: plain functions.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>

#include "cli/cli_test_util.h"

namespace strata::cli {

struct ElasticRun {
  fs::path backups;                  // --backup-dir
  int fault_after = 0;               // the backup (ckpt-<step>) after which `victim` does `fault` (0: never)
  int victim = 2;                    // the worker's index
  std::string fault = "kill -9 $$";  // e.g. "kill -STOP $$; sleep 12; kill -CONT $$"
  bool first_run_only = true;        // a restarted victim leaves itself alone
  int min_workers = 2;
  int max_restarts = 0;
  int backup_every = 50;
  std::string extra;  // more `strata train` flags
};

// `strata launch --workers 3 --min-workers M --max-restarts R -- sh worker.sh`: each worker runs `strata train` on
// the tiny job (3 epochs, multi_worker_mirrored, backups every N steps).
inline std::pair<int, std::string> elastic_job(const TinyJob& t, const ElasticRun& r) {
  std::string script = "exec " + std::string(STRATA_BINARY) + " train " + t.job +
                       " --strategy multi_worker_mirrored --threads 1 --epochs 3 --backup-every-steps " +
                       std::to_string(r.backup_every) + " --backup-dir " + r.backups.string() + " " + r.extra;
  if (r.fault_after > 0) {
    script = std::string("if ") + (r.first_run_only ? "[ \"$STRATA_LAUNCH_RESTART\" = 0 ] && " : "") +
             "echo \"$TF_CONFIG\" | grep -q '\"index\": *" + std::to_string(r.victim) + "'; then (while [ ! -e " +
             (r.backups / ("ckpt-" + std::to_string(r.fault_after))).string() + " ]; do sleep 0.002; done; " + r.fault +
             ") & fi; " + script;
  }
  std::ofstream(t.s.dir / "worker.sh") << script << "\n";
  return run("timeout -k 5 240 " + std::string(STRATA_BINARY) + " launch --workers 3 --min-workers " +
             std::to_string(r.min_workers) + " --max-restarts " + std::to_string(r.max_restarts) + " -- sh " +
             (t.s.dir / "worker.sh").string());
}

// worker:2 was lost and no process restarted: each of worker:0 and worker:1 printed one membership change within
// the heartbeat timeout (10 s) + 2 s of the discarded step's start, and trained all 192 steps, counting each of the
// 2048 examples once per epoch.
inline void expect_two_survivors_went_on(const std::string& out) {
  EXPECT_EQ(out.find("restart"), std::string::npos) << out;
  const std::regex change(R"(\[worker:[01]\] membership: worker:2 left; 2 workers go on \(membership epoch 1\), )"
                          R"(regrouped in ([0-9.]+) s)");
  int changes = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), change), end; it != end; ++it) {
    ++changes;
    EXPECT_LE(std::stod((*it)[1]), 12.0) << out;
  }
  EXPECT_EQ(changes, 2) << out;
  for (const char* w : {"[worker:0]", "[worker:1]"}) {
    EXPECT_NE(out.find(std::string(w) + " training ended after epoch 3 of 3: 192 optimizer steps in all; examples "
                                        "trained per epoch: 2048 2048 2048"),
              std::string::npos)
        << out;
  }
}

// A relaunch that resumed from the last backup and trained to the end.
inline void expect_resumed_to_the_end(const std::pair<int, std::string>& relaunch) {
  const auto& [rc, out] = relaunch;
  ASSERT_EQ(rc, 0) << out;
  // Mid-epoch ("epoch 2 at step 36 of it") or at an epoch's end ("1 epoch(s) done"): whichever backup was the last
  // complete one when the job ended.
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\[worker:0\] Restored .*ckpt-[0-9]+: )"))) << out;
  EXPECT_NE(out.find("[worker:1] training ended after epoch 3 of 3: 192 optimizer steps in all"), std::string::npos)
      << out;
}

}  // namespace strata::cli
