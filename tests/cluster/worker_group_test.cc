// WorkerGroup with its tasks as threads of this process (each its own TF_CONFIG task over 127.0.0.1 ports the OS
// picked): the group connects and reduces on the backend "auto" resolves to; a task that goes silent fails the
// others' collectives naming it, and a collective blocked on it is reported through the callback; tasks given
// different fingerprints fail at the rendezvous naming the keys; bad groups are clear errors.
#include "strata/cluster/worker_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

#include "strata/error.h"
#include "test_util.h"

namespace strata::cluster {
namespace {

using namespace std::chrono_literals;

ClusterSpec local_cluster(int workers) {
  ClusterSpec spec;
  for (int i = 0; i < workers; ++i) spec.jobs["worker"].push_back("127.0.0.1:" + std::to_string(test::free_port()));
  return spec;
}

TaskInfo worker_task(const ClusterSpec& spec, int index) {
  return resolve_tf_config(make_tf_config(spec, "worker", index));
}

// body(w, task) on a thread per worker; the test fails with any worker's error.
void on_every_worker(int workers, const std::function<void(int, const TaskInfo&)>& body) {
  const ClusterSpec spec = local_cluster(workers);
  std::vector<std::string> errors(static_cast<size_t>(workers));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        body(w, worker_task(spec, w));
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(w)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < workers; ++w) EXPECT_EQ(errors[static_cast<size_t>(w)], "") << "worker " << w;
}

TEST(WorkerGroupTest, TheWorkersOfAClusterFormAGroupAndReduce) {
  std::vector<float> sums(3);
  on_every_worker(3, [&](int w, const TaskInfo& task) {
    auto group = WorkerGroup::init(task, {.timeout = 30s});
    EXPECT_EQ(group->rank(), w);
    EXPECT_EQ(group->size(), 3);
    EXPECT_EQ(group->backend(), "gloo");  // "auto" outside mpirun
    EXPECT_EQ(group->member_tasks(), (std::vector<std::string>{"worker:0", "worker:1", "worker:2"}));
    EXPECT_NE(group->client(), nullptr);
    Tensor value = Tensor::full({1}, static_cast<float>(w + 1));
    group->communicator().all_reduce({value}, comm::ReduceOp::kSum)->wait();
    sums[static_cast<size_t>(w)] = value.item<float>();
  });
  EXPECT_EQ(sums, (std::vector<float>{6.0f, 6.0f, 6.0f}));
}

// Worker 1 stops its heartbeats (declared lost after 1 s) and enters no collective; worker 0 starts an all-reduce
// `delay` after the group formed. Returns worker 0's error, how long its all-reduce took, and whether the blocked
// callback was called (it is when the group still exists a second after the loss).
struct SilentPeer {
  std::string error;
  std::chrono::duration<double> took{};
  bool reported = false;
};
SilentPeer with_a_silent_peer(std::chrono::milliseconds delay) {
  SilentPeer out;
  std::atomic<bool> reported{false};
  on_every_worker(2, [&](int w, const TaskInfo& task) {
    auto group = WorkerGroup::init(task, {.timeout = 5s,
                                          .heartbeat_timeout = 1s,
                                          .heartbeat_interval = 100ms,
                                          .on_blocked_by_lost_task = [&](const std::string&) { reported = true; }});
    if (w == 1) {
      group->client()->stop_heartbeats();
      std::this_thread::sleep_for(3s);
      return;
    }
    std::this_thread::sleep_for(delay);
    Tensor value = Tensor::full({1}, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    out.error = test::message_of<Error>([&] { group->communicator().all_reduce({value})->wait(); });
    out.took = std::chrono::steady_clock::now() - start;
    std::this_thread::sleep_for(1500ms);  // time for the report of a blocked collective
  });
  out.reported = reported.load();
  return out;
}

TEST(WorkerGroupTest, TasksGivenDifferentJobsFailAtTheRendezvousNamingTheKeysAndTheTasks) {
  std::vector<std::string> errors(3);
  on_every_worker(3, [&](int w, const TaskInfo& task) {
    std::map<std::string, std::string> fingerprint = {{"batch_size", w == 2 ? "128" : "64"}, {"loss", "mse"}};
    if (w == 1) fingerprint["extra"] = "1";
    // Values longer than a message shows still compare whole: these differ after the shown part.
    fingerprint["model"] = std::string(150, 'x') + (w == 2 ? "y" : "z");
    errors[static_cast<size_t>(w)] = test::message_of<InvalidArgument>(
        [&] { WorkerGroup::init(task, {.timeout = 30s, .fingerprint = fingerprint}); });
  });
  EXPECT_NE(errors[0].find("the tasks were not given the same job: worker:1 has extra 1, worker:0 has none; "
                           "worker:2 has batch_size 128, worker:0 has 64"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[2].find("worker:0 has batch_size 64, worker:2 has 128"), std::string::npos) << errors[2];
  EXPECT_NE(errors[0].find("worker:2 has model " + std::string(120, 'x') + "..., worker:0 has " +
                           std::string(120, 'x') + "..."),
            std::string::npos)
      << errors[0];
  EXPECT_EQ(errors[0].find("worker:1 has model"), std::string::npos) << errors[0];
  // The same fingerprints everywhere: the group forms.
  on_every_worker(2, [&](int, const TaskInfo& task) {
    WorkerGroup::init(task, {.timeout = 30s, .fingerprint = {{"batch_size", "64"}}});
  });
}

TEST(WorkerGroupTest, ACollectiveAfterATaskWasLostFailsAtOnceNamingIt) {
  const SilentPeer run = with_a_silent_peer(2500ms);  // the loss is declared ~1 s in
  EXPECT_NE(run.error.find("task worker:1 was lost"), std::string::npos) << run.error;
  EXPECT_LT(run.took.count(), 1.0);
}

TEST(WorkerGroupTest, ACollectiveBlockedOnALostTaskIsReportedAndEndsNamingIt) {
  const SilentPeer run = with_a_silent_peer(0ms);  // blocked in Gloo before the loss: it cannot be interrupted
  EXPECT_TRUE(run.reported);
  EXPECT_NE(run.error.find("worker:1"), std::string::npos) << run.error;
}

TEST(WorkerGroupTest, TheRendezvousSaysWhomItWaitsForAndWhere) {
  std::vector<std::string> reports;
  std::string late_address;
  std::mutex mu;
  on_every_worker(2, [&](int w, const TaskInfo& task) {
    if (w == 1) {
      late_address = task.address;
      std::this_thread::sleep_for(1500ms);
    }
    auto group = WorkerGroup::init(task, {.timeout = 30s,
                                          .progress_every = 300ms,
                                          .on_waiting = [&](const std::string& message) {
                                            std::lock_guard<std::mutex> lock(mu);
                                            reports.push_back(task.name() + ": " + message);
                                          }});
    EXPECT_EQ(group->size(), 2);
  });
  ASSERT_FALSE(reports.empty());
  EXPECT_NE(reports.front().find("worker:0: waiting for worker:1 (rank 1) at " + late_address), std::string::npos)
      << reports.front();
  EXPECT_TRUE(std::regex_search(reports.front(), std::regex(R"(: not here after [0-9.]+ s of 30 s$)")))
      << reports.front();
}

TEST(WorkerGroupTest, AWorkerThatNeverComesEndsTheRendezvousNamingItWithinItsTimeout) {
  const ClusterSpec spec = local_cluster(2);
  const auto start = std::chrono::steady_clock::now();
  const std::string error = test::message_of<Timeout>([&] {
    WorkerGroup::init(worker_task(spec, 0), {.rendezvous_timeout = 1500ms, .on_waiting = [](const std::string&) {}});
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_NE(error.find("waiting for worker:1 (rank 1) at " + spec.jobs.at("worker")[1]), std::string::npos) << error;
  EXPECT_NE(error.find("(rendezvous timeout)"), std::string::npos) << error;
}

TEST(WorkerGroupTest, AServiceThatNeverAnswersIsReportedAndEndsTheRendezvous) {
  const ClusterSpec spec = local_cluster(2);  // worker:0 would serve the coordination service; it never starts
  std::vector<std::string> reports;
  const std::string error = test::message_of<Timeout>([&] {
    WorkerGroup::init(worker_task(spec, 1),
                      {.rendezvous_timeout = 1500ms,
                       .progress_every = 500ms,
                       .on_waiting = [&](const std::string& message) { reports.push_back(message); }});
  });
  ASSERT_FALSE(reports.empty());
  EXPECT_NE(reports.front().find("waiting for the coordination service at " + spec.jobs.at("worker")[0] +
                                 " (worker:0): no answer after"),
            std::string::npos)
      << reports.front();
  EXPECT_NE(error.find("is worker:0 running?"), std::string::npos) << error;
}

TEST(WorkerGroupTest, BadGroupsAreClearErrors) {
  const ClusterSpec one = local_cluster(1);
  EXPECT_NE(test::message_of<InvalidArgument>([&] { WorkerGroup::init(worker_task(one, 0), {}); })
                .find("has one worker"),
            std::string::npos);
  const ClusterSpec two = local_cluster(2);
  const std::string unknown =
      test::message_of<InvalidArgument>([&] { WorkerGroup::init(worker_task(two, 0), {.backend = "ucx"}); });
  EXPECT_NE(unknown.find("unknown communicator backend 'ucx'"), std::string::npos) << unknown;
  EXPECT_NE(test::message_of<InvalidArgument>([&] {
              WorkerGroup::init(worker_task(two, 0), {.heartbeat_interval = 0ms});
            }).find("must be positive"),
            std::string::npos);
  on_every_worker(2, [&](int, const TaskInfo& task) {
    auto group = WorkerGroup::init(task, {.timeout = 30s, .without_communicator = true});
    EXPECT_NE(test::message_of<InvalidArgument>([&] { group->communicator(); }).find("without a communicator"),
              std::string::npos);
  });
}

}  // namespace
}  // namespace strata::cluster
