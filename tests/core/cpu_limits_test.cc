// Tests of the CPU-limit readers (core/cpu_limits.h): kernel CPU lists, cgroup v1 and v2 quotas, and how
// affinity and quota combine into the cores a process may keep busy; and the process-wide default thread
// count (strata/threading.h) that the CLI sets from them.
// Thread-safety: single-threaded, but for the one test that reads the default from a second thread.
#include "core/cpu_limits.h"

#include <gtest/gtest.h>

#include <thread>

#include "strata/threading.h"

namespace strata::detail {
namespace {

TEST(CpuListTest, CountsRangesAndSingles) {
  EXPECT_EQ(count_cpu_list("0-3,8,10-11"), 7);
  EXPECT_EQ(count_cpu_list("0"), 1);
  EXPECT_EQ(count_cpu_list("0-1\n"), 2);
  EXPECT_EQ(count_cpu_list(""), 0);
}

TEST(CpuListTest, RejectsWhatIsNoList) {
  EXPECT_FALSE(count_cpu_list("3-1").has_value());
  EXPECT_FALSE(count_cpu_list("a-b").has_value());
  EXPECT_FALSE(count_cpu_list("0,,1").has_value());
  EXPECT_FALSE(count_cpu_list("-1").has_value());
}

TEST(CgroupQuotaTest, V2CpuMax) {
  EXPECT_DOUBLE_EQ(*parse_cpu_max("200000 100000"), 2.0);
  EXPECT_DOUBLE_EQ(*parse_cpu_max("150000 100000\n"), 1.5);
  EXPECT_FALSE(parse_cpu_max("max 100000").has_value());
  EXPECT_FALSE(parse_cpu_max("garbage").has_value());
  EXPECT_FALSE(parse_cpu_max("0 100000").has_value());
}

TEST(CgroupQuotaTest, V1Quota) {
  EXPECT_DOUBLE_EQ(*parse_cfs_quota("50000", "100000"), 0.5);
  EXPECT_FALSE(parse_cfs_quota("-1", "100000").has_value());
}

TEST(UsableCoresTest, AffinityLoweredToTheQuotaRoundedUp) {
  EXPECT_EQ(usable_cores({.affinity = 8, .cpuset = 8, .quota = std::nullopt}), 8);
  EXPECT_EQ(usable_cores({.affinity = 8, .cpuset = 8, .quota = 1.5}), 2);
  EXPECT_EQ(usable_cores({.affinity = 2, .cpuset = 8, .quota = 4.0}), 2);
  EXPECT_EQ(usable_cores({.affinity = 8, .cpuset = 8, .quota = 0.2}), 1);
}

TEST(UsableCoresTest, ThisProcessHasAtLeastOneAndNoMoreThanTheMachine) {
  const CpuLimits limits = read_cpu_limits();
  EXPECT_GE(limits.affinity, 1);
  EXPECT_GE(limits.cpuset, 1);
  EXPECT_GE(usable_cores(limits), 1);
  EXPECT_LE(usable_cores(limits), hardware_threads());
  EXPECT_EQ(strata::usable_cores(), usable_cores(limits));
}

TEST(DefaultThreadsTest, SetDefaultReachesThreadsThatSetNothing) {
  const int before = default_num_threads();
  set_default_num_threads(3);
  int seen = 0;
  std::thread([&] { seen = num_threads(); }).join();
  EXPECT_EQ(seen, 3);
  {
    ScopedNumThreads own(2);  // a thread's own count still wins
    EXPECT_EQ(num_threads(), 2);
  }
  EXPECT_EQ(num_threads(), 3);
  set_default_num_threads(0);
  EXPECT_EQ(default_num_threads(), before);
}

}  // namespace
}  // namespace strata::detail
