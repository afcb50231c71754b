// Pipeline × data parallelism (PipelineOptions::replicas): replicas of a pipeline, each with its own copy of the
// model and its own share of every global batch, all-reduce their gradients before the step, so after K steps every
// replica holds the weights of the unsplit model trained on the whole batches (1e-5 relative): ThreadPipelines as
// replicas over a local group and over Gloo (ranks as threads), shares of unequal size and an empty share, and
// stages as PipelineStages each reducing over its own stage's group (2 replicas × 2 stages, 4 threads).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "parallel/parallel_test_util.h"
#include "strata/comm/gloo.h"
#include "strata/comm/local.h"
#include "strata/comm/store.h"
#include "strata/optim/optimizers.h"
#include "strata/parallel/pipeline.h"
#include "test_util.h"

namespace strata::parallel {
namespace {

using namespace std::chrono_literals;

using namespace test_util::replica_job;

std::vector<Tensor> train_unsplit() { return test_util::train_unsplit(make_mlp(), sgd(), kSteps, inputs, labels); }

// Rows [first, first + rows) of every global batch go to a replica.
struct Share {
  int64_t first = 0, rows = 0;
};

// Runs one ThreadPipeline replica per communicator of `group`, replica r on share r of each batch, K steps at
// once on threads; returns each replica's weights and its losses.
struct ReplicaResult {
  std::vector<Tensor> weights;
  std::vector<float> losses;
  std::string error;
};
std::vector<ReplicaResult> run_replicas(const std::vector<Share>& shares, const std::string& schedule,
                                        const std::function<std::shared_ptr<comm::Communicator>(int)>& comm_of) {
  const int n = static_cast<int>(shares.size());
  std::vector<ReplicaResult> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<comm::Communicator> comm = comm_of(r);
        auto layers = make_mlp();
        PipelineOptions options{.example_shape = {kFeatures}, .timeout = 20s};
        options.replicas = comm.get();
        ThreadPipeline pipe(split_by_parameters(layers, kStages), make_schedule(schedule, kStages, kMicroBatches),
                            test_util::logits_loss(), sgd(), options);
        const Share s = shares[r];
        for (int k = 0; k < kSteps; ++k) {
          results[r].losses.push_back(
              pipe.train_step(inputs(k).slice(s.first, s.first + s.rows), labels(k).slice(s.first, s.first + s.rows)));
        }
        results[r].weights = test_util::weight_values(layers);
      } catch (const std::exception& e) {
        results[r].error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

void expect_every_replica_unsplit(const std::vector<ReplicaResult>& results, const std::string& what) {
  const std::vector<Tensor> want = train_unsplit();
  for (size_t r = 0; r < results.size(); ++r) {
    SCOPED_TRACE(what + ", replica " + std::to_string(r));
    ASSERT_EQ(results[r].error, "");
    test_util::expect_same_weights(results[r].weights, want, what);
    for (int k = 0; k < kSteps; ++k) {
      EXPECT_TRUE(std::isfinite(results[r].losses[k]));
      EXPECT_FLOAT_EQ(results[r].losses[k], results[0].losses[k]) << "step " << k << ": the replicas' loss differs";
    }
  }
}

TEST(PipelineReplicasTest, ReplicasOnALocalGroupGiveTheUnsplitModelOnTheWholeBatch) {
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"}) {
    auto group = comm::make_local_group(2);
    // Unequal shares: the replicas' gradients are weighted by their rows, not averaged.
    expect_every_replica_unsplit(run_replicas({{0, 14}, {14, 10}}, schedule, [&](int r) { return group[r]; }),
                                 std::string("local ") + schedule);
  }
}

TEST(PipelineReplicasTest, AReplicaWithAnEmptyShareStillTakesTheStep) {
  auto group = comm::make_local_group(3);
  expect_every_replica_unsplit(run_replicas({{0, 16}, {16, 0}, {16, 8}}, "1f1b", [&](int r) { return group[r]; }),
                               "an empty share");
}

TEST(PipelineReplicasTest, ReplicasOverGlooGiveTheUnsplitModel) {
  auto store = comm::make_in_memory_store(20s);
  expect_every_replica_unsplit(
      run_replicas({{0, 12}, {12, 12}}, "1f1b",
                   [&](int r) { return comm::make_gloo_communicator(store, r, 2, {.timeout = 20s, .prefix = "dp"}); }),
      "gloo");
}

TEST(PipelineReplicasTest, StagesWithTheirOwnOptimizersReduceOverTheirStagesGroup) {
  // 2 replicas × 2 stages, each a PipelineStage on its own thread: the stages of a replica talk over that replica's
  // group, and each stage reduces its gradients over the group of that stage across the replicas.
  constexpr int kReplicas = 2;
  std::vector<std::vector<std::shared_ptr<comm::Communicator>>> pipeline_groups, stage_groups;
  for (int r = 0; r < kReplicas; ++r) pipeline_groups.push_back(comm::make_local_group(kStages));
  for (int s = 0; s < kStages; ++s) stage_groups.push_back(comm::make_local_group(kReplicas));
  const std::vector<Share> shares = {{0, 10}, {10, 14}};
  std::vector<std::vector<std::shared_ptr<nn::Layer>>> models;
  for (int r = 0; r < kReplicas; ++r) models.push_back(make_mlp());
  std::vector<std::vector<Tensor>> stage_weights(kReplicas * kStages);
  std::vector<std::string> errors(kReplicas * kStages);
  std::vector<float> losses(kReplicas * kStages);
  std::vector<std::thread> threads;
  for (int r = 0; r < kReplicas; ++r) {
    for (int s = 0; s < kStages; ++s) {
      threads.emplace_back([&, r, s] {
        const int i = r * kStages + s;
        try {
          PipelineOptions options{.example_shape = {kFeatures}, .timeout = 20s};
          options.replicas = stage_groups[s][r].get();
          PipelineStage stage(split_by_parameters(models[r], kStages), s, one_f_one_b(kStages, kMicroBatches),
                              test_util::logits_loss(), sgd(), pipeline_groups[r][s], options);
          const Share sh = shares[r];
          for (int k = 0; k < kSteps; ++k) {
            losses[i] = stage.train_step(inputs(k).slice(sh.first, sh.first + sh.rows),
                                         labels(k).slice(sh.first, sh.first + sh.rows));
          }
          for (const Variable& w : stage.trainable_variables()) stage_weights[i].push_back(w.value().clone());
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  const std::vector<Tensor> want = train_unsplit();
  for (int r = 0; r < kReplicas; ++r) {
    SCOPED_TRACE("replica " + std::to_string(r));
    for (int s = 0; s < kStages; ++s) ASSERT_EQ(errors[r * kStages + s], "") << "stage " << s;
    std::vector<Tensor> got = stage_weights[r * kStages];
    got.insert(got.end(), stage_weights[r * kStages + 1].begin(), stage_weights[r * kStages + 1].end());
    test_util::expect_same_weights(got, want, "stages with their own optimizers");
    EXPECT_FLOAT_EQ(losses[r * kStages + 1], losses[kStages - 1]);  // the loss stages report the replicas' loss
  }
}

}  // namespace
}  // namespace strata::parallel
