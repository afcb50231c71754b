// The worker service on 127.0.0.1, called through a ClusterCoordinator (its only client): the port it binds, the
// strata type and message of a function's error arriving intact (and not retried, even an Unavailable), an unknown
// function name, and one function at a time per worker.
#include "strata/ps/worker_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "strata/error.h"
#include "strata/ps/cluster_coordinator.h"
#include "test_util.h"

namespace strata::ps {
namespace {

std::string address_of(const WorkerServer& w) { return "127.0.0.1:" + std::to_string(w.port()); }

TEST(WorkerServerTest, ServesOnThePortItReportsAndRefusesATakenOne) {
  WorkerServer worker;
  worker.register_function("echo", [](int64_t step, const std::string& args) { return args + std::to_string(step); });
  worker.start("127.0.0.1:0");
  EXPECT_GT(worker.port(), 0);
  EXPECT_THROW(worker.start("127.0.0.1:0"), InvalidArgument);
  WorkerServer other;
  EXPECT_THROW(other.start(address_of(worker)), Unavailable);
  ClusterCoordinator coordinator({address_of(worker)}, {.first_step_id = 7});
  EXPECT_EQ(coordinator.schedule("echo", "step ").fetch(), "step 7");
  EXPECT_EQ(worker.functions_run(), 1);
}

template <class E>
void expect_arrives_as(ClusterCoordinator& coordinator, const std::string& function, const std::string& text) {
  SCOPED_TRACE(function);
  RemoteValue value = coordinator.schedule(function);
  const std::string m = test::message_of<E>([&] { value.fetch(); });
  EXPECT_NE(m.find("function '" + function + "' (step " + std::to_string(value.step_id()) + ") failed"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(text), std::string::npos) << m;
  EXPECT_THROW(coordinator.join(), E);
}

TEST(WorkerServerTest, AFunctionsErrorArrivesWithItsTypeAndMessageAndIsNotRetried) {
  WorkerServer worker;
  worker.register_function("shape", [](int64_t, const std::string&) -> std::string { throw ShapeError("[2] vs [3]"); });
  worker.register_function("timeout", [](int64_t, const std::string&) -> std::string { throw Timeout("waited 5 s"); });
  worker.register_function("corrupt", [](int64_t, const std::string&) -> std::string { throw DataCorrupt("bad crc"); });
  worker.register_function("ps_gone",
                           [](int64_t, const std::string&) -> std::string { throw Unavailable("ps 1 unreachable"); });
  worker.register_function("plain",
                           [](int64_t, const std::string&) -> std::string { throw std::runtime_error("oops"); });
  worker.start("127.0.0.1:0");
  ClusterCoordinator coordinator({address_of(worker)});
  expect_arrives_as<ShapeError>(coordinator, "shape", "[2] vs [3]");
  expect_arrives_as<Timeout>(coordinator, "timeout", "waited 5 s");
  expect_arrives_as<DataCorrupt>(coordinator, "corrupt", "bad crc");
  expect_arrives_as<Unavailable>(coordinator, "ps_gone", "ps 1 unreachable");  // the function's: not a lost worker
  expect_arrives_as<Error>(coordinator, "plain", "oops");
  EXPECT_EQ(worker.functions_run(), 5);  // each ran once
  EXPECT_EQ(coordinator.worker_status()[0].times_lost, 0);
}

TEST(WorkerServerTest, AnUnknownFunctionIsInvalidArgumentNamingItAndTheRegisteredOnes) {
  WorkerServer worker;
  worker.register_function("train_step", [](int64_t, const std::string&) { return std::string(); });
  worker.register_function("eval_step", [](int64_t, const std::string&) { return std::string(); });
  worker.start("127.0.0.1:0");
  ClusterCoordinator coordinator({address_of(worker)});
  const std::string m = test::message_of<InvalidArgument>([&] { coordinator.schedule("trian_step").fetch(); });
  EXPECT_NE(m.find("no function named 'trian_step'"), std::string::npos) << m;
  EXPECT_NE(m.find("eval_step, train_step"), std::string::npos) << m;
  EXPECT_NE(m.find("worker at " + address_of(worker)), std::string::npos) << m;
}

TEST(WorkerServerTest, RunsOneFunctionAtATime) {
  std::atomic<int> running{0}, most{0};
  WorkerServer worker;
  worker.register_function("step", [&](int64_t, const std::string&) {
    most = std::max(most.load(), ++running);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --running;
    return std::string();
  });
  worker.start("127.0.0.1:0");
  // Two coordinators call the one worker at once.
  ClusterCoordinator a({address_of(worker)}), b({address_of(worker)});
  for (int i = 0; i < 10; ++i) {
    a.schedule("step");
    b.schedule("step");
  }
  a.join();
  b.join();
  EXPECT_EQ(worker.functions_run(), 20);
  EXPECT_EQ(most.load(), 1);
}

}  // namespace
}  // namespace strata::ps
