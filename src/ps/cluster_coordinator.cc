// The cluster coordinator (strata/ps/cluster_coordinator.h): one shared queue of closures, one dispatcher thread per
// worker. A dispatcher whose worker is up takes the head of the queue when its consistency allows (take()) and runs
// it there; a lost call puts the closure back at the head, marks the worker down, and the dispatcher probes it with
// backoff until it answers. Probing dispatchers also enforce unavailable_timeout: with every worker down that long,
// they fail the queued closures. Under max_staleness every change of the state a take depends on (a closure queued
// or finished, a worker down or up, the chief waiting) wakes every dispatcher to try again.
// Thread-safety: Impl::mu guards the queue, the counters and every Worker's status; a dispatcher makes its calls
// without holding it. Lock order: Impl::mu, then a RemoteValueState's mu.
#include "strata/ps/cluster_coordinator.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include "ps/remote_value_state.h"
#include "ps/worker_client.h"
#include "strata/error.h"

namespace strata::ps {
namespace {

using Clock = std::chrono::steady_clock;

struct Closure {
  std::string function;
  std::string args;
  std::shared_ptr<detail::RemoteValueState> value;
  bool rerun = false;  // lost once already: admitted before, so it bypasses max_staleness and counts for no worker
  SyncRound round{};   // under max_staleness = 0: set when first taken, kept when re-run
};

struct Worker {
  Worker(std::string address, const CoordinatorOptions& o)
      : client(std::move(address), o.keepalive, o.probe_max_backoff) {}
  detail::WorkerClient client;
  WorkerStatus status;           // GUARDED_BY(Impl::mu)
  Clock::time_point down_since;  // GUARDED_BY(Impl::mu); when status.up turned false
  std::string lost_reason;       // GUARDED_BY(Impl::mu); the status of the call that was lost
  int64_t round_taken = -1;      // GUARDED_BY(Impl::mu); max_staleness = 0: the last round it took a fresh closure in
  std::thread dispatcher;
};

// The error of closure `c` when the coordinator shuts down before it `what` ("ran", "finished").
std::exception_ptr shut_down_error(const Closure& c, const char* what) {
  return std::make_exception_ptr(Error("ps coordinator: shut down before closure '" + c.function + "' (step " +
                                       std::to_string(c.value->step_id) + ") " + what));
}

int64_t clock_step_id() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct ClusterCoordinator::Impl {
  CoordinatorOptions options;
  std::vector<std::unique_ptr<Worker>> workers;

  mutable std::mutex mu;
  std::condition_variable work_cv;  // a closure queued, or stopping
  std::condition_variable stop_cv;  // stopping (wakes probing dispatchers out of their backoff)
  std::condition_variable idle_cv;  // pending reached 0, or a closure stopped running (pause() waits for none to run)
  std::deque<Closure> queue;        // GUARDED_BY(mu)
  int64_t pending = 0;              // GUARDED_BY(mu): queued + running
  int64_t next_step_id = 0;         // GUARDED_BY(mu)
  std::exception_ptr first_error;   // GUARDED_BY(mu)
  bool stopping = false;            // GUARDED_BY(mu)
  bool paused = false;              // GUARDED_BY(mu): no fresh closure is taken (but a synchronous round's own)

  // The chief waits for closures (join(), fetch(): counted while they wait; done(): until the next schedule()), so
  // under max_staleness = 0 a round may open with fewer closures than workers.
  int64_t waiters = 0;       // GUARDED_BY(mu)
  bool done_polled = false;  // GUARDED_BY(mu)
  // max_staleness = 0: the current round, its number (counting from 0), how many fresh closures it took, and how
  // many of those have not finished (a re-run one counts until it finishes).
  SyncRound round;               // GUARDED_BY(mu)
  int64_t round_number = -1;     // GUARDED_BY(mu)
  int64_t round_taken = 0;       // GUARDED_BY(mu)
  int64_t round_unfinished = 0;  // GUARDED_BY(mu)

  // REQUIRES: mu held.
  void finish(Closure& c, std::string result, std::exception_ptr error) {
    if (error && !first_error) first_error = error;
    if (c.round.defined() && c.round.id == round.id) --round_unfinished;
    c.value->finish(std::move(result), std::move(error));
    --pending;
    idle_cv.notify_all();
    if (options.max_staleness) work_cv.notify_all();
  }

  // REQUIRES: mu held.
  int64_t workers_up() const {
    return std::count_if(workers.begin(), workers.end(), [](const auto& w) { return w->status.up; });
  }
  // The fewest steps of a worker that is up other than `except` (none: the largest int64). REQUIRES: mu held.
  int64_t fewest_steps_up(const Worker* except) const {
    int64_t fewest = std::numeric_limits<int64_t>::max();
    for (const auto& w : workers) {
      if (w.get() != except && w->status.up) fewest = std::min(fewest, w->status.steps);
    }
    return fewest;
  }

  // Whether worker `w` may take a fresh closure of the current round. It takes one per round, unless every worker
  // that is up took one already (workers lost and back mid-round must not leave a round unfilled). REQUIRES: mu held.
  bool round_has_slot_for(const Worker& w) const {
    if (round_taken >= round.size) return false;
    if (w.round_taken != round_number) return true;
    return std::none_of(workers.begin(), workers.end(),
                        [&](const auto& u) { return u->status.up && u->round_taken != round_number; });
  }

  // How many closures at the head of the queue are of the head's function. REQUIRES: mu held, the queue not empty.
  int64_t closures_of_head_function() const {
    const std::string& function = queue.front().function;
    const auto other =
        std::find_if(queue.begin(), queue.end(), [&](const Closure& c) { return c.function != function; });
    return static_cast<int64_t>(other - queue.begin());
  }

  // Takes the closure worker `w` (up) may run next into `out`; false when none may be taken now. REQUIRES: mu held.
  bool take(Worker& w, Closure* out) {
    if (queue.empty()) return false;
    const bool fresh = !queue.front().rerun;
    // Paused, only what lets the closures running finish: a synchronous round's other closures (its pushes wait for
    // them), and re-runs of closures lost while running.
    if (paused && fresh && !(options.max_staleness == 0 && round_taken < round.size)) return false;
    if (fresh && options.max_staleness) {
      const int64_t staleness = *options.max_staleness;
      if (staleness > 0 && w.status.steps - staleness > fewest_steps_up(&w)) return false;
      if (staleness == 0 && !round_has_slot_for(w)) {
        const bool round_finished = round_taken == round.size && round_unfinished == 0;
        if (!round_finished) return false;
        // A round holds closures of one function (a train step's round is never short of a push because an eval
        // step took a slot): those at the head of the queue, all fresh (a round ends only once its re-runs did).
        const int64_t up = workers_up();
        const int64_t same = closures_of_head_function();
        const bool more_may_come = same == static_cast<int64_t>(queue.size());
        if (same < up && more_may_come && waiters == 0 && !done_polled) return false;
        round = {.id = queue.front().value->step_id, .size = std::min(up, same)};
        ++round_number;
        round_taken = round_unfinished = 0;
        if (round.size < up) done_polled = false;  // used up
      }
    }
    *out = std::move(queue.front());
    queue.pop_front();
    if (fresh && options.max_staleness == 0) {
      out->round = round;
      ++round_taken;
      ++round_unfinished;
      w.round_taken = round_number;
    }
    return true;
  }

  // The chief starts (+1) or stops (-1) waiting for closures.
  void chief_waits(int change) {
    {
      std::lock_guard lock(mu);
      waiters += change;
    }
    work_cv.notify_all();
  }

  // REQUIRES: mu held. With every worker down for unavailable_timeout, fails the queued closures.
  void fail_queue_if_all_down() {
    const auto now = Clock::now();
    Clock::time_point all_down_since{};
    for (const auto& w : workers) {
      if (w->status.up) return;
      all_down_since = std::max(all_down_since, w->down_since);
    }
    if (queue.empty() || now - all_down_since < options.unavailable_timeout) return;
    std::ostringstream why;
    why << "no worker reachable for " << options.unavailable_timeout.count()
        << " ms (CoordinatorOptions::unavailable_timeout):";
    for (size_t i = 0; i < workers.size(); ++i) {
      const auto down_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - workers[i]->down_since);
      why << (i ? ";" : "") << " worker " << i << " at " << workers[i]->status.address << " down " << down_ms.count()
          << " ms (" << workers[i]->status.last_error << ")";
    }
    while (!queue.empty()) {
      Closure c = std::move(queue.front());
      queue.pop_front();
      finish(c, "",
             std::make_exception_ptr(Unavailable("ps coordinator: closure '" + c.function + "' (step " +
                                                 std::to_string(c.value->step_id) + ") not run: " + why.str())));
    }
  }

