// The local (threads-of-one-process) communicator: every collective against a reference computed here, for
// every all-reduce algorithm and group sizes 1-4; ordering of queued collectives; bit-identical results across
// ranks; mismatched arguments and timeouts raising the right errors on every rank. Ranks run as std::threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "strata/comm/local.h"
#include "comm/comm_test_util.h"
#include "test_util.h"

namespace strata::comm {
namespace {

using test::run_ranks;

using test::message_of;
using test::random_tensor;
using test::Group;

constexpr AllReduceAlgorithm kAlgorithms[] = {AllReduceAlgorithm::kReduceToOne, AllReduceAlgorithm::kRing,
                                              AllReduceAlgorithm::kTree};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin};

Group make_group(int size, AllReduceAlgorithm algorithm = AllReduceAlgorithm::kRing,
                 std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  return make_local_group(size, {.algorithm = algorithm, .timeout = timeout});
}

// Each rank's bucket: distinct random values per rank and tensor.
std::vector<std::vector<Tensor>> make_buckets(int size, const std::vector<Shape>& shapes, uint64_t seed) {
  std::vector<std::vector<Tensor>> buckets(size);
  for (int r = 0; r < size; ++r) {
    for (size_t t = 0; t < shapes.size(); ++t) buckets[r].push_back(random_tensor(shapes[t], seed + 1000 * r + t));
  }
  return buckets;
}

std::vector<std::vector<Tensor>> clone_buckets(const std::vector<std::vector<Tensor>>& buckets) {
  std::vector<std::vector<Tensor>> out(buckets.size());
  for (size_t r = 0; r < buckets.size(); ++r) {
    for (const Tensor& t : buckets[r]) out[r].push_back(t.clone());
  }
  return out;
}

// The reduction over ranks in rank order 0..N-1, as the ring and reduce-to-one algorithms compute it.
std::vector<Tensor> reference_all_reduce(const std::vector<std::vector<Tensor>>& inputs, ReduceOp op) {
  std::vector<Tensor> out;
  const int size = static_cast<int>(inputs.size());
  for (size_t t = 0; t < inputs[0].size(); ++t) {
    Tensor acc = inputs[0][t].clone();
    float* a = acc.data<float>();
    for (int r = 1; r < size; ++r) {
      const float* x = inputs[r][t].data<float>();
      for (int64_t i = 0; i < acc.numel(); ++i) {
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kMean:
            a[i] = a[i] + x[i];
            break;
          case ReduceOp::kMax:
            a[i] = std::max(a[i], x[i]);
            break;
          case ReduceOp::kMin:
            a[i] = std::min(a[i], x[i]);
            break;
        }
      }
    }
    if (op == ReduceOp::kMean) {
      for (int64_t i = 0; i < acc.numel(); ++i) a[i] = a[i] / static_cast<float>(size);
    }
    out.push_back(acc);
  }
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// All-reduces `shapes` on a group and checks every rank against the reference and against rank 0, byte for byte.
void check_all_reduce(AllReduceAlgorithm algorithm, int size, ReduceOp op, const std::vector<Shape>& shapes,
                      uint64_t seed) {
  SCOPED_TRACE(to_string(algorithm) + " on " + std::to_string(size) + " ranks, " + to_string(op));
  auto buckets = make_buckets(size, shapes, seed);
  const auto expected = reference_all_reduce(clone_buckets(buckets), op);
  const Group group = make_group(size, algorithm);
  run_ranks(group, [&](int r, Communicator& comm) { comm.all_reduce(buckets[r], op)->wait(); });
  // Ring and reduce-to-one add in rank order like the reference; the tree pairs ranks differently.
  const bool exact = algorithm != AllReduceAlgorithm::kTree || op == ReduceOp::kMax || op == ReduceOp::kMin;
  for (int r = 0; r < size; ++r) {
    for (size_t t = 0; t < shapes.size(); ++t) {
      SCOPED_TRACE("rank " + std::to_string(r) + ", tensor " + std::to_string(t));
      EXPECT_TRUE(same_bytes(buckets[r][t], buckets[0][t])) << "ranks 0 and " << r << " differ";
      if (exact) {
        EXPECT_TRUE(same_bytes(buckets[r][t], expected[t])) << buckets[r][t].str() << " vs " << expected[t].str();
      } else {
        test::expect_near(buckets[r][t], expected[t], 1e-5f);
      }
    }
  }
}

TEST(LocalCommunicatorTest, AllReduceEveryAlgorithmSizeAndOp) {
  // 1,000+ elements across tensor boundaries (and an empty tensor inside the bucket).
  const std::vector<Shape> shapes = {{37, 11}, {7}, {0}, {1}, {2, 3, 4}, {600}};
  uint64_t seed = 1;
  for (auto algorithm : kAlgorithms) {
    for (int size = 1; size <= 4; ++size) {
      for (auto op : kOps) check_all_reduce(algorithm, size, op, shapes, seed++);
    }
  }
}

TEST(LocalCommunicatorTest, AllReduceUnevenAndEmptyBuckets) {
  for (auto algorithm : kAlgorithms) {
    check_all_reduce(algorithm, 4, ReduceOp::kSum, {{7}}, 11);  // 7 elements over 4 ranks
    check_all_reduce(algorithm, 3, ReduceOp::kMean, {{5}, {2}}, 12);
    check_all_reduce(algorithm, 4, ReduceOp::kSum, {{0}}, 13);
    check_all_reduce(algorithm, 3, ReduceOp::kMax, {}, 14);
  }
}

TEST(LocalCommunicatorTest, ManyTensorsInOneBucket) {
  std::vector<Shape> shapes;
  for (int i = 0; i < 120; ++i) shapes.push_back({1 + (i * 37) % 53});
  for (auto algorithm : kAlgorithms) check_all_reduce(algorithm, 3, ReduceOp::kSum, shapes, 21);
}

TEST(LocalCommunicatorTest, LargeBucketIsBitIdenticalOnEveryRank) {
  for (auto algorithm : kAlgorithms) {
    check_all_reduce(algorithm, 4, ReduceOp::kMean, {{100003}, {17, 129}}, 31);
    check_all_reduce(algorithm, 3, ReduceOp::kSum, {{65536}}, 32);
  }
}

TEST(LocalCommunicatorTest, AlgorithmsOfRankOrderAgreeBitForBit) {
  const std::vector<Shape> shapes = {{4099}, {3, 5}};
  std::vector<std::vector<Tensor>> results;
  for (auto algorithm : {AllReduceAlgorithm::kReduceToOne, AllReduceAlgorithm::kRing}) {
    auto buckets = make_buckets(3, shapes, 41);
    run_ranks(make_group(3, algorithm), [&](int r, Communicator& c) { c.all_reduce(buckets[r])->wait(); });
    results.push_back(buckets[2]);
  }
  for (size_t t = 0; t < shapes.size(); ++t) EXPECT_TRUE(same_bytes(results[0][t], results[1][t]));
}

TEST(LocalCommunicatorTest, QueuedCollectivesRunInIssueOrder) {
  const int size = 3;
  const Group group = make_group(size);
  std::vector<Tensor> a(size), gathered(size), b(size);
  for (int r = 0; r < size; ++r) {
    a[r] = Tensor::full({2}, r + 1);
    gathered[r] = Tensor::zeros({2 * size});
    b[r] = Tensor::full({1}, 10 * r);
  }
  run_ranks(group, [&](int r, Communicator& comm) {
    auto w1 = comm.all_reduce({a[r]});             // a = 6
    auto w2 = comm.all_gather(a[r], gathered[r]);  // sees a after w1
    auto w3 = comm.all_reduce({a[r]});             // a = 18
    auto w4 = comm.broadcast({b[r]}, 2);           // b = 20
    auto w5 = comm.all_reduce({b[r]}, ReduceOp::kMean);
    w5->wait();  // waiting on the last one first is fine: the earlier ones are done by then
    EXPECT_TRUE(w1->is_completed() && w2->is_completed() && w3->is_completed() && w4->is_completed());
    w4->wait();
    w3->wait();
    w2->wait();
    w1->wait();
  });
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(gathered[r].to_vector<float>(), std::vector<float>(2 * size, 6.0f)) << "rank " << r;
    EXPECT_EQ(a[r].to_vector<float>(), std::vector<float>(2, 18.0f)) << "rank " << r;
    EXPECT_EQ(b[r].item<float>(), 20.0f) << "rank " << r;
  }
}

