// `strata train --device cpu|gpu|gpu:N` and the job file's `device:` key: where one_device trains. Without a GPU (a
// CPU-only build, or no device visible) asking for one fails before any data is read, with exit status 1 and a line
// saying which is missing; a bad name or a strategy that cannot use a GPU is a usage error naming the flag or key.
// With a GPU visible the tiny job trains there.
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
  auto [rc2, out2] = run(std::string(STRATA_BINARY) + " train " + t.job + " --device gpu --strategy mirrored");
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_TRUE(has(out2, "only strategy one_device trains on a GPU")) << out2;
  const std::string job = write_job(t.s.dir, tiny_job(t.s.dir) + "strategy: central_storage\ndevice: gpu\n");
  auto [rc3, out3] = run(std::string(STRATA_BINARY) + " train " + job);
  EXPECT_EQ(rc3, 1) << out3;
  EXPECT_TRUE(has(out3, "device: gpu: only strategy: one_device trains on a GPU")) << out3;
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

}  // namespace
}  // namespace strata::cli