  // Probes worker `w` with backoff until it answers (true) or the coordinator stops (false).
  bool probe_until_up(Worker& w) {
    auto backoff = options.probe_initial_backoff;
    for (;;) {
      {
        std::unique_lock lock(mu);
        if (stop_cv.wait_for(lock, backoff, [&] { return stopping; })) return false;
      }
      std::string why;
      const bool up = w.client.ping(options.probe_timeout, &why);
      std::lock_guard lock(mu);
      if (stopping) return false;
      if (up) {
        w.status.up = true;
        // Back, it counts as far as the slowest of the others: it holds nobody back.
        if (const int64_t fewest = fewest_steps_up(&w); fewest != std::numeric_limits<int64_t>::max()) {
          w.status.steps = std::max(w.status.steps, fewest);
        }
        work_cv.notify_all();
        return true;
      }
      w.status.last_error = "lost: " + w.lost_reason + "; probe: " + why;
      fail_queue_if_all_down();
      backoff = std::min(backoff * 2, options.probe_max_backoff);
    }
  }

  void dispatch(Worker& w) {
    std::unique_lock lock(mu);
    while (!stopping) {
      if (!w.status.up) {
        lock.unlock();
        const bool up = probe_until_up(w);
        lock.lock();
        if (!up) break;
        continue;
      }
      Closure c;
      work_cv.wait(lock, [&] { return stopping || take(w, &c); });
      if (stopping) break;
      lock.unlock();
      auto out = w.client.run(c.function, c.value->step_id, c.args, options.function_timeout, c.round);
      lock.lock();
      if (out.kind == detail::WorkerClient::Outcome::kLost && !stopping) {
        c.rerun = true;
        queue.push_front(std::move(c));  // another worker runs it next, with the same step id (and round)
        idle_cv.notify_all();            // one fewer running
        ++w.status.times_lost;
        w.status.up = false;
        w.status.last_error = w.lost_reason = out.lost_reason;
        w.down_since = Clock::now();
        if (options.max_staleness) {
          work_cv.notify_all();  // a down worker holds nobody back
        } else {
          work_cv.notify_one();
        }
        continue;
      }
      if (out.kind == detail::WorkerClient::Outcome::kLost) {  // cancelled by the destructor
        finish(c, "", shut_down_error(c, "finished"));
        continue;
      }
      ++w.status.closures_run;
      if (!c.rerun) ++w.status.steps;
      finish(c, std::move(out.result), out.error);
    }
  }
};

ClusterCoordinator::ClusterCoordinator(std::vector<std::string> workers, CoordinatorOptions options)
    : impl_(std::make_shared<Impl>()) {
  STRATA_CHECK(!workers.empty(), InvalidArgument, "ClusterCoordinator: no worker addresses");
  STRATA_CHECK(options.unavailable_timeout.count() > 0 && options.probe_initial_backoff.count() > 0 &&
                   options.probe_max_backoff >= options.probe_initial_backoff && options.probe_timeout.count() > 0 &&
                   options.keepalive.count() > 0 && options.function_timeout.count() >= 0,
               InvalidArgument,
               "ClusterCoordinator: timeouts and backoffs must be positive (function_timeout may be 0), and "
               "probe_max_backoff at least probe_initial_backoff");
  STRATA_CHECK(!options.max_staleness || *options.max_staleness >= 0, InvalidArgument,
               "ClusterCoordinator: max_staleness is " << *options.max_staleness
                                                       << "; it counts closures a worker may run ahead, so 0 "
                                                          "(synchronous) or more, or none for asynchronous training");
  impl_->options = options;
  impl_->next_step_id = options.first_step_id >= 0 ? options.first_step_id : clock_step_id();
  for (auto& address : workers) {
    auto w = std::make_unique<Worker>(address, options);
    w->status.address = address;
    impl_->workers.push_back(std::move(w));
  }
  for (auto& w : impl_->workers) w->dispatcher = std::thread([this, worker = w.get()] { impl_->dispatch(*worker); });
}

ClusterCoordinator::~ClusterCoordinator() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->work_cv.notify_all();
  impl_->stop_cv.notify_all();
  impl_->idle_cv.notify_all();  // ends a pause()
  for (auto& w : impl_->workers) w->client.cancel();
  for (auto& w : impl_->workers) w->dispatcher.join();
  std::lock_guard lock(impl_->mu);
  while (!impl_->queue.empty()) {
    Closure c = std::move(impl_->queue.front());
    impl_->queue.pop_front();
    impl_->finish(c, "", shut_down_error(c, "ran"));
  }
}

