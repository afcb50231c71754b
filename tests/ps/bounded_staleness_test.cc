// Bounded staleness in the cluster coordinator (CoordinatorOptions::max_staleness), with WorkerServers on 127.0.0.1
// as threads of the test process whose functions log when they start and finish: with one worker slowed, no worker
// starts its step v before every worker up finished v - s, while without a bound the fast one runs far ahead; a down
// worker, and one that comes back, hold nobody back; s = 0
// runs lockstep rounds (one closure per worker each, the round passed to the function, a partial last round when the
// chief waits in join(), fetch() or done(), never two functions in one round); a negative bound is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "strata/error.h"
#include "strata/ps/cluster_coordinator.h"
#include "strata/ps/worker_server.h"
#include "test_util.h"

namespace strata::ps {
namespace {

using std::chrono::milliseconds;

struct Event {
  int worker;
  bool start;  // else: finish
  StepContext step;
  std::string function;
};

// Workers serving "step" and "eval": each sleeps its own time between logging its start and its finish.
class LoggingWorkers {
 public:
  explicit LoggingWorkers(const std::vector<milliseconds>& step_times) {
    for (size_t i = 0; i < step_times.size(); ++i) {
      servers_.push_back(std::make_unique<WorkerServer>());
      for (const std::string function : {"step", "eval"}) {
        servers_.back()->register_function(
            function, [this, function, worker = static_cast<int>(i), time = step_times[i]](const StepContext& step,
                                                                                           const std::string&) {
              log(worker, true, step, function);
              std::this_thread::sleep_for(time);
              log(worker, false, step, function);
              return std::to_string(worker);
            });
      }
      servers_.back()->start("127.0.0.1:0");
    }
  }
  std::vector<std::string> addresses() const {
    std::vector<std::string> out;
    for (const auto& s : servers_) out.push_back("127.0.0.1:" + std::to_string(s->port()));
    return out;
  }
  std::vector<Event> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  // Worker i's server (stop() it and start() it again on its address: its functions stay registered).
  WorkerServer& server(size_t i) { return *servers_[i]; }

