// Per-operation options of the communicator (c10d's Types.hpp): a per-call timeout overriding the group's,
// Work::wait(timeout) and Work::exception(), and the base class's "backend X does not support Y" defaults
// seen through a backend that implements only the required calls. Ranks run as std::threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

// The group timeout is long; each collective's own timeout must fire instead, within timeout + margin.
TEST(LocalOptionsTest, PerCollectiveTimeoutOverridesTheGroupTimeout) {
  const milliseconds timeout(150), margin(1500);
  struct Case {
    const char* name;
    std::function<void(Communicator&)> call;
  };
  const std::vector<Case> cases = {
      {"all_reduce",
       [&](Communicator& c) { c.all_reduce({Tensor::ones({8})}, {.op = ReduceOp::kMax, .timeout = timeout})->wait(); }},
      {"broadcast",
       [&](Communicator& c) { c.broadcast({Tensor::ones({8})}, {.root = 1, .timeout = timeout})->wait(); }},
      {"all_gather",
       [&](Communicator& c) { c.all_gather(Tensor::ones({2}), Tensor::ones({6}), {.timeout = timeout})->wait(); }},
      {"reduce_scatter",
       [&](Communicator& c) { c.reduce_scatter(Tensor::ones({6}), Tensor::ones({2}), {.timeout = timeout})->wait(); }},
      {"barrier", [&](Communicator& c) { c.barrier({.timeout = timeout}); }},
  };
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.name);
    const Group group = make_local_group(3, {.timeout = std::chrono::minutes(5)});
    std::vector<std::string> messages(3);
    std::vector<milliseconds> took(3);
    run_ranks(group, [&](int r, Communicator& c) {
      if (r == 1) return;  // never comes
      const auto start = Clock::now();
      messages[r] = message_of<Timeout>([&] { test_case.call(c); });
      took[r] = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    });
    // The first rank to reach its deadline waited the whole timeout; the other is woken by its abort.
    EXPECT_GE(std::max(took[0], took[2]), timeout);
    for (int r : {0, 2}) {
      EXPECT_LT(took[r], timeout + margin) << "rank " << r;
      const std::string& m = messages[r];
      // One rank times out; the other is woken by its abort. Both name the collective and rank 1.
      EXPECT_TRUE(contains(m, std::string(test_case.name) + " #1 on rank ")) << m;
      EXPECT_TRUE(contains(m, "rank 1 had not arrived; rank 1 has issued no collective")) << m;
      EXPECT_TRUE(contains(m, "timed out after 150 ms")) << m;
    }
  }
}

TEST(LocalOptionsTest, OptionsCarryTheOpAndRoot) {
  const Group group = make_local_group(3);
  std::vector<Tensor> a(3), b(3), in(3), out(3);
  for (int r = 0; r < 3; ++r) {
    a[r] = Tensor::full({4}, r + 1.0);
    b[r] = Tensor::full({2}, 10.0 * r);
    in[r] = Tensor::full({1}, 7.0 * r);
    out[r] = Tensor::zeros({3});
  }
  run_ranks(group, [&](int r, Communicator& c) {
    auto w1 = c.all_reduce({a[r]}, {.op = ReduceOp::kMax, .timeout = milliseconds(10000)});
    auto w2 = c.broadcast({b[r]}, {.root = 2});
    auto w3 = c.all_gather(in[r], out[r], {.timeout = milliseconds(10000)});
    c.barrier({});
    w1->wait();
    w2->wait();
    w3->wait();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(a[r].to_vector<float>(), std::vector<float>(4, 3.0f));
    EXPECT_EQ(b[r].to_vector<float>(), std::vector<float>(2, 20.0f));
    EXPECT_EQ(out[r].to_vector<float>(), (std::vector<float>{0.0f, 7.0f, 14.0f}));
  }
  const std::string m =
      message_of<InvalidArgument>([&] { group[0]->all_reduce({a[0]}, {.timeout = milliseconds(0)}); });
  EXPECT_TRUE(contains(m, "all_reduce on rank 0: timeout must be positive, got 0 ms")) << m;
}

TEST(LocalOptionsTest, WaitWithTimeoutThrowsWhileRunningThenCompletes) {
  const Group group = make_local_group(2, {.timeout = std::chrono::seconds(20)});
  std::atomic<bool> go{false};
  std::vector<Tensor> t = {Tensor::full({3}, 1.0), Tensor::full({3}, 2.0)};
  std::string message;
  std::exception_ptr while_running = std::make_exception_ptr(1);
  run_ranks(group, [&](int r, Communicator& c) {
    if (r == 1) {
      while (!go.load()) std::this_thread::yield();
      c.all_reduce({t[1]})->wait();
      return;
    }
    auto work = c.all_reduce({t[0]});
    const auto start = Clock::now();
    message = message_of<Timeout>([&] { work->wait(milliseconds(50)); });
    EXPECT_GE(Clock::now() - start, milliseconds(45));
    EXPECT_FALSE(work->is_completed());
    while_running = work->exception();
    go.store(true);
    work->wait(milliseconds(20000));  // completes now
    EXPECT_TRUE(work->is_completed());
    EXPECT_EQ(work->exception(), nullptr);
  });
  EXPECT_TRUE(contains(message, "local group of 2: all_reduce #1 on rank 0 did not complete within the 50 ms"))
      << message;
  EXPECT_EQ(while_running, nullptr);
  EXPECT_EQ(t[0].to_vector<float>(), std::vector<float>(3, 3.0f));
}

TEST(LocalOptionsTest, ExceptionHoldsTheFailure) {
  const Group group = make_local_group(2);
  std::vector<std::shared_ptr<Work>> works(2);
  run_ranks(group, [&](int r, Communicator& c) {
    works[r] = c.all_reduce({Tensor::ones({r + 1})});  // different shapes
    EXPECT_THROW(works[r]->wait(milliseconds(20000)), InvalidArgument);
  });
  for (int r = 0; r < 2; ++r) {
    std::exception_ptr error = works[r]->exception();
    ASSERT_NE(error, nullptr);
    const std::string m = message_of<InvalidArgument>([&] { std::rethrow_exception(error); });
    EXPECT_TRUE(contains(m, "the ranks passed different tensors")) << m;
  }
}

// A backend with only the required calls: what it lacks is named, and options without a timeout forward.
class MinimalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "minimal"; }
  std::shared_ptr<Work> all_reduce(std::vector<Tensor>, ReduceOp op) override {
    last = "all_reduce " + to_string(op);
    return done();
  }
  std::shared_ptr<Work> broadcast(std::vector<Tensor>, int root) override {
    last = "broadcast " + std::to_string(root);
    return done();
  }
  std::shared_ptr<Work> all_gather(Tensor, Tensor) override {
    last = "all_gather";
    return done();
  }
  void barrier() override { last = "barrier"; }
  void abort(const std::string&) override {}
  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  std::string last;

 private:
  class DoneWork final : public Work {
   public:
    bool is_completed() const override { return true; }
    void wait() override {}
  };
  static std::shared_ptr<Work> done() { return std::make_shared<DoneWork>(); }
};

