// The job file's strategy and lr_scaling keys, the flags that override them, the learning rate a job
// trains at (linear scaling and gradual warmup, Goyal et al.), and the replica and memory warnings.
#include "cli/distribution.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "cli/job.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/strategies.h"
#include "strata/error.h"
#include "strata/nn/nn.h"
#include "strata/threading.h"
#include "test_util.h"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

// The one job file the tests rewrite, removed when the program ends.
fs::path job_path() {
  return fs::temp_directory_path() / ("strata_distribution_test_" + std::to_string(::getpid()) + ".yaml");
}
struct RemoveJobFileAtExit {
  ~RemoveJobFileAtExit() {
    std::error_code ignored;
    fs::remove(job_path(), ignored);
  }
} remove_job_file_at_exit;

// A job file with `extra` appended (the data directory is never opened by load_job).
std::string job_file(const std::string& extra) {
  const fs::path path = job_path();
  std::ofstream(path) << "data: {format: idx, directory: /nonexistent}\n"
                         "model:\n  - flatten\n  - dense: {units: 10}\n"
                         "loss: {name: sparse_categorical_crossentropy, from_logits: true}\n"
                         "optimizer: {name: sgd, learning_rate: 0.1}\n"
                         "batch_size: 256\n"
                      << extra;
  return path.string();
}

std::string load_error(const std::string& extra) {
  const std::string path = job_file(extra);
  return test::message_of<InvalidArgument>([&] { load_job(path); });
}

TEST(DistributionTest, JobKeysAreReadWithTheirDefaults) {
  const Job plain = load_job(job_file(""));
  EXPECT_EQ(plain.strategy.name, "one_device");
  EXPECT_EQ(plain.strategy.replicas, 0);
  EXPECT_EQ(plain.strategy.cross_device_ops, "reduction_to_one_device");
  EXPECT_EQ(plain.lr_scaling.rule, "none");
  EXPECT_EQ(plain.lr_scaling.base_batch_size, 64);
  EXPECT_EQ(plain.lr_scaling.warmup_epochs, 0);

  const Job job = load_job(
      job_file("strategy: mirrored\nreplicas: 3\ncross_device_ops: tree\nlr_scaling: linear\nbase_batch_size: 32\n"
               "warmup_epochs: 2\n"));
  EXPECT_EQ(job.strategy.name, "mirrored");
  EXPECT_EQ(job.strategy.replicas, 3);
  EXPECT_EQ(job.strategy.cross_device_ops, "tree");
  EXPECT_EQ(job.lr_scaling.rule, "linear");
  EXPECT_EQ(job.lr_scaling.base_batch_size, 32);
  EXPECT_EQ(job.lr_scaling.warmup_epochs, 2);
}

