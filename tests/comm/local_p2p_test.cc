// Point-to-point send/recv on the local backend: every dtype around a ring of 2-4 ranks, tag matching out of
// order, FIFO within a tag, order with collectives, shape mismatches, bad peers, a recv that times out naming
// its source (and the group going on), abort waking a blocked recv, and a collective's timeout naming a rank
// blocked in recv. Ranks run as std::threads.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "strata/comm/local.h"
#include "comm/comm_test_util.h"
#include "test_util.h"

namespace strata::comm {
namespace {

using test::run_ranks;
using test::contains;

using test::message_of;
using test::Group;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

Tensor pattern(DType dtype, const Shape& shape, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = seed * 1000.0 + static_cast<double>(i) * 0.37 - 17.0;
    if (dtype == DType::kFloat32) t.data<float>()[i] = static_cast<float>(v);
    if (dtype == DType::kBFloat16) t.data<BFloat16>()[i] = BFloat16(static_cast<float>(v));
    if (dtype == DType::kInt64) t.data<int64_t>()[i] = (int64_t{1} << 40) * seed - i;
  }
  return t;
}

TEST(LocalP2PTest, RingOfSendsEveryDTypeAndSize) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
    for (int size = 2; size <= 4; ++size) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " on " + std::to_string(size) + " ranks");
      std::vector<std::vector<Tensor>> sent(size), got(size);
      for (int r = 0; r < size; ++r) {
        sent[r] = {pattern(dtype, {3, 4}, r + 1), pattern(dtype, {0}, r), pattern(dtype, {257}, r + 7)};
        got[r] = {Tensor::zeros({3, 4}, dtype), Tensor::zeros({0}, dtype), Tensor::zeros({257}, dtype)};
      }
      run_ranks(make_local_group(size), [&](int r, Communicator& c) {
        // Every rank sends before it receives: sends do not wait for their recv.
        auto s = c.send(sent[r], (r + 1) % size, 9);
        c.recv(got[r], (r + size - 1) % size, 9)->wait();
        s->wait();
      });
      for (int r = 0; r < size; ++r) {
        const int from = (r + size - 1) % size;
        for (size_t t = 0; t < got[r].size(); ++t) EXPECT_TRUE(same_bytes(got[r][t], sent[from][t])) << r << " " << t;
      }
    }
  }
}

TEST(LocalP2PTest, TagsMatchOutOfOrderAndOneTagIsFirstInFirstOut) {
  const Group group = make_local_group(2);
  std::vector<Tensor> got(5);
  for (auto& t : got) t = Tensor::zeros({2});
  run_ranks(group, [&](int r, Communicator& c) {
    if (r == 0) {
      c.send({Tensor::full({2}, 1.0)}, 1, 1);
      c.send({Tensor::full({2}, 2.0)}, 1, 2);
      c.send({Tensor::full({2}, 3.0)}, 1, 3);
      c.send({Tensor::full({2}, 41.0)}, 1, 4);
      c.send({Tensor::full({2}, 42.0)}, 1, 4)->wait();
      return;
    }
    auto w3 = c.recv({got[2]}, 0, 3);
    auto w1 = c.recv({got[0]}, 0, 1);
    auto w4a = c.recv({got[3]}, 0, 4);
    auto w2 = c.recv({got[1]}, 0, 2);
    auto w4b = c.recv({got[4]}, 0, 4);
    for (auto& w : {w3, w1, w4a, w2, w4b}) w->wait();
  });
  const std::vector<float> want = {1, 2, 3, 41, 42};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].to_vector<float>(), std::vector<float>(2, want[i])) << i;
}

TEST(LocalP2PTest, RunsInIssueOrderWithCollectives) {
  const Group group = make_local_group(3);
  std::vector<Tensor> t = {Tensor::full({4}, 1.0), Tensor::full({4}, 2.0), Tensor::full({4}, 3.0)};
  Tensor received = Tensor::zeros({4});
  run_ranks(group, [&](int r, Communicator& c) {
    auto w = c.all_reduce({t[r]});         // t = 6 everywhere
    if (r == 0) c.send({t[0]}, 2, 0);      // sends the reduced value: queued behind the all_reduce
    if (r == 2) c.recv({received}, 0, 0);  // and the all_reduce below waits for it on rank 2
    c.all_reduce({t[r]}, ReduceOp::kMax)->wait();
    w->wait();
  });
  EXPECT_EQ(received.to_vector<float>(), std::vector<float>(4, 6.0f));
}

