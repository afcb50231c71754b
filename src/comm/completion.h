// What the backends share about an operation in flight: its kind and name (every backend's messages say
// "all_reduce #3"), and, for the process backends (gloo, mpi), the Work that completes it: whether it is
// done, the error it ended with, waiters woken when it finishes, and the Timeout of Work::wait(timeout).
// A backend's Work derives from BackendWork and adds what is its own (gloo's caller-runs wait).
//
// Thread-safety: finish() is called once, by the thread that ran the operation; every other member may
// be called from any thread at any time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "strata/comm/communicator.h"

#include "strata/error.h"

namespace strata::comm::detail {

// The operations a communicator queues.
enum class OpKind : int { kNone, kAllReduce, kBroadcast, kAllGather, kBarrier, kReduceScatter, kSend, kRecv, kNewGroup };

inline const char* kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kNone:
      return "nothing";
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kNewGroup:
      return "new_group";
  }
  return "?";
}

// The error of a finished operation, kept as (code, message) so that every waiter throws its own copy.
struct Failure {
  std::optional<ErrorCode> code;  // none: the operation succeeded
  std::string message;

  // The failure of an operation that threw `error` (its strata class, or Error, and its message).
  static Failure of(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return {error_code_of(error), e.what()};
    } catch (...) {
      return {ErrorCode::kUnknown, "a non-standard exception"};
    }
  }
  bool failed() const { return code.has_value(); }
  std::exception_ptr as_exception_ptr() const { return make_error(*code, message); }  // REQUIRES: failed()
  [[noreturn]] void raise() const { throw_error(*code, message); }                    // REQUIRES: failed()
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

// The Work of one queued operation of a process backend, finished by the thread that runs it.
class BackendWork : public Work {
 public:
  // `backend` names it in messages ("gloo"); it must outlive the Work (a string literal).
  BackendWork(const char* backend, OpKind kind, int64_t seq, int rank)
      : backend_(backend), kind_(kind), seq_(seq), rank_(rank) {}

  bool is_completed() const override { return completion_.done(); }
  void wait() override { completion_.wait(); }
  void wait(std::chrono::milliseconds timeout) override {
    if (!completion_.wait_for(timeout)) {
      STRATA_THROW(Timeout, backend_ << ": " << kind_name(kind_) << " #" << seq_ << " on rank " << rank_
                                     << " did not complete within " << timeout.count()
                                     << " ms (it goes on running under its own timeout)");
    }
  }
  std::exception_ptr exception() const override { return completion_.exception(); }
  void finish(Failure failure) { completion_.finish(std::move(failure)); }

 private:
  const char* const backend_;
  const OpKind kind_;
  const int64_t seq_;
  const int rank_;
  Completion completion_;
};

}  // namespace strata::comm::detail
