// The stores (strata/comm/store.h): every operation on the in-memory, file and prefix stores; threads racing
// on add and compare_set (exact totals); processes (fork) racing on one file store; waits woken by a later set
// and waits that time out with the keys still missing; prefix isolation.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include "strata/comm/store.h"
#include "strata/error.h"
#include "comm/comm_test_util.h"
#include "test_util.h"

namespace strata::comm {
namespace {

using test::TempDir;

using namespace std::chrono_literals;
using test::message_of;
using Clock = std::chrono::steady_clock;

enum class Kind { kMemory, kFile, kPrefix };

class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  std::shared_ptr<Store> make(std::chrono::milliseconds timeout = 5s) {
    switch (GetParam()) {
      case Kind::kMemory:
        return make_in_memory_store(timeout);
      case Kind::kFile:
        return make_file_store(dir_.path() + "/store", timeout);
      case Kind::kPrefix: {
        auto inner = make_in_memory_store(timeout);
        inner->set("outside", "x");  // a key of the inner store that the prefix store must not see
        return make_prefix_store(inner, "group-1");
      }
    }
    return nullptr;
  }
  TempDir dir_;
};

TEST_P(StoreTest, SetGetCheckDeleteAndCount) {
  auto store = make();
  EXPECT_EQ(store->num_keys(), 0);
  EXPECT_FALSE(store->check({"a"}));
  store->set("a", "1");
  store->set("b/c d", std::string("\0bytes\xff", 7));  // odd characters in the key, bytes in the value
  EXPECT_EQ(store->get("a"), "1");
  EXPECT_EQ(store->get("b/c d"), std::string("\0bytes\xff", 7));
  store->set("a", "overwritten");
  EXPECT_EQ(store->get("a"), "overwritten");
  store->set("empty", "");
  EXPECT_EQ(store->get("empty"), "");
  EXPECT_TRUE(store->check({"a", "b/c d", "empty"}));
  EXPECT_FALSE(store->check({"a", "zzz"}));
  EXPECT_EQ(store->num_keys(), 3);
  EXPECT_TRUE(store->delete_key("a"));
  EXPECT_FALSE(store->delete_key("a"));
  EXPECT_FALSE(store->check({"a"}));
  EXPECT_EQ(store->num_keys(), 2);
}

TEST_P(StoreTest, AddCountsFromZeroAndRejectsNonCounters) {
  auto store = make();
  EXPECT_EQ(store->add("n", 5), 5);
  EXPECT_EQ(store->add("n", -7), -2);
  EXPECT_EQ(store->get("n"), "-2");
  store->set("word", "12x");
  const std::string message = message_of<InvalidArgument>([&] { store->add("word", 1); });
  EXPECT_NE(message.find("'12x' is not a decimal int64 counter"), std::string::npos) << message;
  EXPECT_NE(message.find("word"), std::string::npos) << message;
  store->set("big", "9223372036854775807");
  EXPECT_NE(message_of<InvalidArgument>([&] { store->add("big", 1); }).find("overflows int64"), std::string::npos);
  store->set("huge", "99999999999999999999");
  EXPECT_NE(message_of<InvalidArgument>([&] { store->add("huge", 1); }).find("not a decimal int64"),
            std::string::npos);
  EXPECT_EQ(store->get("big"), "9223372036854775807");  // a failed add changes nothing
}

TEST_P(StoreTest, CompareSet) {
  auto store = make();
  EXPECT_EQ(store->compare_set("k", "x", "y"), "");  // missing and expected non-empty: nothing stored
  EXPECT_FALSE(store->check({"k"}));
  EXPECT_EQ(store->compare_set("k", "", "first"), "first");  // empty expected matches a missing key
  EXPECT_EQ(store->compare_set("k", "", "second"), "first");
  EXPECT_EQ(store->compare_set("k", "wrong", "second"), "first");
  EXPECT_EQ(store->compare_set("k", "first", "second"), "second");
  EXPECT_EQ(store->get("k"), "second");
}

TEST_P(StoreTest, WaitIsWokenByALaterSet) {
  auto store = make();
  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    store->set("late", "v");
    std::this_thread::sleep_for(20ms);
    store->set("later", "w");
  });
  const auto start = Clock::now();
  store->wait({"late", "later"}, 5s);
  EXPECT_EQ(store->get("later"), "w");
  EXPECT_LT(Clock::now() - start, 2s);
  writer.join();
  std::thread writer2([&] {
    std::this_thread::sleep_for(30ms);
    store->set("blocking", "z");
  });
  EXPECT_EQ(store->get("blocking"), "z");  // get blocks until the key comes
  writer2.join();
}

