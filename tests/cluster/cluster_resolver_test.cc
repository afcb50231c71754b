// Tests of cluster resolution (strata/cluster/cluster_resolver.h): TF_CONFIG as TensorFlow reads it
// (is_chief, id_in_cluster, num_workers as multi_worker_util computes them), mpirun's and torchrun's
// environments, and every bad input's error text.
// Thread-safety: single-threaded tests; the one test of the real environment sets and restores a variable.
#include "strata/cluster/cluster_resolver.h"

#include <cstdlib>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/error.h"
#include "test_util.h"

namespace strata::cluster {
namespace {

using ::testing::HasSubstr;

// Expects `f` to throw InvalidArgument whose message contains every one of `parts`.
template <typename F>
void expect_invalid(F&& f, std::initializer_list<std::string> parts) {
  test::expect_error_containing<InvalidArgument>(std::forward<F>(f), parts);
}

const char* kFull =
    R"({"cluster": {"chief": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "127.0.0.1:2002"],
        "ps": ["127.0.0.1:2003"], "evaluator": ["127.0.0.1:2004"]},
        "task": {"type": "%s", "index": %d}, "rpc_layer": "grpc", "environment": "cloud"})";

std::string full(const std::string& type, int index) {
  char buf[512];
  std::snprintf(buf, sizeof buf, kFull, type.c_str(), index);
  return buf;
}

TEST(TfConfig, ChiefAndWorkersWithChief) {
  const TaskInfo chief = resolve_tf_config(full("chief", 0));
  EXPECT_EQ(chief.source, Source::kTfConfig);
  EXPECT_EQ(chief.name(), "chief:0");
  EXPECT_TRUE(chief.is_chief);
  EXPECT_TRUE(chief.hosts_coordinator);
  EXPECT_EQ(chief.id_in_cluster, 0);
  EXPECT_EQ(chief.num_workers, 3);
  EXPECT_EQ(chief.address, "127.0.0.1:2000");
  EXPECT_EQ(chief.coordinator_address, "127.0.0.1:2000");
  EXPECT_EQ(chief.rpc_layer, "grpc");
  EXPECT_EQ(chief.environment, "cloud");
  EXPECT_EQ(chief.cluster.num_tasks("worker"), 2);
  EXPECT_EQ(chief.cluster.num_tasks("ps"), 1);

  for (int i = 0; i < 2; ++i) {
    const TaskInfo w = resolve_tf_config(full("worker", i));
    EXPECT_FALSE(w.is_chief) << i;  // a chief exists: worker 0 is not it
    EXPECT_FALSE(w.hosts_coordinator);
    EXPECT_EQ(w.id_in_cluster, i + 1);  // chief 0, workers 1..
    EXPECT_EQ(w.num_workers, 3);
    EXPECT_EQ(w.address, "127.0.0.1:200" + std::to_string(i + 1));
    EXPECT_EQ(w.coordinator_address, "127.0.0.1:2000");
  }
}

TEST(TfConfig, PsAndEvaluatorAsTensorFlow) {
  const TaskInfo ps = resolve_tf_config(full("ps", 0));
  EXPECT_FALSE(ps.is_chief);
  EXPECT_FALSE(ps.id_in_cluster.has_value());  // multi_worker_util: "There is no id for task_type 'ps'"
  EXPECT_EQ(ps.address, "127.0.0.1:2003");
  const TaskInfo ev = resolve_tf_config(full("evaluator", 0));
  EXPECT_TRUE(ev.is_chief);  // the chief of its own partition, as in TensorFlow
  EXPECT_FALSE(ev.hosts_coordinator);
  EXPECT_EQ(ev.id_in_cluster, 0);
  EXPECT_EQ(ev.num_workers, 1);  // multi_worker_util.worker_count: the evaluator's partition of one
  EXPECT_EQ(ps.num_workers, 3);  // chief + 2 workers, whom the ps serves
}

