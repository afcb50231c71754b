// `strata report RUN_DIR... [--compare] [-o FILE]`: one self-contained HTML page (inline SVG and CSS, no script,
// nothing fetched) of one or several training runs: the loss and metric curves per epoch, throughput, input wait and
// communication time, and, where the run folder holds a --trace file, the time of a step broken down by what it
// did. Runs are shown side by side, a column each, or with --compare overlaid in one chart per quantity.
//
// A run folder is what `strata train --log-dir DIR` wrote (DIR/train and DIR/validation TensorBoard event files,
// also those of Keras's TensorBoard callback); a trace is any DIR/*.json of Chrome trace events (`--trace
// DIR/trace.json`; a multi-worker job's files, one per worker, give a row each).
//
// Thread-safety: plain functions of values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace strata::cli {

// One scalar over the epochs (or steps): (step, value), in step order, one value per step (the last written).
using Series = std::vector<std::pair<int64_t, double>>;

// Where one process's step time went, from its trace: milliseconds per step of each span name on the threads
// that ran steps (a span's own time, without the spans nested in it, averaged over those threads), what those
// threads did outside any span ("other"), and the spans of the other threads (a communicator's worker running
// gradient buckets), which overlap the step.
struct StepBreakdown {
  std::string process;  // "worker:0", or the file's name
  int64_t steps = 0;
  double step_ms = 0;                                      // wall time of the traced steps / steps
  std::vector<std::pair<std::string, double>> step_parts;  // in the order spans first appear; "other" last
  std::vector<std::pair<std::string, double>> background;  // name -> ms per step, on other threads
};

struct RunData {
  std::string name;                                 // the folder's name
  std::map<std::string, Series> train, validation;  // by tag ("epoch_loss")
  std::vector<StepBreakdown> breakdown;             // one per trace file
};

// Reads a run folder. InvalidArgument naming the folder when it holds no event files; DataCorrupt from a damaged
// event file or trace.
RunData load_run(const std::string& directory);

// The page. `compare`: one chart per quantity with every run in it; else a column of charts per run.
std::string report_html(const std::vector<RunData>& runs, bool compare);

// The breakdown of one trace file (Chrome trace-event JSON), for load_run and tests. DataCorrupt when the file is
// not trace-event JSON.
StepBreakdown step_breakdown_of_trace(const std::string& path);

}  // namespace strata::cli
