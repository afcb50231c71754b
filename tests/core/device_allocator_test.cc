// The device allocator's bookkeeping and its out-of-memory error, on the host: a fake device whose memory is host
// memory with a fixed capacity and a cache of freed blocks, as a CUDA memory pool keeps them (the real backend,
// cudaMallocAsync on the device's pool, is checked by tests/cuda/device_memory_test.cc on a GPU).
#include "core/device_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "strata/device_stats.h"
#include "strata/error.h"

namespace strata::detail {
namespace {

// Host memory limited to `capacity` bytes; freed blocks stay reserved (cached for a request of the same size) until
// release_cached, as with a pool whose release threshold is infinite.
class FakePool : public MemoryBackend {
 public:
  explicit FakePool(size_t capacity) : capacity_(capacity) {}
  ~FakePool() override {
    release_cached();
  }
  void* allocate(size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cached_.find(nbytes);
    if (it != cached_.end()) {
      void* p = it->second;
      cached_.erase(it);
      return p;
    }
    if (reserved_ + nbytes > capacity_) return nullptr;
    reserved_ += nbytes;
    return std::malloc(nbytes);
  }
  void deallocate(void* p, size_t nbytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    cached_.emplace(nbytes, p);
  }
  size_t reserved() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return reserved_;
  }
  std::optional<DeviceMemory> device_memory() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return DeviceMemory{capacity_ - reserved_, capacity_};
  }
  void release_cached() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [n, p] : cached_) {
      reserved_ -= n;
      std::free(p);
    }
    cached_.clear();
    ++releases;
  }
  int releases = 0;

 private:
  mutable std::mutex mu_;
  size_t capacity_;
  size_t reserved_ = 0;
  std::multimap<size_t, void*> cached_;
};

constexpr size_t kMiB = size_t{1} << 20;

TEST(DeviceAllocatorTest, CountsBytesAllocationsAndThePeak) {
  DeviceAllocator a(Device::cuda(0), std::make_unique<FakePool>(64 * kMiB));
  void* x = a.allocate(10 * kMiB);
  void* y = a.allocate(3 * kMiB);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.in_use, 13 * kMiB);
  EXPECT_EQ(s.peak, 13 * kMiB);
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.total_allocations, 2);
  EXPECT_EQ(s.reserved, 13 * kMiB);
  a.deallocate(x, 10 * kMiB);
  s = a.stats();
  EXPECT_EQ(s.in_use, 3 * kMiB);
  EXPECT_EQ(s.peak, 13 * kMiB) << "the peak stays after a free";
  EXPECT_EQ(s.allocations, 1);
  EXPECT_EQ(s.total_allocations, 2);
  EXPECT_EQ(s.reserved, 13 * kMiB) << "a freed block stays cached in the pool";
  a.reset_peak();
  EXPECT_EQ(a.stats().peak, 3 * kMiB);
  void* z = a.allocate(10 * kMiB);  // served from the cache: nothing new reserved
  EXPECT_EQ(a.stats().reserved, 13 * kMiB);
  EXPECT_EQ(a.stats().peak, 13 * kMiB);
  a.deallocate(y, 3 * kMiB);
  a.deallocate(z, 10 * kMiB);
  EXPECT_EQ(a.stats().in_use, 0u);
  EXPECT_EQ(a.stats().allocations, 0);
  EXPECT_EQ(a.stats().total_allocations, 3);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0u);
}

TEST(DeviceAllocatorTest, AnEmptyRequestGetsItsOwnBlockAndCountsNoBytes) {
  DeviceAllocator a(Device::cuda(1), std::make_unique<FakePool>(kMiB));
  void* p = a.allocate(0);
  void* q = a.allocate(0);
  EXPECT_NE(p, nullptr);
  EXPECT_NE(p, q);
  EXPECT_EQ(a.stats().in_use, 0u);
  EXPECT_EQ(a.stats().allocations, 2);
  a.deallocate(p, 0);
  a.deallocate(q, 0);
  a.deallocate(nullptr, 0);
  EXPECT_EQ(a.stats().allocations, 0);
}

TEST(DeviceAllocatorTest, CachedBlocksAreReleasedBeforeGivingUp) {
  auto pool = std::make_unique<FakePool>(16 * kMiB);
  FakePool* raw = pool.get();
  DeviceAllocator a(Device::cuda(0), std::move(pool));
  a.deallocate(a.allocate(12 * kMiB), 12 * kMiB);  // 12 MiB now cached, 4 MiB left
  void* p = a.allocate(8 * kMiB);                   // fits only once the cache is released
  EXPECT_EQ(raw->releases, 1);
  EXPECT_EQ(a.stats().reserved, 8 * kMiB);
  a.deallocate(p, 8 * kMiB);
}

TEST(DeviceAllocatorTest, OutOfMemoryNamesTheDeviceTheRequestAndWhatIsInUseAndFree) {
  DeviceAllocator a(Device::cuda(3), std::make_unique<FakePool>(16 * kMiB));
  void* p = a.allocate(10 * kMiB);
  try {
    a.allocate(8 * kMiB);
    FAIL() << "8 MiB more than 16 MiB holds must fail";
  } catch (const OutOfMemory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda:3 is out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("asked for 8.00 MiB (8388608 bytes)"), std::string::npos) << m;
    EXPECT_NE(m.find("strata has 10.00 MiB in 1 allocation,"), std::string::npos) << m;
    EXPECT_NE(m.find("its pool reserves 10.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("the device has 6.00 MiB free of 16.00 MiB"), std::string::npos) << m;
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << "an OutOfMemory is an Unavailable";
  }
  // The failure changed no count.
  EXPECT_EQ(a.stats().in_use, 10 * kMiB);
  EXPECT_EQ(a.stats().allocations, 1);
  EXPECT_EQ(a.stats().total_allocations, 1);
  a.deallocate(p, 10 * kMiB);
}

TEST(DeviceAllocatorTest, ThreadsAllocatingAtOnceLeaveExactCounts) {
  DeviceAllocator a(Device::cuda(0), std::make_unique<FakePool>(1024 * kMiB));
  constexpr int kThreads = 4, kRounds = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&a, t] {
      for (int i = 0; i < kRounds; ++i) {
        const size_t n = 64 * static_cast<size_t>(1 + (i + t) % 7);
        void* p = a.allocate(n);
        a.deallocate(p, n);
      }
    });
  }
  for (auto& th : threads) th.join();
  const MemoryStats s = a.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.allocations, 0);
  EXPECT_EQ(s.total_allocations, kThreads * kRounds);
  EXPECT_GE(s.peak, 64u * 7);
  EXPECT_LE(s.peak, size_t{kThreads} * 64 * 7);
}

TEST(DeviceAllocatorTest, FormatsBytesForPeople) {
  EXPECT_EQ(format_bytes(0), "0 bytes");
  EXPECT_EQ(format_bytes(1), "1 byte");
  EXPECT_EQ(format_bytes(1023), "1023 bytes");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(size_t{80} << 30), "80.00 GiB");
}

TEST(DeviceStatsTest, TheHostIsNotCountedAndAMissingDeviceSaysWhy) {
  EXPECT_THROW(memory_stats(Device::cpu()), InvalidArgument);
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: tests/cuda/device_memory_test.cc covers it";
  try {
    memory_stats(Device::cuda(0));
    FAIL() << "memory_stats of a GPU that is not there must fail";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda_device_info(0), Unavailable);
  if (!built_with_cuda()) {
    EXPECT_THROW(cuda_versions(), Unavailable);
    EXPECT_EQ(cuda_unavailable_reason(), "");
  }
}

}  // namespace
}  // namespace strata::detail
