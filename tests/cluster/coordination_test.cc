// The coordination service and its client over gRPC on 127.0.0.1 (ports picked by the OS): the Store
// contract (values, blocking get, add and compare_set races from threads with exact results, waits that
// time out naming the keys), barriers (passing, and failing within timeout + margin naming the task that
// did not arrive), heartbeats (a task that goes silent, and a child process killed with SIGKILL, is
// reported lost to the others within heartbeat_timeout + 2 s, by name), and connection failures (a
// service that never comes, a port in use, a stopped service, an RPC past its deadline).
// Every wait is bounded; a spawned child is killed and reaped on every path.
#include "strata/cluster/coordination.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "strata/error.h"
#include "test_util.h"

namespace strata::cluster {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using test::message_of;

constexpr auto kMargin = 2s;  // what a bounded wait may take beyond its timeout on a loaded 2-core machine

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

milliseconds since(Clock::time_point start) { return std::chrono::duration_cast<milliseconds>(Clock::now() - start); }

CoordinationClient::Options client_options(milliseconds store_timeout = 5s) {
  CoordinationClient::Options o;
  o.connect_timeout = 5s;
  o.rpc_timeout = 5s;
  o.store_timeout = store_timeout;
  return o;
}

// A 127.0.0.1 port bound (so nobody else takes it) but not listening: connecting to it is refused.
class ReservedPort {
 public:
  ReservedPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~ReservedPort() { release(); }
  void release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class CoordinationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinationService::Options options;
    options.heartbeat_timeout = 1s;
    service_.start("127.0.0.1:0", options);
    address_ = "127.0.0.1:" + std::to_string(service_.port());
  }
  std::unique_ptr<CoordinationClient> client(const std::string& task, milliseconds store_timeout = 5s) {
    return std::make_unique<CoordinationClient>(address_, task, client_options(store_timeout));
  }

  CoordinationService service_;
  std::string address_;
};

// ---- the Store contract

TEST_F(CoordinationTest, SetGetOverwriteAndBinaryValues) {
  auto c = client("worker:0");
  const std::string bytes("a\0b\xff", 4);
  c->set("k", bytes);
  EXPECT_EQ(c->get("k"), bytes);
  c->set("k", "v2");
  EXPECT_EQ(c->get("k"), "v2");
  EXPECT_EQ(client("worker:1")->get("k"), "v2");  // another client sees it
}

TEST_F(CoordinationTest, GetBlocksUntilAnotherClientSetsTheKey) {
  auto reader = client("worker:0");
  auto writer = client("worker:1");
  auto value = std::async(std::launch::async, [&] { return reader->get("late"); });
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(value.wait_for(0s), std::future_status::timeout) << "get returned before the key was set";
  writer->set("late", "here");
  ASSERT_EQ(value.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(value.get(), "here");
}

TEST_F(CoordinationTest, GetOfAMissingKeyTimesOutNamingKeyAndAddress) {
  auto c = client("worker:0", 300ms);
  const auto start = Clock::now();
  const auto msg = message_of<Timeout>([&] { c->get("never"); });
  const auto took = since(start);
  EXPECT_TRUE(contains(msg, "Get of key 'never' timed out")) << msg;
  EXPECT_TRUE(contains(msg, address_)) << msg;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 300ms + kMargin);
}

