// `strata train --trace` (see trace_flags.h).
#include "cli/trace_flags.h"

#include <cstdio>
#include <filesystem>

#include "cli/output_paths.h"
#include "strata/error.h"
#include "strata/trace.h"

namespace strata::cli {

std::pair<int64_t, int64_t> parse_trace_steps(const std::string& text) {
  long long first = -1, end = -1;
  int used = 0;
  const bool parsed =
      std::sscanf(text.c_str(), "%lld:%lld%n", &first, &end, &used) == 2 && used == static_cast<int>(text.size());
  STRATA_CHECK(
      parsed && first >= 0 && end > first, InvalidArgument,
      "--trace-steps: give the steps to record as FIRST:END (0-based, END excluded, e.g. 10:30), got '" << text << "'");
  return {first, end};
}

namespace {
int64_t tasks_in_job(const cluster::TaskInfo& task) {
  int64_t tasks = 0;
  for (const auto& [type, addresses] : task.cluster.jobs) tasks += static_cast<int64_t>(addresses.size());
  return tasks;
}

// Distinct over the job's tasks: the rank among the workers (chief first), then the ps tasks after them.
int process_id_of(const cluster::TaskInfo& task) {
  if (task.id_in_cluster) return static_cast<int>(*task.id_in_cluster);
  return static_cast<int>(task.cluster.num_tasks("chief") + task.cluster.num_tasks("worker") + task.task_index);
}
}  // namespace

std::string trace_path_for(const std::string& path, const cluster::TaskInfo& task) {
  if (tasks_in_job(task) <= 1) return path;
  const std::filesystem::path p(path);
  const std::string name =
      p.stem().string() + "." + task.task_type + "-" + std::to_string(task.task_index) + p.extension().string();
  return (p.parent_path() / name).string();
}

TraceRecording::TraceRecording(const std::string& path, const std::string& steps, const cluster::TaskInfo& task) {
  if (path.empty()) {
    STRATA_CHECK(steps.empty(), InvalidArgument, "--trace-steps needs --trace FILE");
    return;
  }
  window_ = steps.empty() ? std::pair<int64_t, int64_t>{1, 21} : parse_trace_steps(steps);
  path_ = trace_path_for(path, task);
  // Written only when training ends: a path that cannot be written fails now, before the first step.
  check_output_file(path_, "--trace");
  trace::name_thread("training loop");  // the thread that runs fit (and, with one replica, its steps)
  trace::start({.path = path_,
                .first_step = window_.first,
                .end_step = window_.second,
                .process_id = process_id_of(task),
                .process_name = tasks_in_job(task) > 1 ? task.task_type + ":" + std::to_string(task.task_index)
                                                       : std::string("strata")});
}

void TraceRecording::finish() {
  if (path_.empty()) return;
  const std::string path = std::move(path_);
  path_.clear();
  const int64_t spans = trace::stop();
  std::printf("trace: %lld spans of steps %lld..%lld written to %s\n", static_cast<long long>(spans),
              static_cast<long long>(window_.first), static_cast<long long>(window_.second - 1), path.c_str());
  std::fflush(stdout);
}

TraceRecording::~TraceRecording() {
  try {
    finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: warning: %s\n", e.what());
  }
}

}  // namespace strata::cli