RemoteValue ClusterCoordinator::schedule(const std::string& function, std::string args) {
  std::shared_ptr<detail::RemoteValueState> state;
  std::function<void(int)> on_wait;
  if (impl_->options.max_staleness == 0) {
    on_wait = [weak = std::weak_ptr<Impl>(impl_)](int change) {
      if (const auto impl = weak.lock()) impl->chief_waits(change);
    };
  }
  {
    std::lock_guard lock(impl_->mu);
    state = std::make_shared<detail::RemoteValueState>(impl_->next_step_id++, std::move(on_wait));
    impl_->queue.push_back({.function = function, .args = std::move(args), .value = state});
    ++impl_->pending;
    impl_->done_polled = false;  // more closures came: a round waits until it is full again
  }
  if (impl_->options.max_staleness) {
    impl_->work_cv.notify_all();
  } else {
    impl_->work_cv.notify_one();
  }
  return RemoteValue(state);
}

void ClusterCoordinator::join() {
  std::unique_lock lock(impl_->mu);
  ++impl_->waiters;
  impl_->work_cv.notify_all();
  impl_->idle_cv.wait(lock, [&] { return impl_->pending == 0; });
  --impl_->waiters;
  if (auto error = std::exchange(impl_->first_error, nullptr)) std::rethrow_exception(error);
}

