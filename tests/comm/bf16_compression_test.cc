// bfloat16 compression of float32 all-reduces (AllReduceOptions::compression) on the gloo backend, ranks as threads
// over 127.0.0.1 for group sizes 1-4: the result is the bfloat16 sum (each pairwise sum in float32, rounded back),
// the same bits on every rank, half the bytes on the wire; the hierarchical group compresses only across the
// workers; the local backend reduces in full precision; arguments it cannot compress are InvalidArgument. (The mpi
// backend's compression is checked in mpi_communicator_test.cc, under mpirun.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

#include "comm/comm_test_util.h"
#include "strata/comm/gloo.h"
#include "strata/comm/hierarchical.h"
#include "strata/comm/local.h"
#include "strata/comm/store.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::comm {
namespace {

using namespace std::chrono_literals;
using test::contains;
using test::message_of;

constexpr AllReduceOptions kBf16Sum{.op = ReduceOp::kSum, .compression = Compression::kBFloat16};
constexpr AllReduceOptions kBf16Mean{.op = ReduceOp::kMean, .compression = Compression::kBFloat16};

// Rank r's values: arbitrary floats in about [-3, 3] (most not representable in bfloat16, so rounding shows).
std::vector<float> values(int64_t n, int rank, int salt) {
  uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(1 + rank * 131 + salt * 7919);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>((state >> 33) % 1000003) / 1000003.0 * 6.0 - 3.0);
  }
  return v;
}

float bf16(float x) { return static_cast<float>(BFloat16(x)); }

