// Where the time of a run goes: a timeline of spans written as Chrome trace-event JSON (open it in Perfetto or
// chrome://tracing), and a clock of the time this process spent running collectives.
//
//   trace::start({.path = "trace.json", .first_step = 10, .end_step = 30});
//   model.fit(train, {.epochs = 1});   // fit tags each step; spans of steps 10..29 are kept
//   trace::stop();                      // writes trace.json
//
// Spans come from the layers that do the work: input wait and forward (train), backward and optimizer apply
// (optim), the wait for reduced gradients (distribute), each collective a backend runs, on the thread that runs it
// (comm: gradient buckets run on the communicator's worker thread while backward goes on, which is the overlap to
// look for), parameter-server pushes and pulls (ps), checkpoint writes (io) and membership changes (distribute).
// Each thread is a row ("replica 0", "gloo worker", ...), each process a group named by start()'s process_name;
// a multi-worker job writes one file per worker (its process id is the worker's index, so the files' events can
// be concatenated into one view).
//
// Size is bounded twice: only spans that start while the step tag is in [first_step, end_step) are kept, and at
// most max_events of them. When no trace is recording, a Span costs one relaxed atomic load.
//
// Thread-safety: every function may be called from any thread. start() and stop() are meant to bracket a run;
// spans that end after stop() are dropped.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace strata::trace {

struct Options {
  std::string path;             // the JSON file stop() writes (its folder must exist)
  int64_t first_step = 0;       // keep spans of steps [first_step, end_step): optimizer iterations, 0-based
  int64_t end_step = 20;        // > first_step
  int64_t max_events = 200000;  // at most this many spans are kept (about 100 bytes each in memory)
  int process_id = 0;           // the trace's "pid": the worker's index in a multi-worker job
  std::string process_name = "strata";
};

// Starts recording (InvalidArgument for an empty path or an empty window; a trace already recording is dropped).
void start(const Options& options);
// Writes the file and stops recording; returns the number of spans written (0 and nothing written when no trace
// was started). IoError when the file cannot be written.
int64_t stop();

// Tags the spans started from now on with `step` (Model::fit calls it before each step); kNoStep ends the window
// until the next tag.
inline constexpr int64_t kNoStep = -1;
void set_step(int64_t step);

// Puts the calling thread on the row of that name ("replica 1"), made at the first thread so named: threads made
// anew for the same role (a pipeline's stage threads, started each step) share one row. REQUIRES: threads of one
// name do not run spans at the same time.
void name_thread(const std::string& name);

namespace detail {
extern std::atomic<bool> g_recording;  // started, and the step tag is in the window
void record(const char* category, const char* name, std::chrono::steady_clock::time_point begin,
            std::chrono::steady_clock::time_point end, int64_t bytes);
void record_instant(const char* category, const std::string& name);
}  // namespace detail

// True while spans are kept.
inline bool recording() { return detail::g_recording.load(std::memory_order_relaxed); }

// A span from construction to destruction, on the calling thread. `category` and `name` must outlive the trace
// (string literals); `bytes` (> 0) is shown as an argument.
class Span {
 public:
  Span(const char* category, const char* name, int64_t bytes = 0)
      : category_(category), name_(name), bytes_(bytes), on_(recording()) {
    if (on_) begin_ = std::chrono::steady_clock::now();
  }
  ~Span() {
    if (on_) detail::record(category_, name_, begin_, std::chrono::steady_clock::now(), bytes_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* category_;
  const char* name_;
  int64_t bytes_;
  bool on_;
  std::chrono::steady_clock::time_point begin_;
};

// A span whose times were measured elsewhere (a collective's run, timed for communication_seconds anyway).
inline void add_span(const char* category, const char* name, std::chrono::steady_clock::time_point begin,
                     std::chrono::steady_clock::time_point end, int64_t bytes = 0) {
  if (recording()) detail::record(category, name, begin, end, bytes);
}

// A moment (a membership change): drawn as a marker across the process's rows.
inline void instant(const char* category, const std::string& name) {
  if (recording()) detail::record_instant(category, name);
}

// Seconds this process has spent running collectives across workers (Gloo, MPI), traced or not; the TensorBoard
// callback writes its growth per epoch. Backends add to it as each collective ends.
double communication_seconds();
void add_communication_seconds(double seconds);

}  // namespace strata::trace
