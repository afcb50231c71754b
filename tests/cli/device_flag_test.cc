// `strata train --device cpu|gpu|gpu:N` and the job file's `device:` key: where one_device, mirrored and
// multi_worker_mirrored train. Without a GPU (a CPU-only build, or no device visible) asking for one fails before any
// data is read, with exit status 1 and a line saying which is missing; a bad name, a strategy that cannot use a GPU,
// a GPU index for a strategy of several, or cross-device ops that do not fit the device are usage errors naming the
// flag or key. With a GPU visible the tiny job trains there under each of the three.
// Thread-safety: test-thread only.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "cli/cli_test_util.h"
#include "core/device_memory.h"

namespace strata::cli {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(DeviceFlagTest, AGpuThatIsNotThereFailsSayingWhy) {
  if (detail::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible";
  TinyJob t("device-missing");
  for (const std::string device : {"gpu", "gpu:0"}) {
    auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + t.job + " --device " + device + " --threads 1");
    EXPECT_EQ(rc, 1) << out;
    EXPECT_TRUE(has(out, "strata: error:")) << out;
    EXPECT_TRUE(has(out, "'/gpu:0'")) << out;
    EXPECT_TRUE(has(out, "needs a build of strata with CUDA") || has(out, "0 CUDA devices visible")) << out;
    EXPECT_FALSE(has(out, "Epoch 1/")) << out;  // nothing trained
  }
  for (const std::string strategy : {"mirrored", "multi_worker_mirrored"}) {
    auto [rc, out] =
        run(std::string(STRATA_BINARY) + " train " + t.job + " --device gpu --strategy " + strategy + " --threads 1");
    EXPECT_EQ(rc, 1) << out;
    EXPECT_TRUE(has(out, "strata: error:")) << out;
    EXPECT_TRUE(has(out, "Strategy: device '/gpu:0'")) << out;
    EXPECT_TRUE(has(out, "needs a build of strata with CUDA") || has(out, "0 CUDA devices visible")) << out;
    EXPECT_FALSE(has(out, "Epoch 1/")) << out;
  }
}

TEST(DeviceFlagTest, TheJobFileCanAskForTheGpuToo) {
  if (detail::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible";
  TinyJob t("device-key");
  const std::string job = write_job(t.s.dir, tiny_job(t.s.dir) + "device: gpu:3\n");
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + job + " --threads 1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(has(out, "'/gpu:3'")) << out;
  // --device cpu overrides the file.
  auto [rc2, out2] = run(std::string(STRATA_BINARY) + " train " + job + " --device cpu --epochs 1 --threads 1");
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_TRUE(has(out2, "test accuracy")) << out2;
}

TEST(DeviceFlagTest, BadNamesAndStrategiesAreUsageErrors) {
  TinyJob t("device-bad");
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + t.job + " --device tpu");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(has(out, "--device: unknown device 'tpu'; choose cpu, gpu or gpu:N")) << out;
  auto [rc2, out2] = run(std::string(STRATA_BINARY) + " train " + t.job + " --device gpu --strategy central_storage");
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_TRUE(has(out2, "--device gpu: only strategies one_device, mirrored and multi_worker_mirrored train on GPUs"))
      << out2;
  // Strategies of several replicas take "gpu", not one GPU by index.
  auto [rc4, out4] = run(std::string(STRATA_BINARY) + " train " + t.job + " --device gpu:1 --strategy mirrored");
  EXPECT_EQ(rc4, 1) << out4;
  EXPECT_TRUE(has(out4, "--device gpu:1: strategy mirrored takes device gpu")) << out4;
  // NCCL is for GPU replicas, and GPU replicas reduce with nothing else (checked before any GPU is looked for).
  auto [rc5, out5] =
      run(std::string(STRATA_BINARY) + " train " + t.job + " --strategy mirrored --cross-device-ops nccl");
  EXPECT_EQ(rc5, 1) << out5;
  EXPECT_TRUE(has(out5, "cross-device ops nccl: all-reduces across GPU replicas; add --device gpu")) << out5;
  auto [rc6, out6] =
      run(std::string(STRATA_BINARY) + " train " + t.job + " --strategy mirrored --device gpu --cross-device-ops ring");
  EXPECT_EQ(rc6, 1) << out6;
  EXPECT_TRUE(has(out6, "cross-device ops ring: GPU replicas all-reduce with nccl")) << out6;
  // (write_job replaces t.job: the runs on the tiny job come first.)
  const std::string job = write_job(t.s.dir, tiny_job(t.s.dir) + "strategy: central_storage\ndevice: gpu\n");
  auto [rc3, out3] = run(std::string(STRATA_BINARY) + " train " + job);
  EXPECT_EQ(rc3, 1) << out3;
  EXPECT_TRUE(has(out3, "device: gpu: only strategies one_device, mirrored and multi_worker_mirrored")) << out3;
  EXPECT_TRUE(has(out3, "job.yaml:")) << out3;  // the file and line
}

TEST(DeviceFlagTest, HelpListsTheFlag) {
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train --help");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(has(out, "--device")) << out;
  EXPECT_TRUE(has(out, "gpu:N")) << out;
}

TEST(DeviceFlagTest, TrainsOnTheGpuWhenThereIsOne) {
  if (detail::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  TinyJob t("device-gpu");
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + t.job + " --device gpu");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(has(out, "OneDeviceStrategy, 1 replica")) << out;
  EXPECT_TRUE(has(out, "on cuda:0")) << out;
  std::smatch m;
  const std::string line = last_line(out);
  ASSERT_TRUE(std::regex_match(line, m, std::regex(R"(test loss ([0-9.]+) - test accuracy ([0-9.]+))"))) << out;
  EXPECT_GT(std::stod(m[2]), 0.9) << out;
}

// Mirrored over every visible GPU (NCCL), and a single multi-worker-mirrored worker on its GPU (an NCCL group of one).
TEST(DeviceFlagTest, MirroredAndMultiWorkerTrainOnTheGpus) {
  if (detail::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  TinyJob t("device-gpu-mirrored");
  const int gpus = detail::cuda_device_count();
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + t.job + " --device gpu --strategy mirrored");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(has(out, "MirroredStrategy, " + std::to_string(gpus) + (gpus == 1 ? " replica" : " replicas"))) << out;
  EXPECT_TRUE(has(out, "on cuda:0, nccl all-reduce")) << out;
  std::smatch m;
  std::string line = last_line(out);
  ASSERT_TRUE(std::regex_match(line, m, std::regex(R"(test loss ([0-9.]+) - test accuracy ([0-9.]+))"))) << out;
  EXPECT_GT(std::stod(m[2]), 0.9) << out;
  auto [rc2, out2] =
      run(std::string(STRATA_BINARY) + " train " + t.job + " --device gpu --strategy multi_worker_mirrored");
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_TRUE(has(out2, "MultiWorkerMirroredStrategy, 1 replica")) << out2;
  EXPECT_TRUE(has(out2, "on cuda:0")) << out2;
  EXPECT_TRUE(has(out2, "worker 0 of 1 (nccl)")) << out2;
  line = last_line(out2);
  ASSERT_TRUE(std::regex_match(line, m, std::regex(R"(test loss ([0-9.]+) - test accuracy ([0-9.]+))"))) << out2;
  EXPECT_GT(std::stod(m[2]), 0.9) << out2;
}

}  // namespace
}  // namespace strata::cli
