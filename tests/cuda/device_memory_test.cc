// GPU memory: the allocator's counts go up and down with tensors, freed blocks stay cached in the pool, a request
// the device cannot hold is an OutOfMemory naming it; fill_, zeros/ones/full and to(dtype) on the device give the
// host's values bit for bit; pinned host tensors copy to the GPU without waiting and their blocks are not reused
// under a queued copy; cuda::Event times work. Without a GPU each says so and skips, and what needs none runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/device_memory.h"
#include "cuda/cuda_test_util.h"
#include "strata/device_stats.h"
#include "strata/error.h"
#ifdef STRATA_WITH_CUDA
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_event.h"
#endif

namespace strata {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The raw bytes of a host tensor.
std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  std::vector<uint8_t> out(h.nbytes());
  if (!out.empty()) std::memcpy(out.data(), h.raw_data(), out.size());
  return out;
}

TEST(GpuMemoryTest, CountsGoUpAndDownWithTensorsAndThePeakStays) {
  STRATA_REQUIRE_GPU();
  const Device gpu = testing::gpu();
  reset_peak_memory_stats(gpu);
  const MemoryStats before = memory_stats(gpu);
  {
    const Tensor a = Tensor::empty({4 * 1024 * 1024 / 4}, DType::kFloat32, gpu);  // 4 MiB
    const Tensor b = Tensor::empty({1024}, DType::kInt64, gpu);                    // 8 KiB
    const MemoryStats s = memory_stats(gpu);
    EXPECT_EQ(s.in_use, before.in_use + 4 * kMiB + 8192);
    EXPECT_EQ(s.allocations, before.allocations + 2);
    EXPECT_EQ(s.total_allocations, before.total_allocations + 2);
    EXPECT_EQ(s.peak, s.in_use);
    EXPECT_GE(s.reserved, s.in_use);
  }
  const MemoryStats after = memory_stats(gpu);
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.peak, before.in_use + 4 * kMiB + 8192) << "the peak stays after the tensors are gone";
  reset_peak_memory_stats(gpu);
  EXPECT_EQ(memory_stats(gpu).peak, before.in_use);
}

TEST(GpuMemoryTest, FreedBlocksStayCachedInThePoolUntilEmptyCache) {
  STRATA_REQUIRE_GPU();
  const Device gpu = testing::gpu();
  { const Tensor big = Tensor::empty({64 * kMiB}, DType::kUInt8, gpu); }
  const size_t cached = memory_stats(gpu).reserved;
  EXPECT_GE(cached, 64 * kMiB) << "a freed block stays in the pool (release threshold: never)";
  { const Tensor again = Tensor::empty({64 * kMiB}, DType::kUInt8, gpu); }
  EXPECT_EQ(memory_stats(gpu).reserved, cached) << "the second 64 MiB reuse the first's block";
  empty_cache(gpu);
  EXPECT_LT(memory_stats(gpu).reserved, cached) << "empty_cache gives the cached block back to the driver";
}

