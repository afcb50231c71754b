// What a RemoteValue (strata/ps/remote_value.h) shares with the coordinator that fills it in (private to the ps
// layer): set once, with a result or an error, then read by any number of fetch() calls.
// Thread-safety: the mutable members guarded by mu; finish() may be called once from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>

namespace strata::ps::detail {

struct RemoteValueState {
  // `on_wait(+1)` is called before a fetch() waits for it and `on_wait(-1)` after (the coordinator learns that the
  // chief waits: under max_staleness = 0 a round that is not full then starts with the closures there are).
  explicit RemoteValueState(int64_t step, std::function<void(int)> on_wait = nullptr)
      : step_id(step), on_wait(std::move(on_wait)) {}

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
  const std::function<void(int)> on_wait;
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;        // GUARDED_BY(mu)
  std::string result;        // GUARDED_BY(mu)
  std::exception_ptr error;  // GUARDED_BY(mu)
};

}  // namespace strata::ps::detail
