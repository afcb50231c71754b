// The device strings strategies accept: OneDeviceStrategy and MirroredStrategy take "/gpu:N" only in a CUDA build
// with GPU N visible, and say which of the two is missing (how many GPUs are visible); Mirrored refuses a mix of CPU
// and GPU replicas naming both, and cross-device ops that do not fit the replicas' device; central storage refuses
// GPUs. Runs in every build; the GPU side is tested in tests/cuda/train_step_test.cc and mirrored_gpu_test.cc.
// Thread-safety: test-thread only.
#include <gtest/gtest.h>

#include <string>

#include "core/device_memory.h"
#include "distribute/devices.h"
#include "strata/distribute/strategies.h"
#include "test_util.h"

namespace strata::distribute {
namespace {

bool has(const std::string& message, const std::string& part) { return message.find(part) != std::string::npos; }

TEST(GpuDevicesTest, OneDeviceOnAGpuThatIsNotThereSaysWhy) {
  if (strata::detail::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible";
  const std::string msg = test::message_of<Unavailable>([] { OneDeviceStrategy("/gpu:0"); });
  EXPECT_TRUE(has(msg, "/gpu:0")) << msg;
#ifdef STRATA_WITH_CUDA
  EXPECT_TRUE(has(msg, "0 CUDA devices visible")) << msg;
#else
  EXPECT_TRUE(has(msg, "needs a build of strata with CUDA")) << msg;
#endif
}

TEST(GpuDevicesTest, AGpuIndexPastTheVisibleOnesIsUnavailable) {
  const std::string msg = test::message_of<Unavailable>([] { OneDeviceStrategy("/gpu:4096"); });
  EXPECT_TRUE(has(msg, "/gpu:4096")) << msg;
  EXPECT_TRUE(has(msg, "CUDA")) << msg;
}

TEST(GpuDevicesTest, AMalformedGpuIndexIsInvalid) {
  const std::string msg = test::message_of<InvalidArgument>([] { OneDeviceStrategy("/gpu:x"); });
  EXPECT_TRUE(has(msg, "needs an index")) << msg;
  EXPECT_THROW(OneDeviceStrategy("/gpu:"), InvalidArgument);
  EXPECT_THROW(OneDeviceStrategy("/npu:0"), InvalidArgument);
}

TEST(GpuDevicesTest, CentralStorageStaysOnTheCpu) {
  const std::string msg = test::message_of<Unavailable>([] { CentralStorageStrategy({"/gpu:0", "/gpu:1"}); });
  EXPECT_TRUE(has(msg, "CPU replicas only")) << msg;
}

TEST(GpuDevicesTest, MirroredOnGpusThatAreNotThereSaysWhy) {
  const int visible = strata::detail::cuda_device_count();
  // More GPUs than there are: the first missing one is named, with the count.
  const std::string missing = "/gpu:" + std::to_string(visible);
  std::vector<std::string> devices;
  for (int i = 0; i <= visible; ++i) devices.push_back("/gpu:" + std::to_string(i));
  const std::string msg = test::message_of<Unavailable>([&] { MirroredStrategy{devices}; });
  EXPECT_TRUE(has(msg, "MirroredStrategy")) << msg;
  EXPECT_TRUE(has(msg, missing)) << msg;
#ifdef STRATA_WITH_CUDA
  EXPECT_TRUE(has(msg, std::to_string(visible) + " CUDA device")) << msg;
#else
  EXPECT_TRUE(has(msg, "needs a build of strata with CUDA")) << msg;
#endif
}

TEST(GpuDevicesTest, MirroredRefusesMixingTheCpuAndAGpuNamingBoth) {
  // InvalidArgument in every build (the mix is checked before whether the GPU is there).
  const std::string msg = test::message_of<InvalidArgument>([] { MirroredStrategy({"/cpu:0", "/gpu:0"}); });
  EXPECT_TRUE(has(msg, "'/cpu:0'")) << msg;
  EXPECT_TRUE(has(msg, "'/gpu:0'")) << msg;
  EXPECT_TRUE(has(msg, "mix the CPU and a GPU")) << msg;
  EXPECT_THROW(MirroredStrategy({"/gpu:1", "/cpu:0"}), InvalidArgument);
  // A single list stays a valid one: the CPU replicas work as before.
  MirroredStrategy cpus({"/cpu:0", "/cpu:1"});
  EXPECT_FALSE(cpus.cross_device_ops().nccl);
}

TEST(GpuDevicesTest, NcclCrossDeviceOpsNeedGpuReplicas) {
  EXPECT_TRUE(CrossDeviceOps::from_name("nccl").nccl);
  EXPECT_FALSE(CrossDeviceOps::from_name("ring").nccl);
  const std::string msg = test::message_of<InvalidArgument>([] {
    MirroredStrategy({"/cpu:0", "/cpu:1"}, {.cross_device_ops = CrossDeviceOps::from_name("nccl")});
  });
  EXPECT_TRUE(has(msg, "'nccl' needs GPU replicas")) << msg;
  EXPECT_TRUE(has(msg, "'/cpu:0'")) << msg;
}

TEST(GpuDevicesTest, GpuReplicasRefuseRingAndTree) {
  // Checked before the GPUs are looked for, so in every build.
  for (const char* ops : {"ring", "tree"}) {
    const std::string msg = test::message_of<InvalidArgument>(
        [&] { MirroredStrategy({"/gpu:0"}, {.cross_device_ops = CrossDeviceOps::from_name(ops)}); });
    EXPECT_TRUE(has(msg, "all-reduce with cross-device ops 'nccl'")) << msg;
  }
}

TEST(GpuDevicesTest, ReplicaDevicesAreParsed) {
  EXPECT_EQ(detail::device_of("/gpu:3"), Device::cuda(3));
  EXPECT_EQ(detail::device_of("/GPU:1"), Device::cuda(1));
  EXPECT_EQ(detail::device_of("/cpu:2"), Device::cpu());
  OneDeviceStrategy one("/cpu:0");
  EXPECT_EQ(one.replica_device(0), Device::cpu());
  EXPECT_THROW(one.replica_device(1), InvalidArgument);
  MirroredStrategy two({"/cpu:0", "/cpu:1"});
  EXPECT_EQ(two.replica_device(1), Device::cpu());
}

}  // namespace
}  // namespace strata::distribute
