// The gloo communicator (strata/comm/gloo.h) over 127.0.0.1: every collective for group sizes 1-4, as threads of
// one process (in-memory store) and as forked processes (file store in a temp dir), bitwise-equal on every rank and
// equal to a reference computed here; a rank that never joins a collective (Timeout within the timeout plus a
// margin, naming the collective), a rank stuck between steps (named with the last collective and step it reached,
// beside the failing rank's own last collectives), a rank that never connects, abort, ranks calling different
// collectives (both named, at once), and argument errors.
// Processes: each child has an alarm(); the parent waits with a deadline, kills what is left and reaps every child.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "strata/comm/gloo.h"
#include "strata/comm/store.h"
#include "strata/error.h"
#include "comm/comm_test_util.h"
#include "test_util.h"

namespace strata::comm {
namespace {

using test::contains;
using test::TempDir;

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::message_of;

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin};


// Rank r's tensor t: multiples of 1/8 in [-8, 8], so that sums of up to 4 ranks are exact in any order and the
// reference equals Gloo's ring bit for bit.
Tensor exact_tensor(const Shape& shape, int rank, int t, int salt) {
  Tensor x = Tensor::empty(shape);
  float* p = x.data<float>();
  uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(1 + rank * 131 + t * 17 + salt * 7919);
  for (int64_t i = 0; i < x.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<float>(static_cast<int>((state >> 33) % 129) - 64) / 8.0f;
  }
  return x;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data<float>(), b.data<float>(), a.nbytes()) == 0;
}

