// PipelineStage over the Gloo backend (127.0.0.1 only): an MLP in 2 stages, M = 4, K = 3 steps of SGD with momentum,
// gives the unsplit model's weights (1e-5 relative) with GPipe and 1F1B, (a) with the 2 ranks as threads of this
// process (in-memory store) and (b) as 2 real processes (this binary re-run with a filter for the hidden child test
// PipelineGlooChild.RunsOneStage, a file store in a temp dir; each child saves its stage's weights as safetensors).
// (c) When the process of stage 1 dies mid-step (_exit before its first send), stage 0 fails with an error within
// a bounded time instead of hanging; (d) when it hangs there (alive, connected, silent), stage 0 fails after
// PipelineOptions::timeout (3 s), saying so. Children: killed if this process dies (PR_SET_PDEATHSIG), an alarm()
// of their own, and the parent waits with a deadline, then SIGKILLs and reaps every child on every path.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>

#include "comm/comm_test_util.h"
#include "parallel/parallel_test_util.h"
#include "strata/comm/gloo.h"
#include "strata/comm/store.h"
#include "strata/gradient_tape.h"
#include "strata/io/safetensors.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/parallel/pipeline.h"
#include "test_util.h"

extern char** environ;

namespace strata::parallel {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int64_t kFeatures = 12;
constexpr int64_t kClasses = 5;
constexpr int64_t kBatch = 22;  // not a multiple of M: micro-batches of 6, 6, 5, 5
constexpr int kStages = 2;
constexpr int kMicroBatches = 4;
constexpr int kSteps = 3;
// The child's spec: "<parent pid> <rank> <dir> <schedule> <train|die|hang>".
constexpr const char* kChildSpec = "STRATA_PIPELINE_GLOO_CHILD";
constexpr int kDiedStatus = 3;  // the exit status of a child told to die

std::vector<std::shared_ptr<nn::Layer>> make_mlp(uint64_t seed) {
  return test_util::make_mlp(kFeatures, kClasses, seed);
}
Tensor batch_inputs(int step) { return test::random_tensor({kBatch, kFeatures}, 100 + step); }
Tensor labels(int64_t n, uint64_t seed) { return test_util::labels(n, seed, kClasses); }
std::shared_ptr<losses::Loss> loss() { return test_util::logits_loss(); }
using test_util::expect_same_weights;

const optim::SGD& sgd() {
  static const optim::SGD optimizer({.learning_rate = 0.1f, .momentum = 0.9f});
  return optimizer;
}

// K steps of the unsplit model; every weight's value, in the model's order.
std::vector<Tensor> train_unsplit() {
  return test_util::train_unsplit(make_mlp(7), sgd(), kSteps, batch_inputs, [](int k) { return labels(kBatch, k); });
}

// One rank's stage of the MLP (its own copy of the model) over `comm`.
struct Rank {
  std::vector<std::shared_ptr<nn::Layer>> layers = make_mlp(7);
  PipelineStage stage;
  Rank(int rank, const std::string& schedule, std::shared_ptr<comm::Communicator> comm, PipelineOptions options)
      : stage(split_by_parameters(layers, kStages), rank, make_schedule(schedule, kStages, kMicroBatches), loss(),
              sgd(), std::move(comm), std::move(options)) {}
  std::vector<Tensor> weights() const {
    std::vector<Tensor> out;
    for (const Variable& w : stage.trainable_variables()) out.push_back(w.value().clone());
    return out;
  }
};

// ---- (a) ranks as threads

TEST(PipelineGlooTest, TwoRanksAsThreadsGiveTheUnsplitModelsWeights) {
  const std::vector<Tensor> want = train_unsplit();
  for (const char* schedule : {"gpipe", "1f1b"}) {
    auto store = comm::make_in_memory_store(20s);
    std::vector<std::vector<Tensor>> weights(kStages);
    std::vector<std::string> errors(kStages);
    std::vector<float> losses(kStages);
    std::vector<std::thread> threads;
    for (int r = 0; r < kStages; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto comm = comm::make_gloo_communicator(store, r, kStages, {.timeout = 20s, .prefix = "pipe"});
          PipelineOptions options;
          options.example_shape = {kFeatures};
          options.timeout = 20s;
          Rank rank(r, schedule, comm, options);
          for (int k = 0; k < kSteps; ++k) losses[r] = rank.stage.train_step(batch_inputs(k), labels(kBatch, k));
          weights[r] = rank.weights();
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    SCOPED_TRACE(schedule);
    for (int r = 0; r < kStages; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
    EXPECT_TRUE(std::isnan(losses[0]));  // only the stage holding the loss reports it
    EXPECT_TRUE(std::isfinite(losses[1]));
    std::vector<Tensor> got = weights[0];
    got.insert(got.end(), weights[1].begin(), weights[1].end());
    EXPECT_EQ(weights[0].size(), 4u);  // the first two Dense layers' kernels and biases
    expect_same_weights(got, want, std::string("threads ") + schedule);
  }
}

// ---- (b), (c) ranks as processes

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string stage_file(const std::string& dir, int rank) {
  return dir + "/stage" + std::to_string(rank) + ".safetensors";
}
std::string error_file(const std::string& dir, int rank) { return dir + "/error" + std::to_string(rank) + ".txt"; }
std::string log_file(const std::string& dir, int rank) { return dir + "/rank" + std::to_string(rank) + ".log"; }

// The child's work; its exit status: 0 trained and saved, 1 a step failed (error file written: seconds from the
// step's start to the failure, then the message), 2 anything else failed (error file: -1, the message).
int run_child(int rank, const std::string& dir, const std::string& schedule, const std::string& mode) {
  const auto write_error = [&](double seconds, const std::string& message) {
    std::ofstream(error_file(dir, rank)) << seconds << "\n" << message;
  };
  try {
    auto store = comm::make_file_store(dir + "/store", 20s);
    auto comm = comm::make_gloo_communicator(store, rank, kStages, {.timeout = 20s, .prefix = "pipe"});
    PipelineOptions options;
    options.example_shape = {kFeatures};
    options.timeout = 3s;
    // The stage holding the loss calls this after each micro-batch's forward, before any send of the step.
    if (mode == "die") options.on_predictions = [](const Tensor&, const Tensor&) { ::_exit(kDiedStatus); };
    if (mode == "hang") {
      options.on_predictions = [](const Tensor&, const Tensor&) { std::this_thread::sleep_for(120s); };
    }
    Rank r(rank, schedule, comm, options);
    for (int k = 0; k < kSteps; ++k) {
      const auto start = Clock::now();
      try {
        r.stage.train_step(batch_inputs(k), labels(kBatch, k));
      } catch (const std::exception& e) {
        write_error(std::chrono::duration<double>(Clock::now() - start).count(), e.what());
        return 1;
      }
    }
    io::NamedTensors named;
    for (const Tensor& t : r.weights()) named.emplace_back("w" + std::to_string(named.size()), t);
    io::save_safetensors(stage_file(dir, rank), named);
    return 0;
  } catch (const std::exception& e) {
    write_error(-1, e.what());
    return 2;
  }
}

// The hidden child: does nothing unless this binary was re-run by ChildProcesses below.
TEST(PipelineGlooChild, RunsOneStage) {
  const char* spec = std::getenv(kChildSpec);
  if (spec == nullptr) GTEST_SKIP() << "a helper process of PipelineGlooProcessTest";
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  std::istringstream in(spec);
  pid_t parent = 0;
  int rank = 0;
  std::string dir, schedule, mode;
  in >> parent >> rank >> dir >> schedule >> mode;
  if (::getppid() != parent) ::_exit(5);  // the parent died before the line above
  ::alarm(60);                            // a last resort should the parent fail to kill it
  const int status = run_child(rank, dir, schedule, mode);
  std::fflush(nullptr);
  ::_exit(status);  // no gtest epilogue: the status is the child's verdict
}

// Children running PipelineGlooChild.RunsOneStage (stdout and stderr to their log files in `dir`). Every child not
// reaped by wait() is SIGKILLed and reaped by the destructor, so none outlives a failing test.
class ChildProcesses {
 public:
  explicit ChildProcesses(std::string dir) : dir_(std::move(dir)) {}
  ~ChildProcesses() {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (statuses_[i] != kRunning) continue;
      ::kill(pids_[i], SIGKILL);
      int status = 0;
      ::waitpid(pids_[i], &status, 0);
    }
  }
  ChildProcesses(const ChildProcesses&) = delete;
  ChildProcesses& operator=(const ChildProcesses&) = delete;

  void spawn(int rank, const std::string& schedule, const std::string& mode) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      // Not the parent's gtest settings (an XML report path would be overwritten by the child's).
      if (std::string(*e).rfind("GTEST_", 0) != 0) env.emplace_back(*e);
    }
    env.push_back(std::string(kChildSpec) + "=" + std::to_string(::getpid()) + " " + std::to_string(rank) + " " + dir_ +
                  " " + schedule + " " + mode);
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", filter = "--gtest_filter=PipelineGlooChild.RunsOneStage";
    char* argv[] = {exe.data(), filter.data(), nullptr};
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    const std::string log = log_file(dir_, rank);
    ::posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
    ::posix_spawn_file_actions_destroy(&actions);
    ASSERT_EQ(rc, 0) << "posix_spawn: " << std::strerror(rc);
    pids_.push_back(pid);
    statuses_.push_back(kRunning);
    exited_after_.push_back(0);
  }

