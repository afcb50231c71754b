// Pipeline replicas' gradients through the gradient reducer (PipelineOptions::replicas, bytes_per_pack): with small
// buckets every schedule still trains the unsplit model, several buckets go out each step, and the first leaves
// before the first stage starts its last backward (the overlap, seen on the trace); a step in which no replica has an
// example updates no weight (not even by momentum); a stage without weights still carries the replicas' loss.
// Thread-safety: each test runs its replicas and stages on threads of its own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "forwarding_communicator.h"
#include "parallel/parallel_test_util.h"
#include "strata/comm/local.h"
#include "strata/optim/optimizers.h"
#include "strata/parallel/pipeline.h"
#include "strata/trace.h"
#include "test_util.h"

namespace strata::parallel {
namespace {

using namespace std::chrono_literals;

using namespace test_util::replica_job;
constexpr int64_t kSmallPack = 256;  // bytes: about one weight of the MLP per bucket

// A rank of the replicas' group that counts the all-reduces issued through it and marks each issue on the trace.
class IssueRecorder : public test::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  using ForwardingCommunicator::all_reduce;

  std::string backend() const override { return "recording " + inner()->backend(); }
  std::shared_ptr<comm::Work> all_reduce(std::vector<Tensor> tensors, comm::ReduceOp op) override {
    return all_reduce(std::move(tensors), comm::AllReduceOptions{.op = op});
  }
  std::shared_ptr<comm::Work> all_reduce(std::vector<Tensor> tensors, const comm::AllReduceOptions& options) override {
    trace::Span span("test", "bucket issued");
    ++issued_;
    return inner()->all_reduce(std::move(tensors), options);
  }

  int issued() const { return issued_.load(); }