TEST(DistributionTest, BadKeysNameTheLineAndListTheChoices) {
  std::string msg = load_error("strategy: mirorred\n");
  EXPECT_NE(msg.find(".yaml:8: strategy: unknown strategy 'mirorred'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("one_device, mirrored, central_storage"), std::string::npos) << msg;
  msg = load_error("strategy: mirrored\ncross_device_ops: nccl2\n");
  EXPECT_NE(msg.find(":9: cross_device_ops: unknown cross-device ops 'nccl2'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ring, tree, reduction_to_one_device"), std::string::npos) << msg;
  msg = load_error("strategy: central_storage\ncross_device_ops: tree\n");
  EXPECT_NE(msg.find("cross_device_ops: only strategy: mirrored"), std::string::npos) << msg;
  msg = load_error("replicas: 2\n");
  EXPECT_NE(msg.find("replicas: 2 needs strategy: mirrored or central_storage"), std::string::npos) << msg;
  msg = load_error("strategy: mirrored\nreplicas: 0\n");
  EXPECT_NE(msg.find("replicas: must be positive"), std::string::npos) << msg;
  msg = load_error("lr_scaling: sqrt\n");
  EXPECT_NE(msg.find("lr_scaling: unknown lr_scaling rule 'sqrt'; choose one of none, linear"), std::string::npos)
      << msg;
  msg = load_error("warmup_epochs: 2\n");
  EXPECT_NE(msg.find("warmup_epochs: needs lr_scaling: linear"), std::string::npos) << msg;
  msg = load_error("lr_scaling: linear\nwarmup_epochs: -1\n");
  EXPECT_NE(msg.find("warmup_epochs: must be a finite number >= 0, got -1"), std::string::npos) << msg;
  msg = load_error("base_batch_size: 32\n");
  EXPECT_NE(msg.find("base_batch_size: needs lr_scaling: linear"), std::string::npos) << msg;
}

TEST(DistributionTest, FlagsOverrideTheJob) {
  const StrategySpec mirrored{.name = "mirrored", .replicas = 3, .cross_device_ops = "tree"};
  // No flags: the job's own.
  StrategySpec s = resolve_strategy(mirrored, {});
  EXPECT_EQ(s.name, "mirrored");
  EXPECT_EQ(s.replicas, 3);
  EXPECT_EQ(s.cross_device_ops, "tree");
  // --replicas overrides replicas only.
  s = resolve_strategy(mirrored, StrategyFlags{"", 2, ""});
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.cross_device_ops, "tree");
  // --strategy one_device drops the file's replicas and cross-device ops; central_storage keeps replicas.
  s = resolve_strategy(mirrored, StrategyFlags{"one_device", std::nullopt, ""});
  EXPECT_EQ(s.name, "one_device");
  EXPECT_EQ(s.replicas, 0);
  s = resolve_strategy(mirrored, StrategyFlags{"central_storage", std::nullopt, ""});
  EXPECT_EQ(s.replicas, 3);
  EXPECT_EQ(s.cross_device_ops, "reduction_to_one_device");
  s = resolve_strategy({}, {.strategy = "mirrored", .replicas = 2, .cross_device_ops = "reduction_to_one_device"});
  EXPECT_EQ(s.name, "mirrored");
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.cross_device_ops, "reduction_to_one_device");

  auto error = [](const StrategySpec& job, const StrategyFlags& flags) {
    return test::message_of<InvalidArgument>([&] { resolve_strategy(job, flags); });
  };
  std::string msg = error({}, StrategyFlags{"mirror", std::nullopt, ""});
  EXPECT_NE(msg.find("--strategy: unknown strategy 'mirror'; choose one of one_device, mirrored, central_storage"),
            std::string::npos)
      << msg;
  msg = error({}, StrategyFlags{"", 2, ""});
  EXPECT_NE(msg.find("--replicas 2: one_device has one replica"), std::string::npos) << msg;
  msg = error({}, StrategyFlags{"", -1, ""});
  EXPECT_NE(msg.find("--replicas: must be a positive integer, got -1"), std::string::npos) << msg;
  // --replicas 0 is an error, not "the default".
  msg = error(mirrored, StrategyFlags{"", 0, ""});
  EXPECT_NE(msg.find("--replicas: must be a positive integer, got 0"), std::string::npos) << msg;
  msg = error(mirrored, StrategyFlags{"", std::nullopt, "butterfly"});
  EXPECT_NE(msg.find("--cross-device-ops: unknown cross-device ops 'butterfly'"), std::string::npos) << msg;
  msg = error({}, StrategyFlags{"central_storage", std::nullopt, "tree"});
  EXPECT_NE(msg.find("only the mirrored strategy"), std::string::npos) << msg;
  msg = error({}, {.strategy = "mirrored", .collective_timeout_seconds = 30});
  EXPECT_NE(msg.find("--collective-timeout 30: only multi_worker_mirrored"), std::string::npos) << msg;
  msg = error({}, {.strategy = "multi_worker_mirrored", .collective_timeout_seconds = -2});
  EXPECT_NE(msg.find("--collective-timeout: must be a positive number of seconds, got -2"), std::string::npos) << msg;
  s = resolve_strategy({}, {.strategy = "multi_worker_mirrored", .collective_timeout_seconds = 12.5});
  EXPECT_EQ(s.collective_timeout_seconds, 12.5);
  msg = error({}, {.strategy = "multi_worker_mirrored", .gradient_compression = "fp16"});
  EXPECT_NE(msg.find("--gradient-compression: unknown gradient compression 'fp16'; choose one of none, bf16"),
            std::string::npos)
      << msg;
  msg = error({}, {.strategy = "mirrored", .gradient_compression = "bf16"});
  EXPECT_NE(msg.find("--gradient-compression bf16: only multi_worker_mirrored"), std::string::npos) << msg;
  s = resolve_strategy({}, {.strategy = "multi_worker_mirrored", .gradient_compression = "bf16"});
  EXPECT_EQ(s.gradient_compression, "bf16");
  EXPECT_EQ(resolve_strategy({}, {.strategy = "multi_worker_mirrored"}).gradient_compression, "none");
}

