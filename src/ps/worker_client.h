// The coordinator's end of one worker (private to the ps layer): runs a function there and probes whether it is
// alive, and sorts every failed call into the function's own error or a lost worker.
// Thread-safety: one call at a time (the worker's dispatcher thread); cancel() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "strata/ps/sync_round.h"

namespace strata::ps::detail {

class WorkerClient {
 public:
  // `keepalive`: how often an idle or long call pings the worker, so a machine that vanished mid-call is noticed.
  // `reconnect_backoff`: the longest the channel waits between attempts to reach a lost worker.
  WorkerClient(std::string address, std::chrono::milliseconds keepalive, std::chrono::milliseconds reconnect_backoff);
  ~WorkerClient();

  struct Outcome {
    enum Kind { kOk, kFunctionError, kLost } kind = kOk;
    std::string result;        // kOk
    std::exception_ptr error;  // kFunctionError: of the type the function threw, its message naming the worker
    std::string lost_reason;   // kLost: the status, e.g. "UNAVAILABLE: failed to connect to all addresses"
  };
  // Runs `function` on the worker for closure `step_id` (of synchronous round `round`, when defined); a call that
  // fails without a function's error (unreachable, cancelled, past `timeout`; 0 = no bound) is kLost.
  Outcome run(const std::string& function, int64_t step_id, const std::string& args, std::chrono::milliseconds timeout,
              const SyncRound& round = {});
  // Whether the worker answers a liveness call within `timeout` (waiting for it to come up meanwhile) and runs no
  // function (after a lost call: the one it was lost in has returned, so a new call is not stuck behind it); else
  // `why`.
  bool ping(std::chrono::milliseconds timeout, std::string* why);
  // Cancels the call in flight and every later one (they come back kLost / false). For shutting down.
  void cancel();
  const std::string& address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::ps::detail
