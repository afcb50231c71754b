// FlightRecorder (flight_recorder.h): the ring of a communicator's last collectives, and how they read in a
// message and in the one-line form a peer reads back from the store.
// A collective's end also feeds strata/trace.h: the communication clock and, when recording, a span.
// Thread-safety: the recorder's members lock mu_; the free functions share no state.
#include "comm/flight_recorder.h"

#include <cstdio>
#include <sstream>

#include "strata/trace.h"

namespace strata::comm::detail {
namespace {

constexpr FlightRecorder::State kStates[] = {FlightRecorder::State::kIssued, FlightRecorder::State::kRunning,
                                             FlightRecorder::State::kCompleted, FlightRecorder::State::kFailed};


// "0.3 ms" below 10 ms, "1002 ms" above.
std::string ms_str(FlightRecorder::Clock::duration d) {
  const double ms = std::chrono::duration<double, std::milli>(d).count();
  char text[32];
  std::snprintf(text, sizeof text, ms < 10 ? "%.1f ms" : "%.0f ms", ms);
  return text;
}

}  // namespace

void FlightRecorder::issued(int64_t seq, OpKind kind, const std::vector<Tensor>& tensors,
                            std::chrono::milliseconds timeout, Clock::time_point at) {
  const bool input_only = kind == OpKind::kAllGather || kind == OpKind::kReduceScatter;
  int64_t bytes = 0;
  for (size_t i = 0; i < (input_only ? std::min<size_t>(tensors.size(), 1) : tensors.size()); ++i) {
    if (tensors[i].defined()) bytes += static_cast<int64_t>(tensors[i].nbytes());
  }
  const int64_t step = step_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  ring_[static_cast<size_t>(seq) % kCapacity] = {seq, kind, State::kIssued, bytes, step, timeout, at, {}, {}};
  newest_ = seq;
}

FlightRecorder::Entry* FlightRecorder::find(int64_t seq) {
  Entry& e = ring_[static_cast<size_t>(seq) % kCapacity];
  return e.seq == seq ? &e : nullptr;
}

void FlightRecorder::started(int64_t seq, Clock::time_point at) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = find(seq);
  if (e == nullptr || e->state != State::kIssued) return;
  e->state = State::kRunning;
  e->started = at;
}

void FlightRecorder::ended(int64_t seq, bool ok, Clock::time_point at) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = find(seq);
  if (e == nullptr || e->state == State::kCompleted || e->state == State::kFailed) return;
  // A collective that ran (not one failed before it started) counts as communication, on the thread that ran it.
  if (e->state == State::kRunning) {
    trace::add_communication_seconds(std::chrono::duration<double>(at - e->started).count());
    trace::add_span("comm", kind_name(e->kind), e->started, at, e->bytes);
  }
  e->state = ok ? State::kCompleted : State::kFailed;
  e->ended = at;
}

std::vector<FlightRecorder::Entry> FlightRecorder::last(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  n = std::min({n, kCapacity, static_cast<size_t>(newest_)});
  std::vector<Entry> out;
  out.reserve(n);
  for (int64_t seq = newest_ - static_cast<int64_t>(n) + 1; seq <= newest_; ++seq) {
    const Entry& e = ring_[static_cast<size_t>(seq) % kCapacity];
    if (e.seq == seq) out.push_back(e);
  }
  return out;
}

std::optional<FlightRecorder::Entry> FlightRecorder::newest() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (newest_ == 0) return std::nullopt;
  return ring_[static_cast<size_t>(newest_) % kCapacity];
}

const char* state_name(FlightRecorder::State state) {
  switch (state) {
    case FlightRecorder::State::kIssued:
      return "issued";
    case FlightRecorder::State::kRunning:
      return "running";
    case FlightRecorder::State::kCompleted:
      return "completed";
    case FlightRecorder::State::kFailed:
      return "failed";
  }
  return "?";
}

std::string describe(const FlightRecorder::Entry& entry) {
  std::string text = std::string(kind_name(entry.kind)) + " #" + std::to_string(entry.seq);
  std::string details;  // the step when tagged, the bytes when any
  if (entry.step != FlightRecorder::kNoStep) details = "step " + std::to_string(entry.step);
  if (entry.bytes > 0) details += (details.empty() ? "" : ", ") + bytes_str(entry.bytes);
  if (!details.empty()) text += " (" + details + ")";
  return text + " " + state_name(entry.state);
}

std::string describe(const FlightRecorder::Entry& entry, FlightRecorder::Clock::time_point now) {
  using State = FlightRecorder::State;
  std::string text = describe(entry);
  switch (entry.state) {
    case State::kIssued:
      return text + " " + ms_str(now - entry.issued) + " ago, not started";
    case State::kRunning:
      return text + " for " + ms_str(now - entry.started);
    case State::kCompleted:
      return text + " in " + ms_str(entry.ended - entry.started);
    case State::kFailed:
      // Failed before it ran (the group was already broken): no running time to give.
      return entry.started == FlightRecorder::Clock::time_point{}
                 ? text
                 : text + " after " + ms_str(entry.ended - entry.started);
  }
  return text;
}

std::string describe_recent(const FlightRecorder& recorder, int rank, size_t n) {
  const std::vector<FlightRecorder::Entry> entries = recorder.last(n);
  if (entries.empty()) return "";
  const auto now = FlightRecorder::Clock::now();
  std::string text = "rank " + std::to_string(rank) + "'s last collectives: ";
  for (size_t i = 0; i < entries.size(); ++i) text += (i ? ", " : "") + describe(entries[i], now);
  return text;
}

std::string encode(const FlightRecorder::Entry& entry) {
  return std::to_string(entry.seq) + " " + kind_name(entry.kind) + " " + state_name(entry.state) + " " +
         std::to_string(entry.step) + " " + std::to_string(entry.bytes);
}

std::optional<FlightRecorder::Entry> decode(const std::string& text) {
  std::istringstream in(text);
  FlightRecorder::Entry entry;
  std::string kind, state;
  if (!(in >> entry.seq >> kind >> state >> entry.step >> entry.bytes) || entry.seq <= 0) return std::nullopt;
  bool known_kind = false, known_state = false;
  for (int k = 0; k <= static_cast<int>(OpKind::kNewGroup) && !known_kind; ++k) {
    entry.kind = static_cast<OpKind>(k);
    known_kind = kind == kind_name(entry.kind);
  }
  for (size_t s = 0; s < std::size(kStates) && !known_state; ++s) {
    entry.state = kStates[s];
    known_state = state == state_name(entry.state);
  }
  if (!known_kind || !known_state) return std::nullopt;
  return entry;
}

// "64 B", "4 KiB", "1.5 MiB".
std::string bytes_str(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  const bool whole = unit == 0 || value == static_cast<double>(static_cast<int64_t>(value)) || value >= 100;
  std::snprintf(text, sizeof text, whole ? "%.0f %s" : "%.1f %s", value, kUnits[unit]);
  return text;
}

}  // namespace strata::comm::detail
