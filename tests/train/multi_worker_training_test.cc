// MultiWorkerMirroredStrategy with its workers as threads of this process (each with its own TF_CONFIG task, its
// own coordination client and gloo communicator over 127.0.0.1): N workers (of 1 or 2 local replicas, reduced
// hierarchically) train to the weights one process gets with the same global batch, start from the chief's initial values whatever their seeds, report the job's
// metrics, and a worker that never comes is a Timeout naming it. (tests/cli/multi_worker_command_test.cc runs
// workers as processes, and kills one.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <thread>

#include "core/device_memory.h"
#include "multi_worker_jobs.h"
#include "multi_worker_test_util.h"
#include "strata/distribute/multi_worker.h"
#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/train/callbacks.h"
#include "strata/train/model.h"
#include "test_util.h"

namespace strata::distribute {
namespace {

using test_workers::local_cluster;
using test_workers::on_every_worker;
using test_workers::quick_options;
using test_workers::worker_task;
using namespace test_jobs;

TEST(MultiWorkerTest, WorkersTrainToWhatOneProcessDoesWithTheSameGlobalBatch) {
  const auto reference = train(default_strategy(), 1000);
  for (const auto& [workers, local] : {std::pair{2, 1}, std::pair{3, 1}, std::pair{2, 2}}) {
    SCOPED_TRACE(std::to_string(workers) + " workers x " + std::to_string(local) + " local replicas");
    std::vector<Trained> results(static_cast<size_t>(workers));
    on_every_worker(workers, local, [&](int w, MultiWorkerMirroredStrategy& strategy) {
      EXPECT_EQ(strategy.num_replicas_in_sync(), workers * local);
      EXPECT_EQ(strategy.worker_index(), w);
      EXPECT_EQ(strategy.backend(), "gloo");
      // Each worker seeds differently: the chief's (seed 1000) initial values must win everywhere.
      results[static_cast<size_t>(w)] = train(strategy, 1000 + static_cast<uint64_t>(w));
    });
    if (HasFatalFailure()) return;
    for (int w = 0; w < workers; ++w) {
      const auto& mine = results[static_cast<size_t>(w)].weights;
      ASSERT_EQ(mine.size(), reference.weights.size());
      for (size_t i = 0; i < mine.size(); ++i) {
        const auto got = mine[i].second.to_vector<float>(), want = reference.weights[i].second.to_vector<float>();
        const auto chief = results[0].weights[i].second.to_vector<float>();
        for (size_t k = 0; k < got.size(); ++k) {
          ASSERT_EQ(got[k], chief[k]) << "worker " << w << " " << mine[i].first << " differs from the chief's";
          ASSERT_NEAR(got[k], want[k], 1e-5f * std::max(1.0f, std::fabs(want[k]))) << mine[i].first << " " << k;
        }
      }
      // The logs are the job's, not the worker's share.
      for (const char* key : {"loss", "accuracy"}) {
        for (size_t e = 0; e < 2; ++e) {
          EXPECT_NEAR(results[static_cast<size_t>(w)].history.history.at(key)[e], reference.history.history.at(key)[e],
                      1e-5)
              << key << " epoch " << e;
        }
      }
    }
  }
}

TEST(MultiWorkerTest, ACustomLoopGivesWhatOneProcessGives) {
  const auto reference = train_custom(default_strategy(), 77);
  for (const auto& [workers, local] : {std::pair{2, 1}, std::pair{2, 2}}) {
    SCOPED_TRACE(std::to_string(workers) + " workers x " + std::to_string(local) + " local replicas");
    std::vector<std::pair<std::vector<Tensor>, std::vector<double>>> results(static_cast<size_t>(workers));
    on_every_worker(workers, local, [&](int w, MultiWorkerMirroredStrategy& strategy) {
      results[static_cast<size_t>(w)] = train_custom(strategy, 77 + static_cast<uint64_t>(w));
    });
    if (HasFatalFailure()) return;
    for (int w = 0; w < workers; ++w) {
      const auto& [weights, losses] = results[static_cast<size_t>(w)];
      ASSERT_EQ(weights.size(), reference.first.size());
      for (size_t i = 0; i < weights.size(); ++i) {
        const auto got = weights[i].to_vector<float>(), want = reference.first[i].to_vector<float>();
        for (size_t k = 0; k < got.size(); ++k) {
          ASSERT_NEAR(got[k], want[k], 1e-5f * std::max(1.0f, std::fabs(want[k]))) << "weight " << i << " " << k;
        }
      }
      ASSERT_EQ(losses.size(), reference.second.size());
      for (size_t k = 0; k < losses.size(); ++k) EXPECT_NEAR(losses[k], reference.second[k], 1e-5) << "step " << k;
    }
  }
}

// gradient_compression "bf16": the gradients cross between the workers as bfloat16, so two workers train to within
// bfloat16's precision of the float32 run (measured: 0.06-0.2% relative), but not to its bits (which shows the
// compressed path was taken), with half the bytes on the wire (measured: 5620 against 11240 per worker).
TEST(MultiWorkerTest, Bf16GradientCompressionStaysNearTheFloat32RunWithHalfTheBytes) {
  struct Run {
    std::vector<Trained> results{2};
    std::vector<int64_t> bytes = std::vector<int64_t>(2);
  };
  auto run = [](const std::string& compression) {
    Run out;
    CommunicationOptions options = quick_options();
    options.gradient_compression = compression;
    on_every_worker(
        2, 1,
        [&](int w, MultiWorkerMirroredStrategy& strategy) {
          out.results[static_cast<size_t>(w)] = train(strategy, 1000);
          out.bytes[static_cast<size_t>(w)] = strategy.communicator(0).all_reduce_wire_bytes();
        },
        options);
    return out;
  };
  const Run full = run("none");
  if (HasFatalFailure()) return;
  const Run bf16 = run("bf16");
  if (HasFatalFailure()) return;
  int differ = 0;
  for (int w = 0; w < 2; ++w) {
    const auto& mine = bf16.results[static_cast<size_t>(w)].weights;
    const auto& want = full.results[static_cast<size_t>(w)].weights;
    ASSERT_EQ(mine.size(), want.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      const auto got = mine[i].second.to_vector<float>(), ref = want[i].second.to_vector<float>();
      const auto chief = bf16.results[0].weights[i].second.to_vector<float>();
      double diff = 0, norm = 0;
      for (size_t k = 0; k < got.size(); ++k) {
        ASSERT_EQ(got[k], chief[k]) << "worker " << w << " " << mine[i].first << " differs from the chief's";
        diff += (got[k] - ref[k]) * (got[k] - ref[k]);
        norm += ref[k] * ref[k];
        differ += got[k] != ref[k];
      }
      EXPECT_LE(std::sqrt(diff), 1e-2 * std::sqrt(norm)) << mine[i].first << ": relative to the float32 run";
    }
  }
  EXPECT_GT(differ, 0) << "bf16 compression trained to the float32 run's very bits: the path was not taken";
  for (int w = 0; w < 2; ++w) {
    const double ratio = static_cast<double>(bf16.bytes[static_cast<size_t>(w)]) /
                         static_cast<double>(full.bytes[static_cast<size_t>(w)]);
    EXPECT_NEAR(ratio, 0.5, 0.05) << "worker " << w << ": " << bf16.bytes[static_cast<size_t>(w)]
                                  << " bytes with bf16, " << full.bytes[static_cast<size_t>(w)] << " without";
  }
}

TEST(MultiWorkerTest, WorkersThatWouldResumeFromDifferentPositionsAllStopWithAClearError) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata_mw_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {  // a checkpoint after one epoch, which only worker 0 will see
    manual_seed(1);
    Sequential model({nn::Dense(4)});
    model.build_for({1, 12});
    model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::SGD({.learning_rate = 0.1}));
    model.fit(training_data(), {.epochs = 1, .callbacks = {std::make_shared<callbacks::BackupAndRestore>(
                                                  (dir / "shared").string(),
                                                  callbacks::BackupAndRestore::Options{.delete_checkpoint = false})},
                                .verbose = 0});
  }
  std::vector<std::string> messages(2);
  on_every_worker(2, 1, [&](int w, MultiWorkerMirroredStrategy& strategy) {
    auto scope = strategy.scope();
    manual_seed(1);
    Sequential model({nn::Dense(4)});
    model.build_for({1, 12});
    model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::SGD({.learning_rate = 0.1}));
    const fs::path mine = dir / (w == 0 ? "shared" : "empty");
    messages[static_cast<size_t>(w)] = test::message_of<InvalidArgument>([&] {
      model.fit(training_data(),
                {.epochs = 2, .callbacks = {std::make_shared<callbacks::BackupAndRestore>(mine.string())}, .verbose = 0});
    });
  });
  fs::remove_all(dir);
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("the workers would resume from different positions"), std::string::npos) << m;
    EXPECT_NE(m.find("file system they share"), std::string::npos) << m;
  }
}

