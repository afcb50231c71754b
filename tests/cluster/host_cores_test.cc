// Tests of a task's share of its host's cores (strata/cluster/host_cores.h): divided among the job's tasks
// on the host as each launcher tells them (TF_CONFIG addresses, mpirun, torchrun), waiting tasks (ps, a
// parameter-server chief) given one thread, a launcher's binding used whole, the user's count winning with
// one warning per host when it oversubscribes.
// Thread-safety: single-threaded.
#include "strata/cluster/host_cores.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/cpu_limits.h"

namespace strata::cluster {
namespace {

using ::testing::HasSubstr;

detail::CpuLimits cores(int n) { return {.affinity = n, .cpuset = n, .quota = std::nullopt}; }

TaskInfo tf_task(const std::string& cluster_json, const std::string& type, int index) {
  return resolve_tf_config(R"({"cluster": )" + cluster_json + R"(, "task": {"type": ")" + type + R"(", "index": )" +
                           std::to_string(index) + "}}");
}

TEST(HostCoresTest, OneProcessTakesEveryCore) {
  const CoreShare share = share_host_cores(TaskInfo{}, cores(2), std::nullopt);
  EXPECT_EQ(share.threads, 2);
  EXPECT_EQ(share.reason, "2 threads: the 2 cores of this host");
  EXPECT_TRUE(share.warning.empty());
}

TEST(HostCoresTest, TwoLocalWorkersShareTwoCores) {
  const std::string cluster = R"({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})";
  for (int i = 0; i < 2; ++i) {
    const CoreShare share = share_host_cores(tf_task(cluster, "worker", i), cores(2), std::nullopt);
    EXPECT_EQ(share.threads, 1);
    EXPECT_EQ(share.tasks_on_host, 2);
    EXPECT_EQ(share.reason, "1 thread: 2 cores shared by 2 tasks on this host");
  }
  EXPECT_EQ(share_host_cores(tf_task(cluster, "worker", 0), cores(16), std::nullopt).threads, 8);
  EXPECT_EQ(share_host_cores(tf_task(cluster, "worker", 0), cores(3), std::nullopt).threads, 1);
}

TEST(HostCoresTest, OnlyTasksOfThisHostCount) {
  // 2 tasks on host a, 1 on b; localhost and 127.0.0.2 are one machine.
  const std::string cluster = R"({"worker": ["a:1", "a:2", "b:1", "localhost:5", "127.0.0.2:6"]})";
  EXPECT_EQ(share_host_cores(tf_task(cluster, "worker", 0), cores(8), std::nullopt).threads, 4);
  EXPECT_EQ(share_host_cores(tf_task(cluster, "worker", 2), cores(8), std::nullopt).threads, 8);
  EXPECT_EQ(share_host_cores(tf_task(cluster, "worker", 3), cores(8), std::nullopt).threads, 4);
}

TEST(HostCoresTest, ParameterServerTasksThatWaitTakeOneThread) {
  const std::string cluster =
      R"({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"], "ps": ["127.0.0.1:4", "127.0.0.1:5"]})";
  const CoreShare ps = share_host_cores(tf_task(cluster, "ps", 1), cores(8), std::nullopt);
  EXPECT_EQ(ps.threads, 1);
  EXPECT_EQ(ps.reason, "1 thread: a ps task mostly waits");
  EXPECT_EQ(share_host_cores(tf_task(cluster, "chief", 0), cores(8), std::nullopt).threads, 1);
  const CoreShare worker = share_host_cores(tf_task(cluster, "worker", 0), cores(8), std::nullopt);
  EXPECT_EQ(worker.threads, 4);  // the waiting chief and ps are not counted against the workers
  EXPECT_EQ(worker.reason,
            "4 threads: 8 cores shared by 2 tasks on this host (and 3 tasks that mostly wait, 1 thread each)");
  // Without ps tasks the chief is a worker like the others (multi_worker_mirrored).
  const std::string mirrored = R"({"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]})";
  EXPECT_EQ(share_host_cores(tf_task(mirrored, "chief", 0), cores(8), std::nullopt).threads, 4);
}