// The bfloat16 sums element i can have: every rank's value rounded, then folded pairwise (float32 sum, rounded) in
// the order of some ring — a rotation of the ranks, either way round. Gloo's ring reduces each chunk along one.
std::vector<float> possible_sums(const std::vector<std::vector<float>>& by_rank, size_t i) {
  const int size = static_cast<int>(by_rank.size());
  std::vector<float> sums;
  for (int start = 0; start < size; ++start) {
    for (int step : {1, size - 1}) {
      float acc = bf16(by_rank[static_cast<size_t>(start)][i]);
      for (int k = 1; k < size; ++k) {
        acc = bf16(acc + bf16(by_rank[static_cast<size_t>((start + k * step) % size)][i]));
      }
      sums.push_back(acc);
    }
  }
  return sums;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> flat(const std::vector<Tensor>& tensors) {
  std::vector<float> out;
  for (const Tensor& t : tensors) {
    const auto v = t.to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

class GlooCompressionTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCompressionTest, TheBFloat16SumOnEveryRankWithHalfTheBytes) {
  const int size = GetParam();
  const std::vector<Shape> shapes = {{3, 5}, {37}};  // a bucket of two tensors: 52 elements
  constexpr int64_t kNumel = 52;
  std::vector<std::vector<float>> inputs;  // by rank, the bucket flattened
  for (int r = 0; r < size; ++r) inputs.push_back(values(kNumel, r, 1));
  std::vector<std::vector<float>> sums(size), means(size), plain(size);
  std::vector<int64_t> compressed_bytes(size), plain_bytes(size);
  std::vector<std::string> problems(size);
  auto store = make_in_memory_store(10s);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = make_gloo_communicator(store, r, size, {.timeout = 10s});
        auto bucket = [&] {
          std::vector<Tensor> b;
          int64_t offset = 0;
          for (const Shape& s : shapes) {
            const int64_t n = std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
            const auto first = inputs[r].begin() + offset;
            b.push_back(Tensor::from_vector(std::vector<float>(first, first + n), s));
            offset += n;
          }
          return b;
        };
        std::vector<Tensor> a = bucket(), m = bucket(), p = bucket();
        int64_t before = comm->all_reduce_wire_bytes();
        comm->all_reduce(a, kBf16Sum)->wait();
        compressed_bytes[r] = comm->all_reduce_wire_bytes() - before;
        comm->all_reduce(m, kBf16Mean)->wait();
        before = comm->all_reduce_wire_bytes();
        comm->all_reduce(p, ReduceOp::kSum)->wait();
        plain_bytes[r] = comm->all_reduce_wire_bytes() - before;
        sums[r] = flat(a);
        means[r] = flat(m);
        plain[r] = flat(p);
      } catch (const std::exception& e) {
        problems[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) ASSERT_EQ(problems[r], "") << "rank " << r;

  int rounded = 0;  // elements where the compressed sum differs from the float32 one: the path was taken
  for (size_t i = 0; i < static_cast<size_t>(kNumel); ++i) {
    const std::vector<float> possible = possible_sums(inputs, i);
    const float got = sums[0][i];
    EXPECT_NE(std::find(possible.begin(), possible.end(), got), possible.end())
        << "element " << i << ": " << got << " is no bfloat16 ring sum (the first is " << possible[0] << ")";
    EXPECT_EQ(got, bf16(got)) << "element " << i << " is not a bfloat16 value";
    EXPECT_EQ(means[0][i], got / static_cast<float>(size)) << "element " << i << ": mean is the widened sum / size";
    float magnitude = 0;  // each of the 2 size - 1 roundings errs by at most 2^-9 of a partial sum's magnitude
    for (int r = 0; r < size; ++r) magnitude += std::fabs(inputs[r][i]);
    EXPECT_NEAR(got, plain[0][i], static_cast<float>(2 * size - 1) * magnitude / 256) << "element " << i;
    rounded += got != plain[0][i];
  }
  EXPECT_GT(rounded, kNumel / 2);
  for (int r = 1; r < size; ++r) {
    EXPECT_TRUE(same_bits(sums[r], sums[0])) << "rank " << r << "'s sum differs from rank 0's";
    EXPECT_TRUE(same_bits(means[r], means[0])) << "rank " << r << "'s mean differs from rank 0's";
  }
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(plain_bytes[r], 4 * kNumel) << "rank " << r;
    EXPECT_EQ(compressed_bytes[r], 2 * kNumel) << "rank " << r << ": bfloat16 on the wire is half the bytes";
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooCompressionTest, ::testing::Values(1, 2, 3, 4));

TEST(GlooCompressionTest, OnlyFloat32SumsAreCompressed) {
  auto store = make_in_memory_store(10s);
  auto comm = make_gloo_communicator(store, 0, 1, {.timeout = 10s});
  std::string m = message_of<InvalidArgument>([&] {
    comm->all_reduce({Tensor::from_vector(std::vector<int64_t>{1, 2})}, kBf16Sum)->wait();
  });
  EXPECT_TRUE(contains(m, "all_reduce #1 on rank 0: bf16 compression wants float32 tensors, got int64")) << m;
  m = message_of<InvalidArgument>([&] {
    comm->all_reduce({Tensor::ones({4})}, {.op = ReduceOp::kMax, .compression = Compression::kBFloat16})->wait();
  });
  EXPECT_TRUE(contains(m, "bf16 compression wants sum or mean, got max")) << m;
  EXPECT_EQ(comm->all_reduce_wire_bytes(), 0);
}

// Two workers of two replicas: the replicas of a worker sum in float32, only the sum between the workers goes as
// bfloat16 (rank 0 of each local group on the gloo group), so the result is bf16(bf16(a0 + a1) + bf16(b0 + b1)).
TEST(GlooCompressionTest, HierarchicalCompressesAcrossTheWorkersOnly) {
  constexpr int kWorkers = 2, kLocal = 2, kNumel = 40;
  auto store = make_in_memory_store(10s);
  std::vector<std::vector<float>> inputs, results(kWorkers * kLocal);
  for (int g = 0; g < kWorkers * kLocal; ++g) inputs.push_back(values(kNumel, g, 2));
  std::vector<std::shared_ptr<Communicator>> cross(kWorkers);
  std::vector<std::string> problems(kWorkers);
  {
    std::vector<std::thread> connect;
    for (int w = 0; w < kWorkers; ++w) {
      connect.emplace_back([&, w] {
        try {
          cross[w] = make_gloo_communicator(store, w, kWorkers, {.timeout = 10s});
        } catch (const std::exception& e) {
          problems[w] = e.what();
        }
      });
    }
    for (auto& t : connect) t.join();
  }
  for (int w = 0; w < kWorkers; ++w) ASSERT_EQ(problems[w], "") << "worker " << w;
  std::vector<std::shared_ptr<Communicator>> ranks;
  for (int w = 0; w < kWorkers; ++w) {
    for (auto& r : make_hierarchical_group(make_local_group(kLocal, {.timeout = 10s}), cross[w])) ranks.push_back(r);
  }
  test::run_ranks(ranks, [&](int g, Communicator& comm) {
    Tensor x = Tensor::from_vector(inputs[g], Shape{kNumel});
    comm.all_reduce({x}, kBf16Sum)->wait();
    results[g] = x.to_vector<float>();
  });
  for (int i = 0; i < kNumel; ++i) {
    const float worker0 = inputs[0][i] + inputs[1][i], worker1 = inputs[2][i] + inputs[3][i];
    ASSERT_EQ(results[0][i], bf16(bf16(worker0) + bf16(worker1))) << "element " << i;
  }
  for (int g = 1; g < kWorkers * kLocal; ++g) EXPECT_TRUE(same_bits(results[g], results[0])) << "rank " << g;
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(cross[w]->all_reduce_wire_bytes(), 2 * kNumel) << "worker " << w;
}

// The local backend's ranks share memory: nothing to save, so it reduces in full precision.
TEST(LocalCompressionTest, LocalRanksReduceInFullPrecision) {
  auto group = make_local_group(2, {.timeout = 10s});
  std::vector<std::vector<float>> results(2);
  test::run_ranks(group, [&](int r, Communicator& comm) {
    Tensor x = Tensor::from_vector(values(16, r, 3), Shape{16});
    comm.all_reduce({x}, kBf16Sum)->wait();
    results[r] = x.to_vector<float>();
    EXPECT_EQ(comm.all_reduce_wire_bytes(), 0);
  });
  const auto a = values(16, 0, 3), b = values(16, 1, 3);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(results[0][i], a[i] + b[i]) << "element " << i;
}

}  // namespace
}  // namespace strata::comm
