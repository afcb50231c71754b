// Tensors on a GPU: copies there and back keep every byte, and placement errors name both devices.
#include <gtest/gtest.h>

#include "cuda/cuda_test_util.h"
#include "kernels/kernels.h"
#include "strata/error.h"

namespace strata {
namespace {

TEST(GpuTensorTest, ARoundTripThroughTheGpuKeepsEveryValue) {
  STRATA_REQUIRE_GPU();
  const Tensor host = testing::random_host({3, 1000}, 1);
  const Tensor on_gpu = host.to(testing::gpu());
  EXPECT_EQ(on_gpu.device(), testing::gpu());
  const Tensor back = on_gpu.clone().to(Device::cpu());
  EXPECT_EQ(back.to_vector<float>(), host.to_vector<float>());
}

TEST(GpuTensorTest, MixingDevicesNamesBoth) {
  STRATA_REQUIRE_GPU();
  const Tensor a = testing::random_host({2, 2}, 1);
  const Tensor b = a.to(testing::gpu());
  try {
    kernels::add(a, b);
    FAIL() << "adding a host and a GPU tensor must fail";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

TEST(GpuTensorTest, WithoutAGpuAskingForOneIsAClearError) {
  if (detail::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible";
  try {
    Tensor::zeros({2}, DType::kFloat32, Device::cuda(0));
    FAIL() << "a tensor on cuda:0 without a GPU must fail";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