TEST(LocalCommunicatorTest, CollectivesRunInTheBackground) {
  // Rank 1 issues only after rank 0's all_reduce has returned: issuing must not wait for the other ranks.
  const Group group = make_group(2, AllReduceAlgorithm::kRing, std::chrono::seconds(5));
  std::atomic<bool> issued{false};
  std::vector<Tensor> t = {Tensor::full({3}, 1.0), Tensor::full({3}, 2.0)};
  run_ranks(group, [&](int r, Communicator& c) {
    if (r == 0) {
      auto work = c.all_reduce({t[0]});
      EXPECT_FALSE(work->is_completed());
      issued.store(true);
      work->wait();
    } else {
      while (!issued.load()) std::this_thread::yield();
      c.all_reduce({t[1]})->wait();
    }
  });
  EXPECT_EQ(t[0].to_vector<float>(), std::vector<float>(3, 3.0f));
  EXPECT_EQ(t[1].to_vector<float>(), std::vector<float>(3, 3.0f));
}

TEST(LocalCommunicatorTest, DroppedWorkStillRunsBeforeTheGroupCloses) {
  std::vector<Tensor> t = {Tensor::full({5}, 1.0), Tensor::full({5}, 4.0), Tensor::full({5}, 7.0)};
  {
    const Group group = make_group(3);
    run_ranks(group, [&](int r, Communicator& c) { c.all_reduce({t[r]}, ReduceOp::kMax); });  // never waited
  }  // the communicators' destructors run what is queued
  for (const Tensor& x : t) EXPECT_EQ(x.to_vector<float>(), std::vector<float>(5, 7.0f));
}