TEST(GpuMemoryTest, ARequestTheDeviceCannotHoldNamesTheDeviceAndWhatIsFree) {
  STRATA_REQUIRE_GPU();
  const Device gpu = testing::gpu();
  const CudaDeviceInfo info = cuda_device_info(0);
  const Tensor keep = Tensor::zeros({1024}, DType::kFloat32, gpu);
  const int64_t absurd = static_cast<int64_t>(info.total_memory) * 2;
  try {
    Tensor::empty({absurd}, DType::kUInt8, gpu);
    FAIL() << "twice the device's memory must not fit";
  } catch (const OutOfMemory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda:0 is out of memory: asked for"), std::string::npos) << m;
    EXPECT_NE(m.find("(" + std::to_string(absurd) + " bytes)"), std::string::npos) << m;
    EXPECT_NE(m.find("strata has "), std::string::npos) << m;
    EXPECT_NE(m.find(" free of "), std::string::npos) << m;
  }
  // The failure is not sticky: the device still works.
  EXPECT_EQ(Tensor::ones({3}, DType::kFloat32, gpu).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(keep.to_vector<float>(), std::vector<float>(1024, 0.0f));
}

TEST(GpuMemoryTest, FillZerosOnesAndFullOnTheDeviceMatchTheHost) {
  STRATA_REQUIRE_GPU();
  const Device gpu = testing::gpu();
  for (DType dtype : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_EQ(bytes_of(Tensor::zeros({37, 3}, dtype, gpu)), bytes_of(Tensor::zeros({37, 3}, dtype)));
    EXPECT_EQ(bytes_of(Tensor::ones({5000}, dtype, gpu)), bytes_of(Tensor::ones({5000}, dtype)));
    EXPECT_EQ(bytes_of(Tensor::full({3, 1001}, 3.7, dtype, gpu)), bytes_of(Tensor::full({3, 1001}, 3.7, dtype)));
    EXPECT_EQ(bytes_of(Tensor::full({7}, -2.0, dtype, gpu)), bytes_of(Tensor::full({7}, -2.0, dtype)));
  }
  // fill_ of a view writes its rows only.
  Tensor t = Tensor::zeros({4, 3}, DType::kFloat32, gpu);
  Tensor rows = t.slice(1, 3);
  rows.fill_(5.0);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 0, 0, 5, 5, 5, 5, 5, 5, 0, 0, 0}));
  EXPECT_EQ(Tensor::full({}, 1e10, DType::kInt64, gpu).item<int64_t>(), int64_t{10000000000});
}

TEST(GpuMemoryTest, DtypeConversionOnTheDeviceMatchesTheHostBitForBit) {
  STRATA_REQUIRE_GPU();
  const Device gpu = testing::gpu();
  Tensor host = testing::random_host({4097}, 7, -1e4f, 1e4f);
  float* p = host.data<float>();
  // The edges of bfloat16's rounding: NaN, infinities, signed zero, a tie to even, the largest finite float.
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.0f, 1.00390625f, 1.01171875f,
                            std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()};
  std::memcpy(p, specials, sizeof specials);
  const Tensor on_gpu = host.to(gpu);
  for (DType to : {DType::kBFloat16, DType::kInt32, DType::kInt64, DType::kFloat32}) {
    SCOPED_TRACE(dtype_name(to));
    Tensor want = host.to(to), got = on_gpu.to(to);
    EXPECT_EQ(got.device(), gpu);
    if (to == DType::kInt32 || to == DType::kInt64) {  // NaN and infinities have no integer: compare the rest
      want = want.slice(8, 4097);
      got = got.slice(8, 4097);
    }
    EXPECT_EQ(bytes_of(got), bytes_of(want));
  }
  const Tensor bf = on_gpu.to(DType::kBFloat16);
  EXPECT_EQ(bytes_of(bf.to(DType::kFloat32)), bytes_of(host.to(DType::kBFloat16).to(DType::kFloat32)));
  const Tensor small = Tensor::from_vector<int32_t>({-3, 0, 7, 255}).to(gpu);
  EXPECT_EQ(bytes_of(small.to(DType::kUInt8)), bytes_of(Tensor::from_vector<int32_t>({-3, 0, 7, 255}).to(DType::kUInt8)));
  EXPECT_EQ(small.to(DType::kFloat32).to_vector<float>(), (std::vector<float>{-3, 0, 7, 255}));
}