  // Waits until every child (or only child `only`, when given) has exited or `limit` has passed, then kills and
  // reaps the rest (status kKilled). Returns the exit statuses (128 + signal for a child a signal ended).
  std::vector<int> wait(std::chrono::milliseconds limit, int only = -1) {
    const auto start = Clock::now();
    for (;;) {
      bool running = false;
      for (size_t i = 0; i < pids_.size(); ++i) {
        if (statuses_[i] != kRunning) continue;
        int status = 0;
        if (::waitpid(pids_[i], &status, WNOHANG) == pids_[i]) {
          statuses_[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          exited_after_[i] = std::chrono::duration<double>(Clock::now() - start).count();
        } else if (only < 0 || static_cast<int>(i) == only) {
          running = true;
        }
      }
      if (!running || Clock::now() - start > limit) break;
      std::this_thread::sleep_for(5ms);
    }
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (statuses_[i] != kRunning) continue;
      ::kill(pids_[i], SIGKILL);
      int status = 0;
      ::waitpid(pids_[i], &status, 0);
      statuses_[i] = kKilled;
    }
    return statuses_;
  }
  // Seconds from the start of wait() to the child's exit (seen within 5 ms).
  double exited_after(int rank) const { return exited_after_[rank]; }
  // What a child printed and the error it recorded, for failure messages.
  std::string report(int rank) const {
    return "rank " + std::to_string(rank) + " log:\n" + slurp(log_file(dir_, rank)) + "\nerror file:\n" +
           slurp(error_file(dir_, rank));
  }