uint64_t fnv1a(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(t.data<float>());
  for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

const std::vector<Shape> kBucket = {{3, 5}, {7}, {1}, {2, 2, 2}};

// Every collective on `comm`, checked against references; returns the first problem or "". `results` receives
// every tensor the collectives produced (for the cross-rank bitwise comparison).
std::string run_all_collectives(Communicator& comm, std::vector<Tensor>* results) {
  const int size = comm.size(), rank = comm.rank();
  std::ostringstream problems;
  int salt = 0;
  for (ReduceOp op : kOps) {
    for (bool bucket : {false, true}) {
      const std::vector<Shape> shapes = bucket ? kBucket : std::vector<Shape>{{1000}};
      ++salt;
      std::vector<Tensor> mine;
      for (size_t t = 0; t < shapes.size(); ++t) mine.push_back(exact_tensor(shapes[t], rank, int(t), salt));
      comm.all_reduce(mine, op)->wait();
      for (size_t t = 0; t < shapes.size(); ++t) {
        Tensor want = exact_tensor(shapes[t], 0, int(t), salt);
        float* w = want.data<float>();
        for (int q = 1; q < size; ++q) {
          Tensor other = exact_tensor(shapes[t], q, int(t), salt);
          const float* o = other.data<float>();
          for (int64_t i = 0; i < want.numel(); ++i) {
            w[i] = op == ReduceOp::kMax ? std::max(w[i], o[i]) : op == ReduceOp::kMin ? std::min(w[i], o[i]) : w[i] + o[i];
          }
        }
        if (op == ReduceOp::kMean) {
          for (int64_t i = 0; i < want.numel(); ++i) w[i] /= static_cast<float>(size);
        }
        if (!same_bits(mine[t], want)) problems << "all_reduce " << to_string(op) << " tensor " << t << " differs; ";
        results->push_back(mine[t]);
      }
    }
  }
  // A large all-reduce of arbitrary floats (several Gloo segments): close to the reference here, and compared
  // bit for bit across ranks by the caller (the ring sums each element along one path, then copies it).
  {
    Tensor big = test::random_tensor({300001}, 77 + rank);
    comm.all_reduce({big}, ReduceOp::kSum)->wait();
    Tensor want = test::random_tensor({300001}, 77);
    for (int q = 1; q < size; ++q) {
      Tensor o = test::random_tensor({300001}, 77 + q);
      for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += o.data<float>()[i];
    }
    for (int64_t i = 0; i < want.numel(); ++i) {
      if (std::abs(big.data<float>()[i] - want.data<float>()[i]) > 1e-5f) {
        problems << "large all_reduce element " << i << " differs; ";
        break;
      }
    }
    results->push_back(big);
  }
  for (int root = 0; root < size; ++root) {
    std::vector<Tensor> mine;
    for (size_t t = 0; t < kBucket.size(); ++t) mine.push_back(exact_tensor(kBucket[t], rank, int(t), 100 + root));
    Tensor single = exact_tensor({33}, rank, 9, 200 + root);
    auto w1 = comm.broadcast(mine, root);
    auto w2 = comm.broadcast({single}, root);  // two in flight: they run in issue order
    w1->wait();
    w2->wait();
    for (size_t t = 0; t < kBucket.size(); ++t) {
      if (!same_bits(mine[t], exact_tensor(kBucket[t], root, int(t), 100 + root)))
        problems << "broadcast from " << root << " tensor " << t << " differs; ";
      results->push_back(mine[t]);
    }
    if (!same_bits(single, exact_tensor({33}, root, 9, 200 + root)))
      problems << "broadcast from " << root << " (one tensor) differs; ";
  }
  {
    Tensor input = exact_tensor({2, 3}, rank, 0, 300);
    Tensor output = Tensor::zeros({2 * size, 3});
    comm.all_gather(input, output)->wait();
    for (int q = 0; q < size; ++q) {
      Tensor want = exact_tensor({2, 3}, q, 0, 300);
      if (std::memcmp(output.data<float>() + q * 6, want.data<float>(), 6 * sizeof(float)) != 0)
        problems << "all_gather rows of rank " << q << " differ; ";
    }
    results->push_back(output);
  }
  for (ReduceOp op : kOps) {
    Tensor input = exact_tensor({2 * size, 3}, rank, 0, 400);
    const Tensor before = input.clone();
    Tensor output = Tensor::zeros({2, 3});
    comm.reduce_scatter(input, output, {.op = op})->wait();
    if (!same_bits(input, before)) problems << "reduce_scatter changed its input; ";
    Tensor want = Tensor::zeros({2, 3});
    for (int i = 0; i < 6; ++i) {
      float acc = exact_tensor({2 * size, 3}, 0, 0, 400).data<float>()[rank * 6 + i];
      for (int q = 1; q < size; ++q) {
        const float v = exact_tensor({2 * size, 3}, q, 0, 400).data<float>()[rank * 6 + i];
        acc = op == ReduceOp::kMax ? std::max(acc, v) : op == ReduceOp::kMin ? std::min(acc, v) : acc + v;
      }
      want.data<float>()[i] = op == ReduceOp::kMean ? acc / static_cast<float>(size) : acc;
    }
    if (!same_bits(output, want)) problems << "reduce_scatter " << to_string(op) << " differs; ";
  }
  comm.barrier();
  return problems.str();
}

void run_threads(int size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

class GlooThreadsTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooThreadsTest, EveryCollectiveMatchesTheReferenceBitwiseOnEveryRank) {
  const int size = GetParam();
  auto store = make_in_memory_store(10s);
  std::vector<std::vector<Tensor>> results(size);
  std::vector<std::string> problems(size);
  run_threads(size, [&](int r) {
    try {
      auto comm = make_gloo_communicator(store, r, size, {.timeout = 10s});
      EXPECT_EQ(comm->rank(), r);
      EXPECT_EQ(comm->size(), size);
      EXPECT_EQ(comm->backend(), "gloo");
      problems[r] = run_all_collectives(*comm, &results[r]);
    } catch (const std::exception& e) {
      problems[r] = e.what();
    }
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(problems[r], "") << "rank " << r;
  for (int r = 1; r < size; ++r) {
    ASSERT_EQ(results[r].size(), results[0].size());
    for (size_t i = 0; i < results[0].size(); ++i) EXPECT_TRUE(same_bits(results[r][i], results[0][i])) << "result " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooThreadsTest, ::testing::Values(1, 2, 3, 4));

// Forks `n` children running `child(i)` (its return value is the exit status; an exception is 100). The parent
// waits until `limit`, then kills the children still running (status 1000 = killed) and reaps all of them.
// `stop_early(i)`: children the parent kills as soon as every other child has exited (ranks that hang on purpose).
std::vector<int> run_processes(int n, const std::function<int(int)>& child, std::chrono::milliseconds limit,
                               const std::function<bool(int)>& stop_early = [](int) { return false; }) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(static_cast<unsigned>(limit.count() / 1000 + 2));  // dies on its own if the parent cannot kill it
      int status = 100;
      try {
        status = child(i);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", i, e.what());
      }
      ::_exit(status);
    }
    if (pid < 0) break;
    pids.push_back(pid);
  }
  std::vector<int> statuses(n, -1);
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    bool others_done = true;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (statuses[i] != -1) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        statuses[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      } else if (!stop_early(static_cast<int>(i))) {
        others_done = false;
      }
    }
    if (others_done) break;
    std::this_thread::sleep_for(2ms);
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (statuses[i] != -1) continue;
    ::kill(pids[i], SIGKILL);
    int status = 0;
    ::waitpid(pids[i], &status, 0);
    statuses[i] = 1000;
  }
  EXPECT_EQ(static_cast<int>(pids.size()), n) << "fork failed";
  return statuses;
}

class GlooProcessesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooProcessesTest, EveryCollectiveMatchesTheReferenceBitwiseInEveryProcess) {
  const int size = GetParam();
  TempDir dir;
  const auto statuses = run_processes(
      size,
      [&](int r) {
        auto store = make_file_store(dir.path(), 10s);
        std::vector<Tensor> results;
        std::string problems;
        {
          auto comm = make_gloo_communicator(store, r, size, {.timeout = 10s, .prefix = "job"});
          problems = run_all_collectives(*comm, &results);
        }
        // Bitwise across processes: every rank publishes digests of its results and compares the others'.
        std::string digest = problems.empty() ? "" : "failed:";
        for (const Tensor& t : results) digest += std::to_string(fnv1a(t)) + ",";
        store->set("digest-" + std::to_string(r), digest);
        if (!problems.empty()) {
          std::fprintf(stderr, "rank %d: %s\n", r, problems.c_str());
          return 1;
        }
        for (int q = 0; q < size; ++q) {
          if (store->get("digest-" + std::to_string(q)) != digest) {
            std::fprintf(stderr, "rank %d: results differ from rank %d's\n", r, q);
            return 2;
          }
        }
        return 0;
      },
      20s);
  for (int r = 0; r < size; ++r) EXPECT_EQ(statuses[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooProcessesTest, ::testing::Values(1, 2, 3, 4));

// ---- failures

TEST(GlooFaultTest, ARankThatNeverJoinsACollectiveTimesOutNamingIt) {
  for (int size : {2, 3}) {
    std::atomic<int> finished{0};
    std::string message, later, rank1_message;
    Clock::duration waited{};
    // Every rank but the last issues the all-reduce; the last stays connected and never joins it.
    auto store = make_in_memory_store(10s);
    run_threads(size, [&](int r) {
      auto comm = make_gloo_communicator(store, r, size, {.timeout = 300ms});
      if (r == size - 1) {
        while (finished.load() < size - 1) std::this_thread::sleep_for(1ms);
        return;
      }
      Tensor x = Tensor::ones({16});
      const auto start = Clock::now();
      const std::string m = message_of<Timeout>([&] { comm->all_reduce({x}, ReduceOp::kSum)->wait(); });
      if (r == 0) {
        message = m;
        waited = Clock::now() - start;
        later = message_of<Timeout>([&] { comm->broadcast({x}, 0)->wait(); });
      } else {
        rank1_message = m;
      }
      ++finished;
    });
    SCOPED_TRACE("size " + std::to_string(size));
    EXPECT_GE(waited, 300ms);
    EXPECT_LT(waited, 1300ms);
    EXPECT_TRUE(contains(message, "gloo group of " + std::to_string(size) + " (prefix 'gloo'): all_reduce #1 on rank 0 "
                                  "failed after "))
        << message;
    EXPECT_TRUE(contains(message, "(timeout 300 ms)")) << message;
    const std::string last = std::to_string(size - 1);
    EXPECT_TRUE(contains(message, "): rank " + last + " had not entered it; rank " + last +
                                      " had not reported where it stands; rank 0's last collectives: all_reduce #1 "
                                      "(64 B) failed after "))
        << message;
    if (size == 3) {
      EXPECT_TRUE(contains(rank1_message, "all_reduce #1 on rank 1")) << rank1_message;
      EXPECT_TRUE(contains(rank1_message, "rank 2 had not entered it")) << rank1_message;
    }
    EXPECT_TRUE(contains(message, "rebuild the group under a fresh store prefix")) << message;
    EXPECT_TRUE(contains(later, "broadcast #2 on rank 0 was not run: the communicator is unusable")) << later;
    EXPECT_TRUE(contains(later, "unusable since all_reduce #1 failed after ")) << later;
  }
}

// A rank alive but stuck between steps (an endless loop: its heartbeats would go on) issues nothing more; the others
// time out naming it with the last collective and step it reached, and list their own last collectives.
TEST(GlooFaultTest, ARankStuckBetweenStepsIsNamedWithItsLastCollectiveAndStep) {
  constexpr int kSize = 3;
  auto store = make_in_memory_store(10s);
  std::atomic<int> failed{0};
  std::vector<std::string> messages(kSize);
  std::vector<Clock::duration> waited(kSize);
  run_threads(kSize, [&](int r) {
    auto comm = make_gloo_communicator(store, r, kSize, {.timeout = 1s});
    Tensor grads = Tensor::ones({256});  // 1 KiB
    Tensor loss = Tensor::ones({1});
    for (int64_t step = 0; step < 2; ++step) {  // collectives #1-#4
      comm->set_step(step);
      comm->all_reduce({grads})->wait();
      comm->all_reduce({loss}, ReduceOp::kMean)->wait();
    }
    comm->set_step(2);
    if (r == kSize - 1) {  // stuck until the others have failed
      while (failed.load() < kSize - 1) std::this_thread::sleep_for(1ms);
      return;
    }
    const auto start = Clock::now();
    messages[r] = message_of<Timeout>([&] { comm->all_reduce({grads})->wait(); });  // #5
    waited[r] = Clock::now() - start;
    ++failed;
  });
  for (int r = 0; r < kSize - 1; ++r) {
    const std::string& m = messages[r];
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + m);
    EXPECT_GE(waited[r], 900ms);  // the peer rank fails when the first one closes its connections
    EXPECT_LT(waited[r], 2500ms);
    const std::string me = std::to_string(r);
    EXPECT_TRUE(contains(m, "all_reduce #5 on rank " + me + " failed after "));
    EXPECT_TRUE(contains(m, ": rank 2 had not entered it; rank 2 was last seen with all_reduce #4 (step 1, 4 B) "
                            "completed; rank " + me + "'s last collectives: all_reduce #2 (step 0, 4 B) completed in "));
    EXPECT_TRUE(contains(m, ", all_reduce #3 (step 1, 1 KiB) completed in "));
    EXPECT_TRUE(contains(m, ", all_reduce #5 (step 2, 1 KiB) failed after "));
    EXPECT_FALSE(contains(m, "rank " + std::to_string(1 - r) + " had not entered it"));
    EXPECT_FALSE(contains(m, "\n"));
  }
  std::printf("rank 0's message: %s\n", messages[0].c_str());
}

TEST(GlooFaultTest, ARankThatNeverJoinsACollectiveTimesOutAcrossProcesses) {
  TempDir dir;
  const auto statuses = run_processes(
      2,
      [&](int r) {
        auto store = make_file_store(dir.path(), 10s);
        auto comm = make_gloo_communicator(store, r, 2, {.timeout = 300ms});
        if (r == 1) {
          ::pause();  // alive and connected, never joins; the parent kills it
          return 3;
        }
        Tensor x = Tensor::ones({1024});
        const auto start = Clock::now();
        try {
          comm->all_reduce({x}, ReduceOp::kMean)->wait();
        } catch (const Timeout& e) {
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
          const std::string m = e.what();
          if (ms < 300 || ms > 1300) return 4;
          if (!contains(m, "all_reduce #1 on rank 0") || !contains(m, "timeout 300 ms") ||
              !contains(m, "rank 1 had not entered it") || !contains(m, "rebuild the group"))
            return 5;
          return 0;
        }
        return 6;
      },
      10s, [](int i) { return i == 1; });
  EXPECT_EQ(statuses[0], 0);
  EXPECT_EQ(statuses[1], 1000);  // killed by the parent, as planned
}

// Rank 1 stops itself (SIGSTOP: alive, connected, stuck) or is killed (SIGKILL) once connected; rank 0's all-reduce
// must fail within its timeout plus a margin, naming rank 1. Returns rank 0's exit status (0: as expected).
int run_with_lost_rank(bool stop, std::chrono::milliseconds* waited_out) {
  TempDir dir;
  std::string timing_file = dir.path() + "/waited";
  const auto statuses = run_processes(
      2,
      [&](int r) {
        auto store = make_file_store(dir.path() + "/store", 10s);
        auto comm = make_gloo_communicator(store, r, 2, {.timeout = 400ms});
        Tensor x = Tensor::ones({256});
        comm->all_reduce({x})->wait();  // both ranks are up and connected
        if (r == 1) {
          if (stop) ::raise(SIGSTOP);
          ::raise(SIGKILL);
          return 3;
        }
        std::this_thread::sleep_for(50ms);  // rank 1 is stopped or dead by now
        const auto start = Clock::now();
        try {
          comm->all_reduce({x})->wait();
        } catch (const Timeout& e) {
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
          if (std::FILE* f = std::fopen(timing_file.c_str(), "w")) {
            std::fprintf(f, "%lld", static_cast<long long>(ms));
            std::fclose(f);
          }
          const std::string m = e.what();
          if (!contains(m, "all_reduce #2 on rank 0") || !contains(m, "rank 1 had not entered it")) {
            std::fprintf(stderr, "unexpected message: %s\n", m.c_str());
            return 5;
          }
          return ms <= 400 + 900 ? 0 : 4;
        }
        return 6;
      },
      10s, [](int i) { return i == 1; });
  if (std::FILE* f = std::fopen(timing_file.c_str(), "r")) {
    long long ms = -1;
    if (std::fscanf(f, "%lld", &ms) == 1) *waited_out = std::chrono::milliseconds(ms);
    std::fclose(f);
  }
  EXPECT_TRUE(statuses[1] == 1000 || statuses[1] == 128 + SIGKILL) << statuses[1];
  return statuses[0];
}

TEST(GlooFaultTest, AStoppedProcessFailsThePeersWithinTheTimeoutNamingIt) {
  std::chrono::milliseconds waited{-1};
  EXPECT_EQ(run_with_lost_rank(true, &waited), 0);
  EXPECT_GE(waited.count(), 400);  // stopped, not gone: only the timeout tells
}

TEST(GlooFaultTest, AKilledProcessFailsThePeersAtOnceNamingIt) {
  std::chrono::milliseconds waited{-1};
  EXPECT_EQ(run_with_lost_rank(false, &waited), 0);
  EXPECT_GE(waited.count(), 0);
  EXPECT_LT(waited.count(), 400);  // its connections closed: no need to wait for the timeout
}

TEST(GlooFaultTest, ARankThatNeverConnectsIsNamed) {
  auto store = make_in_memory_store(10s);
  const auto start = Clock::now();
  const std::string message =
      message_of<Timeout>([&] { make_gloo_communicator(store, 0, 3, {.timeout = 300ms, .prefix = "lonely"}); });
  EXPECT_LT(Clock::now() - start, 1500ms);
  EXPECT_TRUE(contains(message, "gloo group of 3 (prefix 'lonely'): rank 0 could not connect within 300 ms: "
                                "ranks 1, 2 never joined"))
      << message;
}

TEST(GlooFaultTest, AbortFailsThePeersAtOnceQuotingTheReason) {
  auto store = make_in_memory_store(10s);
  std::string message, after;
  Clock::duration waited{};
  std::atomic<bool> started{false};
  run_threads(2, [&](int r) {
    auto comm = make_gloo_communicator(store, r, 2, {.timeout = 5s});
    if (r == 1) {
      while (!started.load()) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(50ms);
      comm->abort("replica 1 failed");
      after = message_of<Timeout>([&] { comm->barrier(); });
      return;
    }
    Tensor x = Tensor::ones({8});
    const auto start = Clock::now();
    auto work = comm->all_reduce({x}, ReduceOp::kSum);
    started = true;
    message = message_of<Timeout>([&] { work->wait(); });
    waited = Clock::now() - start;
  });
  EXPECT_LT(waited, 3s);  // well before the 5 s timeout
  EXPECT_TRUE(contains(message, "all_reduce #1 on rank 0")) << message;
  EXPECT_TRUE(contains(message, "the group was aborted by rank 1: replica 1 failed")) << message;
  EXPECT_TRUE(contains(after, "barrier #1 on rank 1 was not run")) << after;
  EXPECT_TRUE(contains(after, "unusable since it was aborted on rank 1: replica 1 failed")) << after;
}

// Ranks that call different collectives at the same point (rank 1 an all_gather of 4 KiB where rank 0 all-reduces
// 1.4 MiB) are both told, naming both calls, at once and before any data moves: never a Gloo abort of the process,
// never a wait for the timeout. The communicator is then unusable (the ranks are out of step).
TEST(GlooFaultTest, RanksCallingDifferentCollectivesAreToldWhichOnEachSide) {
  auto store = make_in_memory_store(10s);
  std::vector<std::string> messages(2), after(2);
  std::vector<Clock::duration> waited(2);
  run_threads(2, [&](int r) {
    auto comm = make_gloo_communicator(store, r, 2, {.timeout = 20s});
    const auto start = Clock::now();
    if (r == 0) {
      Tensor x = Tensor::ones({364544});  // 1.4 MiB of float32
      messages[0] = message_of<InvalidArgument>([&] { comm->all_reduce({x}, ReduceOp::kSum)->wait(); });
    } else {
      Tensor in = Tensor::ones({1024}), out = Tensor::ones({2048});  // 4 KiB in
      messages[1] = message_of<InvalidArgument>([&] { comm->all_gather(in, out)->wait(); });
    }
    waited[static_cast<size_t>(r)] = Clock::now() - start;
    Tensor y = Tensor::ones({1});
    after[static_cast<size_t>(r)] = message_of<Error>([&] { comm->all_reduce({y})->wait(); });
  });
  EXPECT_TRUE(contains(messages[0], "all_reduce #1 on rank 0: collective #1: rank 1 called all_gather of float32 "
                                    "(4 KiB) where rank 0 called all_reduce of float32 (1.4 MiB, sum)"))
      << messages[0];
  EXPECT_TRUE(contains(messages[1], "rank 0 called all_reduce of float32 (1.4 MiB, sum) where rank 1 called "
                                    "all_gather of float32 (4 KiB)"))
      << messages[1];
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(waited[static_cast<size_t>(r)], 5s) << r;  // far inside the 20 s timeout
    EXPECT_TRUE(contains(after[static_cast<size_t>(r)], "rank 1 called all_gather")) << after[static_cast<size_t>(r)];
  }
}

