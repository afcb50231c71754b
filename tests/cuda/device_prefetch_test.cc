// Batches staged on the GPU through pinned blocks on the copy stream (distribute/device_prefetch.h with CUDA's copy
// queue, core/cuda/copy_queue_cuda.cc): many batches of changing sizes through two blocks arrive with their bytes
// while kernels of earlier "steps" run on the compute stream, blocks go back to the pinned cache, and a component on
// another GPU is refused. Without a GPU each test says so and skips; the host side is tests/distribute's.
#include "distribute/device_prefetch.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/copy_queue.h"
#include "core/device_memory.h"
#include "cuda/cuda_test_util.h"
#include "strata/error.h"
#include "strata/ops.h"
#include "strata/variable.h"

namespace strata {
namespace {

data::Element host_batch(int id, int64_t rows) {
  return data::Element({Tensor::full({rows, 5}, static_cast<double>(id)),
                        Tensor::full({rows}, static_cast<double>(1000 + id), DType::kInt64)});
}

TEST(GpuDevicePrefetchTest, BatchesOfChangingSizesArriveWithTheirBytesBesideTheSteps) {
  STRATA_REQUIRE_GPU();
  const Device gpu = testing::gpu();
  std::vector<data::Element> batches;
  for (int id = 0; id < 40; ++id) batches.push_back(host_batch(id, 1 + (id * 37) % 3000));
  const Tensor big = Tensor::ones({2048, 2048}, DType::kFloat32, gpu);
  std::vector<float> firsts;
  std::vector<int64_t> labels;
  {
    distribute::DevicePrefetcher prefetch(detail::make_device_copy_queue(gpu));
    distribute::run_prefetched(
        prefetch, batches.size(), [&](size_t k) -> const data::Element& { return batches[k]; },
        [&](size_t k, const data::Element& b) {
          ASSERT_EQ(b[0].device(), gpu);
          ASSERT_EQ(b[0].shape(), batches[k][0].shape());
          // A step: kernels on the compute stream that read the batch after a long product.
          const Tensor busy = matmul(Variable(big), Variable(big)).value();
          const Tensor s = add(Variable(b[0]), Variable(Tensor::zeros(b[0].shape(), DType::kFloat32, gpu))).value();
          const std::vector<float> v = s.to(Device::cpu()).to_vector<float>();
          firsts.push_back(v.back());
          labels.push_back(b[1].to(Device::cpu()).to_vector<int64_t>().front());
          (void)busy;
        });
  }
  ASSERT_EQ(firsts.size(), batches.size());
  for (size_t k = 0; k < batches.size(); ++k) {
    EXPECT_EQ(firsts[k], static_cast<float>(k)) << "batch " << k;
    EXPECT_EQ(labels[k], static_cast<int64_t>(1000 + k)) << "batch " << k;
  }
  EXPECT_GT(detail::cached_pinned_bytes(), 0u) << "the staging blocks went back to the pinned cache";
}

TEST(GpuDevicePrefetchTest, AComponentOnAnotherGpuIsRefused) {
  STRATA_REQUIRE_GPU();
  if (detail::cuda_device_count() < 2) GTEST_SKIP() << "one GPU: no other device to refuse";
  distribute::DevicePrefetcher prefetch(detail::make_device_copy_queue(testing::gpu()));
  EXPECT_THROW(prefetch.stage(data::Element({Tensor::zeros({2}, DType::kFloat32, Device::cuda(1))})), InvalidArgument);
}

TEST(GpuDevicePrefetchTest, TheHostHasNoCopyQueueNorHasAMissingGpu) {
  EXPECT_THROW(detail::make_device_copy_queue(Device::cpu()), InvalidArgument);
  const int gpus = detail::cuda_device_count();
  EXPECT_THROW(detail::make_device_copy_queue(Device::cuda(gpus)), Unavailable) << "cuda:" << gpus << " is not there";
}

}  // namespace
}  // namespace strata