  static constexpr int kRunning = -1;
  static constexpr int kKilled = 1000;

 private:
  std::string dir_;
  std::vector<pid_t> pids_;
  std::vector<int> statuses_;
  std::vector<double> exited_after_;
};

TEST(PipelineGlooProcessTest, TwoProcessesGiveTheUnsplitModelsWeights) {
  const std::vector<Tensor> want = train_unsplit();
  for (const char* schedule : {"1f1b", "gpipe"}) {
    SCOPED_TRACE(schedule);
    test::TempDir dir("strata_pipeline_gloo");
    ChildProcesses children(dir.path());
    for (int r = 0; r < kStages; ++r) children.spawn(r, schedule, "train");
    const std::vector<int> statuses = children.wait(60s);
    for (int r = 0; r < kStages; ++r) ASSERT_EQ(statuses[r], 0) << children.report(r);
    std::vector<Tensor> got;
    for (int r = 0; r < kStages; ++r) {
      const io::NamedTensors stage = io::load_safetensors(stage_file(dir.path(), r));
      for (size_t i = 0; i < stage.size(); ++i) {
        ASSERT_EQ(stage[i].first, "w" + std::to_string(i));
        got.push_back(stage[i].second);
      }
      if (r == 0) {
        EXPECT_EQ(got.size(), 4u);  // the first two Dense layers' kernels and biases
      }
    }
    expect_same_weights(got, want, std::string("processes ") + schedule);
  }
}