TEST(LocalCommunicatorTest, BroadcastFromEveryRoot) {
  for (int size = 1; size <= 4; ++size) {
    for (int root = 0; root < size; ++root) {
      SCOPED_TRACE(std::to_string(size) + " ranks, root " + std::to_string(root));
      auto buckets = make_buckets(size, {{5, 3}, {0}, {9}}, 50 + root);
      const auto expected = clone_buckets(buckets)[root];
      run_ranks(make_group(size), [&](int r, Communicator& c) { c.broadcast(buckets[r], root)->wait(); });
      for (int r = 0; r < size; ++r) {
        for (size_t t = 0; t < expected.size(); ++t) EXPECT_TRUE(same_bytes(buckets[r][t], expected[t]));
      }
    }
  }
}

TEST(LocalCommunicatorTest, AllGatherPlacesRankRowsInOrder) {
  for (int size = 1; size <= 4; ++size) {
    SCOPED_TRACE(std::to_string(size) + " ranks");
    std::vector<Tensor> in(size), out(size);
    for (int r = 0; r < size; ++r) {
      in[r] = Tensor::empty({2, 3});
      for (int i = 0; i < 6; ++i) in[r].data<float>()[i] = 100.0f * r + i;
      out[r] = Tensor::full({2 * size, 3}, -1.0);
    }
    run_ranks(make_group(size), [&](int r, Communicator& c) { c.all_gather(in[r], out[r])->wait(); });
    for (int r = 0; r < size; ++r) {
      for (int q = 0; q < size; ++q) EXPECT_TRUE(same_bytes(out[r].slice(2 * q, 2 * q + 2), in[q]));
    }
  }
}

