// `strata report`'s input (report.h): a run folder's TensorBoard scalars and its traces' step breakdowns.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/report.h"
#include "io/event_file_reader.h"
#include "strata/error.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

// The events files of one TensorBoard run folder, oldest first (their names start with the unix time).
std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// tag -> series, from the events files of one run folder (event_files' order); a step written again (a resumed run)
// keeps the last value.
std::map<std::string, Series> read_scalars(const std::vector<fs::path>& files) {
  std::map<std::string, std::map<int64_t, double>> by_tag;
  for (const fs::path& file : files) {
    for (const io::detail::ScalarEvent& e : io::detail::read_scalar_events(file.string()))
      by_tag[e.tag][e.step] = e.value;
  }
  std::map<std::string, Series> out;
  for (const auto& [tag, points] : by_tag) out[tag] = Series(points.begin(), points.end());
  return out;
}

struct TracedSpan {
  std::string name;
  double begin = 0, end = 0;
  int64_t step = -1;
};

bool is_trace_file(const fs::path& path) {
  if (path.extension() != ".json") return false;
  std::ifstream in(path);
  char head[64] = {};
  in.read(head, sizeof head - 1);
  return std::string(head).find("traceEvents") != std::string::npos ||
         std::string(head).find("displayTimeUnit") != std::string::npos;
}

}  // namespace

StepBreakdown step_breakdown_of_trace(const std::string& path) {
  std::ifstream in(path);
  STRATA_CHECK(in, IoError, "strata report: cannot read " << path);
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(DataCorrupt, path << ": not JSON (" << e.what() << ")");
  }
  STRATA_CHECK(trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array(), DataCorrupt,
               path << ": not a Chrome trace (no traceEvents array)");
  StepBreakdown out;
  out.process = fs::path(path).filename().string();
  std::map<int64_t, std::vector<TracedSpan>> by_thread;
  std::vector<std::string> order;  // span names in order of first appearance
  try {
    for (const auto& e : trace["traceEvents"]) {
      const std::string phase = e.value("ph", "");
      // (contains() first: the const operator[] of a key that is not there is undefined behaviour in nlohmann.)
      if (phase == "M" && e.value("name", "") == "process_name" && e.contains("args"))
        out.process = e["args"].value("name", out.process);
      if (phase != "X") continue;
      TracedSpan s;
      s.name = e.value("name", "?");
      s.begin = e.value("ts", 0.0);
      s.end = s.begin + e.value("dur", 0.0);
      if (e.contains("args") && e["args"].contains("step")) s.step = e["args"]["step"].get<int64_t>();
      if (std::find(order.begin(), order.end(), s.name) == order.end()) order.push_back(s.name);
      by_thread[e.value("tid", int64_t{0})].push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(DataCorrupt, path << ": a trace event is malformed (" << e.what() << ")");
  }
  // Threads that ran steps are those with forward or backward spans; the rest run beside them.
  std::set<int64_t> steps;
  std::map<std::string, double> own_us, background_us;
  double wall_us = 0, spans_us = 0;
  int step_threads = 0;
  for (auto& [thread, spans] : by_thread) {
    const bool runs_steps = std::any_of(
        spans.begin(), spans.end(), [](const TracedSpan& s) { return s.name == "forward" || s.name == "backward"; });
    if (!runs_steps) {
      for (const TracedSpan& s : spans) background_us[s.name] += s.end - s.begin;
      continue;
    }
    ++step_threads;
    // A span's own time: its duration less that of the spans nested in it (same thread, inside its interval).
    std::sort(spans.begin(), spans.end(), [](const TracedSpan& a, const TracedSpan& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
    });
    std::vector<const TracedSpan*> open;
    std::map<const TracedSpan*, double> nested;
    const double first = spans.front().begin;  // sorted by start
    double last = spans.front().end;
    for (const TracedSpan& s : spans) {
      while (!open.empty() && open.back()->end <= s.begin) open.pop_back();
      if (!open.empty()) {
        nested[open.back()] += s.end - s.begin;
      } else {
        spans_us += s.end - s.begin;
      }
      open.push_back(&s);
      if (s.step >= 0) steps.insert(s.step);
      last = std::max(last, s.end);
    }
    for (const TracedSpan& s : spans) own_us[s.name] += (s.end - s.begin) - nested[&s];
    wall_us += last - first;
  }
  out.steps = static_cast<int64_t>(steps.size());
  if (out.steps == 0 || step_threads == 0) return out;
  const double per_step = 1.0 / (1000.0 * static_cast<double>(out.steps) * step_threads);  // us -> ms per step
  out.step_ms = wall_us * per_step;
  for (const std::string& name : order) {
    if (own_us.count(name)) out.step_parts.emplace_back(name, own_us[name] * per_step);
    if (background_us.count(name))
      out.background.emplace_back(name, background_us[name] / (1000.0 * static_cast<double>(out.steps)));
  }
  out.step_parts.emplace_back("other", std::max(0.0, (wall_us - spans_us) * per_step));
  return out;
}

RunData load_run(const std::string& directory) {
  const fs::path dir(directory);
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(dir, ec), InvalidArgument,
               "strata report: '" << directory << "' is not a folder (give the --log-dir of a strata train run)");
  RunData run;
  run.name = fs::absolute(dir).lexically_normal().filename().string();
  if (run.name.empty()) run.name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  // Keras's layout (train/ and validation/ runs), or a folder of events files itself.
  std::vector<fs::path> train_files = event_files(dir / "train");
  if (train_files.empty()) train_files = event_files(dir);
  STRATA_CHECK(!train_files.empty(), InvalidArgument,
               "strata report: '" << directory
                                  << "' holds no TensorBoard event files (train/events.out.tfevents.*): give the "
                                     "--log-dir of a strata train run");
  run.train = read_scalars(train_files);
  run.validation = read_scalars(event_files(dir / "validation"));
  std::vector<fs::path> traces;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && is_trace_file(entry.path())) traces.push_back(entry.path());
  }
  std::sort(traces.begin(), traces.end());
  for (const fs::path& t : traces) run.breakdown.push_back(step_breakdown_of_trace(t.string()));
  return run;
}

}  // namespace strata::cli