TEST_F(CoordinationTest, AddFromManyThreadsAndClientsGivesExactTotalsAndDistinctValues) {
  constexpr int kClients = 4, kThreadsPerClient = 2, kAdds = 150;
  std::vector<std::unique_ptr<CoordinationClient>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(client("worker:" + std::to_string(i)));
  std::mutex mu;
  std::vector<int64_t> seen;
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients * kThreadsPerClient; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int64_t> mine;
      for (int i = 0; i < kAdds; ++i) mine.push_back(clients[t % kClients]->add("counter", 1));
      clients[t % kClients]->add("by_three", 3);
      std::lock_guard lock(mu);
      seen.insert(seen.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  constexpr int64_t kTotal = kClients * kThreadsPerClient * kAdds;
  EXPECT_EQ(clients[0]->get("counter"), std::to_string(kTotal));
  EXPECT_EQ(clients[0]->add("counter", 0), kTotal);
  EXPECT_EQ(clients[0]->add("by_three", -1), 3 * kClients * kThreadsPerClient - 1);
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> expected(kTotal);
  for (int64_t i = 0; i < kTotal; ++i) expected[i] = i + 1;
  EXPECT_EQ(seen, expected) << "every add must return a distinct value";
}

TEST_F(CoordinationTest, AddOnAValueThatIsNotANumberIsInvalidArgument) {
  auto c = client("worker:0");
  c->set("text", "abc");
  const auto msg = message_of<InvalidArgument>([&] { c->add("text", 1); });
  EXPECT_TRUE(contains(msg, "key 'text' is not a decimal int64: 'abc'")) << msg;
  EXPECT_TRUE(contains(msg, address_)) << msg;
}

TEST_F(CoordinationTest, CompareSetSwapsOnlyOnTheExpectedValue) {
  auto c = client("worker:0");
  EXPECT_EQ(c->compare_set("cs", "", "first"), "first");  // empty expected: the key must be missing
  EXPECT_EQ(c->compare_set("cs", "", "second"), "first");
  EXPECT_EQ(c->compare_set("cs", "wrong", "second"), "first");
  EXPECT_EQ(c->compare_set("cs", "first", "second"), "second");
  EXPECT_EQ(c->compare_set("missing", "something", "x"), "");  // missing key, non-empty expected: unchanged
  EXPECT_FALSE(c->check({"missing"}));
}

TEST_F(CoordinationTest, CompareSetRaceHasExactlyOneWinner) {
  constexpr int kThreads = 8;
  std::vector<std::unique_ptr<CoordinationClient>> clients;
  for (int i = 0; i < kThreads; ++i) clients.push_back(client("worker:" + std::to_string(i)));
  std::vector<std::string> result(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { result[t] = clients[t]->compare_set("leader", "", "task-" + std::to_string(t)); });
  }
  for (auto& t : threads) t.join();
  const std::string winner = clients[0]->get("leader");
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(result[t], winner) << "thread " << t;
}

TEST_F(CoordinationTest, CheckDeleteAndNumKeys) {
  auto c = client("worker:0");
  EXPECT_EQ(c->num_keys(), 0);
  c->set("a", "1");
  c->set("b", "2");
  EXPECT_TRUE(c->check({"a", "b"}));
  EXPECT_FALSE(c->check({"a", "c"}));
  EXPECT_EQ(c->num_keys(), 2);
  EXPECT_TRUE(c->delete_key("a"));
  EXPECT_FALSE(c->delete_key("a"));
  EXPECT_FALSE(c->check({"a"}));
  EXPECT_EQ(c->num_keys(), 1);
}

TEST_F(CoordinationTest, NumKeysWithPrefixCountsOnlyThoseKeys) {
  auto c = client("worker:0");
  for (const char* k : {"g1/a", "g1/b", "g10/a", "g2/a", "h"}) c->set(k, "v");
  EXPECT_EQ(c->num_keys_with_prefix("g1/"), 2);
  EXPECT_EQ(c->num_keys_with_prefix("g1"), 3);
  EXPECT_EQ(c->num_keys_with_prefix("zz"), 0);
  EXPECT_EQ(c->num_keys_with_prefix(""), 5);
}

// How communicators use it: a fresh prefix per group over the one client (Gloo's rendezvous).
TEST_F(CoordinationTest, APrefixStoreOverTheClientKeepsGroupsApart) {
  std::shared_ptr<comm::Store> shared = client("worker:0");
  auto epoch1 = comm::make_prefix_store(shared, "epoch-1");
  auto epoch2 = comm::make_prefix_store(shared, "epoch-2");
  epoch1->set("rank-0", "127.0.0.1:1000");
  epoch2->set("rank-0", "127.0.0.1:2000");
  EXPECT_EQ(epoch1->get("rank-0"), "127.0.0.1:1000");
  EXPECT_EQ(epoch2->get("rank-0"), "127.0.0.1:2000");
  EXPECT_EQ(epoch1->add("count", 2), 2);
  EXPECT_EQ(shared->get("epoch-1/count"), "2");
  const auto msg = message_of<Timeout>([&] { epoch2->wait({"rank-1"}, 200ms); });
  EXPECT_TRUE(contains(msg, "'epoch-2/rank-1'")) << msg;
}

TEST_F(CoordinationTest, WaitReturnsOnceEveryKeyArrives) {
  auto waiter = client("worker:0");
  auto writer = client("worker:1");
  auto done = std::async(std::launch::async, [&] { waiter->wait({"x", "y"}, 5s); });
  writer->set("x", "1");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(done.wait_for(0s), std::future_status::timeout) << "wait returned with 'y' missing";
  writer->set("y", "2");
  ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
  done.get();
}