TEST(LocalCommunicatorTest, AllGatherWrongOutputShapeFailsOnEveryRank) {
  const Group group = make_group(2);
  std::vector<std::string> messages(2);
  run_ranks(group, [&](int r, Communicator& c) {
    Tensor out = Tensor::zeros({r == 1 ? 3 : 4, 3});
    messages[r] = message_of<InvalidArgument>([&] { c.all_gather(Tensor::ones({2, 3}), out)->wait(); });
  });
  for (const auto& m : messages) {
    EXPECT_NE(m.find("rank 1: output is [3, 3], wants [4, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("all_gather #1"), std::string::npos) << m;
  }
}

TEST(LocalCommunicatorTest, BarrierWaitsForEveryRank) {
  for (int size = 1; size <= 4; ++size) {
    std::vector<std::atomic<int>> arrived(size);
    run_ranks(make_group(size), [&](int r, Communicator& c) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * r));  // the last rank comes late
      arrived[r].store(1);
      c.barrier();
      for (int q = 0; q < size; ++q) EXPECT_EQ(arrived[q].load(), 1) << "rank " << r << " passed before " << q;
    });
  }
}

TEST(LocalCommunicatorTest, GroupOfOneCompletesAtOnce) {
  const Group group = make_group(1);
  Tensor t = Tensor::full({3}, 2.5);
  auto work = group[0]->all_reduce({t}, ReduceOp::kMean);
  EXPECT_TRUE(work->is_completed());
  work->wait();
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, 2.5f));
  EXPECT_EQ(group[0]->backend(), "local");
  EXPECT_EQ(group[0]->size(), 1);
  group[0]->barrier();
  Tensor bad = Tensor::zeros({2}, DType::kInt32);
  const std::string m = message_of<InvalidArgument>([&] { group[0]->all_reduce({bad})->wait(); });
  EXPECT_NE(m.find("tensor 0 is int32, wants float32"), std::string::npos) << m;
}

TEST(LocalCommunicatorTest, MismatchedBucketsFailOnEveryRankAndTheGroupGoesOn) {
  const int size = 3;
  const Group group = make_group(size);
  std::vector<std::string> messages(size);
  std::vector<Tensor> after(size);
  run_ranks(group, [&](int r, Communicator& c) {
    std::vector<Tensor> bucket = {Tensor::ones({4, 3})};
    if (r == 1) bucket = {Tensor::ones({5})};
    messages[r] = message_of<InvalidArgument>([&] { c.all_reduce(bucket)->wait(); });
    after[r] = Tensor::full({2}, r);
    c.all_reduce({after[r]})->wait();  // the next collective still works
  });
  for (int r = 0; r < size; ++r) {
    const std::string& m = messages[r];
    EXPECT_NE(m.find("all_reduce #1"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0: 1 tensor [4, 3] (12 elements)"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1: 1 tensor [5] (5 elements)"), std::string::npos) << m;
    EXPECT_EQ(after[r].to_vector<float>(), std::vector<float>(2, 3.0f));
  }
}

