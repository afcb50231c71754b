// Parallel map, prefetch and parallel interleave: deterministic order under random completion
// times, errors delivered at their element's position, real worker threads, and prompt shutdown.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "data/dataset_test_util.h"
#include "strata/threading.h"

namespace strata::data {
namespace {

using test::collect_ints;
using test::drain_ints;

int64_t value(const Element& e) { return e[0].item<int64_t>(); }

// Sleeps 0-300 microseconds, a pseudo-random amount per value, so workers finish out of order.
void jitter(int64_t v) { std::this_thread::sleep_for(std::chrono::microseconds((v * 7919) % 300)); }

Element times_ten(const Element& e) {
  jitter(value(e));
  return Element({Tensor::from_vector<int64_t>({value(e) * 10}, {})});
}

TEST(DatasetParallelMapTest, DeterministicOrderEqualsTheSequentialMap) {
  const auto sequential = collect_ints(Dataset::range(300).map(times_ten));
  for (int64_t parallel : {int64_t{2}, int64_t{3}, int64_t{8}, kAutotune}) {
    SCOPED_TRACE(parallel);
    EXPECT_EQ(collect_ints(Dataset::range(300).map(times_ten, {.num_parallel_calls = parallel})), sequential);
  }
  auto nondet = collect_ints(Dataset::range(300).map(times_ten, {.num_parallel_calls = 4, .deterministic = false}));
  std::sort(nondet.begin(), nondet.end());
  EXPECT_EQ(nondet, sequential);
}

TEST(DatasetParallelMapTest, RunsOnSeveralWorkerThreadsEachLimitedToOneKernelThread) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> max_kernel_threads{0};
  auto ds = Dataset::range(64).map(
      [&](const Element& e) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
        max_kernel_threads = std::max(max_kernel_threads.load(), num_threads());
        return e;
      },
      {.num_parallel_calls = 4});
  EXPECT_EQ(collect_ints(ds).size(), 64u);
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
  EXPECT_EQ(max_kernel_threads.load(), 1);
}

TEST(DatasetParallelMapTest, AnExceptionReachesNextAtItsPosition) {
  auto fn = [](const Element& e) {
    jitter(value(e));
    if (value(e) == 5) STRATA_THROW(InvalidArgument, "bad element 5");
    return e;
  };
  for (int64_t parallel : {int64_t{1}, int64_t{4}}) {
    SCOPED_TRACE(parallel);
    auto it = Dataset::range(10).map(fn, {.num_parallel_calls = parallel}).prefetch(3).make_iterator();
    EXPECT_EQ(drain_ints(it, 5), (std::vector<int64_t>{0, 1, 2, 3, 4}));
    const std::string msg = test::message_of<InvalidArgument>([&] { it.next(); });
    EXPECT_NE(msg.find("bad element 5"), std::string::npos) << msg;
    EXPECT_EQ(drain_ints(it), (std::vector<int64_t>{6, 7, 8, 9}));  // the pipeline goes on after the error
  }
}

TEST(DatasetPrefetchTest, KeepsOrderAndReadsAheadOnAnotherThread) {
  EXPECT_EQ(collect_ints(Dataset::range(100).prefetch(3)), collect_ints(Dataset::range(100)));
  auto pulled = std::make_shared<std::atomic<int>>(0);
  auto ds = Dataset::range(100)
                .map([pulled](const Element& e) {
                  ++*pulled;
                  return e;
                })
                .prefetch(4);
  auto it = ds.make_iterator();
  ASSERT_TRUE(it.next());
  // The producer fills the buffer (4 elements) without further calls to next().
  for (int i = 0; i < 500 && pulled->load() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(pulled->load(), 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_LE(pulled->load(), 5);  // and stops there: the buffer is bounded
  EXPECT_EQ(test::drain_ints(it), test::collect_ints(Dataset::range(1, 100)));
}

TEST(DatasetShutdownTest, DestroyingIteratorsMidEpochJoinsTheirThreads) {
  auto slow = [](const Element& e) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return e;
  };
  InterleaveOptions io;
  io.cycle_length = 3;
  io.num_parallel_calls = 3;
  auto ds = Dataset::range(1000)
                .repeat()
                .map(slow, {.num_parallel_calls = 4})
                .prefetch(8)
                .interleave([](const Element& e) { return Dataset::range(value(e)).prefetch(2); }, io)
                .prefetch(2);
  for (int round = 0; round < 5; ++round) {
    auto it = ds.make_iterator();
    for (int i = 0; i < round * 7; ++i) it.next();
  }  // each iterator is destroyed here with workers busy or blocked on full buffers
  auto untouched = ds.make_iterator();  // never started
  SUCCEED();
}

TEST(DatasetParallelInterleaveTest, ParallelReadsKeepTheSequentialOrder) {
  auto make = [](const Element& e) {
    const int64_t v = value(e);
    return Dataset::range(v * 100, v * 100 + v % 5 + 1).map([](const Element& x) {
      jitter(value(x));
      return x;
    });
  };
  InterleaveOptions o;
  o.cycle_length = 3;
  o.block_length = 2;
  const auto sequential = collect_ints(Dataset::range(20).interleave(make, o));
  EXPECT_EQ(sequential.size(), 60u);
  o.num_parallel_calls = 3;
  EXPECT_EQ(collect_ints(Dataset::range(20).interleave(make, o)), sequential);
}

}  // namespace
}  // namespace strata::data