TEST(DistributionTest, MultiWorkerMirroredOutsideAClusterIsOneWorker) {
  auto mw = make_job_strategy({.name = "multi_worker_mirrored", .collective_timeout_seconds = 7});
  const auto& strategy = dynamic_cast<const distribute::MultiWorkerMirroredStrategy&>(*mw);
  EXPECT_EQ(strategy.num_replicas_in_sync(), 1);
  EXPECT_EQ(strategy.communication_options().timeout, std::chrono::milliseconds(7000));
  auto compressed = make_job_strategy({.name = "multi_worker_mirrored", .gradient_compression = "bf16"});
  EXPECT_EQ(dynamic_cast<const distribute::MultiWorkerMirroredStrategy&>(*compressed)
                .communication_options()
                .gradient_compression,
            "bf16");
  EXPECT_EQ(strategy_line(*mw, 64),
            "strategy: MultiWorkerMirroredStrategy, 1 replica (" + std::to_string(mw->threads_per_replica()) +
                (mw->threads_per_replica() == 1 ? " thread" : " threads") + "), worker 0 of 1, global batch 64");
  auto two = make_job_strategy({.name = "multi_worker_mirrored", .replicas = 2});
  EXPECT_EQ(two->num_local_replicas(), 2);
  EXPECT_NE(strategy_line(*two, 64).find("worker 0 of 1 with 2 replicas each"), std::string::npos)
      << strategy_line(*two, 64);
}

TEST(DistributionTest, LocalSgdFromTheJobAndTheFlags) {
  const Job job = load_job(job_file("strategy: local_sgd\nsync_every: 16\nouter_step: nesterov\n"));
  EXPECT_EQ(job.strategy.name, "local_sgd");
  EXPECT_EQ(job.strategy.sync_every, 16);
  EXPECT_EQ(job.strategy.outer_step, "nesterov");
  EXPECT_EQ(load_job(job_file("strategy: local_sgd\n")).strategy.sync_every, 8);
  EXPECT_NE(load_error("sync_every: 4\n").find("sync_every: only strategy: local_sgd"), std::string::npos);
  EXPECT_NE(load_error("strategy: local_sgd\nouter_step: adam\n").find("unknown outer step 'adam'"),
            std::string::npos);
  StrategySpec s = resolve_strategy(job.strategy, {.sync_every = 4, .outer_step = "none"});
  EXPECT_EQ(s.sync_every, 4);
  EXPECT_EQ(s.outer_step, "none");
  s = resolve_strategy({}, {.strategy = "local_sgd", .collective_timeout_seconds = 30});
  EXPECT_EQ(s.collective_timeout_seconds, 30);
  auto error = [](const StrategySpec& spec, const StrategyFlags& flags) {
    return test::message_of<InvalidArgument>([&] { resolve_strategy(spec, flags); });
  };
  EXPECT_NE(error({}, {.strategy = "mirrored", .sync_every = 4}).find("--sync-every 4: only local_sgd"),
            std::string::npos);
  EXPECT_NE(error({}, {.strategy = "local_sgd", .sync_every = 0}).find("--sync-every: must be a positive"),
            std::string::npos);
  EXPECT_NE(error({}, {.strategy = "local_sgd", .outer_step = "sgd"}).find("unknown outer step 'sgd'"),
            std::string::npos);
  // Outside a cluster: one worker, which never averages.
  auto local = make_job_strategy({.name = "local_sgd", .sync_every = 4, .outer_step = "nesterov"});
  EXPECT_EQ(local->name(), "LocalSGDStrategy");
  EXPECT_EQ(local->num_workers(), 1);
  EXPECT_NE(strategy_line(*local, 64).find("worker 0 of 1, weights averaged every 4 steps with DiLoCo's outer"),
            std::string::npos)
      << strategy_line(*local, 64);
}