TEST(LocalOptionsTest, ABackendThatLacksAnOperationSaysSoByName) {
  MinimalCommunicator c;
  Communicator& base = c;
  auto unsupported = [&](const std::function<void()>& f) { return message_of<Unavailable>(f); };
  EXPECT_TRUE(contains(unsupported([&] { base.reduce_scatter(Tensor::ones({1}), Tensor::ones({1})); }),
                       "backend minimal does not support reduce_scatter"));
  EXPECT_TRUE(
      contains(unsupported([&] { base.send({Tensor::ones({1})}, 0, 3); }), "backend minimal does not support send"));
  EXPECT_TRUE(
      contains(unsupported([&] { base.recv({Tensor::ones({1})}, 0); }), "backend minimal does not support recv"));
  EXPECT_TRUE(contains(unsupported([&] { base.new_group({0}); }), "backend minimal does not support new_group"));
  EXPECT_TRUE(contains(unsupported([&] { base.all_reduce({}, {.timeout = milliseconds(5)}); }),
                       "backend minimal does not support all_reduce with a per-call timeout"));
  EXPECT_TRUE(contains(unsupported([&] { base.barrier({.timeout = milliseconds(5)}); }),
                       "backend minimal does not support barrier with a per-call timeout"));
  base.all_reduce({}, {.op = ReduceOp::kMin})->wait();
  EXPECT_EQ(c.last, "all_reduce min");
  base.broadcast({}, {.root = 0})->wait();
  EXPECT_EQ(c.last, "broadcast 0");
  base.all_gather(Tensor(), Tensor(), {})->wait();
  EXPECT_EQ(c.last, "all_gather");
  base.barrier(BarrierOptions{});
  EXPECT_EQ(c.last, "barrier");
  // Work's defaults: wait(timeout) and exception() from is_completed() and wait().
  auto work = base.all_reduce({});
  work->wait(milliseconds(1));
  EXPECT_EQ(work->exception(), nullptr);
}

// Work's default wait(timeout) and exception() for a backend whose Work has only is_completed() and wait().
class ManualWork final : public Work {
 public:
  bool is_completed() const override { return done.load(); }
  void wait() override {
    while (!done.load()) std::this_thread::yield();
    if (fail) throw InvalidArgument("the peers disagreed");
  }
  std::atomic<bool> done{false};
  bool fail = false;
};

TEST(LocalOptionsTest, WorkDefaultsPollAndReport) {
  ManualWork manual;
  Work& work = manual;  // as callers see it (ManualWork's own wait() hides the overload)
  const auto start = Clock::now();
  const std::string m = message_of<Timeout>([&] { work.wait(milliseconds(30)); });
  EXPECT_GE(Clock::now() - start, milliseconds(30));
  EXPECT_TRUE(contains(m, "Work::wait: the operation did not complete within 30 ms (it goes on running)")) << m;
  EXPECT_EQ(work.exception(), nullptr);  // still running
  manual.fail = true;
  std::thread finisher([&] {
    std::this_thread::sleep_for(milliseconds(20));
    manual.done.store(true);
  });
  EXPECT_THROW(work.wait(milliseconds(20000)), InvalidArgument);  // completes within the wait, then rethrows
  finisher.join();
  ASSERT_NE(work.exception(), nullptr);
  EXPECT_THROW(std::rethrow_exception(work.exception()), InvalidArgument);
}

}  // namespace
}  // namespace strata::comm