 private:
  std::atomic<int> issued_{0};
};

// The model cut for `schedule`: one piece per virtual stage.
std::vector<StageLayers> cut(const std::vector<std::shared_ptr<nn::Layer>>& layers, const Schedule& schedule) {
  return split_by_parameters(layers, schedule.virtual_stages());
}

Schedule schedule_named(const std::string& name) { return make_schedule(name, kStages, kMicroBatches); }

TEST(PipelineOverlapTest, SmallBucketsTrainTheUnsplitModelOnEverySchedule) {
  const std::vector<Tensor> want = test_util::train_unsplit(make_mlp(), sgd(), kSteps, inputs, labels);
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
    SCOPED_TRACE(name);
    const Schedule schedule = schedule_named(name);
    auto group = comm::make_local_group(2);
    const std::vector<std::pair<int64_t, int64_t>> shares = {{0, 14}, {14, 24}};  // unequal: weighted by rows
    std::vector<std::unique_ptr<IssueRecorder>> comms;
    for (int r = 0; r < 2; ++r) comms.push_back(std::make_unique<IssueRecorder>(group[r]));
    std::vector<std::vector<Tensor>> weights(2);
    std::vector<std::vector<float>> losses(2);
    const std::vector<std::string> errors = test_util::on_threads(2, [&](int r) {
      auto layers = make_mlp();
      PipelineOptions options{.example_shape = {kFeatures}, .timeout = 20s};
      options.replicas = comms[r].get();
      options.bytes_per_pack = kSmallPack;
      ThreadPipeline pipe(cut(layers, schedule), schedule, test_util::logits_loss(), sgd(), options);
      const auto [first, end] = shares[r];
      for (int k = 0; k < kSteps; ++k) {
        losses[r].push_back(pipe.train_step(inputs(k).slice(first, end), labels(k).slice(first, end)));
      }
      weights[r] = test_util::weight_values(layers);
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(errors[r], "") << "replica " << r;
      test_util::expect_same_weights(weights[r], want, name);
      // The same buckets every step, more than one of them.
      EXPECT_EQ(comms[r]->issued() % kSteps, 0) << comms[r]->issued();
      EXPECT_GE(comms[r]->issued() / kSteps, 2);
      for (int k = 0; k < kSteps; ++k) {
        EXPECT_TRUE(std::isfinite(losses[r][k]));
        EXPECT_FLOAT_EQ(losses[r][k], losses[0][k]) << "step " << k;
      }
    }
    EXPECT_EQ(comms[0]->issued(), comms[1]->issued());
  }
}

std::filesystem::path trace_path() {
  return std::filesystem::temp_directory_path() /
         ("strata_pipeline_overlap_test_" + std::to_string(::getpid()) + ".json");
}

TEST(PipelineOverlapTest, TheFirstBucketStartsBeforeTheFirstStageRunsItsLastBackward) {
  // In these schedules stage 0's last backward needs the gradient that stage 1 sends after its own last backward,
  // right after which the last virtual stage's weights are final: their bucket goes out while stage 0 still works.
  // (ZB-H1 runs stage 1's weight gradients late, so there the order is a race; it is left out.)
  for (const char* name : {"gpipe", "1f1b", "interleaved"}) {
    SCOPED_TRACE(name);
    const Schedule schedule = schedule_named(name);
    auto group = comm::make_local_group(1);
    IssueRecorder recorder(group[0]);
    auto layers = make_mlp();
    PipelineOptions options{.example_shape = {kFeatures}, .timeout = 20s};
    options.replicas = &recorder;
    options.bytes_per_pack = kSmallPack;
    ThreadPipeline pipe(cut(layers, schedule), schedule, test_util::logits_loss(), sgd(), options);
    const std::filesystem::path path = trace_path();
    trace::start({.path = path.string(), .first_step = 0, .end_step = kSteps});
    for (int k = 0; k < kSteps; ++k) {
      trace::set_step(k);
      pipe.train_step(inputs(k), labels(k));
    }
    trace::set_step(trace::kNoStep);
    trace::stop();
    nlohmann::json events;
    {
      std::ifstream in(path);
      events = nlohmann::json::parse(in)["traceEvents"];
    }
    std::filesystem::remove(path);
    int stage0 = -1;
    for (const auto& e : events) {
      if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "stage 0") stage0 = e["tid"].get<int>();
    }
    ASSERT_GE(stage0, 0) << "no trace row for stage 0";
    for (int k = 0; k < kSteps; ++k) {
      SCOPED_TRACE("step " + std::to_string(k));
      double first_issue = std::numeric_limits<double>::infinity();
      double last_backward = -1;
      int issues = 0;
      for (const auto& e : events) {
        if (e["ph"] != "X" || e["args"]["step"] != k) continue;
        const double ts = e["ts"].get<double>();
        if (e["name"] == "bucket issued") {
          ++issues;
          first_issue = std::min(first_issue, ts);
        } else if (e["tid"] == stage0 && e["cat"] == "compute" &&
                   e["name"].get<std::string>().rfind("backward", 0) == 0) {
          last_backward = std::max(last_backward, ts);
        }
      }
      EXPECT_GE(issues, 2);
      ASSERT_GE(last_backward, 0) << "no backward of stage 0 on the trace";
      EXPECT_LT(first_issue, last_backward) << "the first bucket waited for stage 0's last backward";
    }
  }
}

