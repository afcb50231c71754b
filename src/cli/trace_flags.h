// `strata train --trace FILE [--trace-steps A:B]`: the timeline of a run (strata/trace.h) for this task.
//
// A job of one task writes FILE; in a job of several tasks (under `strata launch`) each task writes its own file
// beside it, named by its task: trace.json becomes trace.worker-0.json, trace.worker-1.json (and trace.chief-0.json,
// trace.ps-0.json), each with the task's index as its process id, so that the files can be opened one by one or
// their events concatenated.
//
// Thread-safety: used by the thread that runs the command.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "strata/cluster/cluster_resolver.h"

namespace strata::cli {

// [first, end) steps from "A:B" (InvalidArgument naming --trace-steps unless 0 <= A < B).
std::pair<int64_t, int64_t> parse_trace_steps(const std::string& text);

// The file `task` writes for --trace `path`: `path` itself when the task is alone in its job.
std::string trace_path_for(const std::string& path, const cluster::TaskInfo& task);

// Records the timeline while it lives (nothing when `path` is empty) and writes it when destroyed, printing
// "trace: N spans of steps A..B-1 written to FILE". The constructor proves the task's file writable (IoError naming
// --trace: a directory, a missing folder), since the file is written only when training ends.
class TraceRecording {
 public:
  TraceRecording(const std::string& path, const std::string& steps, const cluster::TaskInfo& task);
  ~TraceRecording();
  TraceRecording(const TraceRecording&) = delete;
  TraceRecording& operator=(const TraceRecording&) = delete;
  // Writes the file now (throws IoError when it cannot); the destructor then does nothing.
  void finish();

 private:
  std::string path_;
  std::pair<int64_t, int64_t> window_{0, 0};
};

}  // namespace strata::cli