TEST(GlooCommunicatorTest, ArgumentErrors) {
  auto store = make_in_memory_store(5s);
  EXPECT_THROW(make_gloo_communicator(store, 2, 2), InvalidArgument);
  EXPECT_THROW(make_gloo_communicator(nullptr, 0, 1), InvalidArgument);
  auto comm = make_gloo_communicator(store, 0, 1, {.timeout = 1s, .prefix = "solo"});
  const std::string reused =
      message_of<InvalidArgument>([&] { make_gloo_communicator(store, 0, 1, {.timeout = 1s, .prefix = "solo"}); });
  EXPECT_TRUE(contains(reused, "rank 0 already joined a group under this prefix")) << reused;

  Tensor bytes = Tensor::zeros({4}, DType::kUInt8);
  std::string m = message_of<InvalidArgument>([&] { comm->all_reduce({bytes}, ReduceOp::kSum)->wait(); });
  EXPECT_TRUE(contains(m, "all_reduce #1 on rank 0: tensor 0 is uint8, wants float32, bfloat16 or int64")) << m;
  m = message_of<InvalidArgument>(
      [&] { comm->all_reduce({Tensor::ones({2}), Tensor::zeros({2}, DType::kInt64)}, ReduceOp::kSum)->wait(); });
  EXPECT_TRUE(contains(m, "tensor 1 is int64 but tensor 0 is float32 (one dtype per call)")) << m;
  m = message_of<InvalidArgument>([&] { comm->all_reduce({Tensor::ones({2})}, {.timeout = std::chrono::milliseconds(0)})->wait(); });
  EXPECT_TRUE(contains(m, "timeout must be positive, got 0 ms")) << m;
  m = message_of<InvalidArgument>([&] { comm->broadcast({Tensor::ones({2})}, 1)->wait(); });
  EXPECT_TRUE(contains(m, "root 1 is not a rank of a group of 1")) << m;
  m = message_of<InvalidArgument>([&] { comm->all_gather(Tensor::ones({2, 3}), Tensor::ones({3, 3}))->wait(); });
  EXPECT_TRUE(contains(m, "output is [3, 3], wants [2, 3]")) << m;
  // An argument error leaves the group usable.
  Tensor x = Tensor::full({3}, 2.0);
  comm->all_reduce({x}, ReduceOp::kMean)->wait();
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

TEST(GlooCommunicatorTest, Int64AndBFloat16MatchTheReferenceOnEveryRank) {
  for (int size : {2, 3}) {
    auto store = make_in_memory_store(10s);
    std::vector<std::string> problems(size);
    run_threads(size, [&](int r) {
      auto comm = make_gloo_communicator(store, r, size, {.timeout = 10s});
      std::ostringstream out;
      for (ReduceOp op : kOps) {
        // int64 near the top of the range: sums wrap around, mean divides the wrapped sum rounding toward zero.
        std::vector<int64_t> mine = {int64_t{1} << 62, -7 - r, 1000 * r, -(r % 2) * 5};
        Tensor a = Tensor::from_vector(mine);
        Tensor b = Tensor::from_vector(std::vector<int64_t>{r, 2 * r + 1});  // a bucket of two int64 tensors
        comm->all_reduce({a, b}, op)->wait();
        for (size_t i = 0; i < mine.size(); ++i) {
          uint64_t sum = 0;
          int64_t mx = INT64_MIN, mn = INT64_MAX;
          for (int q = 0; q < size; ++q) {
            const std::vector<int64_t> theirs = {int64_t{1} << 62, -7 - q, 1000 * q, -(q % 2) * 5};
            sum += static_cast<uint64_t>(theirs[i]);
            mx = std::max(mx, theirs[i]);
            mn = std::min(mn, theirs[i]);
          }
          const int64_t s64 = static_cast<int64_t>(sum);
          const int64_t want = op == ReduceOp::kSum ? s64 : op == ReduceOp::kMean ? s64 / size : op == ReduceOp::kMax ? mx : mn;
          if (a.data<int64_t>()[i] != want) out << "int64 " << to_string(op) << " element " << i << "; ";
        }
        int64_t bsum = 0;
        for (int q = 0; q < size; ++q) bsum += 2 * q + 1;
        if (op == ReduceOp::kSum && b.data<int64_t>()[1] != bsum) out << "int64 bucket; ";
        // bfloat16: reduced in float32 and rounded once.
        Tensor h = Tensor::empty({5}, DType::kBFloat16);
        for (int i = 0; i < 5; ++i) h.data<BFloat16>()[i] = BFloat16(0.1f * (i + 1) + r);
        comm->all_reduce({h}, op)->wait();
        for (int i = 0; i < 5; ++i) {
          float acc = static_cast<float>(BFloat16(0.1f * (i + 1)));
          for (int q = 1; q < size; ++q) {
            const float v = static_cast<float>(BFloat16(0.1f * (i + 1) + q));
            acc = op == ReduceOp::kMax ? std::max(acc, v) : op == ReduceOp::kMin ? std::min(acc, v) : acc + v;
          }
          if (op == ReduceOp::kMean) acc /= static_cast<float>(size);
          if (h.data<BFloat16>()[i].bits != BFloat16(acc).bits) out << "bfloat16 " << to_string(op) << " element " << i << "; ";
        }
      }
      // Broadcast and all_gather move bytes: any of the three dtypes.
      Tensor ints = Tensor::from_vector(std::vector<int64_t>{10 * r, 10 * r + 1});
      comm->broadcast({ints}, size - 1)->wait();
      if (ints.to_vector<int64_t>() != std::vector<int64_t>{10 * (size - 1), 10 * (size - 1) + 1}) out << "int64 broadcast; ";
      Tensor in = Tensor::full({3}, 1.0 + r, DType::kBFloat16);
      Tensor gathered = Tensor::zeros({3 * size}, DType::kBFloat16);
      comm->all_gather(in, gathered)->wait();
      for (int q = 0; q < size; ++q) {
        for (int i = 0; i < 3; ++i) {
          if (static_cast<float>(gathered.data<BFloat16>()[3 * q + i]) != 1.0f + q) out << "bfloat16 all_gather; ";
        }
      }
      problems[r] = out.str();
    });
    for (int r = 0; r < size; ++r) EXPECT_EQ(problems[r], "") << "size " << size << " rank " << r;
  }
}

TEST(GlooFaultTest, APerCallTimeoutBoundsThatCollective) {
  auto store = make_in_memory_store(10s);
  std::atomic<bool> done{false};
  std::string message;
  Clock::duration waited{};
  run_threads(2, [&](int r) {
    auto comm = make_gloo_communicator(store, r, 2, {.timeout = 20s});
    if (r == 1) {
      comm->barrier({.timeout = 5s});  // a first barrier with a per-call timeout passes
      while (!done.load()) std::this_thread::sleep_for(1ms);
      return;
    }
    comm->barrier({.timeout = 5s});
    Tensor x = Tensor::ones({4});
    const auto start = Clock::now();
    message = message_of<Timeout>([&] { comm->all_reduce({x}, {.op = ReduceOp::kMax, .timeout = 250ms})->wait(); });
    waited = Clock::now() - start;
    done = true;
  });
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 1500ms);  // not the group's 20 s
  EXPECT_TRUE(contains(message, "all_reduce #2 on rank 0 failed after ")) << message;
  EXPECT_TRUE(contains(message, "(timeout 250 ms): rank 1 had not entered it")) << message;
  // Rank 1 stands still after a barrier with a 5 s timeout, so it reports where it stands after 1 s: not yet.
  EXPECT_TRUE(contains(message, "rank 1 had not reported where it stands; rank 0's last collectives: barrier #1 "
                                "completed in "))
      << message;
}

