// DevicePrefetcher's host side (distribute/device_prefetch.h) on a fake copy queue whose "device" is host memory and
// whose copies run only when the test (or a wait) says so, reading their source when they run: batches come out in
// order with their bytes, the next batch is staged while the current step runs and nothing after the last, a
// staging block is not written again before its copies ran, the host waits only when every block is in flight,
// components already on the device pass, a copy that fails to queue or to run is an error that leaves the blocks
// safe, and the destructor waits for the copies in flight and gives every block back.
#include "distribute/device_prefetch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/copy_queue.h"
#include "strata/error.h"

namespace strata::distribute {
namespace {

// What the fake saw; outlives the queue (the prefetcher owns it).
struct Log {
  std::set<void*> live_blocks;  // handed out by alloc_host, not yet freed
  int blocks_allocated = 0;
  int after_compute = 0;
  int copies_queued = 0;
  int copies_run = 0;
  int waits = 0;                         // host waits
  std::vector<uint64_t> compute_waited;  // tickets the compute stream waited for, in order
  std::set<uint64_t> open_tickets;       // recorded, not released
  int fail_queue_at = -1;                // queue_copy number (0-based) that throws
  int fail_run_at = -1;                  // copy number whose run fails (wait throws)
};

class FakeQueue final : public detail::CopyQueue {
 public:
  explicit FakeQueue(Log& log) : log_(log) {}
  ~FakeQueue() override {  // blocks a prefetcher kept (their copies failed) are the test's to free
    for (void* p : log_.live_blocks) std::free(p);
  }
  // The device in name (messages); its memory is the host's.
  Device device() const override { return Device::cuda(0); }
  Tensor device_tensor(const Shape& shape, DType dtype) override { return Tensor::empty(shape, dtype); }
  void* alloc_host(size_t nbytes) override {
    void* p = std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
    log_.live_blocks.insert(p);
    sizes_[p] = nbytes;
    ++log_.blocks_allocated;
    return p;
  }
  void free_host(void* block) noexcept override {
    if (block == nullptr) return;
    EXPECT_EQ(log_.live_blocks.erase(block), 1u) << "a block freed twice, or not ours";
    EXPECT_FALSE(pending_reads(block, sizes_[block])) << "a block freed under a copy that has not run";
    sizes_.erase(block);
    std::free(block);
  }
  void after_compute() override { ++log_.after_compute; }
  void queue_copy(void* dst, const void* src, size_t nbytes) override {
    if (log_.copies_queued++ == log_.fail_queue_at) STRATA_THROW(Unavailable, "fake: the copy cannot be queued");
    copies_.push_back({dst, src, nbytes});
  }
  Ticket record() override {
    const Ticket t = next_++;
    points_[t] = copies_.size();
    log_.open_tickets.insert(t);
    return t;
  }
  bool done(Ticket t) override { return ran_ >= point(t); }
  void wait(Ticket t) override {
    ++log_.waits;
    run_until(point(t));
    if (failed_ && failed_at_ < point(t)) STRATA_THROW(Unavailable, "fake: copy " << failed_at_ << " failed");
  }
  void compute_waits(Ticket t) override {
    point(t);
    log_.compute_waited.push_back(t);
  }
  void release(Ticket t) noexcept override {
    EXPECT_EQ(log_.open_tickets.erase(t), 1u) << "ticket " << t << " released twice";
  }

  // The device makes progress: the next `n` copies run (all with n < 0).
  void run(int n = -1) { run_until(n < 0 ? copies_.size() : std::min(copies_.size(), ran_ + n)); }
  size_t pending() const { return copies_.size() - ran_; }
  // Whether a queued copy that has not run reads from [p, p + n).
  bool pending_reads(const void* p, size_t n) const {
    for (size_t i = ran_; i < copies_.size(); ++i) {
      const char* a = static_cast<const char*>(copies_[i].src);
      const char* b = static_cast<const char*>(p);
      if (a < b + n && b < a + copies_[i].nbytes) return true;
    }
    return false;
  }