void ClusterCoordinator::pause() {
  std::unique_lock lock(impl_->mu);
  impl_->paused = true;
  // Running: taken and not finished; a re-run waiting in the queue runs (take lets it) and counts as running.
  impl_->idle_cv.wait(lock, [&] {
    const bool rerun_queued = std::any_of(impl_->queue.begin(), impl_->queue.end(), [](const Closure& c) { return c.rerun; });
    return impl_->stopping || (impl_->pending == static_cast<int64_t>(impl_->queue.size()) && !rerun_queued);
  });
}

void ClusterCoordinator::resume() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->paused = false;
  }
  impl_->work_cv.notify_all();
}

bool ClusterCoordinator::done() {
  std::lock_guard lock(impl_->mu);
  if (auto error = std::exchange(impl_->first_error, nullptr)) std::rethrow_exception(error);
  if (impl_->pending > 0 && !impl_->done_polled) {
    impl_->done_polled = true;
    impl_->work_cv.notify_all();
  }
  return impl_->pending == 0;
}

int64_t ClusterCoordinator::num_workers() const { return static_cast<int64_t>(impl_->workers.size()); }

std::vector<WorkerStatus> ClusterCoordinator::worker_status() const {
  std::lock_guard lock(impl_->mu);
  std::vector<WorkerStatus> out;
  for (const auto& w : impl_->workers) out.push_back(w->status);
  return out;
}

}  // namespace strata::ps