TEST(GlooCommunicatorTest, SubGroupsRunIndependentlyAndNest) {
  auto store = make_in_memory_store(10s);
  std::vector<std::string> problems(4);
  run_threads(4, [&](int r) {
    std::ostringstream out;
    auto world = make_gloo_communicator(store, r, 4, {.timeout = 10s});
    // Even and odd ranks; each rank's k-th call for the same ranks joins the same group.
    auto pair = world->new_group(r % 2 == 0 ? std::vector<int>{2, 0} : std::vector<int>{1, 3});
    auto evens = world->new_group({0, 2});
    if ((evens != nullptr) != (r % 2 == 0)) out << "new_group({0, 2}) membership; ";
    if (!pair || pair->size() != 2 || pair->rank() != r / 2) {
      out << "pair group rank/size; ";
    } else {
      Tensor x = Tensor::full({3}, 1.0 + r);
      pair->all_reduce({x}, ReduceOp::kSum)->wait();
      const float want = r % 2 == 0 ? 1 + 3 : 2 + 4;  // ranks 0+2 or 1+3, each holding 1 + rank
      if (x.to_vector<float>() != std::vector<float>(3, want)) out << "pair all_reduce; ";
      auto alone = pair->new_group({pair->rank()});  // nests: a group of one inside the pair
      Tensor y = Tensor::full({2}, 5.0);
      alone->all_reduce({y}, ReduceOp::kMean)->wait();
      if (alone->size() != 1 || y.to_vector<float>() != std::vector<float>(2, 5.0f)) out << "nested group; ";
    }
    if (evens) {
      Tensor z = Tensor::full({1}, static_cast<double>(r));
      evens->all_reduce({z}, ReduceOp::kMax)->wait();
      if (z.to_vector<float>()[0] != 2.0f) out << "second even group; ";
    }
    Tensor w = Tensor::ones({2});
    world->all_reduce({w}, ReduceOp::kSum)->wait();  // the parent still works
    if (w.to_vector<float>() != std::vector<float>(2, 4.0f)) out << "world after sub-groups; ";
    problems[r] = out.str();
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(problems[r], "") << "rank " << r;
  auto solo = make_gloo_communicator(store, 0, 1, {.timeout = 1s, .prefix = "solo"});
  EXPECT_TRUE(contains(message_of<InvalidArgument>([&] { solo->new_group({0, 0}); }), "name a rank twice"));
  EXPECT_TRUE(contains(message_of<InvalidArgument>([&] { solo->new_group({1}); }), "are not all ranks of the group"));
  EXPECT_TRUE(contains(message_of<InvalidArgument>([&] { solo->send({Tensor::ones({1})}, 0)->wait(); }),
                       "send #1 to rank 0 (tag 0) on rank 0: destination rank 0 is this rank"));
  const std::string m = message_of<InvalidArgument>(
      [&] { solo->reduce_scatter(Tensor::ones({3}), Tensor::ones({2}), {})->wait(); });
  EXPECT_TRUE(contains(m, "reduce_scatter #1 on rank 0: output is [2], wants [3] (input [3] / 1)")) << m;
}

TEST(GlooCommunicatorTest, WorkWaitWithATimeoutAndException) {
  auto store = make_in_memory_store(10s);
  std::atomic<bool> go{false};
  std::string early;
  bool null_while_running = false, null_after_success = false, set_after_failure = false;
  run_threads(2, [&](int r) {
    auto comm = make_gloo_communicator(store, r, 2, {.timeout = 5s});
    Tensor x = Tensor::ones({4});
    if (r == 1) {
      while (!go.load()) std::this_thread::sleep_for(1ms);
      comm->all_reduce({x})->wait();
      // Every rank issues the same sequence, a rejected call included (it takes a sequence number everywhere).
      EXPECT_THROW(comm->all_reduce({Tensor::zeros({2}, DType::kUInt8)})->wait(), InvalidArgument);
      comm->barrier();
      return;
    }
    auto work = comm->all_reduce({x});
    early = message_of<Timeout>([&] { work->wait(50ms); });  // rank 1 has not issued it yet
    null_while_running = work->exception() == nullptr;
    go = true;
    work->wait(5s);
    null_after_success = work->exception() == nullptr && x.to_vector<float>() == std::vector<float>(4, 2.0f);
    auto bad = comm->all_reduce({Tensor::zeros({2}, DType::kUInt8)});
    EXPECT_THROW(bad->wait(1s), InvalidArgument);
    set_after_failure = bad->exception() != nullptr;
    comm->barrier();
  });
  EXPECT_TRUE(contains(early, "gloo: all_reduce #1 on rank 0 did not complete within 50 ms")) << early;
  EXPECT_TRUE(null_while_running);
  EXPECT_TRUE(null_after_success);
  EXPECT_TRUE(set_after_failure);
}

TEST(GlooCommunicatorTest, SendAndRecvMatchBySourceAndTagInOrder) {
  for (int size : {2, 3}) {
    auto store = make_in_memory_store(10s);
    std::vector<std::string> problems(size);
    run_threads(size, [&](int r) {
      std::ostringstream out;
      auto comm = make_gloo_communicator(store, r, size, {.timeout = 10s});
      const int next = (r + 1) % size, prev = (r + size - 1) % size;
      // A ring: every rank sends before it receives (sends never hold up the queue).
      Tensor mine = Tensor::full({5}, 10.0 * r);
      Tensor got = Tensor::zeros({5});
      auto s1 = comm->send({mine}, next);
      comm->recv({got}, prev)->wait();
      s1->wait();
      if (got.to_vector<float>() != std::vector<float>(5, 10.0f * prev)) out << "ring; ";
      // Tags: two messages to the next rank, received in the other order; a bucket of two tensors of int64.
      auto a = comm->send({Tensor::full({2}, 1.0 + r)}, next, 7);
      auto b = comm->send({Tensor::from_vector(std::vector<int64_t>{r, -r}), Tensor::from_vector(std::vector<int64_t>{42})},
                          next, SendOptions{.tag = 9, .timeout = 5s});
      Tensor i1 = Tensor::zeros({2}, DType::kInt64), i2 = Tensor::zeros({1}, DType::kInt64);
      comm->recv({i1, i2}, prev, 9)->wait();
      Tensor f = Tensor::zeros({2});
      comm->recv({f}, prev, 7)->wait();
      a->wait();
      b->wait();
      if (i1.to_vector<int64_t>() != std::vector<int64_t>{prev, -prev} || i2.to_vector<int64_t>()[0] != 42) out << "tag 9; ";
      if (f.to_vector<float>() != std::vector<float>(2, 1.0f + prev)) out << "tag 7; ";
      // Same tag twice: first sent, first received.
      auto c1 = comm->send({Tensor::full({1}, 1.0)}, next, 3);
      auto c2 = comm->send({Tensor::full({1}, 2.0)}, next, 3);
      Tensor first = Tensor::zeros({1}), second = Tensor::zeros({1});
      comm->recv({first}, prev, 3)->wait();
      comm->recv({second}, prev, 3)->wait();
      c1->wait();
      c2->wait();
      if (first.to_vector<float>()[0] != 1.0f || second.to_vector<float>()[0] != 2.0f) out << "FIFO per tag; ";
      // Collectives still line up across ranks after messages (numbered apart from them).
      Tensor x = Tensor::ones({3});
      comm->all_reduce({x})->wait();
      if (x.to_vector<float>() != std::vector<float>(3, static_cast<float>(size))) out << "all_reduce after p2p; ";
      problems[r] = out.str();
    });
    for (int r = 0; r < size; ++r) EXPECT_EQ(problems[r], "") << "size " << size << " rank " << r;
  }
}

TEST(GlooFaultTest, ARecvWithNoSenderTimesOutNamingThePeer) {
  auto store = make_in_memory_store(10s);
  std::atomic<bool> done{false};
  std::string message;
  Clock::duration waited{};
  run_threads(2, [&](int r) {
    auto comm = make_gloo_communicator(store, r, 2, {.timeout = 10s});
    if (r == 1) {
      // Rank 1 sends only on tag 1 (never taken) and never on tag 2.
      auto unmatched = comm->send({Tensor::ones({2})}, 0, 1);
      while (!done.load()) std::this_thread::sleep_for(1ms);
      EXPECT_THROW(unmatched->wait(), Timeout);  // its peer's group broke: the send fails (within its timeout)
      return;
    }
    Tensor x = Tensor::zeros({2});
    const auto start = Clock::now();
    message = message_of<Timeout>([&] { comm->recv({x}, 1, RecvOptions{.tag = 2, .timeout = 300ms})->wait(); });
    waited = Clock::now() - start;
    done = true;
  });
  EXPECT_GE(waited, 300ms);
  EXPECT_LT(waited, 1500ms);
  EXPECT_TRUE(contains(message, "recv #1 from rank 1 (tag 2) on rank 0 failed after ")) << message;
  EXPECT_TRUE(contains(message, "(timeout 300 ms): rank 1 had not posted the matching send")) << message;
}

}  // namespace
}  // namespace strata::comm