 private:
  void log(int worker, bool start, const StepContext& step, const std::string& function) {
    std::lock_guard lock(mu_);
    events_.push_back({worker, start, step, function});
  }
  std::vector<std::unique_ptr<WorkerServer>> servers_;
  mutable std::mutex mu_;
  std::vector<Event> events_;  // GUARDED_BY(mu_), in the order they happened
};

CoordinatorOptions quick(std::optional<int64_t> max_staleness) {
  return {.probe_initial_backoff = milliseconds(20),
          .probe_max_backoff = milliseconds(200),
          .probe_timeout = milliseconds(200),
          .first_step_id = 0,
          .max_staleness = max_staleness};
}

// Replays `events` of `workers` workers (none lost): at each start of worker w, having finished v steps, how far it
// is ahead of the fewest steps any other worker finished (v - fewest). Per worker, the largest lead; and the largest
// lead past `bound` seen at all (0 when none).
struct Leads {
  std::vector<int64_t> largest;
  int64_t violation = 0;
};
Leads leads_of(const std::vector<Event>& events, int workers, int64_t bound) {
  std::vector<int64_t> finished(static_cast<size_t>(workers), 0);
  Leads out{std::vector<int64_t>(static_cast<size_t>(workers), std::numeric_limits<int64_t>::min()), 0};
  for (const Event& e : events) {
    const auto w = static_cast<size_t>(e.worker);
    if (!e.start) {
      ++finished[w];
      continue;
    }
    int64_t fewest = std::numeric_limits<int64_t>::max();
    for (size_t u = 0; u < finished.size(); ++u) {
      if (u != w) fewest = std::min(fewest, finished[u]);
    }
    const int64_t lead = finished[w] - fewest;
    out.largest[w] = std::max(out.largest[w], lead);
    if (lead > bound) out.violation = std::max(out.violation, lead);
  }
  return out;
}

// Worker 0 fast, worker 1 a little slower, worker 2 slow.
const std::vector<milliseconds> kUnevenWorkers = {milliseconds(1), milliseconds(8), milliseconds(60)};

// The workers' statuses, one line each: "worker 0: 8 steps, lost 0 calls (...)".
std::string statuses(const std::vector<WorkerStatus>& status) {
  std::ostringstream out;
  for (size_t i = 0; i < status.size(); ++i) {
    out << "worker " << i << ": " << status[i].steps << " steps, lost " << status[i].times_lost << " calls ("
        << status[i].last_error << ")\n";
  }
  return out.str();
}

TEST(BoundedStalenessTest, NoWorkerStartsStepVBeforeEveryWorkerUpFinishedVMinusS) {
  for (const int64_t staleness : {1, 2}) {
    SCOPED_TRACE("max_staleness " + std::to_string(staleness));
    // A call lost by the transport (a loaded machine) rightly lets the others run ahead of the worker that is down,
    // which this replay cannot see: such a run is retried, and one of three must lose nothing.
    for (int attempt = 1;; ++attempt) {
      LoggingWorkers workers(kUnevenWorkers);
      ClusterCoordinator coordinator(workers.addresses(), quick(staleness));
      constexpr int kClosures = 24;
      for (int i = 0; i < kClosures; ++i) coordinator.schedule("step");
      coordinator.join();
      const std::vector<WorkerStatus> status = coordinator.worker_status();
      const bool lost = std::any_of(status.begin(), status.end(), [](const auto& w) { return w.times_lost > 0; });
      if (lost) {
        std::cout << "attempt " << attempt << " lost a call:\n" << statuses(status);
        ASSERT_LT(attempt, 3) << "every attempt lost a call";
        continue;
      }
      const std::vector<Event> events = workers.events();
      ASSERT_EQ(events.size(), 2u * kClosures);
      const Leads leads = leads_of(events, 3, staleness);
      EXPECT_EQ(leads.violation, 0) << "a worker started a step " << leads.violation << " ahead\n" << statuses(status);
      // The bound holds the fast worker back, and only as far as it says: it runs exactly s ahead of the slow one.
      EXPECT_EQ(leads.largest[0], staleness);
      for (const Event& e : events) EXPECT_FALSE(e.step.round.defined());  // rounds are for s = 0 alone
      int64_t steps = 0;
      for (const WorkerStatus& w : status) steps += w.steps;
      EXPECT_EQ(steps, kClosures);
      break;
    }
  }
}

TEST(BoundedStalenessTest, WithoutABoundTheFastWorkerRunsFarAhead) {
  LoggingWorkers workers(kUnevenWorkers);
  ClusterCoordinator coordinator(workers.addresses(), quick(std::nullopt));
  for (int i = 0; i < 24; ++i) coordinator.schedule("step");
  coordinator.join();
  const Leads leads = leads_of(workers.events(), 3, 2);
  std::cout << "asynchronous: the fast worker ran up to " << leads.largest[0] << " steps ahead of the slow one\n";
  EXPECT_GT(leads.largest[0], 2);  // past both bounds tested above
}

TEST(BoundedStalenessTest, ZeroStalenessRunsLockstepRoundsOneClosurePerWorker) {
  LoggingWorkers workers({milliseconds(2), milliseconds(2), milliseconds(20)});
  ClusterCoordinator coordinator(workers.addresses(), quick(0));
  constexpr int kClosures = 10;  // rounds of 3, 3, 3 and, once join() waits, 1
  std::vector<RemoteValue> values;
  for (int i = 0; i < kClosures; ++i) values.push_back(coordinator.schedule("step"));
  coordinator.join();
  const std::vector<Event> events = workers.events();
  ASSERT_EQ(events.size(), 2u * kClosures);

  std::map<int64_t, std::vector<Event>> starts;  // by round id
  std::map<int64_t, int64_t> unfinished;         // by round id, while replaying
  std::set<int64_t> finished_rounds;
  for (const Event& e : events) {
    ASSERT_TRUE(e.step.round.defined()) << "step " << e.step.step_id << " ran without a round";
    if (e.start) {
      // Every earlier round finished before a closure of this one started.
      for (const auto& [round, left] : unfinished) {
        if (round == e.step.round.id) continue;
        EXPECT_EQ(left, 0) << "step " << e.step.step_id << " started while round " << round << " ran";
      }
      starts[e.step.round.id].push_back(e);
      ++unfinished[e.step.round.id];
    } else {
      --unfinished[e.step.round.id];
    }
  }
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 3}, {3, 3}, {6, 3}, {9, 1}};  // (id, size), FIFO
  ASSERT_EQ(starts.size(), want.size());
  size_t r = 0;
  for (const auto& [id, round_starts] : starts) {
    SCOPED_TRACE("round " + std::to_string(id));
    EXPECT_EQ(id, want[r].first);  // the step id of its first closure
    EXPECT_EQ(static_cast<int64_t>(round_starts.size()), want[r].second);
    std::set<int> round_workers;
    for (const Event& e : round_starts) {
      EXPECT_EQ(e.step.round.size, want[r].second);
      EXPECT_GE(e.step.step_id, id);
      EXPECT_LT(e.step.step_id, id + want[r].second);
      round_workers.insert(e.worker);
    }
    EXPECT_EQ(static_cast<int64_t>(round_workers.size()), want[r].second) << "a worker ran two closures of a round";
    ++r;
  }
  for (const RemoteValue& v : values) EXPECT_NO_THROW(v.fetch());
}

