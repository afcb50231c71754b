// The strategies of several replicas on GPUs, against OneDeviceStrategy("/gpu:0") on the same data from the same
// initial weights: MirroredStrategy with one GPU replica (its NCCL group of one, GradientReducer's buckets on the GPU,
// the update in merge_call), a single MultiWorkerMirroredStrategy worker on nccl (the same, through the worker's
// communicator), and, when the machine has two GPUs or more, MirroredStrategy over two (a real NCCL all-reduce between
// two replica threads, each copy of the variables on its own GPU). Each must give the one-device run's per-step losses
// and weights within 1e-4. Every test skips without a GPU (STRATA_REQUIRE_GPU); the multi-rank logic they share with
// the CPU replicas is covered by tests/distribute (gradient_reducer_test, strategy_test) on every build.
// Thread-safety: test-thread only.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/strategies.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/train/callbacks.h"
#include "strata/train/model.h"

namespace strata {
namespace {

using testing::expect_matches_cpu;
using testing::random_host;

// Records the running loss after every training batch.
class StepLosses final : public Callback {
 public:
  void on_train_batch_end(int64_t, const Logs& logs) override { losses.push_back(*logs.get("loss")); }
  std::vector<double> losses;
};

struct FitResult {
  std::vector<double> step_losses;
  Logs evaluation;
  std::vector<Tensor> weights;  // replica 0's copy, on the host
};

// Three epochs of a small Dense model (global batch 8 of 72 rows) under `strategy`; every variable's copies are
// checked to be on their replicas' devices and equal at the end.
FitResult fit_under(distribute::Strategy& strategy) {
  Tensor x = random_host({72, 12}, 50);
  Tensor y = Tensor::empty({72}, DType::kInt64);
  for (int64_t i = 0; i < 72; ++i) y.data<int64_t>()[i] = (i * 7 + 3) % 4;
  const auto dataset = data::Dataset::from_tensor_slices({x, y}).batch(8);
  auto scope = strategy.scope();
  manual_seed(1234);  // the same initial weights under every strategy (drawn on the host)
  Sequential model(std::vector<nn::LayerRef>{nn::Dense(16, "relu"), nn::Dense(4)});
  model.build_for({1, 12});
  model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                optim::Adam(optim::AdamOptions{.learning_rate = 0.01}), {"accuracy"});
  auto steps = std::make_shared<StepLosses>();
  FitResult r;
  model.fit(dataset, {.epochs = 3, .callbacks = {steps}, .verbose = 0});
  r.step_losses = steps->losses;
  r.evaluation = model.evaluate(dataset);
  for (const Variable& v : model.variables()) {
    for (int c = 0; c < v.num_components(); ++c) {
      EXPECT_EQ(v.component(c).device(), strategy.replica_device(c)) << v.name() << " copy " << c;
      if (c > 0) expect_matches_cpu(v.component(c), v.component(0).to(Device::cpu()), 0.0, v.name() + " copies");
    }
    r.weights.push_back(v.component(0).to(Device::cpu()));
  }
  return r;
}

void expect_follows(const FitResult& got, const FitResult& want, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.step_losses.size(), want.step_losses.size());
  for (size_t i = 0; i < want.step_losses.size(); ++i)
    EXPECT_NEAR(got.step_losses[i], want.step_losses[i], 1e-4) << "step " << i;
  EXPECT_LT(want.step_losses.back(), want.step_losses.front());  // it learned
  for (const char* key : {"loss", "accuracy"}) EXPECT_NEAR(*got.evaluation.get(key), *want.evaluation.get(key), 1e-4);
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (size_t i = 0; i < want.weights.size(); ++i) expect_matches_cpu(got.weights[i], want.weights[i], 1e-4, "weights");
}

FitResult one_device() {
  distribute::OneDeviceStrategy strategy("/gpu:0");
  return fit_under(strategy);
}

TEST(MirroredGpuTest, OneGpuReplicaOnNcclFollowsOneDevice) {
  STRATA_REQUIRE_GPU();
  distribute::MirroredStrategy mirrored({"/gpu:0"});
  EXPECT_TRUE(mirrored.cross_device_ops().nccl);  // the default ops on GPUs
  EXPECT_EQ(mirrored.replica_device(0), testing::gpu());
  expect_follows(fit_under(mirrored), one_device(), "MirroredStrategy({\"/gpu:0\"})");
}

TEST(MirroredGpuTest, ASingleMultiWorkerGpuWorkerOnNcclFollowsOneDevice) {
  STRATA_REQUIRE_GPU();
  distribute::MultiWorkerMirroredStrategy worker(cluster::TaskInfo{}, {.implementation = "nccl"});
  EXPECT_EQ(worker.backend(), "nccl");
  EXPECT_EQ(worker.replica_device(0), testing::gpu());
  expect_follows(fit_under(worker), one_device(), "MultiWorkerMirroredStrategy on nccl");
  // "auto" on a GPU worker is nccl too.
  distribute::MultiWorkerMirroredStrategy automatic(cluster::TaskInfo{}, {.device = "gpu"});
  EXPECT_EQ(automatic.backend(), "nccl");
}

TEST(MirroredGpuTest, TwoGpuReplicasFollowOneDevice) {
  STRATA_REQUIRE_GPU();
  if (strata::detail::cuda_device_count() < 2) GTEST_SKIP() << "one GPU visible: two NCCL ranks need two GPUs";
  distribute::MirroredStrategy mirrored({"/gpu:0", "/gpu:1"});
  EXPECT_EQ(mirrored.replica_device(1), Device::cuda(1));
  expect_follows(fit_under(mirrored), one_device(), "MirroredStrategy({\"/gpu:0\", \"/gpu:1\"})");
}

}  // namespace
}  // namespace strata
