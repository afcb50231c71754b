// RecycledBuffer: large buffers go back to a bounded process-wide cache and are handed out again;
// small ones are plain allocations; grow keeps the bytes asked for; concurrent owners never share one.
#include "data/recycled_buffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

namespace strata::data::detail {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(RecycledBufferTest, ALargeBufferIsHandedOutAgainAfterItsRelease) {
  RecycledBuffer first(5 * kMiB);
  ASSERT_TRUE(first);
  EXPECT_GE(first.capacity(), 5 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first.data()) % (2 * kMiB), 0u);  // huge-page aligned
  char* const p = first.data();
  const size_t kept_before = recycled_bytes_kept();
  first.release();
  EXPECT_FALSE(first);
  EXPECT_EQ(recycled_bytes_kept(), kept_before + 6 * kMiB);  // rounded to 2 MiB
  RecycledBuffer again(4 * kMiB);  // a smaller request fits in it
  EXPECT_EQ(again.data(), p);
  EXPECT_EQ(recycled_bytes_kept(), kept_before);
}

TEST(RecycledBufferTest, TheSmallestBufferThatFitsIsChosen) {
  RecycledBuffer big(40 * kMiB), small(4 * kMiB);
  char* const small_data = small.data();
  char* const big_data = big.data();
  big.release();
  small.release();
  RecycledBuffer want(3 * kMiB);
  EXPECT_EQ(want.data(), small_data);
  RecycledBuffer more(10 * kMiB);
  EXPECT_EQ(more.data(), big_data);
}

TEST(RecycledBufferTest, SmallBuffersAreNotKept) {
  const size_t kept_before = recycled_bytes_kept();
  RecycledBuffer small(1000);
  ASSERT_TRUE(small);
  EXPECT_GE(small.capacity(), 1000u);
  small.release();
  EXPECT_EQ(recycled_bytes_kept(), kept_before);
}

TEST(RecycledBufferTest, TheCacheIsBounded) {
  std::vector<RecycledBuffer> many;
  for (size_t i = 0; i < kMaxKeptBuffers + 4; ++i) many.emplace_back(2 * kMiB);
  many.clear();  // releases them all
  EXPECT_LE(recycled_bytes_kept(), kMaxKeptBuffers * 2 * kMiB);
  for (size_t i = 0; i < 3; ++i) many.emplace_back(kMaxKeptBytes / 2);
  many.clear();
  EXPECT_LE(recycled_bytes_kept(), kMaxKeptBytes);
  const size_t kept_before = recycled_bytes_kept();
  RecycledBuffer huge(kMaxKeptBytes + 1);  // larger than the whole cache: freed, never kept
  huge.release();
  EXPECT_EQ(recycled_bytes_kept(), kept_before);
}

TEST(RecycledBufferTest, GrowKeepsTheBytesAskedFor) {
  for (size_t start : {size_t{100}, 3 * kMiB}) {
    RecycledBuffer b(start);
    for (size_t i = 0; i < start; ++i) b.data()[i] = static_cast<char>(i * 7);
    b.grow(start / 2, start);  // already large enough: unchanged
    char* const same = b.data();
    EXPECT_EQ(b.data(), same);
    b.grow(9 * kMiB, start);
    EXPECT_GE(b.capacity(), 9 * kMiB);
    bool kept = true;
    for (size_t i = 0; i < start; ++i) kept = kept && b.data()[i] == static_cast<char>(i * 7);
    EXPECT_TRUE(kept) << "from " << start;
  }
}

TEST(RecycledBufferTest, MovingTransfersOwnership) {
  RecycledBuffer a(3 * kMiB);
  char* const p = a.data();
  RecycledBuffer b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(b.data(), p);
  RecycledBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_FALSE(b);  // NOLINT(bugprone-use-after-move)
  c.release();
  c.release();  // idempotent
  EXPECT_FALSE(c);
}

TEST(RecycledBufferTest, ConcurrentOwnersNeverShareABuffer) {
  // Each thread fills its buffer with its own byte and checks it is untouched before releasing it;
  // a buffer handed to two owners at once would show the other's byte.
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  std::vector<int> clashes(kThreads, 0);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, &clashes] {
      for (int r = 0; r < kRounds; ++r) {
        RecycledBuffer b((2 + (r + t) % 3) * kMiB);
        const size_t n = 2 * kMiB;
        std::memset(b.data(), 'a' + t, n);
        std::this_thread::yield();
        for (size_t i = 0; i < n; i += 4096)
          if (b.data()[i] != 'a' + t) ++clashes[static_cast<size_t>(t)];
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(clashes[static_cast<size_t>(t)], 0) << "thread " << t;
}

}  // namespace
}  // namespace strata::data::detail