TEST(TfConfig, WithoutChiefWorkerZeroIsChief) {
  const std::string cluster = R"({"cluster": {"worker": ["a:1", "b:1", "c:1"]}, "task": {"type": "worker", "index": )";
  for (int i = 0; i < 3; ++i) {
    const TaskInfo w = resolve_tf_config(cluster + std::to_string(i) + "}}");
    EXPECT_EQ(w.is_chief, i == 0);
    EXPECT_EQ(w.hosts_coordinator, i == 0);
    EXPECT_EQ(w.id_in_cluster, i);  // no chief: worker i -> i
    EXPECT_EQ(w.num_workers, 3);
    EXPECT_EQ(w.coordinator_address, "a:1");
    EXPECT_TRUE(w.rpc_layer.empty());
  }
}

TEST(TfConfig, IndexAsStringAndEmptyJobsAndIgnoredKeys) {
  // TensorFlow applies int() to the index; an empty job list is no job; unknown top-level keys are ignored.
  const TaskInfo w = resolve_tf_config(
      R"({"cluster": {"worker": ["h:1", "h:2"], "ps": []}, "task": {"type": "worker", "index": "1"}, "model_dir": "x"})");
  EXPECT_EQ(w.task_index, 1);
  EXPECT_FALSE(w.cluster.has("ps"));
  EXPECT_EQ(w.cluster.jobs.size(), 1u);
  EXPECT_EQ(resolve_tf_config(R"({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0.0}})").task_index, 0);
}

TEST(TfConfig, EmptyIsSingleProcess) {
  for (const char* text : {"", "  ", "{}", R"({"cluster": {}})", R"({"task": {}})", R"({"rpc_layer": "grpc"})"}) {
    const TaskInfo t = resolve_tf_config(text);
    EXPECT_EQ(t.source, Source::kSingle) << text;
    EXPECT_EQ(t.num_workers, 1);
    EXPECT_TRUE(t.is_chief);
    EXPECT_EQ(t.id_in_cluster, 0);
  }
}

TEST(TfConfig, IPv6AndHostNames) {
  const TaskInfo t = resolve_tf_config(
      R"({"cluster": {"worker": ["[::1]:2222", "node-1.example_x.com:65535"]}, "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(t.address, "node-1.example_x.com:65535");
  EXPECT_EQ(parse_address("[::1]:2222", "x").host, "[::1]");
  EXPECT_EQ(parse_address("[::1]:2222", "x").port, 2222);
}

TEST(TfConfigErrors, MalformedJsonNamesPosition) {
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1",]}})"); },
                 {"TF_CONFIG is not valid JSON", "line 1, column 31", "(byte 31)"});
  expect_invalid([] { resolve_tf_config("{\"cluster\":\n {\"worker\": [\"a:1\"]}"); },
                 {"TF_CONFIG is not valid JSON", "line 2"});
  expect_invalid([] { resolve_tf_config("[1, 2]"); }, {"TF_CONFIG must be a JSON object"});
}

// Found by fuzz/tf_config_fuzzer: "1e211...1U" made nlohmann::json throw out_of_range (a number too large for a
// double), which escaped resolve_tf_config and aborted the process.
TEST(TfConfigErrors, NumberOutOfRangeIsInvalidArgument) {
  expect_invalid([] { resolve_tf_config("1e2" + std::string(80, '1') + "U"); },
                 {"TF_CONFIG is not valid JSON", "number overflow"});
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"index": 1e999}})"); },
                 {"TF_CONFIG is not valid JSON"});
}

// Seen while fuzzing (fuzz/tf_config_fuzzer): a TF_CONFIG of 100000 nested arrays overflowed the stack when the
// error message printed it; the nesting is capped before the JSON is parsed.
TEST(TfConfigErrors, NestingTooDeepIsInvalidArgument) {
  expect_invalid([] { resolve_tf_config(std::string(100000, '[') + std::string(100000, ']')); },
                 {"TF_CONFIG nests arrays or objects deeper than 100 levels"});
  // Brackets inside strings are not nesting.
  EXPECT_EQ(resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0},
                                  "environment": ")" +
                              std::string(500, '[') + R"("})")
                .environment,
            std::string(500, '['));
}

