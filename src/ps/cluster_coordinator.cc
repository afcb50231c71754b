// The cluster coordinator (strata/ps/cluster_coordinator.h): one shared queue of closures, one dispatcher thread per
// worker. A dispatcher whose worker is up takes the head of the queue and runs it there; a lost call puts the closure
// back at the head, marks the worker down, and the dispatcher probes it with backoff until it answers. Probing
// dispatchers also enforce unavailable_timeout: with every worker down that long, they fail the queued closures.
// Thread-safety: Impl::mu guards the queue, the counters and every Worker's status; a dispatcher makes its calls
// without holding it. Lock order: Impl::mu, then a RemoteValueState's mu.
#include "strata/ps/cluster_coordinator.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
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
};

struct Worker {
  Worker(std::string address, const CoordinatorOptions& o)
      : client(std::move(address), o.keepalive, o.probe_max_backoff) {}
  detail::WorkerClient client;
  WorkerStatus status;           // GUARDED_BY(Impl::mu)
  Clock::time_point down_since;  // GUARDED_BY(Impl::mu); when status.up turned false
  std::string lost_reason;       // GUARDED_BY(Impl::mu); the status of the call that was lost
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
  std::condition_variable idle_cv;  // pending reached 0
  std::deque<Closure> queue;        // GUARDED_BY(mu)
  int64_t pending = 0;              // GUARDED_BY(mu): queued + running
  int64_t next_step_id = 0;         // GUARDED_BY(mu)
  std::exception_ptr first_error;   // GUARDED_BY(mu)
  bool stopping = false;            // GUARDED_BY(mu)

  // REQUIRES: mu held.
  void finish(Closure& c, std::string result, std::exception_ptr error) {
    if (error && !first_error) first_error = error;
    c.value->finish(std::move(result), std::move(error));
    if (--pending == 0) idle_cv.notify_all();
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
      work_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping) break;
      Closure c = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      auto out = w.client.run(c.function, c.value->step_id, c.args, options.function_timeout);
      lock.lock();
      if (out.kind == detail::WorkerClient::Outcome::kLost && !stopping) {
        queue.push_front(std::move(c));  // another worker runs it next, with the same step id
        work_cv.notify_one();
        ++w.status.times_lost;
        w.status.up = false;
        w.status.last_error = w.lost_reason = out.lost_reason;
        w.down_since = Clock::now();
        continue;
      }
      if (out.kind == detail::WorkerClient::Outcome::kLost) {  // cancelled by the destructor
        finish(c, "", shut_down_error(c, "finished"));
        continue;
      }
      ++w.status.closures_run;
      finish(c, std::move(out.result), out.error);
    }
  }
};

ClusterCoordinator::ClusterCoordinator(std::vector<std::string> workers, CoordinatorOptions options)
    : impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(!workers.empty(), InvalidArgument, "ClusterCoordinator: no worker addresses");
  STRATA_CHECK(options.unavailable_timeout.count() > 0 && options.probe_initial_backoff.count() > 0 &&
                   options.probe_max_backoff >= options.probe_initial_backoff && options.probe_timeout.count() > 0 &&
                   options.keepalive.count() > 0 && options.function_timeout.count() >= 0,
               InvalidArgument,
               "ClusterCoordinator: timeouts and backoffs must be positive (function_timeout may be 0), and "
               "probe_max_backoff at least probe_initial_backoff");
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
  {
    std::lock_guard lock(impl_->mu);
    state = std::make_shared<detail::RemoteValueState>(impl_->next_step_id++);
    impl_->queue.push_back({function, std::move(args), state});
    ++impl_->pending;
  }
  impl_->work_cv.notify_one();
  return RemoteValue(state);
}

void ClusterCoordinator::join() {
  std::unique_lock lock(impl_->mu);
  impl_->idle_cv.wait(lock, [&] { return impl_->pending == 0; });
  if (auto error = std::exchange(impl_->first_error, nullptr)) std::rethrow_exception(error);
}

bool ClusterCoordinator::done() {
  std::lock_guard lock(impl_->mu);
  if (auto error = std::exchange(impl_->first_error, nullptr)) std::rethrow_exception(error);
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
