// The mpi communicator (strata/comm/mpi.h). Run plainly (by ctest), the binary re-executes itself under
// `timeout -s KILL 120 mpirun --allow-run-as-root --oversubscribe -np N` with a --gtest_filter naming one MpiChild
// test; a process started that way (OMPI_COMM_WORLD_SIZE set) runs that child test as one rank. Covered: every
// collective for N = 1-4 (and float32 all_reduce with bfloat16 compression), each rank's results equal to a
// reference computed here and their hashes written to a file per rank, which the parent compares across ranks
// (bitwise-equal on every rank); a rank that never joins a collective (Timeout within the timeout plus a margin on
// the others, naming it and listing their last collectives with bytes and step, then mpirun ends and no process is
// left); abort; make_mpi_communicator outside mpirun (Unavailable, no MPI_Init). Skipped when `mpirun` is not on
// the PATH.
// Processes: mpirun runs under `timeout -s KILL`; the parent checks afterwards that every rank's pid is gone.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm/comm_test_util.h"
#include "strata/comm/mpi.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::contains;
using test::message_of;
using test::TempDir;

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin};

bool is_child() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

std::string child_dir() {
  const char* dir = std::getenv("STRATA_MPI_TEST_DIR");
  return dir ? dir : "";
}

uint64_t next(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return state >> 33;
}

// Rank r's values for case `salt`: multiples of 1/8 in [-8, 8] (exact: sums of up to 4 ranks in any order are
// exact, in float32 and in bfloat16's float32 accumulation), or arbitrary floats when !exact.
std::vector<float> values(int64_t n, int rank, int salt, bool exact = true) {
  uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(1 + rank * 131 + salt * 7919);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    const uint64_t r = next(state);
    x = exact ? static_cast<float>(static_cast<int>(r % 129) - 64) / 8.0f
              : static_cast<float>(static_cast<double>(r % 1000003) / 1000003.0 * 2.0 - 1.0) * 3.14159f;
  }
  return v;
}

std::vector<int64_t> int_values(int64_t n, int rank, int salt) {
  uint64_t state = 0xD1B54A32D192ED03ull * static_cast<uint64_t>(1 + rank * 31 + salt * 101);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& x : v) x = static_cast<int64_t>(next(state) % 2000000007ull) - 1000000003 + (int64_t{1} << 40);
  return v;
}

float combine(float a, float b, ReduceOp op) {
  return op == ReduceOp::kMax ? std::max(a, b) : op == ReduceOp::kMin ? std::min(a, b) : a + b;
}
int64_t combine(int64_t a, int64_t b, ReduceOp op) {
  return op == ReduceOp::kMax ? std::max(a, b) : op == ReduceOp::kMin ? std::min(a, b) : a + b;
}

