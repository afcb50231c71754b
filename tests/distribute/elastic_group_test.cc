// ElasticGroup with 3 workers as threads of this process, each with its own coordination client of one in-process
// service (127.0.0.1, heartbeat timeout 1 s): a step commits when every member votes ok and is aborted everywhere
// when one fails; when a member goes silent (its heartbeats stop) the others' vote aborts, they regroup into
// epoch 1 without it, and their new communicator all-reduces; below min_workers the regroup fails naming the lost
// task; a member declared lost learns that it is out; a malformed epoch key is reported.
#include "distribute/elastic_group.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "strata/cluster/coordination.h"
#include "strata/error.h"
#include "strata/tensor.h"

namespace strata::distribute::detail {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

const std::vector<std::string> kTasks = {"chief:0", "worker:0", "worker:1"};

class ElasticGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_.start("127.0.0.1:0", {.heartbeat_timeout = 1s, .tasks = kTasks});
    for (const std::string& task : kTasks) {
      cluster::CoordinationClient::Options o;
      o.connect_timeout = 10s;
      o.store_timeout = 10s;
      o.service_timeout = 5s;
      auto client =
          std::make_shared<cluster::CoordinationClient>("127.0.0.1:" + std::to_string(service_.port()), task, o);
      client->start_heartbeats(100ms);
      clients_.push_back(client);
    }
  }
  void TearDown() override {
    for (auto& c : clients_) c->disconnect();
    service_.stop();
  }

  ElasticGroup::Options options(int min_workers = 1) {
    return {.min_workers = min_workers, .timeout = 20s, .heartbeat_timeout = 1s, .hostname = "127.0.0.1"};
  }

  // Runs fn(i, group) for the tasks in `who`, each on its own thread with its own group; rethrows nothing: errors
  // are returned per task ("" when none).
  std::vector<std::string> on_threads(const std::vector<int>& who, int min_workers,
                                      const std::function<void(int, ElasticGroup&)>& fn) {
    std::vector<std::string> errors(kTasks.size());
    std::vector<std::thread> threads;
    for (int i : who) {
      threads.emplace_back([&, i] {
        try {
          ElasticGroup group(clients_[i], kTasks, kTasks[i], options(min_workers));
          fn(i, group);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    return errors;
  }

  cluster::CoordinationService service_;
  std::vector<std::shared_ptr<cluster::CoordinationClient>> clients_;
};

TEST_F(ElasticGroupTest, AStepCommitsOnlyWhenEveryMemberVotesOk) {
  std::vector<std::vector<bool>> decisions(kTasks.size());
  const auto errors = on_threads({0, 1, 2}, 1, [&](int i, ElasticGroup& group) {
    auto comm = group.start();
    EXPECT_EQ(comm->size(), 3);
    EXPECT_EQ(comm->rank(), i);
    for (int step = 0; step < 5; ++step) {
      const bool ok = !(step == 3 && i == 1);  // worker:0 fails step 3
      decisions[i].push_back(group.should_commit(ok));
    }
  });
  for (size_t i = 0; i < kTasks.size(); ++i) {
    ASSERT_EQ(errors[i], "") << kTasks[i];
    EXPECT_EQ(decisions[i], (std::vector<bool>{true, true, true, false, true})) << kTasks[i];
  }
}

TEST_F(ElasticGroupTest, TheSurvivorsOfALostMemberAbortTheStepAndRegroupWithoutIt) {
  std::vector<float> sums(kTasks.size(), 0);
  std::vector<MembershipChange> changes(kTasks.size());
  std::vector<bool> committed(kTasks.size(), true);
  const auto errors = on_threads({0, 1, 2}, 2, [&](int i, ElasticGroup& group) {
    group.start();
    ASSERT_TRUE(group.should_commit(true));
    if (i == 2) {  // worker:1 goes silent: no more heartbeats, no vote
      clients_[2]->stop_heartbeats();
      return;
    }
    committed[i] = group.should_commit(true);
    auto comm = group.regroup();
    changes[i] = group.last_change();
    Tensor x = Tensor::full({4}, static_cast<double>(i + 1));
    comm->all_reduce({x})->wait();
    sums[i] = x.to_vector<float>()[0];
    EXPECT_TRUE(group.should_commit(true));
  });
  for (int i : {0, 1}) {
    SCOPED_TRACE(kTasks[i]);
    ASSERT_EQ(errors[i], "");
    EXPECT_FALSE(committed[i]);  // the step the lost member never voted on is discarded
    EXPECT_EQ(changes[i].epoch, 1);
    EXPECT_EQ(changes[i].left, std::vector<std::string>{"worker:1"});
    EXPECT_EQ(changes[i].members, (std::vector<std::string>{"chief:0", "worker:0"}));
    EXPECT_LT(changes[i].seconds, 1.0 + 2.0 + 1.0);  // the heartbeat timeout, the margin, and some slack
    EXPECT_EQ(sums[i], 3.0f);                        // 1 + 2: the two survivors' new communicator
  }
}

TEST_F(ElasticGroupTest, FallingBelowMinWorkersNamesTheLostTask) {
  const auto errors = on_threads({0, 1, 2}, 3, [&](int i, ElasticGroup& group) {
    group.start();
    if (i == 2) {
      clients_[2]->stop_heartbeats();
      return;
    }
    EXPECT_FALSE(group.should_commit(true));
    group.regroup();
  });
  for (int i : {0, 1}) {
    EXPECT_THAT(errors[i], HasSubstr("2 of 3 workers remain, fewer than min_workers 3; lost: worker:1")) << kTasks[i];
  }
}

TEST_F(ElasticGroupTest, AMemberDeclaredLostLearnsThatItIsOut) {
  const auto errors = on_threads({0, 1, 2}, 1, [&](int i, ElasticGroup& group) {
    group.start();
    if (i == 2) {  // silent for longer than the heartbeat timeout, then back: the others went on without it
      clients_[2]->stop_heartbeats();
      std::this_thread::sleep_for(1500ms);
      clients_[2]->start_heartbeats(100ms);
      std::this_thread::sleep_for(3500ms);
      group.regroup();
      return;
    }
    EXPECT_FALSE(group.should_commit(true));
    group.regroup();
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_THAT(errors[2], HasSubstr("this task (worker:1) is no longer a member of the group"));
}

// Any task can write the coordination service's keys: a restarted task that finds an epoch that is not a number is
// told so (DataCorrupt naming the key), where std::stoll's invalid_argument used to escape.
TEST_F(ElasticGroupTest, ARestartedTaskReportsAMalformedEpochKey) {
  for (const std::string bad : {"seven", "12x", "-1", "9223372036854775807", "99999999999999999999"}) {
    clients_[0]->set("elastic/epoch", bad);
    ElasticGroup group(clients_[2], kTasks, kTasks[2], options());
    EXPECT_EQ(group.start(), nullptr);  // the key exists: the job runs already, this task joins
    try {
      group.join();
      ADD_FAILURE() << "no error for epoch '" << bad << "'";
    } catch (const DataCorrupt& e) {
      EXPECT_THAT(e.what(), HasSubstr("'elastic/epoch' holds '" + bad + "', not a membership epoch"));
    }
  }
}

}  // namespace
}  // namespace strata::distribute::detail