TEST(DistributionTest, TheRendezvousTimeoutReachesTheStrategy) {
  const StrategySpec s = resolve_strategy({}, {.strategy = "multi_worker_mirrored", .rendezvous_timeout_seconds = 7});
  EXPECT_EQ(s.rendezvous_timeout_seconds, 7);
  auto mw = make_job_strategy(s);
  EXPECT_EQ(dynamic_cast<const distribute::MultiWorkerMirroredStrategy&>(*mw).communication_options().rendezvous_timeout,
            std::chrono::milliseconds(7000));
  const auto error = [](const StrategyFlags& flags) {
    return test::message_of<InvalidArgument>([&] { resolve_strategy({}, flags); });
  };
  EXPECT_NE(error({.strategy = "mirrored", .rendezvous_timeout_seconds = 5}).find("--rendezvous-timeout 5: only"),
            std::string::npos);
  EXPECT_NE(error({.strategy = "local_sgd", .rendezvous_timeout_seconds = -1}).find("must be a positive number"),
            std::string::npos);
  // A parameter-server worker waits that long for the chief's fit to serve the worker group.
  EXPECT_EQ(resolve_strategy({}, {.strategy = "parameter_server", .rendezvous_timeout_seconds = 9})
                .rendezvous_timeout_seconds,
            9);
  EXPECT_NE(error({.strategy = "mirrored", .rendezvous_timeout_seconds = 5})
                .find("only multi_worker_mirrored, pipeline, local_sgd and parameter_server meet the other workers"),
            std::string::npos);
}

TEST(DistributionTest, MakesTheStrategyAndDescribesIt) {
  ScopedNumThreads four(4);
  auto one = make_job_strategy({});
  EXPECT_EQ(one->name(), "OneDeviceStrategy");
  EXPECT_EQ(strategy_line(*one, 64), "strategy: OneDeviceStrategy, 1 replica (4 threads), global batch 64");

  auto two = make_job_strategy({.name = "mirrored", .replicas = 2, .cross_device_ops = "tree"});
  ASSERT_EQ(two->num_replicas_in_sync(), 2);
  EXPECT_EQ(strategy_line(*two, 128),
            "strategy: MirroredStrategy, 2 replicas (2 threads each), tree all-reduce, global batch 128 "
            "(64 per replica)");

  // Replicas default to one per core; an uneven global batch is said so.
  auto central = make_job_strategy(StrategySpec{"central_storage", 0, "ring"});
  EXPECT_EQ(central->num_replicas_in_sync(), 4);
  EXPECT_EQ(strategy_line(*central, 30),
            "strategy: CentralStorageStrategy, 4 replicas (1 thread each), global batch 30 (8 or fewer per replica)");
}

TEST(DistributionTest, WarnsAboutMoreReplicasThanCores) {
  EXPECT_EQ(replicas_warning(2, 2), "");
  EXPECT_EQ(replicas_warning(1, 8), "");
  EXPECT_EQ(replicas_warning(0, 2), "");   // the default: one per core
  EXPECT_EQ(replicas_warning(16, 0), "");  // cores unknown
  EXPECT_EQ(replicas_warning(8, 2),
            "more replicas (8) than CPU cores (2): replicas are threads and will take turns on the cores; training "
            "runs, slower than with 2");
}

