// Auto-sharding by rewriting the dataset graph: FILE restricts the file source(s) to this worker's
// files; DATA appends shard() (before a trailing prefetch). See autoshard.h for the policies.
// Thread-safety: pure functions on immutable graphs.
#include "strata/data/autoshard.h"

#include <cctype>
#include <set>

#include "data/pipeline/nodes.h"

namespace strata::data {

using detail::NodePtr;

namespace {

struct FileSource {
  std::string name;
  int64_t files;
};

void find_file_sources(const NodePtr& node, std::vector<FileSource>& out) {
  if (auto files = node->files()) {
    out.push_back({node->name(), static_cast<int64_t>(files->size())});
    return;
  }
  for (const auto& in : node->inputs()) find_file_sources(in, out);
}

// The graph with every file source reading only files i where i % n == index.
NodePtr shard_file_nodes(const NodePtr& node, int64_t n, int64_t index) {
  if (auto files = node->files()) {
    std::vector<std::string> mine;
    for (size_t i = 0; i < files->size(); ++i)
      if (static_cast<int64_t>(i) % n == index) mine.push_back((*files)[i]);
    return node->with_files(std::move(mine));
  }
  auto inputs = node->inputs();
  if (inputs.empty()) return node;
  std::vector<NodePtr> rewritten;
  rewritten.reserve(inputs.size());
  for (const auto& in : inputs) rewritten.push_back(shard_file_nodes(in, n, index));
  return node->with_inputs(std::move(rewritten));
}

Dataset shard_data(const Dataset& dataset, int64_t n, int64_t index) {
  const NodePtr& root = dataset.node();
  if (root->name() == "prefetch" && root->inputs().size() == 1) {
    const NodePtr sharded = Dataset::from_node(root->inputs()[0]).shard(n, index).node();
    return Dataset::from_node(root->with_inputs({sharded}));
  }
  return dataset.shard(n, index);
}

}  // namespace

AutoShardPolicy parse_auto_shard_policy(const std::string& name) {
  std::string n;
  for (char c : name) n += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (n == "OFF") return AutoShardPolicy::kOff;
  if (n == "AUTO") return AutoShardPolicy::kAuto;
  if (n == "FILE") return AutoShardPolicy::kFile;
  if (n == "DATA") return AutoShardPolicy::kData;
  STRATA_THROW(InvalidArgument, "auto-shard policy '" << name << "' is not one of OFF, AUTO, FILE, DATA");
}

const char* auto_shard_policy_name(AutoShardPolicy p) {
  switch (p) {
    case AutoShardPolicy::kOff: return "OFF";
    case AutoShardPolicy::kAuto: return "AUTO";
    case AutoShardPolicy::kFile: return "FILE";
    case AutoShardPolicy::kData: return "DATA";
  }
  return "?";
}

bool can_shard_files(const Dataset& dataset, int64_t num_workers, std::string* problem) {
  std::vector<FileSource> sources;
  find_file_sources(dataset.node(), sources);
  std::string why;
  if (sources.empty()) {
    why = "the pipeline has no file source (list_files, from_files or a file-reading dataset such as "
          "TFRecordDataset)";
  } else {
    for (const auto& s : sources)
      if (s.files < num_workers) {
        why = "its file source '" + s.name + "' has " + std::to_string(s.files) + " file(s) for " +
              std::to_string(num_workers) + " workers";
        break;
      }
  }
  if (problem != nullptr) *problem = why;
  return why.empty();
}

Dataset shard_files(const Dataset& dataset, int64_t num_workers, int64_t worker_index) {
  STRATA_CHECK(num_workers >= 1, InvalidArgument, "shard_files: num_workers must be >= 1, got " << num_workers);
  STRATA_CHECK(worker_index >= 0 && worker_index < num_workers, InvalidArgument,
               "shard_files: worker index " << worker_index << " is outside [0, " << num_workers << ")");
  std::string problem;
  STRATA_CHECK(can_shard_files(dataset, num_workers, &problem), InvalidArgument,
               "FILE auto-shard policy cannot shard this dataset across workers: " << problem
                                                                                    << "; use the DATA or AUTO policy");
  return Dataset::from_node(shard_file_nodes(dataset.node(), num_workers, worker_index));
}

namespace {
// Stages that hand on whole elements as they come (one per input element, or fewer): a batch before them is
// still the batch at the end. unbatch, interleave, zip and the like are not.
bool keeps_elements_whole(const std::string& stage) {
  static const std::set<std::string> kWhole = {"map",  "parallel_map", "filter", "prefetch", "cache",    "shuffle",
                                                "repeat", "options",    "take",   "skip",     "shard", "enumerate"};
  return kWhole.count(stage) > 0;
}

// The pipeline's last batching stage, following element-preserving one-input stages from the end; nullptr when
// there is none.
const DatasetNode* final_batch_node(const NodePtr& node) {
  if (node->batch_size()) return node.get();
  const auto inputs = node->inputs();
  return inputs.size() == 1 && keeps_elements_whole(node->name()) ? final_batch_node(inputs[0]) : nullptr;
}

NodePtr rebatch_node(const NodePtr& node, int64_t batch_size) {
  if (node->batch_size()) return node->with_batch_size(batch_size);
  return node->with_inputs({rebatch_node(node->inputs()[0], batch_size)});
}
}  // namespace

std::optional<int64_t> final_batch_size(const Dataset& dataset) {
  const DatasetNode* node = final_batch_node(dataset.node());
  return node != nullptr ? node->batch_size() : std::nullopt;
}

Dataset rebatch(const Dataset& dataset, int64_t batch_size) {
  STRATA_CHECK(batch_size >= 1, InvalidArgument, "rebatch: batch_size must be >= 1, got " << batch_size);
  STRATA_CHECK(final_batch_node(dataset.node()) != nullptr, InvalidArgument,
               "rebatch: the pipeline does not end in batch() or padded_batch() (only stages that keep elements whole, "
               "such as map, filter, shuffle or prefetch, may follow it), so its global batches cannot be split into "
               "each worker's share");
  return Dataset::from_node(rebatch_node(dataset.node(), batch_size));
}

Dataset auto_shard(const Dataset& dataset, int64_t num_workers, int64_t worker_index, AutoShardPolicy policy) {
  STRATA_CHECK(num_workers >= 1, InvalidArgument, "auto_shard: num_workers must be >= 1, got " << num_workers);
  STRATA_CHECK(worker_index >= 0 && worker_index < num_workers, InvalidArgument,
               "auto_shard: worker index " << worker_index << " is outside [0, " << num_workers << ")");
  if (policy == AutoShardPolicy::kOff || num_workers == 1) return dataset;
  if (policy == AutoShardPolicy::kData) return shard_data(dataset, num_workers, worker_index);
  if (policy == AutoShardPolicy::kFile) return shard_files(dataset, num_workers, worker_index);
  if (can_shard_files(dataset, num_workers)) {
    try {
      return shard_files(dataset, num_workers, worker_index);
    } catch (const InvalidArgument&) {
      // A stage between the files and the end cannot be rebuilt: AUTO falls back to DATA.
    }
  }
  return shard_data(dataset, num_workers, worker_index);  // AUTO falls back to DATA
}

}  // namespace strata::data