 private:
  struct Copy {
    void* dst;
    const void* src;
    size_t nbytes;
  };
  size_t point(Ticket t) const {
    auto it = points_.find(t);
    EXPECT_NE(it, points_.end()) << "unknown or released ticket " << t;
    EXPECT_TRUE(log_.open_tickets.count(t)) << "ticket " << t << " used after its release";
    return it == points_.end() ? 0 : it->second;
  }
  void run_until(size_t upto) {
    for (; ran_ < upto; ++ran_) {
      if (static_cast<int>(ran_) == log_.fail_run_at) {
        failed_ = true;
        failed_at_ = ran_;
        continue;
      }
      std::memcpy(copies_[ran_].dst, copies_[ran_].src, copies_[ran_].nbytes);
      ++log_.copies_run;
    }
  }

  Log& log_;
  std::map<void*, size_t> sizes_;
  std::vector<Copy> copies_;
  size_t ran_ = 0;
  std::map<Ticket, size_t> points_;
  Ticket next_ = 1;
  bool failed_ = false;
  size_t failed_at_ = 0;
};

// A batch (x [rows, 3] float, y [rows] int64) whose values say which batch it is.
data::Element batch(int id, int64_t rows = 4) {
  Tensor x = Tensor::full({rows, 3}, static_cast<double>(id));
  Tensor y = Tensor::full({rows}, static_cast<double>(100 + id), DType::kInt64);
  return data::Element({x, y}, {"x", "y"});
}

void expect_batch(const data::Element& b, int id, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(b.size(), 2u);
  for (float v : b[0].to_vector<float>()) ASSERT_EQ(v, static_cast<float>(id));
  for (int64_t v : b[1].to_vector<int64_t>()) ASSERT_EQ(v, 100 + id);
  EXPECT_EQ(b["y"].dtype(), DType::kInt64) << "names and dtypes stay";
}

struct Fixture {
  Log log;
  FakeQueue* queue = nullptr;
  std::unique_ptr<DevicePrefetcher> prefetch;
  explicit Fixture(int blocks = 2) {
    auto q = std::make_unique<FakeQueue>(log);
    queue = q.get();
    prefetch = std::make_unique<DevicePrefetcher>(std::move(q), blocks);
  }
};

TEST(DevicePrefetcherTest, BatchesComeOutInOrderOnTheDeviceWithTheComputeStreamWaitingForEach) {
  Fixture f;
  f.prefetch->stage(batch(1));
  f.prefetch->stage(batch(2));
  EXPECT_EQ(f.prefetch->staged(), 2u);
  EXPECT_EQ(f.log.copies_queued, 4) << "one copy per component";
  EXPECT_EQ(f.log.after_compute, 2) << "each batch's copies wait for the compute work before them";
  EXPECT_EQ(f.log.waits, 0) << "staging does not wait while a block is free";
  const data::Element one = f.prefetch->take();
  const data::Element two = f.prefetch->take();
  EXPECT_EQ(f.log.compute_waited.size(), 2u) << "the step's stream waits for its batch's copies";
  EXPECT_LT(f.log.compute_waited[0], f.log.compute_waited[1]);
  EXPECT_EQ(f.log.waits, 0) << "take does not block the host";
  f.queue->run();
  expect_batch(one, 1, "first");
  expect_batch(two, 2, "second");
  EXPECT_THROW(f.prefetch->take(), InvalidArgument) << "nothing staged";
}

TEST(DevicePrefetcherTest, ABlockIsNotWrittenAgainBeforeItsCopiesRan) {
  Fixture f(/*blocks=*/2);
  f.prefetch->stage(batch(1));
  f.prefetch->stage(batch(2));
  // Both blocks are in flight: the third batch must wait for the oldest copies (batch 1's) before it takes a block.
  f.prefetch->stage(batch(3));
  EXPECT_EQ(f.log.waits, 1);
  EXPECT_EQ(f.log.blocks_allocated, 2) << "never more blocks than asked";
  EXPECT_EQ(f.log.copies_run, 2) << "the wait ran batch 1's copies, no more";
  f.queue->run();
  expect_batch(f.prefetch->take(), 1, "batch 1, copied before its block was reused");
  expect_batch(f.prefetch->take(), 2, "batch 2");
  expect_batch(f.prefetch->take(), 3, "batch 3");
  // With the device keeping up, blocks are reused without a wait.
  for (int id = 4; id < 10; ++id) {
    f.prefetch->stage(batch(id));
    f.queue->run();
    expect_batch(f.prefetch->take(), id, "in step");
  }
  EXPECT_EQ(f.log.waits, 1);
  EXPECT_EQ(f.log.blocks_allocated, 2);
}

TEST(DevicePrefetcherTest, AnIdleBlockIsTakenBeforeWaitingOnABusyOne) {
  Fixture f(/*blocks=*/2);
  f.prefetch->stage(batch(1));
  f.queue->run();  // batch 1's block is idle again
  f.prefetch->stage(batch(2));
  f.prefetch->stage(batch(3));  // batch 2's block busy, batch 1's idle: no wait
  EXPECT_EQ(f.log.waits, 0);
  f.queue->run();
  for (int id = 1; id <= 3; ++id) expect_batch(f.prefetch->take(), id, "batch " + std::to_string(id));
}

TEST(DevicePrefetcherTest, RunPrefetchedStagesTheNextBatchWhileAStepRunsAndNothingAfterTheLast) {
  Fixture f;
  std::vector<data::Element> batches;
  for (int id = 0; id < 5; ++id) batches.push_back(batch(id));
  std::vector<size_t> staged_during_step;
  run_prefetched(
      *f.prefetch, batches.size(), [&](size_t k) -> const data::Element& { return batches[k]; },
      [&](size_t k, const data::Element& on_device) {
        staged_during_step.push_back(f.prefetch->staged());
        f.queue->run();  // the step's kernels run after its batch's copies (the compute stream waited)
        expect_batch(on_device, static_cast<int>(k), "step " + std::to_string(k));
      });
  EXPECT_EQ(staged_during_step, (std::vector<size_t>{1, 1, 1, 1, 0})) << "the next batch is staged beside each step";
  EXPECT_EQ(f.log.compute_waited.size(), 5u);
  EXPECT_EQ(f.log.waits, 0) << "the device keeping up, the host never waited for a copy";
  run_prefetched(
      *f.prefetch, 0, [&](size_t) -> const data::Element& { return batches[0]; },
      [&](size_t, const data::Element&) { ADD_FAILURE() << "no step for no batches"; });
  EXPECT_EQ(f.prefetch->staged(), 0u);
}

TEST(DevicePrefetcherTest, AStepsErrorEndsTheLoopAndTheDestructorWaitsForTheStagedCopies) {
  Log log;
  {
    DevicePrefetcher prefetch(std::make_unique<FakeQueue>(log));
    std::vector<data::Element> batches = {batch(0), batch(1), batch(2)};
    int steps = 0;
    EXPECT_THROW(run_prefetched(
                     prefetch, batches.size(), [&](size_t k) -> const data::Element& { return batches[k]; },
                     [&](size_t, const data::Element&) {
                       ++steps;
                       STRATA_THROW(InvalidArgument, "the step failed");
                     }),
                 InvalidArgument);
    EXPECT_EQ(steps, 1);
    EXPECT_EQ(prefetch.staged(), 1u) << "batch 1 was staged beside the failed step";
    EXPECT_EQ(log.copies_run, 0);
  }
  EXPECT_EQ(log.copies_run, log.copies_queued) << "the destructor waited for every copy in flight";
  EXPECT_TRUE(log.live_blocks.empty()) << "and gave every block back";
  EXPECT_TRUE(log.open_tickets.empty()) << "and every ticket";
}

TEST(DevicePrefetcherTest, UndefinedComponentsPassAndAnEmptyBatchNeedsNoCopy) {
  Fixture f;
  f.prefetch->stage(data::Element({Tensor::full({2, 3}, 5.0), Tensor()}));
  f.prefetch->stage(batch(8, /*rows=*/0));  // a replica's empty share of a short last batch
  EXPECT_EQ(f.log.copies_queued, 1) << "the defined component's bytes only";
  EXPECT_EQ(f.log.blocks_allocated, 1);
  f.queue->run();
  const data::Element first = f.prefetch->take();
  EXPECT_FALSE(first[1].defined());
  EXPECT_EQ(first[0].to_vector<float>(), std::vector<float>(6, 5.0f));
  const data::Element empty = f.prefetch->take();
  EXPECT_EQ(empty[0].shape(), (Shape{0, 3}));
  EXPECT_EQ(empty[1].dtype(), DType::kInt64);
  EXPECT_EQ(f.log.compute_waited.size(), 1u) << "no copy, no ticket to wait for";
}

TEST(DevicePrefetcherTest, BlocksGrowForALargerBatchWithinTheirNumber) {
  Fixture f(/*blocks=*/1);
  f.prefetch->stage(batch(1, 4));
  f.queue->run();
  expect_batch(f.prefetch->take(), 1, "small");
  f.prefetch->stage(batch(2, 4000));  // the idle block is too small: it is replaced by a larger one
  EXPECT_EQ(f.log.blocks_allocated, 2);
  EXPECT_EQ(f.log.live_blocks.size(), 1u) << "the small block went back";
  f.prefetch->stage(batch(3, 4));  // one block, in flight: wait, then reuse it
  EXPECT_EQ(f.log.waits, 1);
  EXPECT_EQ(f.log.blocks_allocated, 2);
  f.queue->run();
  expect_batch(f.prefetch->take(), 2, "large");
  expect_batch(f.prefetch->take(), 3, "small again");
}

TEST(DevicePrefetcherTest, ACopyThatCannotBeQueuedThrowsAndKeepsItsBlockUntilTheQueuedOnesRan) {
  Fixture f(/*blocks=*/2);
  f.log.fail_queue_at = 1;  // batch 1's second component
  EXPECT_THROW(f.prefetch->stage(batch(1)), Unavailable);
  EXPECT_EQ(f.prefetch->staged(), 0u) << "nothing of the failed batch is handed out";
  EXPECT_EQ(f.queue->pending(), 1u) << "its first copy was queued";
  f.prefetch->stage(batch(2));
  EXPECT_EQ(f.log.waits, 0) << "the other block was free";
  // Both blocks now in flight: the next stage waits for the oldest (the failed batch's queued copy) first.
  f.prefetch->stage(batch(3));
  EXPECT_EQ(f.log.waits, 1);
  f.queue->run();
  expect_batch(f.prefetch->take(), 2, "after the failure");
  expect_batch(f.prefetch->take(), 3, "in order");
}

TEST(DevicePrefetcherTest, ACopyThatFailedOnTheDeviceIsAnErrorWhenItsBlockIsWaitedFor) {
  Log log;
  {
    DevicePrefetcher prefetch(std::make_unique<FakeQueue>(log), /*blocks=*/1);
    log.fail_run_at = 0;
    prefetch.stage(batch(1));
    EXPECT_THROW(prefetch.stage(batch(2)), Unavailable) << "the one block's copies failed";
    EXPECT_EQ(prefetch.staged(), 1u);
  }
  EXPECT_TRUE(log.open_tickets.empty());
}

TEST(DevicePrefetcherTest, NoQueueIsRefused) { EXPECT_THROW(DevicePrefetcher(nullptr), InvalidArgument); }

}  // namespace
}  // namespace strata::distribute