TEST(BoundedStalenessTest, ARoundNotFullStartsOnceTheChiefWaitsInFetchOrDone) {
  LoggingWorkers workers({milliseconds(1), milliseconds(1), milliseconds(1)});
  std::future<std::string> fetched;  // declared first: a coordinator destroyed on failure ends the fetch
  ClusterCoordinator coordinator(workers.addresses(), quick(0));
  RemoteValue first = coordinator.schedule("step"), second = coordinator.schedule("step");
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_TRUE(workers.events().empty()) << "a round of 2 started for 3 workers while nobody waited";
  fetched = std::async(std::launch::async, [&] { return second.fetch(); });
  ASSERT_EQ(fetched.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "fetch() waits forever";
  EXPECT_NO_THROW(fetched.get());
  EXPECT_NO_THROW(first.fetch());
  for (const Event& e : workers.events()) EXPECT_EQ(e.step.round.size, 2);

  RemoteValue third = coordinator.schedule("step");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!coordinator.done() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(1));
  ASSERT_TRUE(third.is_ready()) << "done() polled, but the round of 1 never started";
  EXPECT_EQ(workers.events().back().step.round.size, 1);
  EXPECT_EQ(workers.events().back().step.round.id, third.step_id());
}

// Runs `count` closures of "step" and waits for them, at most 20 s (a gate that waits for a down worker would hang).
void run_bounded(ClusterCoordinator& coordinator, int count) {
  for (int i = 0; i < count; ++i) coordinator.schedule("step");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!coordinator.done()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the closures never finished";
    std::this_thread::sleep_for(milliseconds(2));
  }
}

TEST(BoundedStalenessTest, ADownWorkerHoldsNobodyBackNorDoesOneThatComesBack) {
  LoggingWorkers workers({milliseconds(1), milliseconds(1)});
  const std::string address = workers.addresses()[1];
  ClusterCoordinator coordinator(workers.addresses(), quick(1));
  run_bounded(coordinator, 6);
  workers.server(1).stop();
  run_bounded(coordinator, 20);  // worker 1 is found down; worker 0 goes on alone, 20 and more steps ahead
  ASSERT_FALSE(coordinator.worker_status()[1].up);
  const int64_t alone = coordinator.worker_status()[0].steps;
  EXPECT_GE(alone, 20);
  workers.server(1).start(address);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!coordinator.worker_status()[1].up && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_TRUE(coordinator.worker_status()[1].up) << "the restarted worker was never found up";
  // Back, it counts as far as worker 0: both take the next steps, worker 0 never waiting for it to catch up.
  EXPECT_GE(coordinator.worker_status()[1].steps, alone);
  const size_t before = workers.events().size();
  run_bounded(coordinator, 10);
  const std::vector<Event> events = workers.events();
  int64_t by_first = 0;
  for (size_t i = before; i < events.size(); ++i) by_first += events[i].start && events[i].worker == 0;
  EXPECT_GT(by_first, 0) << "worker 0 waited while the worker that came back caught up";
  const std::vector<WorkerStatus> status = coordinator.worker_status();
  EXPECT_LE(std::abs(status[0].steps - status[1].steps), 1);
}

TEST(BoundedStalenessTest, ARoundHoldsClosuresOfOneFunctionOnly) {
  LoggingWorkers workers({milliseconds(1), milliseconds(1)});
  ClusterCoordinator coordinator(workers.addresses(), quick(0));
  for (const char* function : {"step", "step", "step", "eval", "eval", "step"}) coordinator.schedule(function);
  coordinator.join();
  std::map<int64_t, std::set<std::string>> functions;  // by round id
  std::map<int64_t, int64_t> sizes;
  for (const Event& e : workers.events()) {
    functions[e.step.round.id].insert(e.function);
    sizes[e.step.round.id] = e.step.round.size;
  }
  // Rounds: steps 0 and 1; step 2 alone (an eval follows it); evals 3 and 4; step 5 alone (join() waits).
  EXPECT_EQ(sizes, (std::map<int64_t, int64_t>{{0, 2}, {2, 1}, {3, 2}, {5, 1}}));
  for (const auto& [round, names] : functions) EXPECT_EQ(names.size(), 1u) << "round " << round << " mixes functions";
}

TEST(BoundedStalenessTest, ANegativeBoundIsInvalidArgument) {
  const std::string m = test::message_of<InvalidArgument>(
      [] { ClusterCoordinator({"127.0.0.1:1"}, CoordinatorOptions{.max_staleness = -1}); });
  EXPECT_NE(m.find("max_staleness is -1"), std::string::npos) << m;
}

}  // namespace
}  // namespace strata::ps
