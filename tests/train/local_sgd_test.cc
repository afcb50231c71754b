// LocalSGDStrategy with its workers as threads of this process (each its own TF_CONFIG task over 127.0.0.1): with
// sync_every 1 and SGD it trains exactly as MultiWorkerMirroredStrategy (and one process on the global batches) does;
// with more local steps the workers still end equal, averaging as often as asked; DiLoCo's outer step with rate 1 and
// no momentum is the plain average; bad options are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "strata/distribute/local_sgd.h"
#include "strata/error.h"
#include "multi_worker_jobs.h"
#include "multi_worker_test_util.h"
#include "test_util.h"

namespace strata::distribute {
namespace {

using test_workers::local_cluster;
using test_workers::quick_options;
using test_workers::worker_task;
using namespace test_jobs;

struct WorkerRun {
  Trained trained;
  int64_t syncs = 0;
};

// Fits test_jobs::train's model under a LocalSGDStrategy on each of `workers` worker threads (worker w seeded
// 1000 + w: the chief's initial values must win).
std::vector<WorkerRun> train_local_sgd(int workers, const LocalSGDOptions& options) {
  const cluster::ClusterSpec spec = local_cluster(workers);
  std::vector<WorkerRun> runs(static_cast<size_t>(workers));
  std::vector<std::string> errors(static_cast<size_t>(workers));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        LocalSGDStrategy strategy(options, worker_task(spec, w), quick_options());
        runs[static_cast<size_t>(w)].trained = train(strategy, 1000 + static_cast<uint64_t>(w));
        runs[static_cast<size_t>(w)].syncs = strategy.syncs();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(w)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < workers; ++w) EXPECT_EQ(errors[static_cast<size_t>(w)], "") << "worker " << w;
  return runs;
}

void expect_workers_equal(const std::vector<WorkerRun>& runs) {
  for (size_t w = 1; w < runs.size(); ++w) {
    for (size_t i = 0; i < runs[0].trained.weights.size(); ++i) {
      EXPECT_EQ(runs[w].trained.weights[i].second.to_vector<float>(), runs[0].trained.weights[i].second.to_vector<float>())
          << "worker " << w << " " << runs[w].trained.weights[i].first;
    }
  }
}

float max_difference(const Trained& a, const Trained& b) {
  float most = 0;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const auto x = a.weights[i].second.to_vector<float>(), y = b.weights[i].second.to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k) most = std::max(most, std::fabs(x[k] - y[k]));
  }
  return most;
}

TEST(LocalSGDTest, OneLocalStepIsMultiWorkerMirrored) {
  // MultiWorkerMirroredStrategy trains to this (multi_worker_training_test); SGD with momentum is linear, so averaging
  // after every step is averaging the gradients.
  const Trained reference = train(default_strategy(), 1000);
  const std::vector<WorkerRun> runs = train_local_sgd(2, {.sync_every = 1});
  if (HasFailure()) return;
  expect_workers_equal(runs);
  for (size_t i = 0; i < reference.weights.size(); ++i) {
    const auto got = runs[0].trained.weights[i].second.to_vector<float>();
    const auto want = reference.weights[i].second.to_vector<float>();
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_NEAR(got[k], want[k], 1e-5f * std::max(1.0f, std::fabs(want[k]))) << reference.weights[i].first << " " << k;
    }
  }
  for (const char* key : {"loss", "accuracy"}) {  // the job's logs, as MultiWorkerMirroredStrategy's
    for (size_t e = 0; e < 2; ++e) {
      EXPECT_NEAR(runs[0].trained.history.history.at(key)[e], reference.history.history.at(key)[e], 1e-5) << key;
      EXPECT_NEAR(runs[1].trained.history.history.at(key)[e], reference.history.history.at(key)[e], 1e-5) << key;
    }
  }
  EXPECT_EQ(runs[0].syncs, 10);  // 5 steps an epoch, 2 epochs
}

TEST(LocalSGDTest, MoreLocalStepsAverageLessOftenAndStillEndEqual) {
  const Trained reference = train(default_strategy(), 1000);
  const std::vector<WorkerRun> runs = train_local_sgd(2, {.sync_every = 4});
  if (HasFailure()) return;
  expect_workers_equal(runs);
  EXPECT_EQ(runs[0].syncs, 4);  // per epoch: after step 4, and at its end after step 5
  EXPECT_GT(max_difference(runs[0].trained, reference), 1e-4f);  // local steps are not the synchronous ones
  EXPECT_LT(runs[0].trained.history.history.at("loss")[1], runs[0].trained.history.history.at("loss")[0]);
}

TEST(LocalSGDTest, TheOuterStepAtRateOneWithoutMomentumIsThePlainAverage) {
  const std::vector<WorkerRun> plain = train_local_sgd(2, {.sync_every = 2});
  const std::vector<WorkerRun> outer = train_local_sgd(
      2, {.sync_every = 2, .outer_nesterov = true, .outer_learning_rate = 1.0f, .outer_momentum = 0.0f});
  const std::vector<WorkerRun> diloco = train_local_sgd(2, {.sync_every = 2, .outer_nesterov = true});
  if (HasFailure()) return;
  expect_workers_equal(outer);
  expect_workers_equal(diloco);
  EXPECT_LT(max_difference(outer[0].trained, plain[0].trained), 1e-6f);
  EXPECT_GT(max_difference(diloco[0].trained, plain[0].trained), 1e-4f);  // momentum and rate 0.7 move elsewhere
}

TEST(LocalSGDTest, BadOptionsAreClearErrors) {
  cluster::TaskInfo one;
  one.num_workers = 1;
  EXPECT_NE(test::message_of<InvalidArgument>([&] { LocalSGDStrategy s({.sync_every = 0}, one); }).find("sync_every"),
            std::string::npos);
  EXPECT_NE(test::message_of<InvalidArgument>([&] {
              LocalSGDStrategy s({.outer_nesterov = true, .outer_momentum = 1.0f}, one);
            }).find("outer_momentum"),
            std::string::npos);
  // Its replica is on the host: nccl (GPU workers, MultiWorkerMirrored's) is refused before anything connects.
  const std::string nccl = test::message_of<InvalidArgument>(
      [&] { LocalSGDStrategy s({.sync_every = 2}, one, {.implementation = "nccl"}); });
  EXPECT_NE(nccl.find("runs one CPU replica per worker; communication 'nccl'"), std::string::npos) << nccl;
  EXPECT_THROW(LocalSGDStrategy({.sync_every = 2}, one, {.device = "gpu"}), InvalidArgument);
  LocalSGDStrategy single({.sync_every = 3}, one);  // one worker: nothing to average with
  EXPECT_EQ(single.num_workers(), 1);
  EXPECT_EQ(single.backend(), "local");
}

}  // namespace
}  // namespace strata::distribute