TEST(MultiWorkerTest, AfterARestoreEveryWorkerTakesTheChiefsWeightsAndOptimizerState) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("strata_mw_restore_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto make = [] {
    Sequential model({nn::Dense(4)});
    model.build_for({1, 12});
    model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::Adam({.learning_rate = 0.01}));
    return model;
  };
  for (int w = 0; w < 2; ++w) {  // the same position (one epoch), different weights and slots (different seeds)
    manual_seed(10 + static_cast<uint64_t>(w));
    Sequential model = make();
    model.fit(training_data(), {.epochs = 1,
                                .callbacks = {std::make_shared<callbacks::BackupAndRestore>(
                                    (dir / std::to_string(w)).string(),
                                    callbacks::BackupAndRestore::Options{.delete_checkpoint = false})},
                                .verbose = 0});
  }
  std::vector<std::vector<std::vector<float>>> weights(2);
  on_every_worker(2, 1, [&](int w, MultiWorkerMirroredStrategy& strategy) {
    auto scope = strategy.scope();
    Sequential model = make();
    model.fit(training_data(), {.epochs = 2,
                                .callbacks = {std::make_shared<callbacks::BackupAndRestore>(
                                    (dir / std::to_string(w)).string())},
                                .verbose = 0});
    for (auto& [name, t] : model.named_weights()) weights[static_cast<size_t>(w)].push_back(t.to_vector<float>());
  });
  fs::remove_all(dir);
  ASSERT_FALSE(weights[0].empty());
  EXPECT_EQ(weights[0], weights[1]);  // bit for bit: worker 1 continued from the chief's state, not its own
}