// Found by fuzz/tf_config_fuzzer: an index of 1.2e35 was cast to int64 unchecked (undefined behaviour).
TEST(TfConfigErrors, AnIndexBeyondInt64IsInvalidArgument) {
  expect_invalid(
      [] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1.2e35}})"); },
      {"task index must be an integer, got 1.2e+35"});
  expect_invalid(
      [] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1e19}})"); },
      {"task index must be an integer"});
}

TEST(TfConfigErrors, UnknownTaskType) {
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "master", "index": 0}})"); },
                 {"unknown task type 'master'", "chief, worker, ps, evaluator"});
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"wrker": ["a:1"]}, "task": {"type": "worker", "index": 0}})"); },
                 {"unknown task type 'wrker' in cluster"});
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": 3, "index": 0}})"); },
                 {"task type must be a string"});
}

TEST(TfConfigErrors, IndexOutOfRange) {
  expect_invalid([] { resolve_tf_config(full("worker", 2)); },
                 {"task index 2 is out of range", "2 worker tasks (indices 0..1)"});
  expect_invalid([] { resolve_tf_config(full("chief", 1)); }, {"task index 1 is out of range", "1 chief task "});
  expect_invalid([] { resolve_tf_config(full("worker", -1)); }, {"task index -1 is out of range"});
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0.5}})"); },
                 {"task index must be an integer, got 0.5"});
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "x"}})"); },
                 {"task index must be an integer"});
}

TEST(TfConfigErrors, TaskTypeMissingFromCluster) {
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}})"); },
                 {"task type 'ps' is not in the cluster (it lists worker)"});
  // An empty job is no job.
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"], "chief": []}, "task": {"type": "chief", "index": 0}})"); },
                 {"task type 'chief' is not in the cluster"});
}

TEST(TfConfigErrors, TaskAndClusterMustComeTogether) {
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}})"); },
                 {"has a cluster but no task type"});
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}})"); },
                 {"has a cluster but no task index"});
  expect_invalid([] { resolve_tf_config(R"({"task": {"type": "worker", "index": 0}})"); },
                 {"names a task", "lists no task"});
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": "worker"})"); },
                 {"\"task\" must be an object"});
  expect_invalid([] { resolve_tf_config(R"({"cluster": ["a:1"], "task": {"type": "worker", "index": 0}})"); },
                 {"\"cluster\" must be an object"});
}

TEST(TfConfigErrors, TwoTasksOnOneAddress) {
  expect_invalid([] {
    resolve_tf_config(R"({"cluster": {"chief": ["h:5"], "worker": ["h:6", "h:5"]}, "task": {"type": "chief", "index": 0}})");
  }, {"tasks chief:0 and worker:1 both use address h:5"});
}

TEST(TfConfigErrors, BadAddresses) {
  const auto with = [](const std::string& address) {
    return R"({"cluster": {"worker": ["a:1", ")" + address + R"("]}, "task": {"type": "worker", "index": 0}})";
  };
  expect_invalid([&] { resolve_tf_config(with("nohost")); }, {"TF_CONFIG cluster worker[1]: bad address 'nohost'", "no ':port'"});
  expect_invalid([&] { resolve_tf_config(with(":80")); }, {"empty host"});
  expect_invalid([&] { resolve_tf_config(with("h:0")); }, {"the port must be a number 1..65535"});
  expect_invalid([&] { resolve_tf_config(with("h:65536")); }, {"1..65535"});
  expect_invalid([&] { resolve_tf_config(with("h:http")); }, {"1..65535"});
  expect_invalid([&] { resolve_tf_config(with("h:")); }, {"1..65535"});
  expect_invalid([&] { resolve_tf_config(with("::1:80")); }, {"must be bracketed"});
  expect_invalid([&] { resolve_tf_config(with("h st:80")); }, {"no host name has"});
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": [7]}, "task": {"type": "worker", "index": 0}})"); },
                 {"cluster worker[0] must be a \"host:port\" string, got 7"});
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}})"); },
                 {"cluster job 'worker' must be a list"});
}