TEST(LocalCommunicatorTest, MismatchedCountsKindsAndDtypes) {
  const Group group = make_group(2);
  std::vector<std::string> counts(2), kinds(2), dtypes(2);
  run_ranks(group, [&](int r, Communicator& c) {
    std::vector<Tensor> bucket;
    for (int i = 0; i <= r; ++i) bucket.push_back(Tensor::ones({2}));
    counts[r] = message_of<InvalidArgument>([&] { c.all_reduce(bucket)->wait(); });
    kinds[r] = message_of<InvalidArgument>([&] {
      if (r == 0) {
        c.all_reduce({Tensor::ones({2})})->wait();
      } else {
        c.broadcast({Tensor::ones({2})}, 0)->wait();
      }
    });
    Tensor t = Tensor::zeros({2}, r == 0 ? DType::kInt32 : DType::kFloat32);
    dtypes[r] = message_of<InvalidArgument>([&] { c.all_reduce({t})->wait(); });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(counts[r].find("rank 1: 2 tensors [2] [2] (4 elements)"), std::string::npos) << counts[r];
    EXPECT_NE(kinds[r].find("rank 0: all_reduce; rank 1: broadcast"), std::string::npos) << kinds[r];
    EXPECT_NE(dtypes[r].find("rank 0: tensor 0 is int32, wants float32, bfloat16 or int64"), std::string::npos)
        << dtypes[r];
  }
}

TEST(LocalCommunicatorTest, TimeoutNamesTheRankThatNeverCame) {
  const int size = 3;
  const Group group = make_group(size, AllReduceAlgorithm::kRing, std::chrono::milliseconds(200));
  std::vector<std::string> messages(size);
  run_ranks(group, [&](int r, Communicator& c) {
    if (r == 2) return;  // never calls
    Tensor t = Tensor::ones({8});
    messages[r] = message_of<Timeout>([&] { c.all_reduce({t})->wait(); });
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& m = messages[r];
    EXPECT_NE(m.find("all_reduce #1 on rank " + std::to_string(r)), std::string::npos) << m;
    EXPECT_NE(m.find("rank 2 had not arrived"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 2 has issued no collective"), std::string::npos) << m;
    EXPECT_NE(m.find("200 ms"), std::string::npos) << m;
  }
  // The group is aborted: later collectives fail at once, on every rank, with the first failure.
  const std::string late = message_of<Timeout>([&] { group[2]->barrier(); });
  EXPECT_NE(late.find("barrier #1 on rank 2 was not run: the group was aborted"), std::string::npos) << late;
  EXPECT_NE(late.find("rank 2 had not arrived"), std::string::npos) << late;
}

TEST(LocalCommunicatorTest, AbortWakesWaitingRanksAtOnce) {
  const Group group = make_group(2);  // the default five-minute timeout: only abort can end the wait
  std::string message;
  run_ranks(group, [&](int r, Communicator& c) {
    if (r == 1) {
      c.abort("rank 1 gave up");
      return;
    }
    Tensor t = Tensor::ones({8});
    message = message_of<Timeout>([&] { c.all_reduce({t})->wait(); });
  });
  EXPECT_NE(message.find("rank 1 gave up"), std::string::npos) << message;
  EXPECT_THROW(group[1]->barrier(), Timeout);
}

TEST(LocalCommunicatorTest, TimeoutInALaterStepNamesTheCollective) {
  const Group group = make_group(2, AllReduceAlgorithm::kTree, std::chrono::milliseconds(200));
  std::vector<std::string> messages(2);
  run_ranks(group, [&](int r, Communicator& c) {
    Tensor t = Tensor::ones({4});
    c.all_reduce({t})->wait();
    if (r == 1) return;  // rank 1 stops after its first collective
    messages[r] = message_of<Timeout>([&] { c.broadcast({t}, 0)->wait(); });
  });
  EXPECT_NE(messages[0].find("broadcast #2 on rank 0 timed out"), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find("rank 1 has issued only 1 (the last: all_reduce #1)"), std::string::npos) << messages[0];
}

TEST(LocalCommunicatorTest, AlgorithmNames) {
  for (auto algorithm : kAlgorithms) EXPECT_EQ(all_reduce_algorithm_from_string(to_string(algorithm)), algorithm);
  EXPECT_EQ(to_string(AllReduceAlgorithm::kReduceToOne), "reduction_to_one_device");
  const std::string m = message_of<InvalidArgument>([] { all_reduce_algorithm_from_string("nccl"); });
  EXPECT_NE(m.find("'nccl'; choices: reduction_to_one_device, ring, tree"), std::string::npos) << m;
  EXPECT_THROW(make_local_group(0), InvalidArgument);
  EXPECT_THROW(make_local_group(2, {.timeout = std::chrono::milliseconds(0)}), InvalidArgument);
}

}  // namespace
}  // namespace strata::comm
