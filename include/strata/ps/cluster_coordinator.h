// The chief's scheduler of asynchronous parameter-server training (TensorFlow's ClusterCoordinator): schedule() queues
// a closure (a function registered by name on every WorkerServer, with argument bytes) and returns a RemoteValue at
// once; one dispatcher thread per worker takes closures from one shared queue and runs them there.
//
//   ps::ClusterCoordinator coordinator({"w0:2223", "w1:2223"});
//   std::vector<ps::RemoteValue> losses;
//   for (int i = 0; i < steps; ++i) losses.push_back(coordinator.schedule("train_step", batch_spec(i)));
//   coordinator.join();                              // every closure finished; rethrows the first closure error
//   float loss = decode(losses.back().fetch());
//
// Every closure gets a unique step id, kept when it is re-run: the function passes it on with its ps pushes and the
// ps drops a repeat, so a step is applied once even when it ran twice. By default the ids start at the wall clock in
// microseconds, so a restarted coordinator does not reuse the ids of the one before.
//
// Failures. A call that fails with no error from the function (the worker unreachable, gone mid-call, cancelled, past
// function_timeout) puts the closure back at the head of the queue for another worker and marks the worker down; its
// dispatcher probes it with exponential backoff (probe_initial_backoff doubling to probe_max_backoff) until it answers
// running no function, so a worker restarted on the same address rejoins and gets work again, and one still hung in
// the call it was lost in is given nothing new until that call returns. Training never waits for a dead worker. When
// every worker has been down for unavailable_timeout, the queued closures (and those scheduled later, until a worker
// is back) fail with Unavailable naming each worker and its last error: no endless retry loop (TensorFlow #45088).
// An error the function threw is the closure's own: never retried, it reaches fetch(), and join() / done().
// Unlike TensorFlow, an error does not cancel the closures queued behind it; they all run.
//
// Consistency (CoordinatorOptions::max_staleness). By default training is asynchronous, as in TensorFlow: a worker
// takes the next closure as soon as it is free. With max_staleness = s, a worker that has finished v closures starts
// its next one only when every worker that is up has finished at least v - s (down workers never hold the others
// back, and a worker that comes back up counts as far as the slowest of the others). A closure re-run after a lost
// worker was admitted already: any worker runs it at once, and it counts for none.
// s = 0 is synchronous training in lockstep rounds (strata/ps/sync_round.h): a round opens when the one before is
// finished, with one closure for each worker up then, all of one function (fewer when fewer of it are at the head of
// the queue and another function follows, or the chief waits in join(), done() or fetch(); else a round waits until
// it is full). Each closure gets the round (its id and size) with its call (StepContext), keeps it when re-run
// elsewhere, and passes it with its pushes: the ps applies the mean of the round's gradients once, when every
// closure of the round has pushed, before the last push returns. So when a round's closures have all returned, the
// next round pulls the updated values. A round whose closure failed with its own error is never complete on the ps
// (its pushes are not applied); join() reports the error.
// Thread-safety: all methods may be called from any thread at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/ps/remote_value.h"

namespace strata::ps {

struct CoordinatorOptions {
  // Every worker down this long: queued closures fail with Unavailable naming the workers.
  std::chrono::milliseconds unavailable_timeout = std::chrono::seconds(30);
  // A lost worker is probed after probe_initial_backoff, the wait doubling up to probe_max_backoff; one probe waits at
  // most probe_timeout for an answer.
  std::chrono::milliseconds probe_initial_backoff{100};
  std::chrono::milliseconds probe_max_backoff{2000};
  std::chrono::milliseconds probe_timeout{1000};
  // A function call running longer counts as a lost worker (the closure is re-run elsewhere); 0: no bound.
  std::chrono::milliseconds function_timeout{0};
  // How often a call in flight pings its worker, so that a machine that vanished mid-call is noticed.
  std::chrono::milliseconds keepalive{10000};
  // The first step id; -1: the wall clock in microseconds since the epoch.
  int64_t first_step_id = -1;
  // How many closures a worker may run ahead of the slowest worker that is up; 0: synchronous rounds; none (the
  // default): asynchronous. Negative: InvalidArgument.
  std::optional<int64_t> max_staleness = std::nullopt;
};

// One worker as the coordinator sees it (for tests and reports).
struct WorkerStatus {
  std::string address;
  bool up = true;            // false from a lost call until a probe is answered
  int64_t closures_run = 0;  // finished there, with a result or the function's error
  int64_t steps = 0;         // its step count for max_staleness: closures it took fresh and finished (see above)
  int64_t times_lost = 0;    // calls lost there (each closure re-queued)
  std::string last_error;    // the status of the last lost call, and of the last probe when one failed since
};

class ClusterCoordinator {
 public:
  // Starts one dispatcher per worker ("host:port" each, at least one). The workers need not be up yet.
  explicit ClusterCoordinator(std::vector<std::string> workers, CoordinatorOptions options = {});
  // Cancels calls in flight and fails the closures not finished (their fetch() throws Error); joins the dispatchers.
  ~ClusterCoordinator();
  ClusterCoordinator(const ClusterCoordinator&) = delete;
  ClusterCoordinator& operator=(const ClusterCoordinator&) = delete;

  // Queues a call of `function` (registered on the workers) with `args`; returns at once.
  RemoteValue schedule(const std::string& function, std::string args = "");
  // Waits until every closure scheduled so far finished; then rethrows the first closure error since the last
  // join() / done() that threw, and forgets it.
  void join();
  // Whether every closure scheduled so far finished; rethrows (and forgets) a closure error first, as join().
  bool done();
  // Stops handing out queued closures and waits until none runs (a closure lost meanwhile is re-run first; under
  // max_staleness = 0 a round being taken is completed): then every closure scheduled so far has either finished or
  // not started, which is a state the chief may checkpoint. resume() hands them out again. The destructor ends a
  // pause's wait.
  void pause();
  void resume();
  int64_t num_workers() const;
  std::vector<WorkerStatus> worker_status() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the RemoteValues' wait hooks (weakly)
};

}  // namespace strata::ps