TEST(TfConfigErrors, AtMostOneChiefAndEvaluator) {
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"chief": ["a:1", "a:2"]}, "task": {"type": "chief", "index": 0}})"); },
                 {"at most one chief, the cluster lists 2"});
  expect_invalid([] {
    resolve_tf_config(R"({"cluster": {"worker": ["a:1"], "evaluator": ["a:2", "a:3"]}, "task": {"type": "worker", "index": 0}})");
  }, {"at most one evaluator, the cluster lists 2"});
}

TEST(TfConfigErrors, RpcLayerMustBeString) {
  expect_invalid([] { resolve_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}, "rpc_layer": 1})"); },
                 {"\"rpc_layer\" must be a string"});
}

TEST(Environment, NothingIsSingle) {
  const TaskInfo t = resolve_cluster({{"HOME", "/root"}, {"TF_CONFIG", ""}});
  EXPECT_EQ(t.source, Source::kSingle);
  EXPECT_EQ(t.num_workers, 1);
  EXPECT_EQ(t.cluster.jobs.size(), 0u);
}

TEST(Environment, TfConfig) {
  const TaskInfo t = resolve_cluster({{"TF_CONFIG", full("worker", 1)}});
  EXPECT_EQ(t.source, Source::kTfConfig);
  EXPECT_EQ(t.id_in_cluster, 2);
}