TEST(HostCoresTest, MpirunAndTorchrunLocalSizes) {
  TaskInfo mpi = resolve_cluster({{"OMPI_COMM_WORLD_RANK", "1"},
                                  {"OMPI_COMM_WORLD_SIZE", "4"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(share_host_cores(mpi, cores(8), std::nullopt).threads, 4);
  TaskInfo torch = resolve_cluster({{"RANK", "0"},
                                    {"WORLD_SIZE", "3"},
                                    {"MASTER_ADDR", "h"},
                                    {"MASTER_PORT", "1"},
                                    {"LOCAL_RANK", "0"},
                                    {"LOCAL_WORLD_SIZE", "3"}});
  EXPECT_EQ(share_host_cores(torch, cores(6), std::nullopt).threads, 2);
  // No local size: the process is taken to be alone on its host.
  TaskInfo bare = resolve_cluster({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(share_host_cores(bare, cores(2), std::nullopt).threads, 2);
}

TEST(HostCoresTest, SlurmTasksPerNodeAndCpusPerTask) {
  Environment env = {{"SLURM_STEP_ID", "0"},
                     {"SLURM_PROCID", "1"},
                     {"SLURM_NTASKS", "4"},
                     {"SLURM_LOCALID", "1"},
                     {"SLURM_STEP_NODELIST", "n[1-2]"},
                     {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                     {"SLURMD_NODENAME", "n1"}};
  EXPECT_EQ(share_host_cores(resolve_cluster(env), cores(8), std::nullopt).threads, 4);  // 8 cores, 2 tasks here
  env["SLURM_CPUS_PER_TASK"] = "3";
  const CoreShare share = share_host_cores(resolve_cluster(env), cores(8), std::nullopt);
  EXPECT_EQ(share.threads, 3);
  EXPECT_EQ(share.reason, "3 threads: SLURM_CPUS_PER_TASK=3");
}

TEST(HostCoresTest, ThisProcessGetsAtLeastOneThreadAndNoMoreThanItsCores) {
  const CoreShare share = share_host_cores(TaskInfo{});
  EXPECT_GE(share.threads, 1);
  EXPECT_EQ(share.threads, share.cores);
  EXPECT_EQ(share.cores, detail::usable_cores(detail::read_cpu_limits()));
}

TEST(HostCoresTest, ABindingIsTheTasksShareAlready) {
  TaskInfo mpi = resolve_cluster({{"OMPI_COMM_WORLD_RANK", "0"},
                                  {"OMPI_COMM_WORLD_SIZE", "2"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  const CoreShare share = share_host_cores(mpi, {.affinity = 1, .cpuset = 2, .quota = std::nullopt}, std::nullopt);
  EXPECT_EQ(share.threads, 1);
  EXPECT_EQ(share.reason, "1 thread: the 1 core this task is bound to");
}

TEST(HostCoresTest, AQuotaLimitsTheCores) {
  const CoreShare share = share_host_cores(TaskInfo{}, {.affinity = 16, .cpuset = 16, .quota = 2.5}, std::nullopt);
  EXPECT_EQ(share.threads, 3);
  EXPECT_EQ(share.reason, "3 threads: the 3 cores of this process's CPU quota");
}

TEST(HostCoresTest, TheUsersCountWinsAndOversubscriptionIsWarnedOncePerHost) {
  const std::string cluster = R"({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})";
  const ThreadSetting two{2, "STRATA_NUM_THREADS"};
  const CoreShare first = share_host_cores(tf_task(cluster, "worker", 0), cores(2), two);
  EXPECT_EQ(first.threads, 2);
  EXPECT_EQ(first.reason, "2 threads: STRATA_NUM_THREADS=2");
  EXPECT_THAT(first.warning, HasSubstr("STRATA_NUM_THREADS=2 in each of the 2 tasks on this host asks for 4 threads "
                                       "on 2 cores"));
  EXPECT_THAT(first.warning, HasSubstr("leave it unset to share the cores (1 each)"));
  EXPECT_TRUE(share_host_cores(tf_task(cluster, "worker", 1), cores(2), two).warning.empty());
  // A count that fits says nothing.
  EXPECT_TRUE(share_host_cores(tf_task(cluster, "worker", 0), cores(2), ThreadSetting{1, "--threads"}).warning.empty());
  const CoreShare flag = share_host_cores(TaskInfo{}, cores(2), ThreadSetting{4, "--threads"});
  EXPECT_EQ(flag.reason, "4 threads: --threads 4");
  EXPECT_THAT(flag.warning, HasSubstr("--threads 4 asks for 4 threads on 2 cores"));
}

}  // namespace
}  // namespace strata::cluster
