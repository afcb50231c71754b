// The completion state every process backend's Work shares (gloo, mpi): whether the operation is done,
// the error it ended with, and waiters woken when it finishes. A backend's Work holds one Completion and
// adds what is its own (gloo's caller-runs wait, the text of its Timeout).
//
// Thread-safety: finish() is called once, by the thread that ran the operation; every other member may
// be called from any thread at any time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>

#include "strata/error.h"

namespace strata::comm::detail {

// The error of a finished operation, kept as (type, message) so that every waiter throws its own copy.
struct Failure {
  enum class Type { kNone, kInvalidArgument, kTimeout, kError } type = Type::kNone;
  std::string message;

  bool failed() const { return type != Type::kNone; }
  std::exception_ptr as_exception_ptr() const {
    try {
      raise();
    } catch (...) {
      return std::current_exception();
    }
  }
  [[noreturn]] void raise() const {
    switch (type) {
      case Type::kInvalidArgument:
        throw InvalidArgument(message);
      case Type::kTimeout:
        throw Timeout(message);
      case Type::kNone:
      case Type::kError:
        break;
    }
    throw Error(message);
  }
};

class Completion {
 public:
  bool done() const { return done_.load(std::memory_order_acquire); }

  // Records how the operation ended and wakes every waiter. REQUIRES: called once.
  void finish(Failure failure) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      failure_ = std::move(failure);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

  // Blocks until finish(), then rethrows its failure.
  void wait() {
    if (!done()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return done(); });
    }
    raise_if_failed();
  }

  // Blocks until finish() or `timeout`; false on timeout. Rethrows the failure when done.
  bool wait_for(std::chrono::milliseconds timeout) {
    if (!done()) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, timeout, [&] { return done(); })) return false;
    }
    raise_if_failed();
    return true;
  }

  // The failure as an exception: null while running or after success.
  std::exception_ptr exception() const {
    if (!done() || !failure_.failed()) return nullptr;
    return failure_.as_exception_ptr();
  }

 private:
  void raise_if_failed() const {
    if (failure_.failed()) failure_.raise();
  }

  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  Failure failure_;  // written once, before done_
};

}  // namespace strata::comm::detail
