// The cluster coordinator with WorkerServers on 127.0.0.1 as threads of the test process (and a real ParameterServer
// where steps push): closures spread over the workers; a worker lost mid-call has its closure re-run elsewhere and the
// ps applies every step once; a worker restarted on its port gets work again; every worker gone is Unavailable naming
// them within the bound; a call past function_timeout runs elsewhere; a function's error reaches fetch() and join()
// and is not retried.
#include "strata/ps/cluster_coordinator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>

#include "strata/error.h"
#include "strata/ps/server.h"
#include "strata/ps/worker_server.h"
#include "test_util.h"

namespace strata::ps {
namespace {

using std::chrono::milliseconds;

std::string address_of(const WorkerServer& w) { return "127.0.0.1:" + std::to_string(w.port()); }

// A function that sleeps a little (so every dispatcher gets work) and returns its arguments and step.
std::string echo(int64_t step, const std::string& args) {
  std::this_thread::sleep_for(milliseconds(2));
  return args + "/" + std::to_string(step);
}

// `n` workers serving echo as "echo".
struct Workers {
  std::vector<std::unique_ptr<WorkerServer>> servers;
  explicit Workers(int n) {
    for (int i = 0; i < n; ++i) {
      servers.push_back(std::make_unique<WorkerServer>());
      servers.back()->register_function("echo", echo);
      servers.back()->start("127.0.0.1:0");
    }
  }
  std::vector<std::string> addresses() const {
    std::vector<std::string> out;
    for (const auto& s : servers) out.push_back(address_of(*s));
    return out;
  }
};

// Quick probing, so the tests see a worker come and go in milliseconds.
CoordinatorOptions quick(milliseconds unavailable_timeout = std::chrono::seconds(30)) {
  return {.unavailable_timeout = unavailable_timeout,
          .probe_initial_backoff = milliseconds(20),
          .probe_max_backoff = milliseconds(200),
          .probe_timeout = milliseconds(200),
          .first_step_id = 0};
}

TEST(ClusterCoordinatorTest, ManyClosuresRunSpreadOverTheWorkersAndJoinWaitsForAll) {
  Workers workers(3);
  ClusterCoordinator coordinator(workers.addresses(), quick());
  EXPECT_EQ(coordinator.num_workers(), 3);
  std::vector<RemoteValue> values;
  for (int i = 0; i < 60; ++i) values.push_back(coordinator.schedule("echo", "batch " + std::to_string(i)));
  coordinator.join();
  EXPECT_TRUE(coordinator.done());
  std::set<int64_t> steps;
  for (int i = 0; i < 60; ++i) {
    EXPECT_TRUE(values[i].is_ready());
    EXPECT_EQ(values[i].fetch(), "batch " + std::to_string(i) + "/" + std::to_string(values[i].step_id()));
    steps.insert(values[i].step_id());
  }
  EXPECT_EQ(steps.size(), 60u);  // unique step ids, from first_step_id on
  EXPECT_EQ(*steps.begin(), 0);
  int64_t total = 0;
  for (const auto& s : workers.servers) {
    EXPECT_GT(s->functions_run(), 0) << "a worker got no closure";
    total += s->functions_run();
  }
  EXPECT_EQ(total, 60);
  for (const WorkerStatus& w : coordinator.worker_status()) {
    EXPECT_TRUE(w.up);
    EXPECT_EQ(w.times_lost, 0);
  }
}

// pause() returns once nothing runs: every closure scheduled has finished or not started (a state the chief can
// checkpoint), and no more start until resume().
TEST(ClusterCoordinatorTest, PauseWaitsForTheClosuresRunningAndStartsNoMoreUntilResume) {
  Workers workers(2);
  ClusterCoordinator coordinator(workers.addresses(), quick());
  std::vector<RemoteValue> values;
  for (int i = 0; i < 200; ++i) values.push_back(coordinator.schedule("echo"));
  std::this_thread::sleep_for(milliseconds(20));  // some run
  coordinator.pause();
  const auto finished = [&] {
    return std::count_if(values.begin(), values.end(), [](const RemoteValue& v) { return v.is_ready(); });
  };
  const auto run_so_far = [&] { return workers.servers[0]->functions_run() + workers.servers[1]->functions_run(); };
  const int64_t at_pause = finished();
  EXPECT_GT(at_pause, 0);
  EXPECT_LT(at_pause, 200);
  EXPECT_EQ(run_so_far(), at_pause);  // none half done
  // The finished ones are the first scheduled (FIFO).
  for (int64_t i = 0; i < at_pause; ++i) EXPECT_TRUE(values[static_cast<size_t>(i)].is_ready()) << i;
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(finished(), at_pause) << "a closure started while paused";
  coordinator.resume();
  coordinator.join();
  EXPECT_EQ(finished(), 200);
}

TEST(ClusterCoordinatorTest, StepIdsStartAtTheClockSoARestartedCoordinatorDoesNotReuseThem) {
  Workers workers(1);
  int64_t first = 0;
  {
    ClusterCoordinator coordinator(workers.addresses());
    first = coordinator.schedule("echo").step_id();
    EXPECT_GT(first, int64_t{1'000'000'000'000'000});  // microseconds since 1970: past 2001
  }
  ClusterCoordinator restarted(workers.addresses());
  EXPECT_GT(restarted.schedule("echo").step_id(), first);
}

TEST(ClusterCoordinatorTest, AClosureOnAWorkerLostMidCallRunsElsewhereAndThePsAppliesEveryStepOnce) {
  ParameterServer ps;
  ps.start("127.0.0.1:0");
  auto client = std::make_shared<ParameterServerClient>("127.0.0.1:" + std::to_string(ps.port()));
  client->create("w", Tensor::zeros({1}), {.name = "sgd", .learning_rate = 1.0});
  // A training step: one push of gradient 1 under the closure's step id.
  auto step = [client](int64_t step_id, const std::string&) {
    client->push("w", Tensor::full({1}, 1.0), "step:" + std::to_string(step_id));
    std::this_thread::sleep_for(milliseconds(3));
    return std::string("ok");
  };
  // The victim pushes, then hangs until released: it is lost after its push and before its answer.
  std::mutex mu;
  std::condition_variable cv;
  bool pushed = false, released = false;
  WorkerServer victim;
  victim.register_function("step", [&](int64_t step_id, const std::string& args) {
    step(step_id, args);
    std::unique_lock lock(mu);
    pushed = true;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return released; });
    return std::string("late");
  });
  victim.start("127.0.0.1:0");
  WorkerServer healthy[2];
  for (auto& w : healthy) {
    w.register_function("step", step);
    w.start("127.0.0.1:0");
  }
  ClusterCoordinator coordinator({address_of(victim), address_of(healthy[0]), address_of(healthy[1])}, quick());
  constexpr int kSteps = 30;
  std::vector<RemoteValue> values;
  for (int i = 0; i < kSteps; ++i) values.push_back(coordinator.schedule("step"));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return pushed; })) << "the victim got no closure";
  }
  std::thread stopper([&] { victim.stop(milliseconds(100)); });  // returns once the hung function is released
  // join() does not wait for the lost worker.
  coordinator.join();
  for (const RemoteValue& v : values) EXPECT_EQ(v.fetch(), "ok");
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  stopper.join();
  EXPECT_EQ(ps.pushes_applied(), kSteps);  // every step once
  EXPECT_EQ(ps.pushes_dropped(), 1);       // the lost call's step, re-run on a healthy worker
  EXPECT_EQ(client->pull("w").to_vector<float>(), std::vector<float>{-static_cast<float>(kSteps)});
  EXPECT_EQ(healthy[0].functions_run() + healthy[1].functions_run(), kSteps);
  const WorkerStatus lost = coordinator.worker_status()[0];
  EXPECT_EQ(lost.times_lost, 1);
  EXPECT_FALSE(lost.up);
  std::cout << "the lost call: " << lost.last_error << "\n";
}

