// GroupBarrier: see group_barrier.h. The memory orders: arrivals are acq_rel read-modify-writes of one word,
// so the last arrival acquires every earlier rank's writes and its release of the next generation publishes
// them to every waiter. The blocking path is a Dekker handshake on (state_, sleepers_), both seq_cst.
// Thread-safety: see the header.
#include "comm/group_barrier.h"

#include <thread>

namespace strata::comm::detail {
namespace {

constexpr uint64_t kAbortBit = uint64_t{1} << 63;
constexpr uint64_t kCountMask = 0xffffffffULL;
constexpr uint64_t kGenMask = 0x7fffffffULL;
// A step usually completes within microseconds when the ranks are balanced; spin that long, then give the
// core away (the machine may have fewer cores than ranks), then block.
constexpr int kSpins = 256;
constexpr int kYields = 16;

uint64_t generation(uint64_t state) { return (state >> 32) & kGenMask; }
uint64_t arrived(uint64_t state) { return state & kCountMask; }

}  // namespace

GroupBarrier::GroupBarrier(int size) : size_(static_cast<uint64_t>(size)) {}

bool GroupBarrier::aborted() const { return state_.load(std::memory_order_acquire) & kAbortBit; }

void GroupBarrier::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t s = state_.load(std::memory_order_seq_cst);
  while (!(s & kAbortBit)) {
    if (state_.compare_exchange_weak(s, s | kAbortBit, std::memory_order_seq_cst)) {
      abort_reason_ = reason;
      break;
    }
  }
  cv_.notify_all();
}

std::string GroupBarrier::abort_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_reason_;
}

void GroupBarrier::wake_sleepers() {
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  std::lock_guard<std::mutex> lock(mu_);  // a sleeper checks state_ and blocks under mu_: no lost wake-up
  cv_.notify_all();
}

GroupBarrier::Result GroupBarrier::arrive_and_wait(std::chrono::steady_clock::time_point deadline,
                                                   const std::function<std::string()>& describe_timeout) {
  const uint64_t before = state_.fetch_add(1, std::memory_order_seq_cst);
  if (before & kAbortBit) return Result::kAborted;
  const uint64_t gen = generation(before);
  if (arrived(before) + 1 == size_) {
    // Every rank is here; only an abort could change the word now, and timeouts never abort a full barrier.
    uint64_t expected = before + 1;
    const uint64_t next = ((gen + 1) & kGenMask) << 32;
    const bool released = state_.compare_exchange_strong(expected, next, std::memory_order_seq_cst);
    wake_sleepers();
    return released ? Result::kPassed : Result::kAborted;
  }

  for (int i = 0; i < kSpins + kYields; ++i) {
    const uint64_t s = state_.load(std::memory_order_acquire);
    if (generation(s) != gen) return Result::kPassed;
    if (s & kAbortBit) return Result::kAborted;
    if (i < kSpins) {
      spin_pause();
    } else {
      std::this_thread::yield();
    }
  }

  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  Result result;
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      uint64_t s = state_.load(std::memory_order_seq_cst);
      if (generation(s) != gen) {
        result = Result::kPassed;
        break;
      }
      if (s & kAbortBit) {
        result = Result::kAborted;
        break;
      }
      if (cv_.wait_until(lock, deadline) != std::cv_status::timeout) continue;
      s = state_.load(std::memory_order_seq_cst);
      if (generation(s) != gen || (s & kAbortBit)) continue;  // decided above
      if (arrived(s) >= size_) {                              // the last rank is releasing the barrier right now
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
        continue;
      }
      if (state_.compare_exchange_strong(s, s | kAbortBit, std::memory_order_seq_cst)) {
        abort_reason_ = describe_timeout();
        cv_.notify_all();
        result = Result::kTimedOut;
        break;
      }
      // Another rank arrived meanwhile: look again (the deadline has passed, so this ends at once).
    }
  }
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  return result;
}

}  // namespace strata::comm::detail
