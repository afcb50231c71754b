// TF_CONFIG, mpirun, torchrun and srun (SLURM) environments -> TaskInfo (see strata/cluster/cluster_resolver.h
// for the rules and where they follow TensorFlow). Errors are InvalidArgument naming the variable and the problem.
// Thread-safety: pure functions; resolve_cluster_from_environment reads `environ`.
#include "strata/cluster/cluster_resolver.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json_depth.h"
#include "strata/cluster/slurm.h"
#include "strata/error.h"

extern char** environ;

namespace strata::cluster {
namespace {

using nlohmann::json;

constexpr const char* kTaskTypes[] = {"chief", "worker", "ps", "evaluator"};

bool known_type(const std::string& type) {
  return std::find(std::begin(kTaskTypes), std::end(kTaskTypes), type) != std::end(kTaskTypes);
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c) != 0; });
}

// A whole decimal integer, else nullopt.
std::optional<int64_t> parse_int(const std::string& s) {
  int64_t v = 0;
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

// The task's "index": a JSON integer, or a string of one (TensorFlow applies int() to it).
int64_t task_index(const json& index) {
  if (index.is_number_integer()) return index.get<int64_t>();
  if (index.is_number_float()) {
    const double d = index.get<double>();
    // In range before the cast: a double outside int64's range does not convert (undefined behaviour).
    STRATA_CHECK(d >= -9.2e18 && d <= 9.2e18 && d == std::trunc(d), InvalidArgument,
                 "TF_CONFIG: task index must be an integer, got " << index.dump());
    return static_cast<int64_t>(d);
  }
  if (index.is_string()) {
    const auto v = parse_int(index.get<std::string>());
    STRATA_CHECK(v.has_value(), InvalidArgument, "TF_CONFIG: task index must be an integer, got " << index.dump());
    return *v;
  }
  STRATA_THROW(InvalidArgument, "TF_CONFIG: task index must be an integer, got " << index.dump());
}

std::string string_field(const json& object, const char* key, const char* where) {
  if (!object.contains(key) || object[key].is_null()) return "";
  STRATA_CHECK(object[key].is_string(), InvalidArgument,
               where << " \"" << key << "\" must be a string, got " << object[key].dump());
  return object[key].get<std::string>();
}

ClusterSpec parse_cluster(const json& cluster) {
  STRATA_CHECK(cluster.is_object(), InvalidArgument,
               "TF_CONFIG: \"cluster\" must be an object of job lists, got " << cluster.dump());
  ClusterSpec spec;
  for (const auto& [type, tasks] : cluster.items()) {
    STRATA_CHECK(known_type(type), InvalidArgument,
                 "TF_CONFIG: unknown task type '" << type
                                                  << "' in cluster; the task types are chief, worker, ps, evaluator");
    STRATA_CHECK(tasks.is_array(), InvalidArgument,
                 "TF_CONFIG: cluster job '" << type << "' must be a list of \"host:port\" strings, got "
                                            << tasks.dump());
    std::vector<std::string> addresses;
    for (size_t i = 0; i < tasks.size(); ++i) {
      STRATA_CHECK(tasks[i].is_string(), InvalidArgument,
                   "TF_CONFIG: cluster " << type << "[" << i << "] must be a \"host:port\" string, got "
                                         << tasks[i].dump());
      addresses.push_back(tasks[i].get<std::string>());
      parse_address(addresses.back(), "TF_CONFIG cluster " + type + "[" + std::to_string(i) + "]");
    }
    if (!addresses.empty()) spec.jobs[type] = std::move(addresses);
  }
  STRATA_CHECK(spec.num_tasks("chief") <= 1, InvalidArgument,
               "TF_CONFIG: there must be at most one chief, the cluster lists " << spec.num_tasks("chief"));
  STRATA_CHECK(spec.num_tasks("evaluator") <= 1, InvalidArgument,
               "TF_CONFIG: there must be at most one evaluator, the cluster lists " << spec.num_tasks("evaluator"));
  std::map<std::string, std::string> owner;  // address -> first task listing it
  for (const auto& [type, addresses] : spec.jobs) {
    for (size_t i = 0; i < addresses.size(); ++i) {
      const std::string task = type + ":" + std::to_string(i);
      const auto [it, fresh] = owner.emplace(addresses[i], task);
      STRATA_CHECK(fresh, InvalidArgument,
                   "TF_CONFIG: tasks " << it->second << " and " << task << " both use address " << addresses[i]);
    }
  }
  return spec;
}

// Fills the fields that follow from the cluster and the task (TensorFlow's multi_worker_util).
TaskInfo describe(ClusterSpec spec, const std::string& type, int64_t index) {
  STRATA_CHECK(known_type(type), InvalidArgument,
               "TF_CONFIG: unknown task type '" << type << "'; the task types are chief, worker, ps, evaluator");
  STRATA_CHECK(spec.has(type), InvalidArgument,
               "TF_CONFIG: task type '" << type << "' is not in the cluster (it lists "
                                        << [&] {
                                             std::string names;
                                             for (const auto& [t, a] : spec.jobs) names += (names.empty() ? "" : ", ") + t;
                                             return names;
                                           }()
                                        << ")");
  STRATA_CHECK(index >= 0 && index < spec.num_tasks(type), InvalidArgument,
               "TF_CONFIG: task index " << index << " is out of range: the cluster has " << spec.num_tasks(type)
                                        << " " << type << " task" << (spec.num_tasks(type) == 1 ? "" : "s")
                                        << " (indices 0.." << spec.num_tasks(type) - 1 << ")");
  TaskInfo info;
  info.source = Source::kTfConfig;
  info.task_type = type;
  info.task_index = index;
  const bool has_chief = spec.has("chief");
  info.is_chief = type == "chief" || type == "evaluator" || (!has_chief && type == "worker" && index == 0);
  if (type == "chief") {
    info.id_in_cluster = 0;
  } else if (type == "worker") {
    info.id_in_cluster = index + (has_chief ? 1 : 0);
  } else if (type == "evaluator") {
    info.id_in_cluster = index;
  } else {
    info.id_in_cluster.reset();
  }
  // multi_worker_util.worker_count: the evaluator is a partition of its own, of one worker.
  info.num_workers = type == "evaluator" ? 1 : spec.num_tasks("chief") + spec.num_tasks("worker");
  info.address = spec.jobs.at(type)[static_cast<size_t>(index)];
  if (has_chief) {
    info.coordinator_address = spec.jobs.at("chief")[0];
  } else if (spec.has("worker")) {
    info.coordinator_address = spec.jobs.at("worker")[0];
  }
  info.hosts_coordinator = (type == "chief") || (!has_chief && type == "worker" && index == 0);
  const std::string my_host = parse_address(info.address, "TF_CONFIG task").host;
  int64_t on_host = 0;
  for (const auto& [t, addresses] : spec.jobs) {
    for (const std::string& a : addresses) on_host += same_host(parse_address(a, "TF_CONFIG cluster").host, my_host);
  }
  info.local_world_size = on_host;
  info.cluster = std::move(spec);
  return info;
}

// The value of `name`, or nullopt when unset.
std::optional<std::string> lookup(const Environment& env, const std::string& name) {
  const auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// A rank-like variable: a decimal integer >= 0 (size: >= 1).
int64_t env_int(const Environment& env, const std::string& name, int64_t min) {
  const std::string value = *lookup(env, name);
  const auto v = parse_int(value);
  STRATA_CHECK(v.has_value() && *v >= min, InvalidArgument,
               name << " must be an integer >= " << min << ", got '" << value << "'");
  return *v;
}

// Names the variables of `group` that are set, or "" when none is.
std::string set_names(const Environment& env, const std::vector<std::string>& group) {
  std::string names;
  for (const auto& name : group) {
    if (lookup(env, name)) names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

// Checks that every variable of `required` is set once any variable of `group` is.
void require_all(const Environment& env, const std::vector<std::string>& group,
                 const std::vector<std::string>& required, const char* launcher) {
  std::string missing;
  for (const auto& name : required) {
    if (!lookup(env, name)) missing += (missing.empty() ? "" : ", ") + name;
  }
  STRATA_CHECK(missing.empty(), InvalidArgument,
               launcher << "'s environment is half-set: " << set_names(env, group) << " set but " << missing
                        << " missing");
}

TaskInfo rank_task(Source source, int64_t rank, int64_t size) {
  TaskInfo info;
  info.source = source;
  info.task_type = "worker";
  info.task_index = rank;
  info.cluster.jobs["worker"] = std::vector<std::string>(static_cast<size_t>(size));
  info.is_chief = rank == 0;
  info.hosts_coordinator = rank == 0;
  info.id_in_cluster = rank;
  info.num_workers = size;
  return info;
}

const std::vector<std::string> kMpiVars = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE"};
const std::vector<std::string> kTorchVars = {"RANK",       "WORLD_SIZE", "MASTER_ADDR",
                                             "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};

TaskInfo resolve_mpi(const Environment& env) {
  require_all(env, kMpiVars, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, "mpirun");
  const int64_t size = env_int(env, "OMPI_COMM_WORLD_SIZE", 1);
  const int64_t rank = env_int(env, "OMPI_COMM_WORLD_RANK", 0);
  STRATA_CHECK(rank < size, InvalidArgument,
               "OMPI_COMM_WORLD_RANK " << rank << " is out of range for OMPI_COMM_WORLD_SIZE " << size);
  TaskInfo info = rank_task(Source::kMpi, rank, size);
  if (lookup(env, "OMPI_COMM_WORLD_LOCAL_RANK")) info.local_rank = env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
  if (lookup(env, "OMPI_COMM_WORLD_LOCAL_SIZE")) {
    info.local_world_size = env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  }
  return info;
}

TaskInfo resolve_torchrun(const Environment& env) {
  require_all(env, kTorchVars, {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}, "torchrun");
  const int64_t size = env_int(env, "WORLD_SIZE", 1);
  const int64_t rank = env_int(env, "RANK", 0);
  STRATA_CHECK(rank < size, InvalidArgument, "RANK " << rank << " is out of range for WORLD_SIZE " << size);
  TaskInfo info = rank_task(Source::kTorchrun, rank, size);
  if (lookup(env, "LOCAL_RANK")) info.local_rank = env_int(env, "LOCAL_RANK", 0);
  if (lookup(env, "LOCAL_WORLD_SIZE")) info.local_world_size = env_int(env, "LOCAL_WORLD_SIZE", 1);
  const std::string host = *lookup(env, "MASTER_ADDR");
  const bool ipv6 = host.find(':') != std::string::npos && !host.empty() && host.front() != '[';
  info.coordinator_address = (ipv6 ? "[" + host + "]" : host) + ":" + *lookup(env, "MASTER_PORT");
  parse_address(info.coordinator_address, "MASTER_ADDR:MASTER_PORT");
  return info;
}

// srun sets SLURM_STEP_ID (SLURM_STEPID, its old name) in every task of a step; an sbatch script, which also
// has SLURM_PROCID=0, and salloc's shell do not.
const std::vector<std::string> kSlurmStepVars = {"SLURM_STEP_ID", "SLURM_STEPID"};
// Every SLURM variable the resolution reads, in the order an error names them.
const std::vector<std::string> kSlurmVars = {"SLURM_STEP_ID",        "SLURM_STEPID",
                                             "SLURM_PROCID",         "SLURM_STEP_NUM_TASKS",
                                             "SLURM_NTASKS",         "SLURM_LOCALID",
                                             "SLURM_STEP_NODELIST",  "SLURM_JOB_NODELIST",
                                             "SLURM_NODELIST",       "SLURM_STEP_TASKS_PER_NODE",
                                             "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"};

bool in_srun_step(const Environment& env) { return !set_names(env, kSlurmStepVars).empty(); }

// The first of `names` that is set, or nullopt when none is.
std::optional<std::string> first_set(const Environment& env, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    if (lookup(env, name)) return name;
  }
  return std::nullopt;
}

// The first of `names` followed by the others that may stand in for it: "A (or B, C)".
std::string alternatives(const std::vector<std::string>& names) {
  std::string text = names[0];
  for (size_t i = 1; i < names.size(); ++i) text += (i == 1 ? " (or " : ", ") + names[i];
  return names.size() > 1 ? text + ")" : text;
}

TaskInfo resolve_slurm(const Environment& env) {
  const std::vector<std::string> ntasks_names = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"};
  const std::vector<std::string> nodelist_names = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
  const std::vector<std::string> tasks_per_node_names = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
                                                         "SLURM_NTASKS_PER_NODE"};
  const auto ntasks_name = first_set(env, ntasks_names);
  const auto nodelist_name = first_set(env, nodelist_names);
  const auto tasks_per_node_name = first_set(env, tasks_per_node_names);
  std::string missing;
  const auto require = [&](bool present, const std::string& what) {
    if (!present) missing += (missing.empty() ? "" : ", ") + what;
  };
  require(lookup(env, "SLURM_PROCID").has_value(), "SLURM_PROCID");
  require(ntasks_name.has_value(), alternatives({"SLURM_NTASKS", "SLURM_STEP_NUM_TASKS"}));
  require(lookup(env, "SLURM_LOCALID").has_value(), "SLURM_LOCALID");
  require(nodelist_name.has_value(), alternatives(nodelist_names));
  require(tasks_per_node_name.has_value(), alternatives(tasks_per_node_names));
  STRATA_CHECK(
      missing.empty(), InvalidArgument,
      "SLURM's srun environment is half-set: " << set_names(env, kSlurmVars) << " set but " << missing << " missing");

  const int64_t ntasks = env_int(env, *ntasks_name, 1);
  const int64_t rank = env_int(env, "SLURM_PROCID", 0);
  STRATA_CHECK(rank < ntasks, InvalidArgument,
               "SLURM_PROCID " << rank << " is out of range for " << *ntasks_name << " " << ntasks);
  const int64_t local_id = env_int(env, "SLURM_LOCALID", 0);

  const std::string nodelist = *lookup(env, *nodelist_name);
  const std::vector<std::string> hosts = expand_hostlist(nodelist, *nodelist_name);
  const std::string tasks_per_node_text = *lookup(env, *tasks_per_node_name);
  const std::vector<int64_t> tasks_per_node =
      *tasks_per_node_name == "SLURM_NTASKS_PER_NODE"
          ? std::vector<int64_t>(hosts.size(), env_int(env, *tasks_per_node_name, 1))
          : expand_tasks_per_node(tasks_per_node_text, *tasks_per_node_name);
  const std::string layout =
      *tasks_per_node_name + "='" + tasks_per_node_text + "' over " + *nodelist_name + "='" + nodelist + "'";
  STRATA_CHECK(tasks_per_node.size() == hosts.size(), InvalidArgument,
               *nodelist_name << "='" << nodelist << "' names " << hosts.size() << " node"
                              << (hosts.size() == 1 ? "" : "s") << " but " << *tasks_per_node_name << "='"
                              << tasks_per_node_text << "' counts the tasks of " << tasks_per_node.size());
  std::set<std::string> seen;
  for (const std::string& host : hosts) {
    STRATA_CHECK(seen.insert(host).second, InvalidArgument,
                 *nodelist_name << "='" << nodelist << "' names the node " << host << " twice");
  }
  int64_t total = 0;
  for (const int64_t n : tasks_per_node) total += n;
  STRATA_CHECK(total == ntasks, InvalidArgument,
               layout << " places " << total << " tasks but " << *ntasks_name << " is " << ntasks);

  int64_t port_base = kDefaultSlurmPortBase;
  if (lookup(env, "STRATA_SLURM_PORT_BASE")) {
    port_base = env_int(env, "STRATA_SLURM_PORT_BASE", 1);
    STRATA_CHECK(port_base <= 65535, InvalidArgument,
                 "STRATA_SLURM_PORT_BASE must be a port 1..65535, got " << port_base);
  }
  const int64_t most_on_a_node = *std::max_element(tasks_per_node.begin(), tasks_per_node.end());
  STRATA_CHECK(
      port_base + most_on_a_node - 1 <= 65535, InvalidArgument,
      "STRATA_SLURM_PORT_BASE " << port_base << " leaves no port for local task " << most_on_a_node - 1
                                << " (a task listens on STRATA_SLURM_PORT_BASE + SLURM_LOCALID, at most 65535)");

  // srun's block distribution: the ranks fill the nodes in the order of the node list, each node's tasks
  // taking the next consecutive ranks.
  std::vector<std::string> addresses;
  size_t my_node = 0;
  int64_t my_expected_local_id = 0;
  for (size_t node = 0; node < hosts.size(); ++node) {
    for (int64_t local = 0; local < tasks_per_node[node]; ++local) {
      if (static_cast<int64_t>(addresses.size()) == rank) {
        my_node = node;
        my_expected_local_id = local;
      }
      addresses.push_back(hosts[node] + ":" + std::to_string(port_base + local));
      parse_address(addresses.back(), *nodelist_name);
    }
  }
  const auto node_name = lookup(env, "SLURMD_NODENAME");
  const bool placed_as_expected = local_id == my_expected_local_id && (!node_name || *node_name == hosts[my_node]);
  STRATA_CHECK(placed_as_expected, InvalidArgument,
               "SLURM_PROCID " << rank << " runs as local task " << local_id << " (SLURM_LOCALID)"
                               << (node_name ? " on " + *node_name + " (SLURMD_NODENAME)" : std::string())
                               << ", but srun's block distribution of " << layout << " puts it on " << hosts[my_node]
                               << " as local task " << my_expected_local_id
                               << "; start the tasks with the block distribution (srun --distribution=block, the "
                                  "default when there are more tasks than nodes)");

  std::map<std::string, int64_t> jobs = {{"worker", ntasks}};
  const auto jobs_text = lookup(env, "STRATA_SLURM_JOBS");
  if (jobs_text && !blank(*jobs_text)) {
    jobs = parse_slurm_jobs(*jobs_text, "STRATA_SLURM_JOBS");
    int64_t asked = 0;
    for (const auto& [type, count] : jobs) asked += count;
    STRATA_CHECK(asked == ntasks, InvalidArgument,
                 "STRATA_SLURM_JOBS='" << *jobs_text << "' asks for " << asked << " task" << (asked == 1 ? "" : "s")
                                       << " but " << *ntasks_name << " is " << ntasks
                                       << "; the counts must add up to the step's tasks");
  }
  // As TensorFlow's SlurmClusterResolver: the types, in name order, take consecutive ranks.
  ClusterSpec spec;
  std::string my_type;
  int64_t my_index = 0;
  int64_t first_rank = 0;
  for (const auto& [type, count] : jobs) {
    const auto begin = addresses.begin() + first_rank;
    spec.jobs[type] = std::vector<std::string>(begin, begin + count);
    if (rank >= first_rank && rank < first_rank + count) {
      my_type = type;
      my_index = rank - first_rank;
    }
    first_rank += count;
  }
  TaskInfo info = describe(std::move(spec), my_type, my_index);
  info.source = Source::kSlurm;
  info.local_rank = local_id;
  info.local_world_size = tasks_per_node[my_node];
  if (lookup(env, "SLURM_CPUS_PER_TASK")) info.cpus_per_task = env_int(env, "SLURM_CPUS_PER_TASK", 1);
  return info;
}

}  // namespace

const char* source_name(Source source) {
  switch (source) {
    case Source::kSingle: return "single";
    case Source::kTfConfig: return "tf_config";
    case Source::kMpi: return "mpi";
    case Source::kTorchrun: return "torchrun";
    case Source::kSlurm: return "slurm";
  }
  return "?";
}

bool same_host(const std::string& a, const std::string& b) {
  const auto loopback = [](const std::string& host) {
    return host == "localhost" || host.rfind("127.", 0) == 0 || host == "[::1]";
  };
  return a == b || (loopback(a) && loopback(b));
}

int64_t ClusterSpec::num_tasks(const std::string& type) const {
  const auto it = jobs.find(type);
  return it == jobs.end() ? 0 : static_cast<int64_t>(it->second.size());
}

std::string ClusterSpec::to_json() const {
  json cluster = json::object();
  for (const auto& [type, addresses] : jobs) cluster[type] = addresses;
  return cluster.dump();
}

HostPort parse_address(const std::string& address, const std::string& what) {
  const auto bad = [&](const std::string& why) {
    STRATA_THROW(InvalidArgument, what << ": bad address '" << address << "': " << why
                                       << " (want \"host:port\", e.g. \"127.0.0.1:2222\")");
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) bad("no ':port'");
  HostPort hp;
  hp.host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (hp.host.empty()) bad("empty host");
  if (hp.host.front() == '[') {
    if (hp.host.size() < 3 || hp.host.back() != ']') bad("an IPv6 host must be bracketed, as in [::1]:2222");
    for (size_t i = 1; i + 1 < hp.host.size(); ++i) {
      if (!std::isxdigit(static_cast<unsigned char>(hp.host[i])) && hp.host[i] != ':' && hp.host[i] != '.') {
        bad("not an IPv6 address between the brackets");
      }
    }
  } else {
    for (const char c : hp.host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        bad(c == ':' ? "an IPv6 host must be bracketed, as in [::1]:2222" : "the host has a character that no host name has");
      }
    }
  }
  const auto p = parse_int(port);
  if (!p || port.front() == '+' || *p < 1 || *p > 65535) bad("the port must be a number 1..65535");
  hp.port = static_cast<int>(*p);
  return hp;
}

TaskInfo resolve_tf_config(const std::string& tf_config) {
  if (blank(tf_config)) return TaskInfo{};
  STRATA_CHECK(::strata::detail::json_depth(tf_config) <= ::strata::detail::kMaxJsonDepth, InvalidArgument,
               "TF_CONFIG nests arrays or objects deeper than " << ::strata::detail::kMaxJsonDepth << " levels");
  json config;
  try {
    config = json::parse(tf_config);
  } catch (const json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 17: syntax error ...".
    std::string what = e.what();
    const size_t start = what.find("parse error");
    STRATA_THROW(InvalidArgument,
                 "TF_CONFIG is not valid JSON: " << (start == std::string::npos ? what : what.substr(start))
                                                 << " (byte " << e.byte << ")");
  } catch (const json::exception& e) {  // e.g. a number too large for a double (out_of_range.406)
    STRATA_THROW(InvalidArgument, "TF_CONFIG is not valid JSON: " << e.what());
  }
  STRATA_CHECK(config.is_object(), InvalidArgument,
               "TF_CONFIG must be a JSON object with \"cluster\" and \"task\", got " << config.dump());
  const json cluster = config.contains("cluster") && !config["cluster"].is_null() ? config["cluster"] : json::object();
  const json task = config.contains("task") && !config["task"].is_null() ? config["task"] : json::object();
  STRATA_CHECK(task.is_object(), InvalidArgument,
               "TF_CONFIG: \"task\" must be an object like {\"type\": \"worker\", \"index\": 0}, got " << task.dump());
  ClusterSpec spec = parse_cluster(cluster);
  const bool names_task = task.contains("type") || task.contains("index");
  if (spec.jobs.empty()) {
    STRATA_CHECK(!names_task, InvalidArgument,
                 "TF_CONFIG names a task (" << task.dump() << ") but its \"cluster\" lists no task");
    TaskInfo single;
    single.rpc_layer = string_field(config, "rpc_layer", "TF_CONFIG:");
    single.environment = string_field(config, "environment", "TF_CONFIG:");
    return single;
  }
  STRATA_CHECK(task.contains("type") && !task["type"].is_null(), InvalidArgument,
               "TF_CONFIG has a cluster but no task type (want \"task\": {\"type\": \"worker\", \"index\": 0})");
  STRATA_CHECK(task.contains("index") && !task["index"].is_null(), InvalidArgument,
               "TF_CONFIG has a cluster but no task index (want \"task\": {\"type\": \"worker\", \"index\": 0})");
  STRATA_CHECK(task["type"].is_string(), InvalidArgument,
               "TF_CONFIG: task type must be a string, got " << task["type"].dump());
  TaskInfo info = describe(std::move(spec), task["type"].get<std::string>(), task_index(task["index"]));
  info.rpc_layer = string_field(config, "rpc_layer", "TF_CONFIG:");
  info.environment = string_field(config, "environment", "TF_CONFIG:");
  return info;
}

TaskInfo resolve_cluster(const Environment& env) {
  const auto tf_config = lookup(env, "TF_CONFIG");
  const bool has_tf_config = tf_config && !blank(*tf_config);
  const std::string mpi = set_names(env, kMpiVars);
  const std::string torch = set_names(env, kTorchVars);
  // An srun step's variables describe this process only when no launcher runs inside the step: mpirun in an
  // sbatch job starts its daemons with srun, and torchrun under srun is the step's task; their processes
  // inherit the step's variables, which describe the launcher, not them (see cluster_resolver.h).
  const bool slurm = in_srun_step(env) && mpi.empty() && torch.empty();
  std::vector<std::string> sources;
  if (has_tf_config) sources.push_back("TF_CONFIG");
  if (!mpi.empty()) sources.push_back("mpirun's " + mpi);
  if (!torch.empty()) sources.push_back("torchrun's " + torch);
  if (slurm) sources.push_back("srun's " + set_names(env, {"SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID"}));
  STRATA_CHECK(sources.size() <= 1, InvalidArgument,
               "the environment names the cluster twice: " << sources[0] << " and " << sources[1]
                                                           << " are both set; unset one launcher's variables");
  if (has_tf_config) return resolve_tf_config(*tf_config);
  if (!mpi.empty()) return resolve_mpi(env);
  if (!torch.empty()) return resolve_torchrun(env);
  if (slurm) return resolve_slurm(env);
  return TaskInfo{};
}

TaskInfo resolve_cluster_from_environment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return resolve_cluster(env);
}

std::string make_tf_config(const ClusterSpec& cluster, const std::string& type, int64_t index) {
  json config;
  json jobs = json::object();
  for (const auto& [t, addresses] : cluster.jobs) jobs[t] = addresses;
  config["cluster"] = jobs;
  config["task"] = {{"type", type}, {"index", index}};
  std::string text = config.dump();
  const TaskInfo check = resolve_tf_config(text);  // throws naming the problem
  STRATA_CHECK(check.task_type == type && check.task_index == index, InvalidArgument,
               "make_tf_config: the cluster has no task " << type << ":" << index);
  return text;
}

std::string listen_address(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return "127.0.0.1:" + address;
  if (colon == 0) return "127.0.0.1" + address;
  return address;
}

}  // namespace strata::cluster