TEST_F(CoordinationTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  auto c = client("worker:0");
  c->set("present", "1");
  const auto start = Clock::now();
  const auto msg = message_of<Timeout>([&] { c->wait({"present", "gone-1", "gone-2"}, 400ms); });
  const auto took = since(start);
  EXPECT_TRUE(contains(msg, "timed out after 400 ms: keys 'gone-1', 'gone-2' not set")) << msg;
  EXPECT_FALSE(contains(msg, "'present'")) << msg;
  EXPECT_TRUE(contains(msg, address_)) << msg;
  EXPECT_GE(took, 400ms);
  EXPECT_LT(took, 400ms + kMargin);
}

TEST_F(CoordinationTest, HugeTimeoutsDoNotOverflow) {
  auto waiter = client("worker:0", milliseconds::max());
  auto done = std::async(std::launch::async, [&] {
    waiter->wait({"big"}, milliseconds::max());
    return waiter->get("big");
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(done.wait_for(0s), std::future_status::timeout) << "a wait of milliseconds::max() returned at once";
  client("worker:1")->set("big", "ok");
  ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(done.get(), "ok");
  waiter->barrier("alone", 1, milliseconds::max());
}

TEST_F(CoordinationTest, StoreTimeoutIsTheDefaultWait) {
  auto c = client("worker:0", 250ms);
  const auto start = Clock::now();
  EXPECT_THROW(c->wait({"nothing"}), Timeout);
  EXPECT_LT(since(start), 250ms + kMargin);
}

// ---- barriers

TEST_F(CoordinationTest, BarrierPassesWhenEveryNamedTaskArrives) {
  const std::vector<std::string> tasks = {"worker:0", "worker:1", "worker:2"};
  std::atomic<int> passed{0};
  std::vector<std::thread> threads;
  for (const auto& task : tasks) {
    threads.emplace_back([&, task] {
      auto c = client(task);
      c->barrier("start", tasks, 10s);
      ++passed;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed, 3);
  client("worker:0")->barrier("start", tasks, 1s);  // arriving again at a passed barrier returns at once
}

TEST_F(CoordinationTest, BarrierByCountPassesAndDoesNotPassEarly) {
  auto first = client("worker:0");
  auto arrived = std::async(std::launch::async, [&] { first->barrier("count", 2, 10s); });
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(arrived.wait_for(0s), std::future_status::timeout) << "a barrier of 2 passed with 1 task";
  client("worker:1")->barrier("count", 2, 10s);
  ASSERT_EQ(arrived.wait_for(5s), std::future_status::ready);
  arrived.get();
}

TEST_F(CoordinationTest, BarrierWithAMissingTaskTimesOutNamingIt) {
  const std::vector<std::string> tasks = {"worker:0", "worker:1", "worker:2"};
  std::vector<std::string> messages(2);
  std::vector<milliseconds> took(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {  // worker:2 never comes
    threads.emplace_back([&, i] {
      auto c = client(tasks[i]);
      const auto start = Clock::now();
      messages[i] = message_of<Timeout>([&] { c->barrier("sync", tasks, 500ms); });
      took[i] = since(start);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(contains(messages[i],
                         "barrier 'sync' timed out after 500 ms: 2 of 3 tasks arrived "
                         "(worker:0, worker:1); did not arrive: worker:2"))
        << messages[i];
    EXPECT_TRUE(contains(messages[i], address_)) << messages[i];
    EXPECT_LT(took[i], 500ms + kMargin);
  }
  // A late arrival learns the barrier's outcome instead of waiting again.
  EXPECT_TRUE(contains(message_of<Timeout>([&] { client("worker:2")->barrier("sync", tasks, 10s); }),
                       "did not arrive: worker:2"));
}

TEST_F(CoordinationTest, BarrierByCountNamesTheKnownTasksThatDidNotArrive) {
  auto absent = client("worker:1");
  absent->start_heartbeats(100ms);  // known to the service, but never arrives
  auto c = client("worker:0");
  const auto msg = message_of<Timeout>([&] { c->barrier("counted", 2, 300ms); });
  EXPECT_TRUE(contains(msg, "1 of 2 tasks arrived (worker:0); 1 missing; known tasks that did not arrive: worker:1"))
      << msg;
}

TEST_F(CoordinationTest, BarrierArrivalThatDisagreesOnParticipantsIsInvalidArgument) {
  auto a = client("worker:0");
  auto waiting = std::async(std::launch::async, [&] {
    return message_of<Timeout>([&] { a->barrier("b", std::vector<std::string>{"worker:0", "worker:1"}, 500ms); });
  });
  std::this_thread::sleep_for(100ms);
  auto outsider = client("worker:5");
  auto msg = message_of<InvalidArgument>([&] {
    outsider->barrier("b", std::vector<std::string>{"worker:0", "worker:1"}, 500ms);
  });
  EXPECT_TRUE(contains(msg, "task worker:5 is not one of its tasks (worker:0, worker:1)")) << msg;
  msg = message_of<InvalidArgument>([&] { client("worker:1")->barrier("b", 3, 500ms); });
  EXPECT_TRUE(contains(msg, "arrived for 3 tasks but the barrier is for tasks (worker:0, worker:1)")) << msg;
  EXPECT_TRUE(contains(waiting.get(), "did not arrive: worker:1"));
}

TEST_F(CoordinationTest, BarrierFailsAtOnceWhenAParticipantIsLost) {
  auto gone = client("worker:1");
  gone->start_heartbeats(100ms);
  gone->stop_heartbeats();  // silent from now on: lost after 1 s
  auto c = client("worker:0");
  const auto start = Clock::now();
  const auto msg = message_of<Unavailable>([&] {
    c->barrier("b", std::vector<std::string>{"worker:0", "worker:1"}, 30s);
  });
  EXPECT_TRUE(contains(msg, "barrier 'b' cannot pass: task(s) worker:1 were declared lost before arriving")) << msg;
  EXPECT_LT(since(start), 1s + kMargin) << "the barrier waited for its 30 s timeout";
}

// An RPC whose own deadline passes before the service answers: this task's barrier deadline is shorter
// than the one the first arrival set, so gRPC's DEADLINE_EXCEEDED ends it.
TEST_F(CoordinationTest, RpcPastItsDeadlineIsTimeoutNamingRpcBarrierAndAddress) {
  auto first = client("worker:0");
  auto waiting =
      std::async(std::launch::async, [&] { return message_of<Timeout>([&] { first->barrier("slow", 3, 1500ms); }); });
  std::this_thread::sleep_for(100ms);
  auto options = client_options();
  options.rpc_timeout = 100ms;
  CoordinationClient impatient(address_, "worker:1", options);
  const auto start = Clock::now();
  const auto msg = message_of<Timeout>([&] { impatient.barrier("slow", 3, 100ms); });
  EXPECT_TRUE(contains(msg,
                       "coordination Barrier of barrier 'slow' as worker:1 timed out: no reply within 200 ms "
                       "from the coordination service at " +
                           address_))
      << msg;
  EXPECT_LT(since(start), 200ms + kMargin);
  EXPECT_TRUE(contains(waiting.get(), "2 of 3 tasks arrived"));
}

// ---- heartbeats

TEST_F(CoordinationTest, ATaskThatStopsHeartbeatingIsReportedLostToTheOthers) {
  std::mutex mu;  // declared before the clients: their heartbeat threads call on_lost until they are destroyed
  std::vector<LostTask> reported;
  std::promise<void> first_report;
  auto watcher = client("worker:0");
  auto quiet = client("worker:1");
  watcher->set_on_lost([&](const LostTask& l) {
    std::lock_guard lock(mu);
    reported.push_back(l);
    if (reported.size() == 1) first_report.set_value();
  });
  watcher->start_heartbeats(100ms);
  quiet->start_heartbeats(100ms);
  std::this_thread::sleep_for(1500ms);  // longer than the heartbeat timeout: beating tasks are not lost
  EXPECT_TRUE(watcher->lost_tasks().empty());
  watcher->check_peers();

  const auto start = Clock::now();
  quiet->stop_heartbeats();
  ASSERT_EQ(first_report.get_future().wait_for(1s + kMargin), std::future_status::ready)
      << "worker:1 was not reported lost within heartbeat_timeout + 2 s";
  EXPECT_GE(since(start), 900ms);
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(reported.size(), 1u);
    EXPECT_EQ(reported[0].task, "worker:1");
    EXPECT_TRUE(contains(reported[0].reason, "no heartbeat for")) << reported[0].reason;
    EXPECT_TRUE(contains(reported[0].reason, "(heartbeat timeout 1.00 s)")) << reported[0].reason;
  }
  const auto lost = client("worker:2")->lost_tasks();  // any task can ask
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].task, "worker:1");
  const auto msg = message_of<Unavailable>([&] { watcher->check_peers(); });
  EXPECT_TRUE(
      contains(msg, "the coordination service at " + address_ + " declared task(s) lost: worker:1 (no heartbeat for"))
      << msg;
  // The same client beating again stays lost (the others were told); a restarted task joins again.
  quiet->start_heartbeats(100ms);
  EXPECT_EQ(watcher->lost_tasks().size(), 1u);
  quiet.reset();
  auto restarted = client("worker:1");
  restarted->start_heartbeats(100ms);
  EXPECT_TRUE(watcher->lost_tasks().empty());
}

TEST_F(CoordinationTest, ATaskThatDisconnectsIsNotReportedLost) {
  std::atomic<int> reports{0};
  auto watcher = client("worker:0");
  watcher->set_on_lost([&](const LostTask&) { ++reports; });
  watcher->start_heartbeats(100ms);
  auto done = client("worker:1");
  done->start_heartbeats(100ms);
  done->disconnect();
  auto crashed = client("worker:2");  // for contrast: silent without disconnecting
  crashed->start_heartbeats(100ms);
  crashed->stop_heartbeats();
  std::this_thread::sleep_for(1s + 1s);
  const auto lost = watcher->lost_tasks();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].task, "worker:2");
  watcher->stop_heartbeats();
  EXPECT_EQ(reports, 1);
}

// The child side of the SIGKILL test: run by the test below as a separate process, which it kills.
TEST(CoordinationChild, HeartbeatsUntilKilled) {
  const char* address = std::getenv("STRATA_COORDINATION_CHILD_ADDRESS");
  if (address == nullptr) GTEST_SKIP() << "a helper process of KilledProcessIsReportedLostNamingIt";
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  CoordinationClient c(address, "worker:7", client_options());
  c.start_heartbeats(100ms);
  c.set("child-ready", std::to_string(::getpid()));
  std::this_thread::sleep_for(30s);  // the parent kills it long before
}

// A child process running the test above, killed with SIGKILL and reaped on every path.
struct Child : test::HelperProcess {
  explicit Child(const std::string& address)
      : HelperProcess("CoordinationChild.HeartbeatsUntilKilled", "STRATA_COORDINATION_CHILD_ADDRESS=" + address) {}
};

TEST_F(CoordinationTest, KilledProcessIsReportedLostNamingIt) {
  std::promise<LostTask> report;  // declared before the client: its heartbeat thread calls on_lost
  std::once_flag once;
  auto watcher = client("worker:0", 20s);  // the child's start (a process, gRPC) may be slow on a loaded machine
  watcher->set_on_lost([&](const LostTask& l) { std::call_once(once, [&] { report.set_value(l); }); });
  watcher->start_heartbeats(100ms);
  Child child(address_);
  ASSERT_GT(child.pid(), 0);
  ASSERT_EQ(watcher->get("child-ready"), std::to_string(child.pid()));
  EXPECT_TRUE(watcher->lost_tasks().empty());
  const auto start = Clock::now();
  child.kill();
  auto future = report.get_future();
  ASSERT_EQ(future.wait_for(1s + kMargin), std::future_status::ready)
      << "the killed worker:7 was not reported lost within heartbeat_timeout + 2 s";
  EXPECT_EQ(future.get().task, "worker:7");
  EXPECT_LT(since(start), 1s + kMargin);
  EXPECT_TRUE(contains(message_of<Unavailable>([&] { watcher->check_peers(); }), "declared task(s) lost: worker:7"));
}

// ---- connecting, serving, stopping

TEST(CoordinationConnect, AServiceThatNeverComesIsUnavailableWithinTheConnectDeadline) {
  ReservedPort port;  // bound, not listening: nothing will answer
  const std::string address = "127.0.0.1:" + std::to_string(port.port());
  auto options = client_options();
  options.connect_timeout = 500ms;
  const auto start = Clock::now();
  const auto msg = message_of<Unavailable>([&] { CoordinationClient c(address, "worker:3", options); });
  const auto took = since(start);
  EXPECT_TRUE(contains(msg, "coordination client worker:3: no coordination service answered at " + address + " within"))
      << msg;
  EXPECT_TRUE(contains(msg, "(connect timeout 500 ms)")) << msg;
  EXPECT_GE(took, 450ms);
  EXPECT_LT(took, 500ms + kMargin);
}

TEST(CoordinationConnect, AClientWaitsForAServiceThatComesLate) {
  ReservedPort port;
  const std::string address = "127.0.0.1:" + std::to_string(port.port());
  auto connected = std::async(std::launch::async, [&] {
    CoordinationClient c(address, "worker:1", client_options());
    return c.get("hello");
  });
  std::this_thread::sleep_for(300ms);
  port.release();
  CoordinationService service;
  service.start(address);
  CoordinationClient(address, "worker:0", client_options()).set("hello", "world");
  ASSERT_EQ(connected.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(connected.get(), "world");
}

TEST(CoordinationConnect, APortInUseIsUnavailableNamingTheAddress) {
  CoordinationService first;
  first.start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(first.port());
  CoordinationService second;
  const auto msg = message_of<Unavailable>([&] { second.start(address); });
  EXPECT_TRUE(contains(msg, "coordination service: cannot listen on " + address)) << msg;
}

TEST(CoordinationConnect, ABarePortBindsLoopback) {
  CoordinationService service;
  service.start(":0");
  CoordinationClient c("127.0.0.1:" + std::to_string(service.port()), "worker:0", client_options());
  c.set("k", "v");
  EXPECT_EQ(c.get("k"), "v");
}

TEST(CoordinationConnect, StoppingTheServiceEndsPendingWaitsAndLaterCallsAreUnavailable) {
  CoordinationService service;
  service.start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(service.port());
  CoordinationClient c(address, "worker:0", client_options(30s));
  auto pending = std::async(std::launch::async, [&] { return message_of<Unavailable>([&] { c.get("never"); }); });
  std::this_thread::sleep_for(200ms);
  const auto start = Clock::now();
  service.stop();
  EXPECT_LT(since(start), kMargin + 1s);
  ASSERT_EQ(pending.wait_for(5s), std::future_status::ready);
  const auto pending_msg = pending.get();
  EXPECT_TRUE(contains(pending_msg, "coordination Get of key 'never' failed: the coordination service at " + address +
                                        " is unavailable"))
      << pending_msg;
  const auto msg = message_of<Unavailable>([&] { c.set("k", "v"); });
  EXPECT_TRUE(contains(msg, "coordination Set of key 'k' failed: the coordination service at " + address)) << msg;
}

TEST(CoordinationConnect, HeartbeatingClientsLearnThatTheServiceIsGone) {
  std::promise<LostTask> report;  // declared before the client: its heartbeat thread calls on_lost
  std::once_flag once;
  CoordinationService service;
  service.start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(service.port());
  auto options = client_options();
  options.service_timeout = 1s;
  CoordinationClient c(address, "worker:1", options);
  c.set_on_lost([&](const LostTask& l) { std::call_once(once, [&] { report.set_value(l); }); });
  c.start_heartbeats(100ms);
  std::this_thread::sleep_for(1500ms);  // heartbeats answered: nothing reported
  auto future = report.get_future();
  EXPECT_EQ(future.wait_for(0s), std::future_status::timeout);
  const auto start = Clock::now();
  service.stop();
  ASSERT_EQ(future.wait_for(1s + kMargin), std::future_status::ready)
      << "the stopped service was not reported within service_timeout + 2 s";
  EXPECT_GE(since(start), 900ms);
  const auto lost = future.get();
  EXPECT_EQ(lost.task, "coordination service at " + address);
  EXPECT_TRUE(contains(lost.reason, "no heartbeat answered for")) << lost.reason;
  EXPECT_TRUE(contains(lost.reason, "(service timeout 1.00 s): coordination Heartbeat of task worker:1 failed"))
      << lost.reason;
  c.stop_heartbeats();
}

// Not a speed assertion: prints the round trip of a small Set for the record.
TEST_F(CoordinationTest, PrintsTheRoundTripOfASmallSet) {
  auto c = client("worker:0");
  std::vector<double> us;
  for (int i = 0; i < 1000; ++i) {
    const auto start = Clock::now();
    c->set("rtt", "x");
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("coordination Set round trip on 127.0.0.1: median %.0f us, p90 %.0f us (1000 calls)\n", us[500], us[900]);
  EXPECT_EQ(c->get("rtt"), "x");
}

}  // namespace
}  // namespace strata::cluster
