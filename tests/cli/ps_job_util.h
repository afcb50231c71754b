// Helpers of the parameter-server CLI tests: `strata launch --chief --workers W --ps P` running a tiny job whose
// task may SIGKILL itself once a shell condition holds, and what the chief's report says (pushes applied per ps,
// updates per shard, steps served, the test accuracy).
// Thread-safety: none needed; each test uses its own scratch directory.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli_test_util.h"

namespace strata::cli {

// The pushes applied and the repeats dropped over every ps, from the chief's report.
struct PsCounts {
  int64_t applied = 0, dropped = 0, shards = 0;
  int reports = 0;
};
inline PsCounts ps_counts(const std::string& out) {
  const std::regex line(R"(\[chief:0\] ps:\d \([^)]*\): (\d+) shards?, (\d+) pushes applied, (\d+) repeats dropped)");
  PsCounts c;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    c.shards += std::stoll((*it)[1]);
    c.applied += std::stoll((*it)[2]);
    c.dropped += std::stoll((*it)[3]);
    ++c.reports;
  }
  return c;
}

// Each shard's updates from the chief's report ("(updates: model/var_0/part_0 768 [taken over here], ...)"), by shard
// name; a shard reported twice (served by two ps) keeps both.
inline std::multimap<std::string, int64_t> shard_updates(const std::string& out) {
  const std::regex line(R"(\[chief:0\] ps:\d \([^)]*\): [^\n]*\(updates: ([^)]*)\))");
  const std::regex entry(R"((\S+) (\d+))");
  std::multimap<std::string, int64_t> updates;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    const std::string list = (*it)[1];
    for (std::sregex_iterator e(list.begin(), list.end(), entry); e != end; ++e) {
      updates.emplace((*e)[1], std::stoll((*e)[2]));
    }
  }
  return updates;
}

// Every shard of the job (`shards` of them) served once and updated once a step: `steps` updates each.
inline void expect_every_shard_updated(const std::string& out, size_t shards, int64_t steps) {
  const auto updates = shard_updates(out);
  EXPECT_EQ(updates.size(), shards) << out;
  for (const auto& [name, n] : updates) EXPECT_EQ(n, steps) << name << "\n" << out;
}

// Steps served by each run of `task` ("worker:1"), in order.
inline std::vector<int64_t> steps_served(const std::string& out, const std::string& task) {
  const std::regex line("\\[" + task + "\\] served (\\d+) training steps");
  std::vector<int64_t> served;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) served.push_back(std::stoll((*it)[1]));
  return served;
}

inline double test_accuracy(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex(R"(\[chief:0\] test loss [0-9.]+ - test accuracy ([0-9.]+))"))
             ? std::stod(m[1])
             : -1;
}

inline size_t count(const std::string& out, const std::string& what) {
  size_t n = 0;
  for (size_t at = out.find(what); at != std::string::npos; at = out.find(what, at + 1)) ++n;
  return n;
}

// `strata launch --chief --workers W --ps P [--max-restarts R] -- sh task.sh`, where task.sh runs `strata train ...
// --strategy parameter_server EXTRA`, and the first `kills` runs of `victim` ("worker:1", "ps:1", "chief:0"; ""
// none) each SIGKILL themselves once the shell condition `trigger` holds (it may read $STRATA_LAUNCH_RESTART, the
// run's number from 0).
inline std::pair<int, std::string> launch(const TinyJob& t, int workers, const std::string& extra,
                                          const std::string& victim, const std::string& trigger, int max_restarts,
                                          int ps = 2, int kills = 1) {
  std::string script = "exec " + std::string(STRATA_BINARY) + " train " + t.job +
                       " --strategy parameter_server --threads 1 --verbose 2 " + extra;
  if (!victim.empty()) {
    const std::string type = victim.substr(0, victim.find(':')), index = victim.substr(victim.find(':') + 1);
    script = "if [ \"$STRATA_LAUNCH_RESTART\" -lt " + std::to_string(kills) +
             " ] && echo \"$TF_CONFIG\" | grep -q '\"task\":{\"index\":" + index + ",\"type\":\"" + type +
             "\"'; then (until " + trigger + "; do sleep 0.005; done; kill -9 $$) & fi; " + script;
  }
  std::ofstream(t.s.dir / "task.sh") << script << "\n";
  return run("timeout -k 5 240 " + std::string(STRATA_BINARY) + " launch --chief --workers " + std::to_string(workers) +
             " --ps " + std::to_string(ps) + " --max-restarts " + std::to_string(max_restarts) + " -- sh " +
             (t.s.dir / "task.sh").string());
}

// The number of the ps checkpoint committed under `dir` (none: none).
inline std::optional<int64_t> committed_number(const std::filesystem::path& dir) {
  std::ifstream in(dir / "ps_checkpoint.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(R"("checkpoint": *"?(\d+))"))) return std::nullopt;
  return std::stoll(m[1]);
}

// A shell condition: the job under checkpoint directory `dir` committed ps checkpoint `number` or a later one
// (`number` may be a shell expression: "$((2 + 2 * STRATA_LAUNCH_RESTART))").
inline std::string committed_at_least(const std::filesystem::path& dir, const std::string& number) {
  return "[ \"$(sed -n 's/.*\"checkpoint\": *\"\\{0,1\\}\\([0-9]*\\).*/\\1/p' " +
         (dir / "ps_checkpoint.json").string() + " 2>/dev/null)\" -ge " + number + " ] 2>/dev/null";
}

}  // namespace strata::cli