TEST(Environment, Mpirun) {
  const TaskInfo t = resolve_cluster(
      {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
  EXPECT_EQ(t.source, Source::kMpi);
  EXPECT_EQ(t.name(), "worker:2");
  EXPECT_EQ(t.id_in_cluster, 2);
  EXPECT_EQ(t.num_workers, 4);
  EXPECT_EQ(t.local_rank, 0);
  EXPECT_FALSE(t.is_chief);
  EXPECT_FALSE(t.hosts_coordinator);
  EXPECT_EQ(t.cluster.num_tasks("worker"), 4);
  const TaskInfo r0 = resolve_cluster({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}});
  EXPECT_TRUE(r0.is_chief);
  EXPECT_FALSE(r0.local_rank.has_value());
}

TEST(Environment, Torchrun) {
  const TaskInfo t = resolve_cluster({{"RANK", "1"},
                                      {"WORLD_SIZE", "3"},
                                      {"LOCAL_RANK", "1"},
                                      {"MASTER_ADDR", "127.0.0.1"},
                                      {"MASTER_PORT", "29500"}});
  EXPECT_EQ(t.source, Source::kTorchrun);
  EXPECT_EQ(t.name(), "worker:1");
  EXPECT_EQ(t.num_workers, 3);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_FALSE(t.is_chief);
  EXPECT_EQ(t.coordinator_address, "127.0.0.1:29500");
  const TaskInfo v6 = resolve_cluster({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "::1"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(v6.coordinator_address, "[::1]:1");
  EXPECT_TRUE(v6.is_chief);
}

TEST(EnvironmentErrors, HalfSet) {
  expect_invalid([] { resolve_cluster({{"RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}); },
                 {"torchrun's environment is half-set: RANK, MASTER_ADDR, MASTER_PORT set but WORLD_SIZE missing"});
  expect_invalid([] { resolve_cluster({{"RANK", "0"}, {"WORLD_SIZE", "2"}}); },
                 {"half-set", "MASTER_ADDR, MASTER_PORT missing"});
  expect_invalid([] { resolve_cluster({{"OMPI_COMM_WORLD_RANK", "0"}}); },
                 {"mpirun's environment is half-set: OMPI_COMM_WORLD_RANK set but OMPI_COMM_WORLD_SIZE missing"});
  expect_invalid([] { resolve_cluster({{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}); },
                 {"mpirun's environment is half-set", "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE missing"});
}

TEST(EnvironmentErrors, BadNumbers) {
  expect_invalid([] { resolve_cluster({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}); },
                 {"OMPI_COMM_WORLD_RANK 4 is out of range for OMPI_COMM_WORLD_SIZE 4"});
  expect_invalid([] { resolve_cluster({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "4"}}); },
                 {"OMPI_COMM_WORLD_RANK must be an integer >= 0, got 'x'"});
  expect_invalid([] { resolve_cluster({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}}); },
                 {"OMPI_COMM_WORLD_SIZE must be an integer >= 1, got '0'"});
  expect_invalid([] {
    resolve_cluster({{"RANK", "-1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  }, {"RANK must be an integer >= 0, got '-1'"});
  expect_invalid([] {
    resolve_cluster({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  }, {"RANK 2 is out of range for WORLD_SIZE 2"});
  expect_invalid([] {
    resolve_cluster({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "99999"}});
  }, {"MASTER_ADDR:MASTER_PORT: bad address 'h:99999'"});
}

TEST(EnvironmentErrors, TwoLaunchers) {
  expect_invalid([] { resolve_cluster({{"TF_CONFIG", full("chief", 0)}, {"OMPI_COMM_WORLD_RANK", "0"}}); },
                 {"names the cluster twice: TF_CONFIG and mpirun's OMPI_COMM_WORLD_RANK are both set"});
  expect_invalid([] {
    resolve_cluster({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}});
  }, {"mpirun's OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE and torchrun's LOCAL_RANK"});
}

TEST(Environment, RealEnvironment) {
  const char* saved = std::getenv("TF_CONFIG");
  const std::string old = saved ? saved : "";
  ::setenv("TF_CONFIG", full("worker", 0).c_str(), 1);
  const TaskInfo t = resolve_cluster_from_environment();
  if (saved) ::setenv("TF_CONFIG", old.c_str(), 1); else ::unsetenv("TF_CONFIG");
  EXPECT_EQ(t.source, Source::kTfConfig);
  EXPECT_EQ(t.name(), "worker:0");
  EXPECT_EQ(t.id_in_cluster, 1);
}

TEST(MakeTfConfig, RoundTrips) {
  ClusterSpec spec;
  spec.jobs["chief"] = {"127.0.0.1:1"};
  spec.jobs["worker"] = {"127.0.0.1:2", "127.0.0.1:3"};
  const std::string text = make_tf_config(spec, "worker", 1);
  EXPECT_EQ(text, R"({"cluster":{"chief":["127.0.0.1:1"],"worker":["127.0.0.1:2","127.0.0.1:3"]},"task":{"index":1,"type":"worker"}})");
  const TaskInfo t = resolve_tf_config(text);
  EXPECT_EQ(t.cluster, spec);
  EXPECT_EQ(t.id_in_cluster, 2);
  EXPECT_EQ(spec.to_json(), R"({"chief":["127.0.0.1:1"],"worker":["127.0.0.1:2","127.0.0.1:3"]})");
  expect_invalid([&] { make_tf_config(spec, "ps", 0); }, {"task type 'ps' is not in the cluster"});
}

TEST(Names, Sources) {
  EXPECT_STREQ(source_name(Source::kSingle), "single");
  EXPECT_STREQ(source_name(Source::kTfConfig), "tf_config");
  EXPECT_STREQ(source_name(Source::kMpi), "mpi");
  EXPECT_STREQ(source_name(Source::kTorchrun), "torchrun");
}

}  // namespace
}  // namespace strata::cluster