TEST_P(StoreTest, WaitTimesOutNamingTheMissingKeys) {
  auto store = make(200ms);
  store->set("here", "1");
  auto start = Clock::now();
  std::string message = message_of<Timeout>([&] { store->wait({"here", "gone-1", "gone-2"}, 150ms); });
  auto waited = Clock::now() - start;
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 1500ms);
  EXPECT_NE(message.find("waited 150 ms for 3 keys; still missing 2: '"), std::string::npos) << message;
  EXPECT_NE(message.find("gone-1'"), std::string::npos) << message;
  EXPECT_NE(message.find("gone-2'"), std::string::npos) << message;
  EXPECT_EQ(message.find("here'"), std::string::npos) << message;

  start = Clock::now();  // get is bounded by the store's own timeout
  message = message_of<Timeout>([&] { store->get("never"); });
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_NE(message.find("waited 200 ms for 1 key; still missing 1:"), std::string::npos) << message;
  EXPECT_NE(message.find("never'"), std::string::npos) << message;
  if (GetParam() == Kind::kPrefix) {
    EXPECT_NE(message.find("'group-1/never'"), std::string::npos) << message;
  }
}

TEST_P(StoreTest, ThreadsRacingOnAddAndCompareSetGetExactTotals) {
  auto store = make();
  constexpr int kThreads = 4;
  const int kAdds = GetParam() == Kind::kFile ? 100 : 2000;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) store->add("counter", t + 1);
      // Each thread tries to claim the token once; exactly one wins.
      if (store->compare_set("token", "", "thread-" + std::to_string(t)) == "thread-" + std::to_string(t)) ++winners;
      // A compare-and-swap increment loop: no update may be lost. Values are "<count>:<writer>" so that a
      // writer's desired value is its own (compare_set returns the value now stored; success is seeing ours).
      for (int i = 0; i < kAdds / 4; ++i) {
        std::string seen = store->compare_set("cas", "", "0:init");
        while (true) {
          const std::string next =
              std::to_string(std::stoll(seen) + 1) + ":" + std::to_string(t) + "/" + std::to_string(i);
          const std::string now = store->compare_set("cas", seen, next);
          if (now == next) break;
          seen = now;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->get("counter"), std::to_string(kAdds * (1 + 2 + 3 + 4)));
  EXPECT_EQ(winners.load(), 1);
  EXPECT_EQ(std::stoll(store->get("cas")), kThreads * (kAdds / 4));
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values(Kind::kMemory, Kind::kFile, Kind::kPrefix),
                         [](const auto& info) {
                           switch (info.param) {
                             case Kind::kMemory:
                               return std::string("InMemory");
                             case Kind::kFile:
                               return std::string("File");
                             case Kind::kPrefix:
                               return std::string("Prefix");
                           }
                           return std::string("?");
                         });

