// A worker that is a real process (this test binary, re-run as a helper), killed with SIGKILL in the middle of a call
// and then restarted on its port: the closure it was running is re-run on another worker, a real ps applies every
// step once (the killed call's push is dropped when re-run), and the restarted process gets work again.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <thread>

#include "strata/error.h"
#include "strata/ps/cluster_coordinator.h"
#include "strata/ps/server.h"
#include "strata/ps/worker_server.h"
#include "test_util.h"


namespace strata::ps {
namespace {

using namespace std::chrono_literals;

constexpr const char* kChildSpec = "STRATA_PS_WORKER_CHILD";  // "<port> <ps address> <hang|serve>"

// A training step: one push of gradient 1 to "w" under the closure's step id.
std::string push_step(ParameterServerClient& ps, int64_t step_id) {
  ps.push("w", Tensor::full({1}, 1.0), "step:" + std::to_string(step_id));
  std::this_thread::sleep_for(3ms);
  return "ok";
}

float value_of(ParameterServerClient& ps, const std::string& shard) { return ps.pull(shard).to_vector<float>()[0]; }

// The helper process: a worker serving "step". In mode "hang" a step pushes, counts itself in "child/pushed" and
// hangs (the parent kills the process there); in mode "serve" it counts itself in "child/ran" and answers.
TEST(WorkerProcessChild, ServesSteps) {
  const char* spec = std::getenv(kChildSpec);
  if (spec == nullptr) GTEST_SKIP() << "a helper process of WorkerProcessTest";
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  std::istringstream in(spec);
  int port = 0;
  std::string ps_address, mode;
  in >> port >> ps_address >> mode;
  ParameterServerClient ps(ps_address);
  WorkerServer worker;
  worker.register_function("step", [&](int64_t step_id, const std::string&) {
    const std::string out = push_step(ps, step_id);
    ps.push(mode == "hang" ? "child/pushed" : "child/ran", Tensor::full({1}, -1.0));
    if (mode == "hang") std::this_thread::sleep_for(60s);
    return out;
  });
  worker.start("127.0.0.1:" + std::to_string(port));
  std::this_thread::sleep_for(60s);  // the parent kills it long before
}

// A worker process on `port` (the test above), killed with SIGKILL and reaped on every path.
struct WorkerProcess : test::HelperProcess {
  WorkerProcess(int port, const std::string& ps_address, const std::string& mode)
      : HelperProcess("WorkerProcessChild.ServesSteps",
                      std::string(kChildSpec) + "=" + std::to_string(port) + " " + ps_address + " " + mode) {}
};

TEST(WorkerProcessTest, AKilledWorkerProcessCostsNoStepAndItsRestartGetsWorkAgain) {
  ParameterServer server;
  server.start("127.0.0.1:0");
  const std::string ps_address = "127.0.0.1:" + std::to_string(server.port());
  ParameterServerClient ps(ps_address);
  for (const char* shard : {"w", "child/pushed", "child/ran"}) {
    ps.create(shard, Tensor::zeros({1}), {.name = "sgd", .learning_rate = 1.0});
  }
  WorkerServer healthy[2];
  for (auto& w : healthy) {
    w.register_function("step", [&](int64_t step_id, const std::string&) { return push_step(ps, step_id); });
    w.start("127.0.0.1:0");
  }
  const int port = test::free_port();
  auto child = std::make_unique<WorkerProcess>(port, ps_address, "hang");
  ClusterCoordinator coordinator({"127.0.0.1:" + std::to_string(port), "127.0.0.1:" + std::to_string(healthy[0].port()),
                                  "127.0.0.1:" + std::to_string(healthy[1].port())},
                                 {.probe_initial_backoff = 20ms, .probe_max_backoff = 200ms, .probe_timeout = 200ms});
  // Steps go on until the child (found once it is up) has pushed one and hangs in it.
  int64_t steps = 0;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (value_of(ps, "child/pushed") == 0 && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 10; ++i, ++steps) coordinator.schedule("step");
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(value_of(ps, "child/pushed"), 1) << "the worker process got no step";
  child->kill();
  coordinator.join();                                        // the killed call's step ran again elsewhere
  EXPECT_EQ(value_of(ps, "w"), -static_cast<float>(steps));  // every step applied once
  EXPECT_EQ(server.pushes_dropped(), 1);                     // the killed call's push, repeated by the re-run
  EXPECT_GE(coordinator.worker_status()[0].times_lost, 1);
  EXPECT_FALSE(coordinator.worker_status()[0].up);

  child = std::make_unique<WorkerProcess>(port, ps_address, "serve");  // restarted on its port
  deadline = std::chrono::steady_clock::now() + 20s;
  while (value_of(ps, "child/ran") == 0 && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 10; ++i, ++steps) coordinator.schedule("step");
    coordinator.join();
  }
  EXPECT_GT(value_of(ps, "child/ran"), 0) << "the restarted worker process got no work";
  EXPECT_TRUE(coordinator.worker_status()[0].up);
  EXPECT_EQ(value_of(ps, "w"), -static_cast<float>(steps));
  EXPECT_EQ(server.pushes_dropped(), 1);
}

}  // namespace
}  // namespace strata::ps
