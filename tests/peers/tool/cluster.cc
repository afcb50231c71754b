// peers_tool's cluster subcommands: TF_CONFIG values resolved by strata's cluster resolver (as a process started with
// that environment would resolve them), and variable shapes split by the parameter-server partitioners. See
// commands.h. Thread-safety: see commands.h.
#include <memory>
#include <string>

#include "commands.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/error.h"
#include "strata/ps/partitioner.h"

namespace strata::peers {

namespace {

// {"kind": "fixed" | "min_size" | "max_size", and the partitioner's options by TensorFlow's names}.
std::unique_ptr<ps::Partitioner> partitioner_from_json(const json& p) {
  const std::string kind = member(p, "kind").get<std::string>();
  if (kind == "fixed") return std::make_unique<ps::FixedShardsPartitioner>(member(p, "num_shards").get<int64_t>());
  if (kind == "min_size") {
    return std::make_unique<ps::MinSizePartitioner>(
        ps::MinSizePartitioner::Options{.min_shard_bytes = member(p, "min_shard_bytes").get<int64_t>(),
                                        .max_shards = member(p, "max_shards").get<int64_t>()});
  }
  if (kind == "max_size") {
    ps::MaxSizePartitioner::Options options{.max_shard_bytes = member(p, "max_shard_bytes").get<int64_t>()};
    if (p.contains("max_shards") && !p["max_shards"].is_null()) options.max_shards = p["max_shards"].get<int64_t>();
    return std::make_unique<ps::MaxSizePartitioner>(options);
  }
  STRATA_THROW(InvalidArgument, "unknown partitioner kind '" << kind << "'");
}

}  // namespace

json tf_config(const json& request) {
  json answers = json::array();
  for (const json& config : member(request, "configs")) {
    try {
      const cluster::TaskInfo task = cluster::resolve_cluster({{"TF_CONFIG", config.get<std::string>()}});
      answers.push_back({
          {"source", cluster::source_name(task.source)},
          {"task_type", task.task_type},
          {"task_index", task.task_index},
          {"is_chief", task.is_chief},
          {"id_in_cluster", task.id_in_cluster ? json(*task.id_in_cluster) : json(nullptr)},
          {"num_workers", task.num_workers},
          {"rpc_layer", task.rpc_layer},
          {"cluster", task.cluster.jobs},
          {"cluster_json", json::parse(task.cluster.to_json())},
      });
    } catch (const InvalidArgument& e) {
      answers.push_back({{"error", e.what()}});
    }
  }
  return answers;
}

json partition(const json& request) {
  json answers = json::array();
  for (const json& c : member(request, "cases")) {
    const auto partitioner = partitioner_from_json(member(c, "partitioner"));
    const Shape shape = shape_of(member(c, "shape"));
    const DType dtype = dtype_named(member(c, "dtype").get<std::string>());
    const int64_t shards = partitioner->num_shards(shape, dtype);
    json tasks = json::array();
    for (int64_t s = 0; s < shards; ++s) tasks.push_back(ps::shard_task(s, c.value("num_ps", int64_t{1})));
    answers.push_back({{"partitions", partitioner->partitions(shape, dtype)},
                       {"shard_rows", ps::shard_rows(shape.at(0), shards)},
                       {"shard_tasks", tasks}});
  }
  return answers;
}

}  // namespace strata::peers