TEST(PipelineGlooProcessTest, WhenStageOnesProcessDiesMidStepStageZeroFailsInBoundedTime) {
  test::TempDir dir("strata_pipeline_gloo");
  ChildProcesses children(dir.path());
  children.spawn(0, "1f1b", "train");
  children.spawn(1, "1f1b", "die");
  const std::vector<int> statuses = children.wait(45s);
  ASSERT_EQ(statuses[1], kDiedStatus) << children.report(1);
  // Stage 0 sent micro-batches 0 and 1 and waits for micro-batch 0's gradient, which never comes: its step fails
  // (status 1, not the 1000 of a child killed at the deadline) within the pipeline's 3 s timeout and a margin.
  ASSERT_EQ(statuses[0], 1) << children.report(0);
  std::istringstream error(slurp(error_file(dir.path(), 0)));
  double seconds = -1;
  error >> seconds;
  std::string message((std::istreambuf_iterator<char>(error)), std::istreambuf_iterator<char>());
  EXPECT_GE(seconds, 0) << message;
  EXPECT_LT(seconds, 3.0 + 7.0) << message;
  EXPECT_FALSE(message.empty());
  EXPECT_TRUE(test::contains(message, "rank 1")) << message;
  // The process as a whole (connecting, the failed step and the communicator's shutdown) ends soon after.
  EXPECT_LT(children.exited_after(0), 30.0) << children.report(0);
  std::printf("stage 0 failed %.2f s into its step, its process ended %.2f s after the start: %s\n", seconds,
              children.exited_after(0), message.c_str());
}

TEST(PipelineGlooProcessTest, WhenStageOnesProcessHangsMidStepStageZeroTimesOut) {
  test::TempDir dir("strata_pipeline_gloo");
  ChildProcesses children(dir.path());
  children.spawn(0, "1f1b", "train");
  children.spawn(1, "1f1b", "hang");  // alive, connected, and silent: only the timeout can end stage 0's wait
  const std::vector<int> statuses = children.wait(45s, /*only=*/0);  // then stage 1 is killed
  ASSERT_EQ(statuses[0], 1) << children.report(0);
  EXPECT_EQ(statuses[1], ChildProcesses::kKilled) << children.report(1);
  std::istringstream error(slurp(error_file(dir.path(), 0)));
  double seconds = -1;
  error >> seconds;
  std::string message((std::istreambuf_iterator<char>(error)), std::istreambuf_iterator<char>());
  EXPECT_GE(seconds, 2.9) << message;  // PipelineOptions::timeout is 3 s
  EXPECT_LT(seconds, 3.0 + 7.0) << message;
  EXPECT_TRUE(test::contains(message, "timeout 3000 ms")) << message;
  EXPECT_TRUE(test::contains(message, "rank 1")) << message;
  EXPECT_LT(children.exited_after(0), 30.0) << children.report(0);
  std::printf("stage 0 failed %.2f s into its step, its process ended %.2f s after the start: %s\n", seconds,
              children.exited_after(0), message.c_str());
}

}  // namespace
}  // namespace strata::parallel