TEST(DistributionTest, EstimatesActivationMemoryAndWarnsWhenABatchWouldNotFit) {
  // flatten [784] + dense [10] + dense [10] per example; x 32 examples x 4 bytes x 3 copies.
  Job job = load_job(job_file(""));
  auto model = build_model(job);
  EXPECT_EQ(activation_bytes(*model, 32), 0) << "not built: no shapes yet";
  model->add(nn::Dense(10));
  model->build_for({1, 28, 28, 1});
  EXPECT_EQ(activation_bytes(*model, 32), (784 + 10 + 10) * 32 * 4 * 3);
  EXPECT_EQ(activation_bytes(*model, 64), 2 * activation_bytes(*model, 32));

  EXPECT_GT(available_memory_bytes(), 0);  // Linux: /proc/meminfo
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(batch_memory_warning(gib, 2 * gib, 64), "");
  EXPECT_EQ(batch_memory_warning(100 * gib, 0, 64), "") << "unknown memory: no warning";
  EXPECT_EQ(batch_memory_warning(12 * gib + gib / 4, 7 * gib + gib / 2, 4096),
            "global batch 4096: its activations need about 12.2 GiB (estimate) but 7.5 GiB of memory is available; "
            "expect swapping or an out-of-memory kill (lower batch_size)");
}

TEST(DistributionTest, LinearScalingAndGradualWarmup) {
  LrScalingSpec none;
  EXPECT_FLOAT_EQ(scaled_learning_rate(none, 0.1f, 1024, 100)(0), 0.1f);
  EXPECT_EQ(learning_rate_line(none, 0.1f, 1024, 100), "");

  // lr = base * global / base_batch: Goyal et al.'s 0.1 for 256 becomes 3.2 for 8192.
  LrScalingSpec linear{"linear", 256, 0};
  const optim::LearningRate scaled = scaled_learning_rate(linear, 0.1f, 8192, 100);
  EXPECT_TRUE(scaled.is_constant());
  EXPECT_FLOAT_EQ(scaled(0), 3.2f);
  EXPECT_FLOAT_EQ(scaled(100000), 3.2f);

  // Warmup over 2.5 epochs of 10 steps: 25 steps from the base rate to the scaled one, then constant.
  LrScalingSpec warm{.rule = "linear", .base_batch_size = 64, .warmup_epochs = 2.5};
  EXPECT_EQ(warmup_steps(warm, 10), 25);
  EXPECT_EQ(warmup_steps(warm, 0), 0);
  const optim::LearningRate lr = scaled_learning_rate(warm, 0.001f, 256, 10);  // 0.001 -> 0.004
  EXPECT_FLOAT_EQ(lr(0), 0.001f);
  EXPECT_NEAR(lr(5), 0.001f + 0.003f * 5 / 25, 1e-7);
  EXPECT_NEAR(lr(24), 0.001f + 0.003f * 24 / 25, 1e-7);
  EXPECT_FLOAT_EQ(lr(25), 0.004f);
  EXPECT_FLOAT_EQ(lr(1000), 0.004f);
  for (int64_t step = 1; step < 25; ++step) EXPECT_GT(lr(step), lr(step - 1)) << step;
  EXPECT_EQ(learning_rate_line(warm, 0.001f, 256, 10),
            "learning rate: 0.001 -> 0.004 (linear scaling: global batch 256 / base 64), warmup 2.5 epochs (25 steps) "
            "from 0.001");
}

TEST(DistributionTest, CompileModelTrainsAtTheScaledRate) {
  // sgd 0.1 at batch_size 256 with base 64: 0.4; warmup of 1 epoch of 8 steps starts at 0.1.
  Job job = load_job(job_file("lr_scaling: linear\n"));
  auto model = build_model(job);
  compile_model(job, *model);
  EXPECT_FLOAT_EQ(model->optimizer().learning_rate(), 0.4f);

  job = load_job(job_file("lr_scaling: linear\nwarmup_epochs: 1\n"));
  model = build_model(job);
  compile_model(job, *model, /*steps_per_epoch=*/8);
  EXPECT_FLOAT_EQ(model->optimizer().learning_rate(), 0.1f);
  EXPECT_FLOAT_EQ(make_optimizer(job)->learning_rate(), 0.1f);

  // The optimizer's default rate is the base when the job gives none (Adam: 0.001).
  const std::string path = job_file("lr_scaling: linear\n");
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(path) << std::regex_replace(text, std::regex("optimizer: \\{[^}]*\\}"), "optimizer: adam");
  job = load_job(path);
  model = build_model(job);
  compile_model(job, *model);
  EXPECT_FLOAT_EQ(model->optimizer().learning_rate(), 0.004f);
}

}  // namespace
}  // namespace strata::cli