uint64_t fnv1a(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Records each result's hash for the parent, which compares the files of all ranks line by line.
class Results {
 public:
  void add(const std::string& name, const Tensor& t) { out_ << name << ' ' << std::hex << fnv1a(t) << std::dec << '\n'; }
  void write(int rank) const {
    std::ofstream file(child_dir() + "/results-" + std::to_string(rank));
    file << out_.str();
  }

 private:
  std::ostringstream out_;
};

// ---------------------------------------------------------------------------------------------------- the ranks

TEST(MpiChild, EveryCollective) {
  if (!is_child()) GTEST_SKIP() << "runs as a rank under mpirun, started by MpiCommunicator.EveryCollective*";
  auto comm = make_mpi_communicator({.timeout = 20s});
  const int rank = comm->rank(), n = comm->size();
  ASSERT_EQ(n, std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  ASSERT_EQ(rank, std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  EXPECT_EQ(comm->backend(), "mpi");
  {
    int provided = 0;
    MPI_Query_thread(&provided);
    const char* level = std::getenv("STRATA_MPI_THREAD_LEVEL");
    if (level && std::string(level) == "serialized") {
      EXPECT_EQ(provided, MPI_THREAD_SERIALIZED);  // every MPI call then runs under strata's one lock
    } else {
      EXPECT_GE(provided, MPI_THREAD_SERIALIZED);
    }
  }
  Results results;
  int salt = 0;

  // all_reduce, float32, a bucket of two tensors, every op.
  for (ReduceOp op : kOps) {
    ++salt;
    const Shape shapes[] = {{3, 5}, {37}};
    std::vector<Tensor> mine, want;
    for (int t = 0; t < 2; ++t) {
      const int64_t numel = t == 0 ? 15 : 37;
      mine.push_back(Tensor::from_vector(values(numel, rank, salt * 2 + t), shapes[t]));
      std::vector<float> ref = values(numel, 0, salt * 2 + t);
      for (int r = 1; r < n; ++r) {
        const auto v = values(numel, r, salt * 2 + t);
        for (size_t i = 0; i < ref.size(); ++i) ref[i] = combine(ref[i], v[i], op);
      }
      if (op == ReduceOp::kMean) for (float& x : ref) x /= static_cast<float>(n);
      want.push_back(Tensor::from_vector(ref, shapes[t]));
    }
    comm->all_reduce(mine, op)->wait();
    for (int t = 0; t < 2; ++t) {
      EXPECT_TRUE(same_bytes(mine[t], want[t])) << "float32 all_reduce " << to_string(op) << " tensor " << t;
      results.add("f32-" + to_string(op) + "-" + std::to_string(t), mine[t]);
    }
  }

  // all_reduce, arbitrary float32 sums (order-dependent rounding): every rank gets the same bits (checked by the
  // parent), close to the reference; small and large (MPI picks other algorithms for large messages).
  for (int64_t count : {int64_t{1000}, int64_t{300000}}) {
    ++salt;
    Tensor mine = Tensor::from_vector(values(count, rank, salt, false), Shape{count});
    std::vector<double> ref(static_cast<size_t>(count), 0.0);
    for (int r = 0; r < n; ++r) {
      const auto v = values(count, r, salt, false);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += v[i];
    }
    comm->all_reduce({mine}, {.op = ReduceOp::kSum, .timeout = 10s})->wait();
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(mine.data<float>()[i], ref[i], 1e-5) << "element " << i;
    results.add("f32-inexact-sum-" + std::to_string(count), mine);
  }

  // all_reduce with bfloat16 compression (sum, then mean) of arbitrary float32 values, small and large: every rank
  // gets the same bits (checked by the parent); with 1 or 2 ranks exactly bf16(bf16(a) + bf16(b)), with more within
  // the 2n - 1 roundings' bound of the sum in any order; the mean is the widened sum / n; half the bytes on the wire.
  for (int64_t count : {int64_t{1000}, int64_t{300000}}) {
    ++salt;
    const auto bf16 = [](float x) { return static_cast<float>(BFloat16(x)); };
    Tensor sum = Tensor::from_vector(values(count, rank, salt, false), Shape{count});
    Tensor mean = sum.clone();
    const int64_t before = comm->all_reduce_wire_bytes();
    comm->all_reduce({sum}, {.op = ReduceOp::kSum, .compression = Compression::kBFloat16})->wait();
    EXPECT_EQ(comm->all_reduce_wire_bytes() - before, 2 * count) << "bfloat16 on the wire: 2 bytes an element";
    comm->all_reduce({mean}, {.op = ReduceOp::kMean, .compression = Compression::kBFloat16})->wait();
    std::vector<std::vector<float>> by_rank;
    for (int r = 0; r < n; ++r) by_rank.push_back(values(count, r, salt, false));
    for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
      const float got = sum.data<float>()[i];
      if (n <= 2) {
        const float want = n == 1 ? bf16(by_rank[0][i]) : bf16(bf16(by_rank[0][i]) + bf16(by_rank[1][i]));
        ASSERT_EQ(got, want) << "bfloat16-compressed sum, element " << i;
      } else {
        double exact = 0, magnitude = 0;
        for (int r = 0; r < n; ++r) {
          exact += by_rank[r][i];
          magnitude += std::fabs(by_rank[r][i]);
        }
        ASSERT_NEAR(got, exact, (2 * n - 1) * magnitude / 512) << "bfloat16-compressed sum, element " << i;
      }
      ASSERT_EQ(mean.data<float>()[i], got / static_cast<float>(n)) << "bfloat16-compressed mean, element " << i;
    }
    results.add("bf16-wire-sum-" + std::to_string(count), sum);
    results.add("bf16-wire-mean-" + std::to_string(count), mean);
  }

  // all_reduce, bfloat16: accumulated in float32, rounded once.
  for (ReduceOp op : kOps) {
    ++salt;
    auto to_bf16 = [](const std::vector<float>& v) {
      Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, DType::kBFloat16);
      for (size_t i = 0; i < v.size(); ++i) t.data<BFloat16>()[i] = BFloat16(v[i]);
      return t;
    };
    Tensor mine = to_bf16(values(33, rank, salt));
    std::vector<float> ref = values(33, 0, salt);
    for (int r = 1; r < n; ++r) {
      const auto v = values(33, r, salt);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = combine(ref[i], v[i], op);
    }
    if (op == ReduceOp::kMean) for (float& x : ref) x /= static_cast<float>(n);
    comm->all_reduce({mine}, op)->wait();
    EXPECT_TRUE(same_bytes(mine, to_bf16(ref))) << "bfloat16 all_reduce " << to_string(op);
    results.add("bf16-" + to_string(op), mine);
  }

  // all_reduce, int64.
  for (ReduceOp op : kOps) {
    ++salt;
    Tensor mine = Tensor::from_vector(int_values(21, rank, salt), Shape{21});
    std::vector<int64_t> ref = int_values(21, 0, salt);
    for (int r = 1; r < n; ++r) {
      const auto v = int_values(21, r, salt);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = combine(ref[i], v[i], op);
    }
    if (op == ReduceOp::kMean) for (int64_t& x : ref) x /= n;
    comm->all_reduce({mine}, op)->wait();
    EXPECT_TRUE(same_bytes(mine, Tensor::from_vector(ref, Shape{21}))) << "int64 all_reduce " << to_string(op);
    results.add("i64-" + to_string(op), mine);
  }

  // broadcast from every root: a bucket of two tensors (float32), and one int64 tensor.
  for (int root = 0; root < n; ++root) {
    ++salt;
    std::vector<Tensor> mine = {Tensor::from_vector(values(6, rank, salt), Shape{2, 3}),
                                Tensor::from_vector(values(5, rank, salt + 1000), Shape{5})};
    Tensor ints = Tensor::from_vector(int_values(4, rank, salt), Shape{4});
    auto w1 = comm->broadcast(mine, root);
    auto w2 = comm->broadcast({ints}, {.root = root, .timeout = 10s});
    w1->wait();
    w2->wait();
    EXPECT_TRUE(same_bytes(mine[0], Tensor::from_vector(values(6, root, salt), Shape{2, 3}))) << "root " << root;
    EXPECT_TRUE(same_bytes(mine[1], Tensor::from_vector(values(5, root, salt + 1000), Shape{5}))) << "root " << root;
    EXPECT_TRUE(same_bytes(ints, Tensor::from_vector(int_values(4, root, salt), Shape{4}))) << "root " << root;
    results.add("bcast-" + std::to_string(root), mine[0]);
  }

  // all_gather: [2, 3] per rank -> [2n, 3].
  {
    ++salt;
    Tensor input = Tensor::from_vector(values(6, rank, salt), Shape{2, 3});
    Tensor output = Tensor::zeros(Shape{2 * n, 3});
    comm->all_gather(input, output)->wait();
    std::vector<float> ref;
    for (int r = 0; r < n; ++r) {
      const auto v = values(6, r, salt);
      ref.insert(ref.end(), v.begin(), v.end());
    }
    EXPECT_TRUE(same_bytes(output, Tensor::from_vector(ref, Shape{2 * n, 3}))) << "all_gather";
    results.add("all_gather", output);
  }

  // reduce_scatter: [2n, 3] -> [2, 3], float32 (every op) and int64 sum; the input is left as it was.
  for (ReduceOp op : kOps) {
    ++salt;
    Tensor input = Tensor::from_vector(values(6 * n, rank, salt), Shape{2 * n, 3});
    Tensor before = input.clone();
    Tensor output = Tensor::zeros(Shape{2, 3});
    comm->reduce_scatter(input, output, {.op = op})->wait();
    std::vector<float> ref = values(6 * n, 0, salt);
    for (int r = 1; r < n; ++r) {
      const auto v = values(6 * n, r, salt);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = combine(ref[i], v[i], op);
    }
    if (op == ReduceOp::kMean) for (float& x : ref) x /= static_cast<float>(n);
    std::vector<float> mine_ref(ref.begin() + 6 * rank, ref.begin() + 6 * rank + 6);
    EXPECT_TRUE(same_bytes(output, Tensor::from_vector(mine_ref, Shape{2, 3}))) << "reduce_scatter " << to_string(op);
    EXPECT_TRUE(same_bytes(input, before)) << "reduce_scatter changed its input";
  }
  {
    ++salt;
    Tensor input = Tensor::from_vector(int_values(2 * n, rank, salt), Shape{2 * n});
    Tensor output = Tensor::zeros(Shape{2}, DType::kInt64);
    comm->reduce_scatter(input, output)->wait();
    std::vector<int64_t> ref = int_values(2 * n, 0, salt);
    for (int r = 1; r < n; ++r) {
      const auto v = int_values(2 * n, r, salt);
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += v[i];
    }
    EXPECT_TRUE(same_bytes(output, Tensor::from_vector(std::vector<int64_t>{ref[2 * rank], ref[2 * rank + 1]},
                                                       Shape{2})));
  }

  comm->barrier();
  comm->barrier({.timeout = 10s});

  // send/recv around the ring, two tags sent in one order and received in the other.
  if (n >= 2) {
    ++salt;
    const int to = (rank + 1) % n, from = (rank + n - 1) % n;
    Tensor a = Tensor::from_vector(values(4, rank, salt), Shape{4});
    Tensor b = Tensor::from_vector(values(3, rank, salt + 1), Shape{3});
    auto s1 = comm->send({a}, to, 7);
    auto s2 = comm->send({b}, to, 3);
    Tensor got_b = Tensor::zeros(Shape{3}), got_a = Tensor::zeros(Shape{4});
    comm->recv({got_b}, from, 3)->wait();
    comm->recv({got_a}, from, RecvOptions{.tag = 7, .timeout = 10s})->wait();
    s1->wait();
    s2->wait();
    EXPECT_TRUE(same_bytes(got_a, Tensor::from_vector(values(4, from, salt), Shape{4})));
    EXPECT_TRUE(same_bytes(got_b, Tensor::from_vector(values(3, from, salt + 1), Shape{3})));
  }

  // new_group: all ranks but the last (all of them when n == 1); non-members get nullptr.
  {
    ++salt;
    std::vector<int> members;
    for (int r = 0; r < std::max(1, n - 1); ++r) members.push_back(r);
    auto sub = comm->new_group(members);
    if (rank < static_cast<int>(members.size())) {
      ASSERT_NE(sub, nullptr);
      EXPECT_EQ(sub->rank(), rank);
      EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
      Tensor x = Tensor::from_vector(values(8, rank, salt), Shape{8});
      sub->all_reduce({x})->wait();
      std::vector<float> ref = values(8, 0, salt);
      for (int r = 1; r < sub->size(); ++r) {
        const auto v = values(8, r, salt);
        for (size_t i = 0; i < ref.size(); ++i) ref[i] += v[i];
      }
      EXPECT_TRUE(same_bytes(x, Tensor::from_vector(ref, Shape{8}))) << "sub-group all_reduce";
    } else {
      EXPECT_EQ(sub, nullptr);
    }
    comm->barrier();
  }

  // This rank's own argument errors fail its Work (InvalidArgument) without running anything.
  {
    Tensor input = Tensor::zeros(Shape{2, 3});
    Tensor wrong = Tensor::zeros(Shape{2 * n + 1, 3});
    const std::string message = message_of<InvalidArgument>([&] { comm->all_gather(input, wrong)->wait(); });
    EXPECT_TRUE(contains(message, "all_gather")) << message;
    EXPECT_TRUE(contains(message, "output is")) << message;
  }
  comm->barrier();

  // abort: a second communicator, aborted on every rank; its later calls fail at once quoting the reason.
  {
    auto second = make_mpi_communicator({.timeout = 20s});
    second->abort("replica 7 failed");
    const std::string message = message_of<Timeout>([&] { second->all_reduce({Tensor::ones(Shape{4})})->wait(); });
    EXPECT_TRUE(contains(message, "replica 7 failed")) << message;
    EXPECT_TRUE(contains(message, "aborted on rank " + std::to_string(rank))) << message;
  }
  comm->barrier();
  results.write(rank);
}

TEST(MpiChild, RankNeverJoins) {
  if (!is_child()) GTEST_SKIP() << "runs as a rank under mpirun, started by MpiCommunicator.RankThatNeverJoins";
  auto comm = make_mpi_communicator({.timeout = 20s});
  const int rank = comm->rank(), n = comm->size();
  std::ofstream file(child_dir() + "/fault-" + std::to_string(rank));
  file << "pid " << ::getpid() << std::endl;
  Tensor x = Tensor::ones(Shape{16});
  comm->set_step(7);
  comm->all_reduce({x})->wait();  // #1: every rank
  comm->set_step(8);
  if (rank == n - 1) {  // never joins #2; stays alive until the others have timed out
    file << "skipped" << std::endl;
    std::this_thread::sleep_for(4s);
    return;
  }
  const auto start = Clock::now();
  const std::string message = message_of<Timeout>([&] {
    comm->all_reduce({x}, {.op = ReduceOp::kSum, .timeout = 1000ms})->wait();
  });
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  EXPECT_TRUE(contains(message, "all_reduce #2")) << message;
  EXPECT_TRUE(contains(message, "on rank " + std::to_string(rank))) << message;
  EXPECT_TRUE(contains(message, "1000 ms")) << message;
  EXPECT_TRUE(contains(message, "never joined (no word from it while waiting): rank " + std::to_string(n - 1)))
      << message;
  EXPECT_TRUE(contains(message, "; rank " + std::to_string(rank) + "'s last collectives: all_reduce #1 (step 7, 64 B) "
                                "completed in "))
      << message;
  EXPECT_TRUE(contains(message, ", all_reduce #2 (step 8, 64 B) failed after ")) << message;
  EXPECT_GE(elapsed, 950);
  EXPECT_LT(elapsed, 3000);
  // The communicator is unusable: later calls fail at once, quoting the timeout.
  const auto later_start = Clock::now();
  const std::string later = message_of<Timeout>([&] { comm->barrier(); });
  EXPECT_LT(Clock::now() - later_start, 500ms);
  EXPECT_TRUE(contains(later, "was not run")) << later;
  EXPECT_TRUE(contains(later, "all_reduce #2")) << later;
  file << (::testing::Test::HasFailure() ? "failed " : "timeout-ok ") << elapsed << " " << message << std::endl;
}

// ---------------------------------------------------------------------------------------------------- the parent

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

struct MpirunResult {
  int exit_code = -1;
  double seconds = 0;
  std::string log;
};

// `timeout -s KILL <limit> mpirun ... -np <n> <this binary> --gtest_filter=<filter>`, its output in <dir>/log.
MpirunResult run_under_mpirun(int n, const std::string& filter, const std::string& dir, int limit_s = 120,
                              const std::string& thread_level = "") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::ostringstream command;
  command << "env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK STRATA_MPI_TEST_DIR=" << dir
          << " STRATA_MPI_THREAD_LEVEL=" << thread_level << " timeout -s KILL " << limit_s
          << " mpirun --allow-run-as-root --oversubscribe -np " << n
          << " -x STRATA_MPI_TEST_DIR -x STRATA_MPI_THREAD_LEVEL " << self
          << " --gtest_filter=" << filter << " > " << dir << "/log 2>&1";
  const auto start = Clock::now();
  const int status = std::system(command.str().c_str());
  MpirunResult run;
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.log = read_file(dir + "/log");
  return run;
}