TEST(ClusterCoordinatorTest, AWorkerRestartedOnItsPortGetsWorkAgain) {
  Workers workers(2);
  ClusterCoordinator coordinator(workers.addresses(), quick());
  for (int i = 0; i < 10; ++i) coordinator.schedule("echo");
  coordinator.join();
  const std::string address = address_of(*workers.servers[0]);
  workers.servers[0]->stop();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (coordinator.worker_status()[0].up && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 10; ++i) coordinator.schedule("echo");
    coordinator.join();  // the other worker runs them
  }
  ASSERT_FALSE(coordinator.worker_status()[0].up) << "the stopped worker was never found lost";
  workers.servers[0] = std::make_unique<WorkerServer>();  // a new process on the same address
  workers.servers[0]->register_function("echo", echo);
  workers.servers[0]->start(address);
  while (workers.servers[0]->functions_run() == 0 && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 10; ++i) coordinator.schedule("echo");
    coordinator.join();
  }
  EXPECT_GT(workers.servers[0]->functions_run(), 0) << "the restarted worker got no work";
  EXPECT_TRUE(coordinator.worker_status()[0].up);
}

TEST(ClusterCoordinatorTest, EveryWorkerGoneFailsTheQueuedClosuresNamingThemWithinTheBound) {
  Workers workers(1);
  const std::string never = "127.0.0.1:" + std::to_string(test::free_port());  // nobody ever listens there
  ClusterCoordinator coordinator({workers.addresses()[0], never}, quick(milliseconds(1000)));
  EXPECT_EQ(coordinator.schedule("echo", "a").fetch().substr(0, 2), "a/");
  const std::string gone = workers.addresses()[0];
  workers.servers[0]->stop();
  const auto start = std::chrono::steady_clock::now();
  RemoteValue a = coordinator.schedule("echo"), b = coordinator.schedule("echo");
  const std::string m = test::message_of<Unavailable>([&] { a.fetch(); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));  // 1 s, a probe and a backoff
  EXPECT_NE(m.find("no worker reachable for 1000 ms"), std::string::npos) << m;
  std::cout << m << "\n";
  EXPECT_NE(m.find("worker 0 at " + gone), std::string::npos) << m;
  EXPECT_NE(m.find("worker 1 at " + never), std::string::npos) << m;
  EXPECT_THROW(b.fetch(), Unavailable);
  EXPECT_THROW(coordinator.join(), Unavailable);
  for (const WorkerStatus& w : coordinator.worker_status()) EXPECT_FALSE(w.up);
}

