// GroupBarrier: the meeting point of the ranks of a local group, one generation per step of a collective.
//
// One 64-bit word holds the generation, the number of ranks that have arrived and an "aborted" bit. The last
// rank to arrive starts the next generation; the others spin briefly, then block on a condition variable
// until then or until their deadline. A rank that reaches its deadline aborts the group (the barrier stays
// aborted for good) unless every rank has arrived by then, so no rank ever passes a step that another gave up.
// Thread-safety: all members are safe from any thread; each of the `size` ranks calls arrive_and_wait once
// per generation.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace strata::comm::detail {

// A hint to the core that this thread is spinning (x86 `pause`).
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

class GroupBarrier {
 public:
  enum class Result { kPassed, kTimedOut, kAborted };

  explicit GroupBarrier(int size);
  GroupBarrier(const GroupBarrier&) = delete;
  GroupBarrier& operator=(const GroupBarrier&) = delete;

  // Arrives and waits for the other ranks. kTimedOut: this call reached `deadline` and aborted the group;
  // `describe_timeout()` (called under the barrier's lock, so it must not call back into the barrier) became
  // abort_reason(). kAborted: the group is (or became) aborted by another rank.
  Result arrive_and_wait(std::chrono::steady_clock::time_point deadline,
                         const std::function<std::string()>& describe_timeout);
  bool aborted() const;
  // Aborts the group now (a no-op if it already is): every waiting and later arrival gets kAborted.
  void abort(const std::string& reason);
  // Why the group was aborted; empty while it is not.
  std::string abort_reason() const;

 private:
  void wake_sleepers();

  const uint64_t size_;
  std::atomic<uint64_t> state_{0};  // bit 63 aborted | bits 32..62 generation | bits 0..31 arrived
  std::atomic<int> sleepers_{0};    // ranks blocked (or about to block) on cv_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string abort_reason_;  // guarded by mu_
};

}  // namespace strata::comm::detail