class MpiCommunicator : public ::testing::TestWithParam<int> {};

void expect_every_collective(int n, const std::string& thread_level) {
  TempDir dir("strata_mpi_test");
  const MpirunResult run = run_under_mpirun(n, "MpiChild.EveryCollective", dir.path(), 120, thread_level);
  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_FALSE(contains(run.log, "SKIPPED")) << run.log;
  const std::string first = read_file(dir.path() + "/results-0");
  int lines = 0;
  for (char c : first) lines += c == '\n';
  EXPECT_EQ(lines, 2 * 4 + 2 + 4 + 4 + 4 + n + 1) << first;  // ... + 4: the bfloat16-compressed sums and means
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(read_file(dir.path() + "/results-" + std::to_string(r)), first) << "rank " << r << " differs from rank 0";
  }
}

TEST_P(MpiCommunicator, EveryCollectiveBitwiseEqualOnEveryRank) {
  if (is_child()) GTEST_SKIP() << "the parent side; this process is a rank";
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not on the PATH (install openmpi-bin)";
  expect_every_collective(GetParam(), "");
}

// MPI_THREAD_SERIALIZED: every MPI call under strata's one lock (three communicators' workers in turn).
TEST(MpiCommunicatorSerialized, EveryCollectiveBitwiseEqualOnEveryRank) {
  if (is_child()) GTEST_SKIP() << "the parent side; this process is a rank";
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not on the PATH (install openmpi-bin)";
  expect_every_collective(3, "serialized");
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, MpiCommunicator, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

TEST(MpiCommunicatorFault, RankThatNeverJoinsTimesOutOnTheOthersAndEveryProcessEnds) {
  if (is_child()) GTEST_SKIP() << "the parent side; this process is a rank";
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not on the PATH (install openmpi-bin)";
  constexpr int kRanks = 3;
  TempDir dir("strata_mpi_fault");
  const MpirunResult run = run_under_mpirun(kRanks, "MpiChild.RankNeverJoins", dir.path(), 60);
  // mpirun ends by itself (not by the KILL at 60 s): the timed-out ranks exit without MPI_Finalize, so mpirun
  // reports them and ends the job, non-zero.
  EXPECT_NE(run.exit_code, 137) << run.log;
  EXPECT_LT(run.seconds, 30) << run.log;
  for (int r = 0; r < kRanks; ++r) {
    const std::string text = read_file(dir.path() + "/fault-" + std::to_string(r));
    if (r == kRanks - 1) {
      EXPECT_TRUE(contains(text, "skipped")) << text << run.log;
    } else {
      EXPECT_TRUE(contains(text, "timeout-ok")) << "rank " << r << ": " << text << run.log;
    }
    int pid = 0;
    ASSERT_EQ(std::sscanf(text.c_str(), "pid %d", &pid), 1) << text;
    bool gone = false;
    for (int i = 0; i < 50 && !gone; ++i) {
      gone = ::kill(pid, 0) != 0;
      if (!gone) std::this_thread::sleep_for(100ms);
    }
    EXPECT_TRUE(gone) << "rank " << r << " (pid " << pid << ") is still running";
  }
}

TEST(MpiCommunicatorOutside, MakeOutsideMpirunIsUnavailable) {
  if (is_child()) GTEST_SKIP() << "the parent side; this process is a rank";
  EXPECT_FALSE(started_by_mpirun());
  const std::string message = message_of<Unavailable>([] { make_mpi_communicator(); });
  EXPECT_TRUE(contains(message, "not started by mpirun")) << message;
  EXPECT_TRUE(contains(message, "mpirun")) << message;
}

}  // namespace
}  // namespace strata::comm