TEST(PrefixStoreTest, PrefixesIsolateGroups) {
  auto inner = make_in_memory_store(1s);
  auto a = make_prefix_store(inner, "epoch-1");
  auto b = make_prefix_store(inner, "epoch-2");
  auto nested = make_prefix_store(a, "dp");
  a->set("rank-0", "A");
  b->set("rank-0", "B");
  nested->set("rank-0", "N");
  EXPECT_EQ(a->get("rank-0"), "A");
  EXPECT_EQ(b->get("rank-0"), "B");
  EXPECT_EQ(nested->get("rank-0"), "N");
  EXPECT_EQ(inner->get("epoch-1/rank-0"), "A");
  EXPECT_EQ(inner->get("epoch-1/dp/rank-0"), "N");
  EXPECT_EQ(a->add("n", 2), 2);
  EXPECT_EQ(b->add("n", 3), 3);
  EXPECT_FALSE(b->check({"missing"}));
  EXPECT_TRUE(b->delete_key("rank-0"));
  EXPECT_EQ(a->get("rank-0"), "A");
  EXPECT_EQ(a->num_keys(), 3);  // rank-0, n, dp/rank-0
  EXPECT_EQ(b->num_keys(), 1);
  EXPECT_EQ(nested->num_keys(), 1);
  EXPECT_EQ(inner->num_keys(), 4);
  // A key in b that a waits for never comes.
  EXPECT_THROW(a->wait({"only-in-b"}, 50ms), Timeout);
  b->set("only-in-b", "1");
  EXPECT_FALSE(a->check({"only-in-b"}));

  TempDir dir;
  auto files = make_file_store(dir.path(), 1s);
  auto fa = make_prefix_store(files, "g");
  fa->set("x", "1");
  files->set("gx", "2");  // shares the first characters, not the prefix "g/"
  EXPECT_EQ(fa->num_keys(), 1);
  EXPECT_EQ(files->num_keys(), 2);
}

TEST(FileStoreTest, TwoOpenersShareKeysAndWritesLeaveNoTemporaries) {
  TempDir dir;
  auto one = make_file_store(dir.path() + "/a/b", 1s);  // nested directories are created
  auto two = make_file_store(dir.path() + "/a/b", 1s);
  one->set("key with spaces/and slashes", "v");
  EXPECT_EQ(two->get("key with spaces/and slashes"), "v");
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/a/b")) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp.", 0), 0u) << entry.path();
  }
  EXPECT_THROW(one->set(std::string(300, 'k'), "v"), InvalidArgument);
  const std::string not_a_dir = dir.path() + "/file";
  { std::FILE* f = std::fopen(not_a_dir.c_str(), "w"); std::fclose(f); }
  EXPECT_THROW(make_file_store(not_a_dir), IoError);
}

// Runs `child(i)` in `n` forked processes; each exits 0 on success. The parent waits at most `limit` for all,
// kills any still running, reaps every one, and returns the exit statuses.
std::vector<int> run_processes(int n, const std::function<int(int)>& child, std::chrono::seconds limit) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(static_cast<unsigned>(limit.count()) + 1);  // a stuck child dies on its own
      int status = 1;
      try {
        status = child(i);
      } catch (...) {
        status = 2;
      }
      ::_exit(status);
    }
    if (pid > 0) pids.push_back(pid);
  }
  std::vector<int> statuses(pids.size(), -1);
  const auto deadline = Clock::now() + limit;
  size_t left = pids.size();
  while (left > 0 && Clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (statuses[i] != -1) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        statuses[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (statuses[i] != -1) continue;
    ::kill(pids[i], SIGKILL);
    int status = 0;
    ::waitpid(pids[i], &status, 0);
    statuses[i] = 1000;  // timed out
  }
  EXPECT_EQ(static_cast<int>(pids.size()), n) << "fork failed";
  return statuses;
}

TEST(FileStoreTest, ProcessesRacingOnAddAndCompareSetGetExactTotals) {
  TempDir dir;
  constexpr int kProcesses = 4, kAdds = 100;
  const auto statuses = run_processes(
      kProcesses,
      [&](int i) {
        auto store = make_file_store(dir.path(), 10s);
        for (int k = 0; k < kAdds; ++k) store->add("counter", i + 1);
        store->compare_set("token", "", "process-" + std::to_string(i));
        store->set("done-" + std::to_string(i), "1");
        // Every process waits for every other one: a wait across processes.
        store->wait({"done-0", "done-1", "done-2", "done-3"}, 10s);
        return 0;
      },
      std::chrono::seconds(20));
  for (int i = 0; i < kProcesses; ++i) EXPECT_EQ(statuses[i], 0) << "process " << i;
  auto store = make_file_store(dir.path(), 1s);
  EXPECT_EQ(store->get("counter"), std::to_string(kAdds * (1 + 2 + 3 + 4)));
  EXPECT_EQ(store->get("token").rfind("process-", 0), 0u);
  EXPECT_EQ(store->num_keys(), 2 + kProcesses);
}

}  // namespace
}  // namespace strata::comm
