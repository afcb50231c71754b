// The flight recorder (comm/flight_recorder.h): the ring keeps the newest kCapacity collectives in order, the
// states and the step tag, how an entry reads in a message, and the one-line form a peer decodes.
#include "comm/flight_recorder.h"

#include <gtest/gtest.h>

#include "comm/comm_test_util.h"

namespace strata::comm::detail {
namespace {

using test::contains;
using namespace std::chrono_literals;
using Clock = FlightRecorder::Clock;
using State = FlightRecorder::State;

TEST(FlightRecorderTest, TheRingWrapsAndKeepsTheNewestInOrder) {
  FlightRecorder recorder;
  EXPECT_TRUE(recorder.last(4).empty());
  EXPECT_FALSE(recorder.newest().has_value());
  const int64_t n = FlightRecorder::kCapacity + 5;
  for (int64_t seq = 1; seq <= n; ++seq) {
    recorder.set_step(seq / 2);
    recorder.issued(seq, OpKind::kAllReduce, {Tensor::ones({seq})}, 1s, Clock::now());
    recorder.started(seq);
    recorder.ended(seq, true);
  }
  const auto all = recorder.last(100);
  ASSERT_EQ(all.size(), FlightRecorder::kCapacity);
  for (size_t i = 0; i < all.size(); ++i) {
    const int64_t seq = n - static_cast<int64_t>(FlightRecorder::kCapacity) + 1 + static_cast<int64_t>(i);
    EXPECT_EQ(all[i].seq, seq);
    EXPECT_EQ(all[i].bytes, seq * 4);
    EXPECT_EQ(all[i].step, seq / 2);
    EXPECT_EQ(all[i].state, State::kCompleted);
  }
  const auto three = recorder.last(3);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three.front().seq, n - 2);
  EXPECT_EQ(three.back().seq, n);
  EXPECT_EQ(recorder.newest()->seq, n);
  // An entry overwritten by a newer collective is left alone.
  recorder.ended(n - static_cast<int64_t>(FlightRecorder::kCapacity), false);
  EXPECT_EQ(recorder.last(1).front().state, State::kCompleted);
}

TEST(FlightRecorderTest, StatesStepsAndBytes) {
  FlightRecorder recorder;
  const auto t0 = Clock::now();
  recorder.issued(1, OpKind::kBarrier, {}, 1s, t0);  // untagged
  recorder.set_step(7);
  recorder.issued(2, OpKind::kAllGather, {Tensor::ones({4}), Tensor::ones({8})}, 1s, t0);  // the input only
  recorder.issued(3, OpKind::kAllReduce, {Tensor::ones({256}), Tensor::ones({256})}, 1s, t0);
  EXPECT_EQ(recorder.newest()->state, State::kIssued);
  recorder.started(1, t0 + 1ms);
  recorder.ended(1, true, t0 + 2ms);
  recorder.started(2, t0 + 3ms);
  recorder.ended(2, false, t0 + 5ms);
  recorder.ended(2, true, t0 + 9ms);  // the first outcome stands
  recorder.started(3, t0 + 6ms);
  const auto entries = recorder.last(3);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].step, FlightRecorder::kNoStep);
  EXPECT_EQ(entries[1].bytes, 16);
  EXPECT_EQ(entries[1].state, State::kFailed);
  EXPECT_EQ(entries[2].bytes, 2048);
  EXPECT_EQ(entries[2].state, State::kRunning);
  EXPECT_EQ(entries[2].changed(), t0 + 6ms);

  EXPECT_EQ(describe(entries[0], t0 + 10ms), "barrier #1 completed in 1.0 ms");
  EXPECT_EQ(describe(entries[1], t0 + 10ms), "all_gather #2 (step 7, 16 B) failed after 2.0 ms");
  EXPECT_EQ(describe(entries[2], t0 + 1506ms), "all_reduce #3 (step 7, 2 KiB) running for 1500 ms");
  const std::string recent = describe_recent(recorder, 2, 2);
  EXPECT_TRUE(contains(recent,
                       "rank 2's last collectives: all_gather #2 (step 7, 16 B) failed after 2.0 ms, "
                       "all_reduce #3 (step 7, 2 KiB) running for "))
      << recent;
  EXPECT_EQ(describe_recent(FlightRecorder(), 0, 4), "");
}

TEST(FlightRecorderTest, APeerReadsTheEncodedEntryBack) {
  FlightRecorder recorder;
  recorder.set_step(12);
  recorder.issued(5, OpKind::kReduceScatter, {Tensor::ones({3, 512}), Tensor::ones({512})}, 1s, Clock::now());
  const std::string line = encode(*recorder.newest());
  EXPECT_EQ(line, "5 reduce_scatter issued 12 6144");
  const auto back = decode(line);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(describe(*back), "reduce_scatter #5 (step 12, 6 KiB) issued");
  EXPECT_EQ(describe(*decode("9 barrier completed -1 0")), "barrier #9 completed");
  EXPECT_EQ(describe(*decode("9 barrier completed 4 0")), "barrier #9 (step 4) completed");
  EXPECT_EQ(describe(*decode("3 all_reduce running 2 1572864")), "all_reduce #3 (step 2, 1.5 MiB) running");
  for (const char* bad : {"", "3 all_reduce", "3 nonsense running 1 2", "3 all_reduce dozing 1 2",
                          "0 barrier issued 1 0", "12 all_reduce"}) {
    EXPECT_FALSE(decode(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace strata::comm::detail
