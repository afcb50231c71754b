// Tests of SLURM cluster resolution: hostlist expressions expanded as `scontrol show hostnames` does, tasks-per-
// node lists, STRATA_SLURM_JOBS, and srun environments (fixtures of the variables srun sets) resolved to the
// task, address, local rank and local world size of every rank, with every bad input's error text.
// Thread-safety: single-threaded tests on environment maps; the real environment is not touched.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "strata/cluster/cluster_resolver.h"
#include "strata/cluster/slurm.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::cluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Hosts = std::vector<std::string>;

// Expects `f` to throw InvalidArgument whose message contains every one of `parts`.
template <typename F>
void expect_invalid(F&& f, std::initializer_list<std::string> parts) {
  test::expect_error_containing<InvalidArgument>(std::forward<F>(f), parts);
}

TEST(Hostlist, PlainNamesAndSingleHost) {
  EXPECT_EQ(expand_hostlist("node7"), Hosts({"node7"}));
  EXPECT_EQ(expand_hostlist("login-a.cluster"), Hosts({"login-a.cluster"}));
  EXPECT_EQ(expand_hostlist("a,b,c"), Hosts({"a", "b", "c"}));
  EXPECT_EQ(expand_hostlist("node[5]"), Hosts({"node5"}));
  EXPECT_EQ(expand_hostlist("node[05]"), Hosts({"node05"}));
}

TEST(Hostlist, RangesKeepTheLowerBoundsPadding) {
  EXPECT_EQ(expand_hostlist("node[01-03,07]"), Hosts({"node01", "node02", "node03", "node07"}));
  EXPECT_EQ(expand_hostlist("n[8-11]"), Hosts({"n8", "n9", "n10", "n11"}));           // width 1: no padding
  EXPECT_EQ(expand_hostlist("n[08-11]"), Hosts({"n08", "n09", "n10", "n11"}));        // width 2
  EXPECT_EQ(expand_hostlist("n[098-101]"), Hosts({"n098", "n099", "n100", "n101"}));  // width 3
  EXPECT_EQ(expand_hostlist("n[0-1]"), Hosts({"n0", "n1"}));
  // Order as written, repeats kept (scontrol neither sorts nor removes them).
  EXPECT_EQ(expand_hostlist("n[3,1,3]"), Hosts({"n3", "n1", "n3"}));
}

TEST(Hostlist, SeveralGroupsAndSeparators) {
  EXPECT_EQ(expand_hostlist("a[1-2],b3,c[05-06]"), Hosts({"a1", "a2", "b3", "c05", "c06"}));
  EXPECT_EQ(expand_hostlist("n[1-2],m5,o[3-4,6,7-9]"), Hosts({"n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"}));
  // SLURM also separates names with spaces; empty names between separators are skipped, as scontrol does.
  EXPECT_EQ(expand_hostlist("a1 b[1-2],,c"), Hosts({"a1", "b1", "b2", "c"}));
}