TEST(LocalP2PTest, MismatchedShapesAndBadPeers) {
  const Group group = make_local_group(2);
  std::string mismatch;
  run_ranks(group, [&](int r, Communicator& c) {
    if (r == 0) {
      c.send({Tensor::ones({4})}, 1, 5)->wait();
    } else {
      Tensor small = Tensor::zeros({3}, DType::kInt64);
      mismatch = message_of<InvalidArgument>([&] { c.recv({small}, 0, 5)->wait(); });
    }
  });
  EXPECT_TRUE(contains(mismatch,
                       "local group of 2: recv #1 from rank 0 (tag 5) on rank 1: rank 0 sent 1 tensor [4] "
                       "(4 elements) float32, this rank receives into 1 tensor [3] (3 elements) int64"))
      << mismatch;
  std::string m = message_of<InvalidArgument>([&] { group[0]->send({Tensor::ones({1})}, 2); });
  EXPECT_TRUE(contains(m, "send on rank 0: dst 2 is not another rank of local group of 2")) << m;
  m = message_of<InvalidArgument>([&] { group[1]->recv({Tensor::ones({1})}, 1); });
  EXPECT_TRUE(contains(m, "recv on rank 1: src 1 is not another rank of local group of 2")) << m;
  m = message_of<InvalidArgument>([&] { make_local_group(1)[0]->send({Tensor::ones({1})}, 0); });
  EXPECT_TRUE(contains(m, "dst 0 is not another rank of local group of 1")) << m;
  m = message_of<InvalidArgument>([&] { group[0]->send({Tensor::ones({1}, DType::kUInt8)}, 1)->wait(); });
  EXPECT_TRUE(contains(m, "send #2 to rank 1 (tag 0) on rank 0: tensor 0 is uint8, wants float32, bfloat16 or int64"))
      << m;
}

TEST(LocalP2PTest, RecvTimeoutNamesTheSourceAndTheGroupGoesOn) {
  const Group group = make_local_group(2, {.timeout = std::chrono::minutes(5)});
  const milliseconds timeout(150);
  std::string message;
  milliseconds took{0};
  Tensor later = Tensor::zeros({2}), after = Tensor::full({1}, 1.0);
  run_ranks(group, [&](int r, Communicator& c) {
    if (r == 0) {
      c.send({Tensor::full({2}, 8.0)}, 1, 1)->wait();  // tag 1, not the 7 rank 1 waits for
    } else {
      const auto start = Clock::now();
      message = message_of<Timeout>([&] { c.recv({Tensor::zeros({2})}, 0, {.tag = 7, .timeout = timeout})->wait(); });
      took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
      c.recv({later}, 0, 1)->wait();
    }
    c.all_reduce({after})->wait();
  });
  EXPECT_TRUE(contains(message,
                       "local group of 2: recv #1 from rank 0 (tag 7) on rank 1 timed out after 150 ms: "
                       "rank 0 sent nothing with tag 7 to rank 1 (its messages waiting here have tags 1); "
                       "rank 0 has issued 1 sends"))
      << message;
  EXPECT_GE(took, timeout - milliseconds(5));
  EXPECT_LT(took, timeout + milliseconds(1500));
  EXPECT_EQ(later.to_vector<float>(), std::vector<float>(2, 8.0f));
  EXPECT_EQ(after.item<float>(), 2.0f);
}

TEST(LocalP2PTest, AbortWakesABlockedRecv) {
  const Group group = make_local_group(2);  // five minutes: only abort ends the wait
  std::string message;
  run_ranks(group, [&](int r, Communicator& c) {
    if (r == 0) {
      std::this_thread::sleep_for(milliseconds(30));
      c.abort("rank 0 is going away");
      return;
    }
    message = message_of<Timeout>([&] { c.recv({Tensor::zeros({1})}, 0, 3)->wait(); });
  });
  EXPECT_TRUE(contains(message,
                       "recv #1 from rank 0 (tag 3) on rank 1 gave up because the group was aborted: "
                       "rank 0 is going away"))
      << message;
}

TEST(LocalP2PTest, CollectiveTimeoutNamesARankBlockedInRecv) {
  const Group group = make_local_group(3, {.timeout = milliseconds(200)});
  std::vector<std::string> messages(3);
  run_ranks(group, [&](int r, Communicator& c) {
    Tensor t = Tensor::ones({2});
    if (r == 0) {
      // Waits for a message rank 1 never sends, so never reaches the all_reduce the others are in.
      messages[0] = message_of<Timeout>([&] { c.recv({t}, 1, {.tag = 4, .timeout = milliseconds(2000)})->wait(); });
      return;
    }
    messages[r] = message_of<Timeout>([&] { c.all_reduce({t})->wait(); });
  });
  for (int r : {1, 2}) {
    EXPECT_TRUE(contains(messages[r], "all_reduce #1 on rank")) << messages[r];
    EXPECT_TRUE(contains(messages[r],
                         "rank 0 had not arrived; rank 0 has issued no collective and is in recv #1 "
                         "from rank 1 (tag 4)"))
        << messages[r];
  }
  // The recv ends at the abort (20 ms polling) rather than after its own 2 s.
  EXPECT_TRUE(contains(messages[0], "recv #1 from rank 1 (tag 4) on rank 0 gave up because the group was aborted"))
      << messages[0];
}

}  // namespace
}  // namespace strata::comm