TEST(PipelineOverlapTest, AStepWithoutAnExampleOnAnyReplicaUpdatesNoWeight) {
  // After a first step the momentum is not zero: a weight given a zero gradient would still move.
  auto group = comm::make_local_group(2);
  const Schedule schedule = schedule_named("1f1b");
  std::vector<std::vector<Tensor>> before(2), after(2);
  std::vector<float> empty_loss(2, 0.0f);
  const std::vector<std::string> errors = test_util::on_threads(2, [&](int r) {
    auto layers = make_mlp();
    PipelineOptions options{.example_shape = {kFeatures}, .timeout = 20s};
    options.replicas = group[r].get();
    options.bytes_per_pack = kSmallPack;
    ThreadPipeline pipe(cut(layers, schedule), schedule, test_util::logits_loss(), sgd(), options);
    const int64_t first = r * 12;
    pipe.train_step(inputs(0).slice(first, first + 12), labels(0).slice(first, first + 12));
    before[r] = test_util::weight_values(layers);
    empty_loss[r] = pipe.train_step(inputs(1).slice(0, 0), labels(1).slice(0, 0));
    after[r] = test_util::weight_values(layers);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << "replica " << r;
    EXPECT_TRUE(std::isnan(empty_loss[r])) << empty_loss[r];
    ASSERT_EQ(after[r].size(), before[r].size());
    for (size_t i = 0; i < after[r].size(); ++i) {
      EXPECT_EQ(after[r][i].to_vector<float>(), before[r][i].to_vector<float>()) << "replica " << r << " weight " << i;
    }
  }
}

TEST(PipelineOverlapTest, AStageWithoutWeightsStillCarriesTheReplicasLoss) {
  // 2 replicas × 2 stages as PipelineStages with their own optimizers; stage 1 (the loss's) has no weight, so its
  // reduction carries only the replicas' summed loss and rows.
  constexpr int kReplicas = 2;
  const auto make_model = [] {
    return test_util::built_with_random_weights(
        {std::make_shared<nn::Dense>(16, nn::ActivationSpec("relu")), std::make_shared<nn::Dense>(kClasses),
         std::make_shared<nn::Activation>("tanh")},
        {kFeatures}, 11);
  };
  std::vector<std::vector<std::shared_ptr<comm::Communicator>>> pipeline_groups, stage_groups;
  for (int r = 0; r < kReplicas; ++r) pipeline_groups.push_back(comm::make_local_group(kStages));
  for (int s = 0; s < kStages; ++s) stage_groups.push_back(comm::make_local_group(kReplicas));
  const std::vector<std::pair<int64_t, int64_t>> shares = {{0, 10}, {10, 24}};
  std::vector<std::vector<std::shared_ptr<nn::Layer>>> models;
  for (int r = 0; r < kReplicas; ++r) models.push_back(make_model());
  std::vector<std::vector<Tensor>> stage0_weights(kReplicas);
  std::vector<std::vector<float>> losses(kReplicas);
  const std::vector<std::string> errors = test_util::on_threads(kReplicas * kStages, [&](int i) {
    const int r = i / kStages, s = i % kStages;
    PipelineOptions options{.example_shape = {kFeatures}, .timeout = 20s};
    options.replicas = stage_groups[s][r].get();
    options.bytes_per_pack = kSmallPack;
    PipelineStage stage(split_at(models[r], {2}), s, one_f_one_b(kStages, kMicroBatches), test_util::logits_loss(),
                        sgd(), pipeline_groups[r][s], options);
    EXPECT_EQ(stage.trainable_variables().empty(), s == 1);
    const auto [first, end] = shares[r];
    for (int k = 0; k < kSteps; ++k) {
      const float loss = stage.train_step(inputs(k).slice(first, end), labels(k).slice(first, end));
      if (s == 1) losses[r].push_back(loss);
    }
    if (s == 0) stage0_weights[r] = test_util::weight_values({models[r][0], models[r][1]});
  });
  const std::vector<Tensor> want = test_util::train_unsplit(make_model(), sgd(), kSteps, inputs, labels);
  for (int r = 0; r < kReplicas; ++r) {
    SCOPED_TRACE("replica " + std::to_string(r));
    for (int s = 0; s < kStages; ++s) ASSERT_EQ(errors[r * kStages + s], "") << "stage " << s;
    test_util::expect_same_weights(stage0_weights[r], want, "a stage without weights");
    ASSERT_EQ(losses[r].size(), static_cast<size_t>(kSteps));
    for (int k = 0; k < kSteps; ++k) {
      EXPECT_TRUE(std::isfinite(losses[r][k]));
      EXPECT_FLOAT_EQ(losses[r][k], losses[0][k]) << "step " << k;
    }
  }
}

}  // namespace
}  // namespace strata::parallel