TEST(Hostlist, SeveralBracketsInOneNameMultiplyLeftmostSlowest) {
  EXPECT_EQ(expand_hostlist("rack[1-2]-node[1-2]"),
            Hosts({"rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[01,03].ib"), Hosts({"r1n01.ib", "r1n03.ib", "r2n01.ib", "r2n03.ib"}));
  EXPECT_EQ(expand_hostlist("[1-2]x"), Hosts({"1x", "2x"}));
}

TEST(Hostlist, BadListsNameTheVariableAndTheList) {
  const std::string v = "SLURM_STEP_NODELIST";
  expect_invalid([&] { expand_hostlist("node[1-3", v); },
                 {"SLURM_STEP_NODELIST: bad hostlist 'node[1-3': '[' without ']'"});
  expect_invalid([&] { expand_hostlist("node1-3]", v); },
                 {"SLURM_STEP_NODELIST: bad hostlist 'node1-3]': ']' without '['"});
  expect_invalid([&] { expand_hostlist("node[1[2]]", v); },
                 {"SLURM_STEP_NODELIST: bad hostlist 'node[1[2]]': '[' inside brackets"});
  expect_invalid([&] { expand_hostlist("node[3-1]", v); },
                 {"SLURM_STEP_NODELIST: bad hostlist 'node[3-1]': the range '3-1' ends below its start"});
  expect_invalid([&] { expand_hostlist("node[a-c]", v); },
                 {"SLURM_STEP_NODELIST: bad hostlist 'node[a-c]': 'a-c' is not a number or a range lo-hi of "
                  "decimal numbers"});
  expect_invalid([&] { expand_hostlist("node[1-]", v); }, {"'1-' is not a number or a range lo-hi"});
  expect_invalid([&] { expand_hostlist("node[-1]", v); }, {"'-1' is not a number or a range lo-hi"});
  expect_invalid([&] { expand_hostlist("node[1-2-3]", v); }, {"'1-2-3' is not a number or a range lo-hi"});
  expect_invalid([&] { expand_hostlist("node[+1]", v); }, {"'+1' is not a number"});
  expect_invalid([&] { expand_hostlist("node[]", v); },
                 {"SLURM_STEP_NODELIST: bad hostlist 'node[]': an empty range in '[]'"});
  expect_invalid([&] { expand_hostlist("node[1,]", v); }, {"an empty range in '[1,]'"});
  expect_invalid([&] { expand_hostlist("", v); }, {"SLURM_STEP_NODELIST: bad hostlist '': it names no host"});
  expect_invalid([&] { expand_hostlist(" , ", v); }, {"bad hostlist ' , ': it names no host"});
  expect_invalid([&] { expand_hostlist("n[0-99999]", v); }, {"the range '0-99999' names more than 65536 hosts"});
  expect_invalid([&] { expand_hostlist("a[0-999]b[0-999]", v); }, {"it names more than 65536 hosts"});
  expect_invalid([&] { expand_hostlist("n[1-99999999999999999999]", v); }, {"is not a number"});  // overflows
  // Without a variable the error names the list alone.
  expect_invalid([] { expand_hostlist("x["); }, {"hostlist: bad hostlist 'x['"});
}

TEST(TasksPerNode, Formats) {
  EXPECT_THAT(expand_tasks_per_node("2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(expand_tasks_per_node("4"), ElementsAre(4));
  EXPECT_THAT(expand_tasks_per_node("2(x2)"), ElementsAre(2, 2));
  EXPECT_THAT(expand_tasks_per_node("1,3(x1),2"), ElementsAre(1, 3, 2));
  EXPECT_THAT(expand_tasks_per_node("0,1"), ElementsAre(0, 1));
}

TEST(TasksPerNode, BadLists) {
  const std::string v = "SLURM_STEP_TASKS_PER_NODE";
  expect_invalid([&] { expand_tasks_per_node("2(x3", v); },
                 {"SLURM_STEP_TASKS_PER_NODE: bad tasks-per-node list '2(x3': '2(x3' is not a task count N or "
                  "N(xREPEATS)"});
  expect_invalid([&] { expand_tasks_per_node("2(3)", v); }, {"'2(3)' is not a task count"});
  expect_invalid([&] { expand_tasks_per_node("x", v); }, {"'x' is not a task count"});
  expect_invalid([&] { expand_tasks_per_node("-1", v); }, {"'-1' is not a task count"});
  expect_invalid([&] { expand_tasks_per_node("2,,1", v); }, {"'' is not a task count"});
  expect_invalid([&] { expand_tasks_per_node("2(x0)", v); }, {"'2(x0)' repeats its count 0 times"});
  expect_invalid([&] { expand_tasks_per_node("", v); },
                 {"SLURM_STEP_TASKS_PER_NODE: bad tasks-per-node list '': it is empty"});
  expect_invalid([&] { expand_tasks_per_node("1(x70000)", v); }, {"it covers more than 65536 nodes"});
  expect_invalid([&] { expand_tasks_per_node("70000", v); }, {"'70000' puts more than 65536 tasks on a node"});
}

TEST(SlurmJobs, ParsedInNameOrderWithZeroCountsAbsent) {
  const auto jobs = parse_slurm_jobs("worker:2, chief:1 ,ps:1,evaluator:0");
  EXPECT_EQ(jobs, (std::map<std::string, int64_t>{{"chief", 1}, {"ps", 1}, {"worker", 2}}));
  EXPECT_EQ(parse_slurm_jobs("worker:3"), (std::map<std::string, int64_t>{{"worker", 3}}));
}

TEST(SlurmJobs, BadSpecs) {
  expect_invalid([] { parse_slurm_jobs("worker"); },
                 {"STRATA_SLURM_JOBS='worker': 'worker' is not type:count (want entries like chief:1,worker:2,ps:1)"});
  expect_invalid([] { parse_slurm_jobs("master:1"); },
                 {"STRATA_SLURM_JOBS='master:1': unknown task type 'master'; the task types are chief, worker, ps, "
                  "evaluator"});
  expect_invalid([] { parse_slurm_jobs("worker:two"); },
                 {"STRATA_SLURM_JOBS='worker:two': the count of worker must be a number 0..65536, got 'two'"});
  expect_invalid([] { parse_slurm_jobs("worker:-1"); }, {"got '-1'"});
  expect_invalid([] { parse_slurm_jobs("worker:1,worker:2"); }, {"'worker' is listed twice"});
  expect_invalid([] { parse_slurm_jobs("chief:2,worker:1"); }, {"there must be at most one chief, got 2"});
  expect_invalid([] { parse_slurm_jobs("evaluator:2"); }, {"there must be at most one evaluator, got 2"});
  expect_invalid([] { parse_slurm_jobs("worker:1,"); }, {"'' is not type:count"});
}

// What srun sets in task `rank` of `srun --nodes=2 --ntasks-per-node=2` on node01, node02 (block distribution).
Environment two_by_two(int rank) {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEPID", "0"},
          {"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_LOCALID", std::to_string(rank % 2)},
          {"SLURM_NODEID", std::to_string(rank / 2)},
          {"SLURMD_NODENAME", rank < 2 ? "node01" : "node02"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_NODELIST", "node[01-02]"},
          {"SLURM_JOB_NODELIST", "node[01-02]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_NTASKS_PER_NODE", "2"}};
}

TEST(Slurm, TwoNodesTimesTwoTasksAllWorkers) {
  const std::vector<std::string> addresses = {"node01:8888", "node01:8889", "node02:8888", "node02:8889"};
  for (int rank = 0; rank < 4; ++rank) {
    const TaskInfo t = resolve_cluster(two_by_two(rank));
    EXPECT_EQ(t.source, Source::kSlurm);
    EXPECT_EQ(t.name(), "worker:" + std::to_string(rank));
    EXPECT_EQ(t.cluster.jobs.size(), 1u);
    EXPECT_EQ(t.cluster.jobs.at("worker"), addresses);
    EXPECT_EQ(t.address, addresses[static_cast<size_t>(rank)]);
    EXPECT_EQ(t.id_in_cluster, rank);
    EXPECT_EQ(t.num_workers, 4);
    EXPECT_EQ(t.is_chief, rank == 0);  // no chief: worker 0 is the chief, as for TF_CONFIG
    EXPECT_EQ(t.hosts_coordinator, rank == 0);
    EXPECT_EQ(t.coordinator_address, "node01:8888");
    EXPECT_EQ(t.local_rank, rank % 2);
    EXPECT_EQ(t.local_world_size, 2);
    EXPECT_FALSE(t.cpus_per_task.has_value());
    EXPECT_EQ(t.rpc_layer, "");
  }
  EXPECT_STREQ(source_name(Source::kSlurm), "slurm");
}

TEST(Slurm, UnevenNodesPortBaseAndCpusPerTask) {
  // srun -n 5 on three nodes: 2, 2, 1 tasks.
  Environment env = {{"SLURM_STEP_ID", "3"},
                     {"SLURM_PROCID", "4"},
                     {"SLURM_LOCALID", "0"},
                     {"SLURM_NTASKS", "5"},
                     {"SLURM_STEP_NODELIST", "gpu[7-9]"},
                     {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                     {"SLURM_CPUS_PER_TASK", "8"},
                     {"STRATA_SLURM_PORT_BASE", "20000"}};
  const TaskInfo t = resolve_cluster(env);
  EXPECT_EQ(t.name(), "worker:4");
  EXPECT_EQ(t.address, "gpu9:20000");
  EXPECT_EQ(t.local_world_size, 1);
  EXPECT_EQ(t.cpus_per_task, 8);
  EXPECT_EQ(t.cluster.jobs.at("worker"),
            (std::vector<std::string>{"gpu7:20000", "gpu7:20001", "gpu8:20000", "gpu8:20001", "gpu9:20000"}));
  env["SLURM_PROCID"] = "3";
  env["SLURM_LOCALID"] = "1";
  const TaskInfo three = resolve_cluster(env);
  EXPECT_EQ(three.address, "gpu8:20001");
  EXPECT_EQ(three.local_world_size, 2);
}

TEST(Slurm, NodeListKeepsSlurmsOrderNotStringOrder) {
  // TensorFlow sorts host names as strings (node10 before node9); srun puts rank 0 on node9.
  const TaskInfo t = resolve_cluster({{"SLURM_STEP_ID", "0"},
                                      {"SLURM_PROCID", "0"},
                                      {"SLURM_LOCALID", "0"},
                                      {"SLURMD_NODENAME", "node9"},
                                      {"SLURM_NTASKS", "2"},
                                      {"SLURM_STEP_NODELIST", "node[9-10]"},
                                      {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}});
  EXPECT_EQ(t.address, "node9:8888");
  EXPECT_EQ(t.cluster.jobs.at("worker"), (std::vector<std::string>{"node9:8888", "node10:8888"}));
}

TEST(Slurm, FallbackVariables) {
  // No SLURM_STEP_* lists: the job's node list and SLURM_NTASKS_PER_NODE.
  const TaskInfo t = resolve_cluster({{"SLURM_STEPID", "0"},
                                      {"SLURM_PROCID", "1"},
                                      {"SLURM_LOCALID", "0"},
                                      {"SLURM_NTASKS", "2"},
                                      {"SLURM_NODELIST", "a,b"},
                                      {"SLURM_NTASKS_PER_NODE", "1"}});
  EXPECT_EQ(t.address, "b:8888");
  EXPECT_EQ(t.local_world_size, 1);
  // SLURM_STEP_NUM_TASKS and the step's lists win over the job's.
  Environment env = two_by_two(3);
  env["SLURM_NTASKS"] = "8";
  env["SLURM_JOB_NODELIST"] = "node[01-04]";
  env["SLURM_TASKS_PER_NODE"] = "2(x4)";
  EXPECT_EQ(resolve_cluster(env).address, "node02:8889");
}

TEST(Slurm, ChiefAndPsLayoutAsTensorFlow) {
  // Types take consecutive ranks in name order (chief, ps, worker) whatever order the variable lists them.
  const std::vector<std::string> expected = {"chief:0", "ps:0", "worker:0", "worker:1"};
  for (int rank = 0; rank < 4; ++rank) {
    Environment env = two_by_two(rank);
    env["STRATA_SLURM_JOBS"] = "worker:2,ps:1,chief:1";
    const TaskInfo t = resolve_cluster(env);
    EXPECT_EQ(t.name(), expected[static_cast<size_t>(rank)]);
    EXPECT_EQ(t.cluster.jobs.at("chief"), (std::vector<std::string>{"node01:8888"}));
    EXPECT_EQ(t.cluster.jobs.at("ps"), (std::vector<std::string>{"node01:8889"}));
    EXPECT_EQ(t.cluster.jobs.at("worker"), (std::vector<std::string>{"node02:8888", "node02:8889"}));
    EXPECT_EQ(t.num_workers, 3);  // chief + workers
    EXPECT_EQ(t.coordinator_address, "node01:8888");
    EXPECT_EQ(t.local_world_size, 2);
    EXPECT_EQ(t.local_rank, rank % 2);
  }
  const TaskInfo chief = resolve_cluster([] {
    Environment env = two_by_two(0);
    env["STRATA_SLURM_JOBS"] = "chief:1,worker:2,ps:1";
    return env;
  }());
  EXPECT_TRUE(chief.is_chief);
  EXPECT_TRUE(chief.hosts_coordinator);
  EXPECT_EQ(chief.id_in_cluster, 0);
  Environment ps_env = two_by_two(1);
  ps_env["STRATA_SLURM_JOBS"] = "chief:1,worker:2,ps:1";
  const TaskInfo ps = resolve_cluster(ps_env);
  EXPECT_FALSE(ps.is_chief);
  EXPECT_FALSE(ps.id_in_cluster.has_value());  // TensorFlow: no id for a ps
  EXPECT_EQ(ps.address, "node01:8889");
  Environment worker_env = two_by_two(3);
  worker_env["STRATA_SLURM_JOBS"] = "chief:1,worker:2,ps:1";
  const TaskInfo worker = resolve_cluster(worker_env);
  EXPECT_EQ(worker.id_in_cluster, 2);  // worker 1 after the chief
  EXPECT_FALSE(worker.is_chief);
  EXPECT_FALSE(worker.hosts_coordinator);
  // Blank is the default: all workers.
  Environment blank = two_by_two(1);
  blank["STRATA_SLURM_JOBS"] = " ";
  EXPECT_EQ(resolve_cluster(blank).name(), "worker:1");
}

TEST(SlurmErrors, JobCountsMustAddUpToTheTasks) {
  Environment env = two_by_two(0);
  env["STRATA_SLURM_JOBS"] = "chief:1,worker:2";
  expect_invalid([&] { resolve_cluster(env); },
                 {"STRATA_SLURM_JOBS='chief:1,worker:2' asks for 3 tasks but SLURM_STEP_NUM_TASKS is 4; the counts "
                  "must add up to the step's tasks"});
  env["STRATA_SLURM_JOBS"] = "worker:5";
  expect_invalid([&] { resolve_cluster(env); }, {"asks for 5 tasks but SLURM_STEP_NUM_TASKS is 4"});
  env["STRATA_SLURM_JOBS"] = "boss:4";
  expect_invalid([&] { resolve_cluster(env); }, {"STRATA_SLURM_JOBS='boss:4': unknown task type 'boss'"});
}

TEST(SlurmErrors, HalfSetEnvironmentNamesWhatIsMissing) {
  expect_invalid(
      [] {
        resolve_cluster({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}});
      },
      {"SLURM's srun environment is half-set: SLURM_STEP_ID, SLURM_PROCID set but SLURM_NTASKS (or "
       "SLURM_STEP_NUM_TASKS), SLURM_LOCALID, SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST, SLURM_NODELIST), "
       "SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE) missing"});
  Environment env = two_by_two(1);
  env.erase("SLURM_LOCALID");
  expect_invalid([&] { resolve_cluster(env); }, {"half-set", "set but SLURM_LOCALID missing"});
  env = two_by_two(1);
  env.erase("SLURM_PROCID");
  expect_invalid([&] { resolve_cluster(env); }, {"half-set", "set but SLURM_PROCID missing"});
}

TEST(SlurmErrors, BadValuesNameTheVariable) {
  Environment env = two_by_two(0);
  env["SLURM_PROCID"] = "4";
  expect_invalid([&] { resolve_cluster(env); }, {"SLURM_PROCID 4 is out of range for SLURM_STEP_NUM_TASKS 4"});
  env = two_by_two(0);
  env["SLURM_LOCALID"] = "x";
  expect_invalid([&] { resolve_cluster(env); }, {"SLURM_LOCALID must be an integer >= 0, got 'x'"});
  env = two_by_two(0);
  env["SLURM_STEP_NODELIST"] = "node[01-02";
  expect_invalid([&] { resolve_cluster(env); }, {"SLURM_STEP_NODELIST: bad hostlist 'node[01-02': '[' without ']'"});
  env = two_by_two(0);
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2";
  expect_invalid([&] { resolve_cluster(env); }, {"SLURM_STEP_TASKS_PER_NODE: bad tasks-per-node list '2(x2'"});
  env = two_by_two(0);
  env["SLURM_STEP_NODELIST"] = "node[01-03]";
  expect_invalid([&] { resolve_cluster(env); },
                 {"SLURM_STEP_NODELIST='node[01-03]' names 3 nodes but SLURM_STEP_TASKS_PER_NODE='2(x2)' counts the "
                  "tasks of 2"});
  env = two_by_two(0);
  env["SLURM_STEP_TASKS_PER_NODE"] = "2,1";
  expect_invalid([&] { resolve_cluster(env); },
                 {"SLURM_STEP_TASKS_PER_NODE='2,1' over SLURM_STEP_NODELIST='node[01-02]' places 3 tasks but "
                  "SLURM_STEP_NUM_TASKS is 4"});
  env = two_by_two(0);
  env["SLURM_STEP_NODELIST"] = "node01,node01";
  expect_invalid([&] { resolve_cluster(env); }, {"SLURM_STEP_NODELIST='node01,node01' names the node node01 twice"});
  env = two_by_two(0);
  env["SLURM_STEP_NODELIST"] = "node!1,node02";
  expect_invalid([&] { resolve_cluster(env); }, {"SLURM_STEP_NODELIST: bad address 'node!1:8888'"});
  env = two_by_two(0);
  env["SLURM_CPUS_PER_TASK"] = "0";
  expect_invalid([&] { resolve_cluster(env); }, {"SLURM_CPUS_PER_TASK must be an integer >= 1, got '0'"});
}

TEST(SlurmErrors, PortBase) {
  Environment env = two_by_two(0);
  env["STRATA_SLURM_PORT_BASE"] = "65535";
  expect_invalid([&] { resolve_cluster(env); },
                 {"STRATA_SLURM_PORT_BASE 65535 leaves no port for local task 1 (a task listens on "
                  "STRATA_SLURM_PORT_BASE + SLURM_LOCALID, at most 65535)"});
  env["STRATA_SLURM_PORT_BASE"] = "65534";
  EXPECT_EQ(resolve_cluster(env).address, "node01:65534");
  env["STRATA_SLURM_PORT_BASE"] = "70000";
  expect_invalid([&] { resolve_cluster(env); }, {"STRATA_SLURM_PORT_BASE must be a port 1..65535, got 70000"});
  env["STRATA_SLURM_PORT_BASE"] = "0";
  expect_invalid([&] { resolve_cluster(env); }, {"STRATA_SLURM_PORT_BASE must be an integer >= 1, got '0'"});
}

TEST(SlurmErrors, NonBlockDistributionIsAnErrorNotWrongAddresses) {
  // srun --distribution=cyclic over 2 nodes x 2 tasks: rank 1 is local task 0 of node02.
  Environment env = two_by_two(1);
  env["SLURM_LOCALID"] = "0";
  env["SLURMD_NODENAME"] = "node02";
  expect_invalid([&] { resolve_cluster(env); },
                 {"SLURM_PROCID 1 runs as local task 0 (SLURM_LOCALID) on node02 (SLURMD_NODENAME), but srun's block "
                  "distribution of SLURM_STEP_TASKS_PER_NODE='2(x2)' over SLURM_STEP_NODELIST='node[01-02]' puts it "
                  "on node01 as local task 1; start the tasks with the block distribution"});
  // The right local id on the wrong node is caught by the node's name.
  env = two_by_two(0);
  env["SLURMD_NODENAME"] = "node02";
  expect_invalid([&] { resolve_cluster(env); }, {"on node02 (SLURMD_NODENAME)", "puts it on node01 as local task 0"});
  // Without SLURMD_NODENAME the local id alone is checked.
  env = two_by_two(1);
  env.erase("SLURMD_NODENAME");
  env["SLURM_LOCALID"] = "0";
  expect_invalid([&] { resolve_cluster(env); }, {"SLURM_PROCID 1 runs as local task 0 (SLURM_LOCALID), but"});
}

TEST(SlurmLaunchers, SbatchScriptWithoutSrunIsOneProcess) {
  // An sbatch script has SLURM_PROCID=0 and the job's variables but no step id: it is not an srun task.
  const TaskInfo t = resolve_cluster({{"SLURM_JOB_ID", "4242"},
                                      {"SLURM_PROCID", "0"},
                                      {"SLURM_LOCALID", "0"},
                                      {"SLURM_NTASKS", "4"},
                                      {"SLURM_JOB_NODELIST", "node[01-02]"},
                                      {"SLURM_TASKS_PER_NODE", "2(x2)"}});
  EXPECT_EQ(t.source, Source::kSingle);
  EXPECT_EQ(t.num_workers, 1);
}

TEST(SlurmLaunchers, MpirunAndTorchrunInsideAStepWin) {
  // mpirun in an sbatch job starts its daemons with srun: the ranks inherit the daemons' step (one task per node).
  Environment env = two_by_two(1);
  env["SLURM_STEP_TASKS_PER_NODE"] = "1(x2)";
  env["OMPI_COMM_WORLD_RANK"] = "3";
  env["OMPI_COMM_WORLD_SIZE"] = "4";
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  const TaskInfo mpi = resolve_cluster(env);
  EXPECT_EQ(mpi.source, Source::kMpi);
  EXPECT_EQ(mpi.name(), "worker:3");
  EXPECT_EQ(mpi.local_world_size, 2);
  EXPECT_FALSE(mpi.cpus_per_task.has_value());
  // srun torchrun ...: torchrun's workers inherit torchrun's own step variables.
  env = two_by_two(2);
  env["SLURM_CPUS_PER_TASK"] = "16";
  env["RANK"] = "5";
  env["WORLD_SIZE"] = "8";
  env["MASTER_ADDR"] = "node01";
  env["MASTER_PORT"] = "29500";
  const TaskInfo torch = resolve_cluster(env);
  EXPECT_EQ(torch.source, Source::kTorchrun);
  EXPECT_EQ(torch.name(), "worker:5");
  EXPECT_FALSE(torch.cpus_per_task.has_value());
}

TEST(SlurmLaunchers, TfConfigInsideAStepIsAnError) {
  Environment env = two_by_two(0);
  env["TF_CONFIG"] = R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})";
  expect_invalid([&] { resolve_cluster(env); },
                 {"the environment names the cluster twice: TF_CONFIG and srun's SLURM_STEP_ID, SLURM_STEPID, "
                  "SLURM_PROCID are both set; unset one launcher's variables"});
}

}  // namespace
}  // namespace strata::cluster
