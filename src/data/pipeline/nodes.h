// Internal: the factories for every built-in DatasetNode (defined across src/data/pipeline/*.cc, and the
// file readers in src/data/formats), and UnaryNode, the base of every one-input transformation.
// Thread-safety: nodes are immutable after construction (see dataset_node.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/data/dataset.h"
#include "strata/data/dataset_node.h"

namespace strata::data::detail {

using NodePtr = std::shared_ptr<const DatasetNode>;

class UnaryNode : public DatasetNode {
 public:
  explicit UnaryNode(NodePtr input) : input_(std::move(input)) {}
  std::vector<NodePtr> inputs() const override { return {input_}; }
  NodePtr with_inputs(std::vector<NodePtr> inputs) const override {
    STRATA_CHECK(inputs.size() == 1, InvalidArgument, name() << ": with_inputs wants 1 input, got " << inputs.size());
    return rebuild(std::move(inputs[0]));
  }
  const NodePtr& input() const { return input_; }

 protected:
  virtual NodePtr rebuild(NodePtr input) const = 0;
  NodePtr input_;
};

// A seed drawn from the machine's entropy, for stages given no seed (like tf.data).
uint64_t random_seed();
// kAutotune -> a parallelism for this machine; else the value (checked >= 1, naming `what`).
int64_t resolve_parallelism(int64_t n, const char* what);

// ---- sources (sources.cc)
NodePtr tensor_slices_node(std::vector<Tensor> tensors, std::vector<std::string> names);
NodePtr range_node(int64_t start, int64_t stop, int64_t step);
NodePtr files_node(std::vector<std::string> files, bool shuffle, std::optional<uint64_t> seed, std::string origin);
NodePtr generator_node(std::function<std::function<std::optional<Element>()>()> make, int64_t cardinality);

// ---- simple transformations (transforms.cc)
NodePtr map_node(NodePtr in, std::function<Element(const Element&)> fn);
NodePtr filter_node(NodePtr in, std::function<bool(const Element&)> predicate);
NodePtr take_node(NodePtr in, int64_t count);
NodePtr skip_node(NodePtr in, int64_t count);
NodePtr shard_node(NodePtr in, int64_t num_shards, int64_t index);
NodePtr repeat_node(NodePtr in, int64_t count);
NodePtr enumerate_node(NodePtr in, int64_t start);
NodePtr zip_node(std::vector<NodePtr> inputs);
// The input unchanged, carrying `options` (Dataset::with_options).
NodePtr options_node(NodePtr in, Options options);

// ---- batching (transforms_batch.cc)
NodePtr batch_node(NodePtr in, int64_t batch_size, bool drop_remainder);
NodePtr padded_batch_node(NodePtr in, int64_t batch_size, PaddedBatchOptions options);
NodePtr unbatch_node(NodePtr in);

// ---- shuffle and cache (transforms_shuffle.cc)
NodePtr shuffle_node(NodePtr in, int64_t buffer_size, std::optional<uint64_t> seed, bool reshuffle_each_iteration);
NodePtr cache_node(NodePtr in, std::string path);  // empty path: memory

// ---- parallel stages (transforms_parallel.cc)
NodePtr parallel_map_node(NodePtr in, std::function<Element(const Element&)> fn, int64_t num_parallel_calls,
                          bool deterministic);
NodePtr prefetch_node(NodePtr in, int64_t buffer_size);
NodePtr interleave_node(NodePtr in, std::function<Dataset(const Element&)> fn, InterleaveOptions options);

}  // namespace strata::data::detail