TEST(ClusterCoordinatorTest, ACallPastFunctionTimeoutCountsAsALostWorkerAndRunsElsewhere) {
  WorkerServer hung, quick_one;
  hung.register_function("which", [](int64_t, const std::string&) {
    std::this_thread::sleep_for(milliseconds(600));  // alive (it answers probes) but past the bound
    return std::string("hung");
  });
  quick_one.register_function("which", [](int64_t, const std::string&) { return std::string("quick"); });
  hung.start("127.0.0.1:0");
  quick_one.start("127.0.0.1:0");
  CoordinatorOptions options = quick();
  options.function_timeout = milliseconds(200);
  ClusterCoordinator coordinator({address_of(hung), address_of(quick_one)}, options);
  std::vector<RemoteValue> values;
  for (int i = 0; i < 20; ++i) values.push_back(coordinator.schedule("which"));
  coordinator.join();
  for (const RemoteValue& v : values) EXPECT_EQ(v.fetch(), "quick");
  EXPECT_GE(coordinator.worker_status()[0].times_lost, 1);
  EXPECT_NE(coordinator.worker_status()[0].last_error.find("DEADLINE_EXCEEDED"), std::string::npos);
}

TEST(ClusterCoordinatorTest, AFunctionErrorReachesFetchAndJoinAndIsNotRetried) {
  std::atomic<int> runs{0};
  auto maybe_fail = [&](int64_t step, const std::string& args) {
    ++runs;
    if (args == "bad") STRATA_THROW(InvalidArgument, "bad batch at step " << step);
    return args;
  };
  WorkerServer workers[2];
  for (auto& w : workers) {
    w.register_function("maybe_fail", maybe_fail);
    w.start("127.0.0.1:0");
  }
  ClusterCoordinator coordinator({address_of(workers[0]), address_of(workers[1])}, quick());
  std::vector<RemoteValue> good;
  for (int i = 0; i < 5; ++i) good.push_back(coordinator.schedule("maybe_fail", "good"));
  RemoteValue bad = coordinator.schedule("maybe_fail", "bad");
  for (int i = 0; i < 5; ++i) good.push_back(coordinator.schedule("maybe_fail", "good"));
  const std::string m = test::message_of<InvalidArgument>([&] { coordinator.join(); });
  EXPECT_NE(m.find("bad batch at step " + std::to_string(bad.step_id())), std::string::npos) << m;
  EXPECT_NE(m.find("function 'maybe_fail'"), std::string::npos) << m;
  EXPECT_THROW(bad.fetch(), InvalidArgument);
  for (const RemoteValue& v : good) EXPECT_EQ(v.fetch(), "good");  // the others all ran
  EXPECT_EQ(runs.load(), 11);                                      // the bad one once
  coordinator.join();                                              // the error was reported: forgotten
  EXPECT_TRUE(coordinator.done());

  RemoteValue again = coordinator.schedule("maybe_fail", "bad");  // done() reports it too
  while (!again.is_ready()) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_THROW(coordinator.done(), InvalidArgument);
  EXPECT_TRUE(coordinator.done());
}

TEST(ClusterCoordinatorTest, DestroyingItFailsTheClosuresNotRunAndLeavesNoThread) {
  const std::string never = "127.0.0.1:" + std::to_string(test::free_port());
  RemoteValue value;
  {
    ClusterCoordinator coordinator({never}, quick());
    value = coordinator.schedule("echo");
  }
  const std::string m = test::message_of<Error>([&] { value.fetch(); });
  EXPECT_NE(m.find("shut down before closure 'echo'"), std::string::npos) << m;
  EXPECT_THROW(ClusterCoordinator(std::vector<std::string>{}), InvalidArgument);
  EXPECT_THROW(RemoteValue().fetch(), InvalidArgument);
}

}  // namespace
}  // namespace strata::ps
