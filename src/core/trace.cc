// The trace recorder (strata/trace.h): spans kept in one vector under a mutex while recording (a span is a
// step's forward, a bucket's all-reduce: tens to thousands per step, so one uncontended lock each is noise), written
// as Chrome trace-event JSON ("X" complete events, "i" instants, "M" thread and process names) by stop().
// Timestamps are microseconds of the steady clock, which processes on one machine share, so the files of a job's
// workers line up.
// Thread-safety: g_recording, g_started and the step tag are atomics read without the lock (g_recording only gates
// whether a span is timed; g_started lets set_step skip the lock when nothing records); everything else is under
// g_mu.
#include "strata/trace.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "strata/error.h"

namespace strata::trace {

namespace detail {
std::atomic<bool> g_recording{false};
}  // namespace detail

namespace {

struct Event {
  const char* category;
  const char* name;  // a literal; null for an instant, whose name is `label`
  std::string label;
  int64_t begin_ns;     // steady clock
  int64_t duration_ns;  // -1: an instant
  int thread;
  int64_t step;
  int64_t bytes;
};

std::mutex g_mu;
// Written under g_mu; read without it by set_step, so that a run with no trace takes no lock per step. set_step
// stores the step before it reads this, start() sets this before it reads the step (both sequentially consistent):
// one of them sees the other's write.
std::atomic<bool> g_started{false};
Options g_options;                          // guarded by g_mu
std::vector<Event> g_events;                // guarded by g_mu
int64_t g_dropped = 0;                      // guarded by g_mu
std::map<int, std::string> g_thread_names;  // guarded by g_mu
std::map<std::string, int> g_thread_rows;   // guarded by g_mu: name -> the row threads of that name share
std::atomic<int64_t> g_step{kNoStep};
std::atomic<int> g_next_thread{1};
std::atomic<int64_t> g_communication_ns{0};

thread_local int t_thread = 0;

int this_thread() {
  if (t_thread == 0) t_thread = g_next_thread.fetch_add(1, std::memory_order_relaxed);
  return t_thread;
}

int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// REQUIRES: g_mu held.
void update_recording() {
  const int64_t step = g_step.load();
  detail::g_recording.store(g_started.load() && step >= g_options.first_step && step < g_options.end_step,
                            std::memory_order_relaxed);
}

// REQUIRES: g_mu held.
void keep(Event e) {
  if (!g_started) return;  // stopped while the span ran
  if (static_cast<int64_t>(g_events.size()) >= g_options.max_events) {
    ++g_dropped;
    return;
  }
  g_events.push_back(std::move(e));
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Microseconds with nanosecond digits, as Chrome's format takes them.
std::string micros(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  return buf;
}

void write_event(std::FILE* f, const Event& e, int pid) {
  const std::string name = e.name != nullptr ? json_string(e.name) : json_string(e.label);
  if (e.duration_ns < 0) {
    std::fprintf(f, "{\"name\":%s,\"cat\":\"%s\",\"ph\":\"i\",\"s\":\"p\",\"ts\":%s,\"pid\":%d,\"tid\":%d",
                 name.c_str(), e.category, micros(e.begin_ns).c_str(), pid, e.thread);
  } else {
    std::fprintf(f, "{\"name\":%s,\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%s,\"dur\":%s,\"pid\":%d,\"tid\":%d", name.c_str(),
                 e.category, micros(e.begin_ns).c_str(), micros(e.duration_ns).c_str(), pid, e.thread);
  }
  std::fprintf(f, ",\"args\":{\"step\":%lld", static_cast<long long>(e.step));
  if (e.bytes > 0) std::fprintf(f, ",\"bytes\":%lld", static_cast<long long>(e.bytes));
  std::fputs("}}", f);
}

}  // namespace

void start(const Options& options) {
  STRATA_CHECK(!options.path.empty(), InvalidArgument, "trace: give the path of the trace file to write");
  STRATA_CHECK(options.first_step >= 0 && options.end_step > options.first_step, InvalidArgument,
               "trace: the step window [" << options.first_step << ", " << options.end_step
                                          << ") is empty; end_step must be above first_step");
  STRATA_CHECK(options.max_events >= 1, InvalidArgument,
               "trace: max_events must be at least 1, got " << options.max_events);
  std::lock_guard<std::mutex> lock(g_mu);
  g_options = options;
  g_events.clear();
  g_dropped = 0;
  g_started = true;
  update_recording();
}

int64_t stop() {
  std::vector<Event> events;
  std::map<int, std::string> threads;
  Options options;
  int64_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_started) return 0;
    g_started = false;
    update_recording();
    events.swap(g_events);
    threads = g_thread_names;
    options = g_options;
    dropped = g_dropped;
  }
  std::FILE* f = std::fopen(options.path.c_str(), "w");
  STRATA_CHECK(f != nullptr, IoError, "trace: cannot write " << options.path);
  const int pid = options.process_id;
  std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_spans\":%lld},\"traceEvents\":[\n",
               static_cast<long long>(dropped));
  std::fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":%s}}", pid,
               json_string(options.process_name).c_str());
  std::fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", pid,
               pid);
  for (const auto& [thread, name] : threads) {
    std::fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":%s}}", pid,
                 thread, json_string(name).c_str());
  }
  for (const Event& e : events) {
    std::fputs(",\n", f);
    write_event(f, e, pid);
  }
  std::fputs("\n]}\n", f);
  const bool failed = std::ferror(f) != 0;
  const bool closed = std::fclose(f) == 0;
  STRATA_CHECK(!failed && closed, IoError, "trace: writing " << options.path << " failed");
  return static_cast<int64_t>(events.size());
}

void set_step(int64_t step) {
  g_step.store(step);
  if (!g_started.load()) return;  // nothing records: start() reads the step itself
  std::lock_guard<std::mutex> lock(g_mu);
  update_recording();
}

void name_thread(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (const auto it = g_thread_rows.find(name); it != g_thread_rows.end()) {
    t_thread = it->second;  // a thread made anew for the same role (a pipeline stage's, each step) keeps its row
    return;
  }
  const int thread = this_thread();
  g_thread_rows[name] = thread;
  g_thread_names[thread] = name;
}

namespace detail {

void record(const char* category, const char* name, std::chrono::steady_clock::time_point begin,
            std::chrono::steady_clock::time_point end, int64_t bytes) {
  Event e{category,
          name,
          {},
          ns_of(begin),
          std::max<int64_t>(0, ns_of(end) - ns_of(begin)),
          this_thread(),
          g_step.load(std::memory_order_relaxed),
          bytes};
  std::lock_guard<std::mutex> lock(g_mu);
  keep(std::move(e));
}

void record_instant(const char* category, const std::string& name) {
  Event e{category,
          nullptr,
          name,
          ns_of(std::chrono::steady_clock::now()),
          -1,
          this_thread(),
          g_step.load(std::memory_order_relaxed),
          0};
  std::lock_guard<std::mutex> lock(g_mu);
  keep(std::move(e));
}

}  // namespace detail

double communication_seconds() {
  return static_cast<double>(g_communication_ns.load(std::memory_order_relaxed)) * 1e-9;
}

void add_communication_seconds(double seconds) {
  g_communication_ns.fetch_add(static_cast<int64_t>(seconds * 1e9), std::memory_order_relaxed);
}

}  // namespace strata::trace