TEST(MultiWorkerTest, AWorkerThatNeverComesIsATimeoutNamingIt) {
  const cluster::ClusterSpec spec = local_cluster(2);
  CommunicationOptions options = quick_options();
  options.timeout = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  const std::string msg =
      test::message_of<Timeout>([&] { MultiWorkerMirroredStrategy strategy(worker_task(spec, 0), options); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 2.0 + 3.0) << msg;
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
}

// GPU workers' rules, checked before the GPU is looked for (so in every build).
TEST(MultiWorkerTest, GpuWorkersRefuseWhatNcclCannotDo) {
  const auto refusal = [](CommunicationOptions options, int local_replicas = 1, ElasticOptions elastic = {}) {
    return test::message_of<InvalidArgument>(
        [&] { MultiWorkerMirroredStrategy(cluster::TaskInfo{}, options, local_replicas, elastic); });
  };
  std::string msg = refusal({.implementation = "ring", .device = "gpu"});
  EXPECT_NE(msg.find("communication 'ring' all-reduces host tensors; GPU workers use 'nccl'"), std::string::npos)
      << msg;
  msg = refusal({.implementation = "mpi", .device = "gpu"});
  EXPECT_NE(msg.find("communication 'mpi' all-reduces host tensors"), std::string::npos) << msg;
  msg = refusal({.implementation = "nccl"}, 2);
  EXPECT_NE(msg.find("one replica each (one GPU per worker), not 2"), std::string::npos) << msg;
  msg = refusal({.device = "gpu"}, 1, {.min_workers = 1});
  EXPECT_NE(msg.find("GPU workers on nccl are not elastic"), std::string::npos) << msg;
  msg = refusal({.implementation = "nccl", .gradient_compression = "bf16"});
  EXPECT_NE(msg.find("gradient_compression 'bf16' is for gloo"), std::string::npos) << msg;
  msg = refusal({.device = "tpu"});
  EXPECT_NE(msg.find("unknown device 'tpu'; choices: cpu, gpu"), std::string::npos) << msg;
}

TEST(MultiWorkerTest, OneWorkerIsOneReplicaAndBadOptionsAreClearErrors) {
  MultiWorkerMirroredStrategy single(cluster::TaskInfo{}, {});
  EXPECT_EQ(single.num_replicas_in_sync(), 1);
  EXPECT_EQ(single.backend(), "local");
  EXPECT_TRUE(single.is_chief());
  if (strata::detail::cuda_device_count() == 0) {  // (tests/cuda/mirrored_gpu_test.cc runs it on a GPU)
    const std::string nccl = test::message_of<Unavailable>(
        [] { MultiWorkerMirroredStrategy(cluster::TaskInfo{}, {.implementation = "nccl"}); });
    EXPECT_NE(nccl.find("'/gpu:0'"), std::string::npos) << nccl;
#ifdef STRATA_WITH_CUDA
    EXPECT_NE(nccl.find("0 CUDA devices visible"), std::string::npos) << nccl;
#else
    EXPECT_NE(nccl.find("needs a build of strata with CUDA"), std::string::npos) << nccl;
#endif
    EXPECT_THROW(MultiWorkerMirroredStrategy(cluster::TaskInfo{}, {.device = "gpu"}), Unavailable);
  }
  const std::string bad = test::message_of<InvalidArgument>(
      [] { MultiWorkerMirroredStrategy(cluster::TaskInfo{}, {.implementation = "butterfly"}); });
  EXPECT_NE(bad.find("auto, ring, mpi, nccl"), std::string::npos) << bad;
  const std::string compression = test::message_of<InvalidArgument>(
      [] { MultiWorkerMirroredStrategy(cluster::TaskInfo{}, {.gradient_compression = "fp8"}); });
  EXPECT_NE(compression.find("unknown gradient_compression 'fp8'; choices: none, bf16"), std::string::npos)
      << compression;
  cluster::ClusterSpec spec = local_cluster(1);
  spec.jobs["ps"].push_back("127.0.0.1:" + std::to_string(test::free_port()));
  const std::string ps = test::message_of<InvalidArgument>([&] {
    MultiWorkerMirroredStrategy(cluster::resolve_tf_config(cluster::make_tf_config(spec, "ps", 0)), {});
  });
  EXPECT_NE(ps.find("ps:0"), std::string::npos) << ps;
}

}  // namespace
}  // namespace strata::distribute