TEST(GpuMemoryTest, HostOnlyOperationsNameTheDevice) {
  STRATA_REQUIRE_GPU();
  const Tensor t = Tensor::zeros({2, 3}, DType::kFloat32, testing::gpu());
  try {
    t.transpose();
    FAIL() << "transpose of a GPU tensor is host-only here";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  try {
    t.pin_memory();
    FAIL() << "a GPU tensor cannot be pinned";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(t.is_pinned());
  EXPECT_NE(t.str().find("on cuda:0 {0, 0, 0"), std::string::npos) << t.str();
}

TEST(GpuMemoryTest, PinnedTensorsRoundTripAndCopyWithoutWaiting) {
  STRATA_REQUIRE_GPU();
  const Device gpu = testing::gpu();
  const Tensor host = testing::random_host({257, 31}, 3);
  const Tensor pinned = host.pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_FALSE(host.is_pinned());
  EXPECT_TRUE(pinned.pin_memory().shares_storage_with(pinned)) << "pinning a pinned tensor is a no-op";
  EXPECT_TRUE(pinned.slice(3, 5).is_pinned());
  EXPECT_EQ(pinned.device(), Device::cpu());
  EXPECT_EQ(pinned.to_vector<float>(), host.to_vector<float>());
  const Tensor on_gpu = pinned.to(gpu, /*non_blocking=*/true);
  EXPECT_EQ(on_gpu.to(Device::cpu()).to_vector<float>(), host.to_vector<float>());
  // A view copies from inside its block.
  EXPECT_EQ(pinned.slice(100, 200).to(gpu, true).to_vector<float>(), host.slice(100, 200).to_vector<float>());
}

TEST(GpuMemoryTest, APinnedBlockIsNotReusedUnderAQueuedCopy) {
  STRATA_REQUIRE_GPU();
  const Device gpu = testing::gpu();
  // Queue a long kernel first, so that the copies below wait behind it while their pinned batches are dropped and
  // new ones of the same size are made: each new batch must get a different block until its copy ran.
  Tensor busy = Tensor::zeros({256 * kMiB / 4}, DType::kFloat32, gpu);
  for (int i = 0; i < 200; ++i) busy.fill_(i);  // ~20 ms of writes on an H100
  std::vector<Tensor> copies;
  for (int i = 0; i < 16; ++i) {
    Tensor batch = Tensor::full({1024, 64}, i, DType::kFloat32).pin_memory();
    copies.push_back(batch.to(gpu, /*non_blocking=*/true));
  }  // each pinned batch is freed here, with its copy possibly still queued
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(copies[i].to_vector<float>(), std::vector<float>(1024 * 64, static_cast<float>(i))) << "batch " << i;
  EXPECT_GT(detail::cached_pinned_bytes(), 0u) << "freed pinned blocks stay cached for the next batch";
  detail::release_cached_pinned_blocks();
  EXPECT_EQ(detail::cached_pinned_bytes(), 0u) << "every copy ran, so every cached block can go";
}

#ifdef STRATA_WITH_CUDA
TEST(GpuMemoryTest, EventsTimeTheWorkBetweenThem) {
  STRATA_REQUIRE_GPU();
  detail::cuda::Event start(0), stop(0);
  EXPECT_TRUE(stop.done()) << "an event never recorded is done";
  Tensor t = Tensor::empty({64 * kMiB / 4}, DType::kFloat32, testing::gpu());
  start.record();
  for (int i = 0; i < 4; ++i) t.fill_(i + 1);
  stop.record();
  const float ms = start.elapsed_ms(stop);
  EXPECT_TRUE(stop.done());
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 10000.0f);
  detail::cuda::Event moved = std::move(stop);
  EXPECT_TRUE(moved.done());
  EXPECT_THROW(stop.record(), InvalidArgument);
  detail::cuda::Event untimed(0, /*timing=*/false);
  untimed.record();
  untimed.synchronize();
  EXPECT_THROW(start.elapsed_ms(untimed), Unavailable) << "an event without timing cannot be timed";
}
#endif

TEST(GpuMemoryTest, WithoutAGpuPinningAndStatsAreClearErrors) {
  if (detail::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible";
  const Tensor host = Tensor::ones({4});
  EXPECT_THROW(host.pin_memory(), Unavailable);
  EXPECT_FALSE(host.is_pinned());
  EXPECT_THROW(memory_stats(Device::cuda(0)), Unavailable);
  EXPECT_THROW(memory_stats(Device::cpu()), InvalidArgument);
  EXPECT_THROW(Tensor::ones({2}, DType::kFloat32, Device::cuda(0)), Unavailable);
}

TEST(GpuMemoryTest, AMissingDeviceIsNamed) {
  if (!built_with_cuda()) GTEST_SKIP() << "this build lacks CUDA: no device exists";
  const int n = detail::cuda_device_count();
  try {
    memory_stats(Device::cuda(n));
    FAIL() << "cuda:" << n << " does not exist";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:" + std::to_string(n) + " does not exist"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
