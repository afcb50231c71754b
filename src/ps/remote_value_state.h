// What a RemoteValue (strata/ps/remote_value.h) shares with the coordinator that fills it in (private to the ps
// layer): set once, with a result or an error, then read by any number of fetch() calls.
// Thread-safety: all members guarded by mu; finish() may be called once from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

namespace strata::ps::detail {

struct RemoteValueState {
  explicit RemoteValueState(int64_t step) : step_id(step) {}

  void finish(std::string value, std::exception_ptr failure) {
    {
      std::lock_guard lock(mu);
      result = std::move(value);
      error = std::move(failure);
      ready = true;
    }
    cv.notify_all();
  }

  const int64_t step_id;
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;        // GUARDED_BY(mu)
  std::string result;        // GUARDED_BY(mu)
  std::exception_ptr error;  // GUARDED_BY(mu)
};

}  // namespace strata::ps::detail
