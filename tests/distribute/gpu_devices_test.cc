// The device strings strategies accept: OneDeviceStrategy takes "/gpu:N" only in a CUDA build with GPU N visible,
// and says which of the two is missing; the strategies of several replicas refuse GPUs, saying so. Runs in every
// build; the GPU side of OneDeviceStrategy is tested in tests/cuda/train_step_test.cc.
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

TEST(GpuDevicesTest, SeveralReplicasStayOnTheCpu) {
  const std::string msg = test::message_of<Unavailable>([] { MirroredStrategy({"/gpu:0"}); });
  EXPECT_TRUE(has(msg, "CPU replicas only")) << msg;
  EXPECT_THROW(CentralStorageStrategy({"/gpu:0", "/gpu:1"}), Unavailable);
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
