// FlightRecorder: the last collectives one communicator issued, so that a timeout can say what this rank did last
// and (through what the gloo backend publishes of it) where each peer stands — PyTorch's NCCL flight recorder,
// kept small. A fixed ring of kCapacity entries, one per collective (sequence number, kind, bytes, training step,
// state: issued / running / completed / failed, with times); the entry of collective #seq is slot seq % kCapacity,
// so the newest kCapacity are kept. Recording allocates nothing and takes one uncontended lock (tens of ns beside
// a collective's 50-500 us). The training step is a tag the gradient path sets (Communicator::set_step); every
// collective issued after it carries it. Point-to-point messages are not recorded (they are numbered apart and need
// not line up across ranks).
// Thread-safety: every member may be called from any thread (one mutex); issued() calls for one recorder come in
// increasing sequence order (the backend's issue lock).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/completion.h"

namespace strata::comm::detail {

class FlightRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kCapacity = 16;
  static constexpr int64_t kNoStep = -1;

  enum class State : uint8_t { kIssued, kRunning, kCompleted, kFailed };
  struct Entry {
    int64_t seq = 0;  // 0: an empty slot
    OpKind kind = OpKind::kNone;
    State state = State::kIssued;
    int64_t bytes = 0;
    int64_t step = kNoStep;  // the training step it was issued in, or kNoStep
    std::chrono::milliseconds timeout{0};
    Clock::time_point issued, started, ended;  // started / ended: the epoch until then
    // When the state last changed.
    Clock::time_point changed() const { return std::max({issued, started, ended}); }
  };

  // The training step the collectives issued from now on carry (kNoStep: none).
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }

  // Records collective #seq with the bytes this rank puts in: every tensor's, or the input's (tensors[0]) for
  // all_gather and reduce_scatter. REQUIRES: seq greater than every seq recorded before.
  void issued(int64_t seq, OpKind kind, const std::vector<Tensor>& tensors, std::chrono::milliseconds timeout,
              Clock::time_point at);
  void started(int64_t seq, Clock::time_point at = Clock::now());
  // A second call for the same seq changes nothing (the first outcome stands).
  void ended(int64_t seq, bool ok, Clock::time_point at = Clock::now());

  // The newest `n` entries (at most kCapacity), oldest first.
  std::vector<Entry> last(size_t n) const;
  std::optional<Entry> newest() const;

 private:
  Entry* find(int64_t seq);  // REQUIRES: mu_ held. Null once the slot holds a newer collective.

  std::atomic<int64_t> step_{kNoStep};
  mutable std::mutex mu_;
  std::array<Entry, kCapacity> ring_{};  // guarded by mu_
  int64_t newest_ = 0;                   // guarded by mu_
};

const char* state_name(FlightRecorder::State state);

// "all_reduce #6 (step 3, 4 KiB) completed in 0.2 ms" (the step when tagged, the bytes when any); without times
// (an entry decoded from a peer) "... completed".
std::string describe(const FlightRecorder::Entry& entry, FlightRecorder::Clock::time_point now);
std::string describe(const FlightRecorder::Entry& entry);
// "rank 0's last collectives: all_reduce #5 (...) completed in 0.3 ms, all_reduce #6 (...) running for 1002 ms";
// "" when nothing was recorded.
std::string describe_recent(const FlightRecorder& recorder, int rank, size_t n);

// One line a peer can read: "<seq> <kind> <state> <step> <bytes>"; decode gives nullopt for anything else.
std::string encode(const FlightRecorder::Entry& entry);
std::optional<FlightRecorder::Entry> decode(const std::string& text);

// "64 B", "4 KiB", "1.5 MiB".
std::string bytes_str(int64_t bytes);

}  // namespace strata::comm::detail
