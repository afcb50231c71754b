// The extension point of the data layer: a DatasetNode is the immutable description of one stage
// of a pipeline (a source or a transformation) and makes IteratorImpls that walk it. Formats written
// outside this folder (TFRecord, CSV) derive from DatasetNode and wrap it with Dataset::from_node.
//
// Iterator state is an opaque string. StateWriter / StateReader give every node the same
// binary-safe key/value encoding (nested states are values), so a pipeline's state is the state of
// its last stage with its inputs' states nested inside.
//
// Lifetime: an IteratorImpl may keep raw pointers to its node and the node's inputs, so whoever holds
// an IteratorImpl keeps its node alive (the public Iterator holds the root of its graph; a stage that
// makes datasets on the fly, like interleave, holds each one beside its iterator).
//
// Thread-safety: a DatasetNode is shared by every Dataset and iterator made from it, so its const
// methods must be safe to call from several threads at once. An IteratorImpl is used by one thread
// at a time (the caller of next/save_state/restore_state); it may own worker threads internally.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/data/element.h"
#include "strata/data/options.h"

namespace strata::data {

// Returned by num_parallel_calls / buffer sizes: let the library choose.
inline constexpr int64_t kAutotune = -1;
// Cardinalities (like tf.data's).
inline constexpr int64_t kInfiniteCardinality = -1;
inline constexpr int64_t kUnknownCardinality = -2;

class IteratorImpl {
 public:
  virtual ~IteratorImpl() = default;
  // The next element, or nullopt at the end (and on every call after it).
  virtual std::optional<Element> next() = 0;
  // Where the iterator stands: restoring it into a fresh iterator of the same dataset continues with
  // exactly the elements this one would have produced next.
  virtual std::string save_state() const = 0;
  virtual void restore_state(const std::string& state) = 0;
};

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<IteratorImpl> make_iterator() const = 0;
  // Number of elements, or kInfiniteCardinality / kUnknownCardinality.
  virtual int64_t cardinality() const { return kUnknownCardinality; }
  // A short name for messages ("TFRecordDataset", "batch").
  virtual std::string name() const { return "Dataset"; }

  // ---- graph rewrites (auto-sharding). A source has no inputs.
  virtual std::vector<std::shared_ptr<const DatasetNode>> inputs() const { return {}; }
  // A copy of this node reading from `inputs` instead (same count as inputs()).
  // The default throws: a node with inputs should override it.
  virtual std::shared_ptr<const DatasetNode> with_inputs(std::vector<std::shared_ptr<const DatasetNode>> inputs) const;
  // A source that reads a list of files says which (FILE auto-shard policy) ...
  virtual std::optional<std::vector<std::string>> files() const { return std::nullopt; }
  // ... and makes a copy of itself reading only `files` (a subset of files()).
  virtual std::shared_ptr<const DatasetNode> with_files(std::vector<std::string> files) const;
  // A batching stage says its batch size (rebatching a global batch into a worker's share) ...
  virtual std::optional<int64_t> batch_size() const { return std::nullopt; }
  // ... and makes a copy of itself batching `batch_size` elements instead.
  virtual std::shared_ptr<const DatasetNode> with_batch_size(int64_t batch_size) const;
  // An options stage (Dataset::with_options) gives its options; others nullptr.
  virtual const Options* options() const { return nullptr; }
};

// Builds a state string: put(key, value) in any order; values may be nested states.
class StateWriter {
 public:
  // `kind` names the node; StateReader checks it so a state restored into another dataset fails clearly.
  explicit StateWriter(std::string_view kind);
  StateWriter& put(std::string_view key, std::string_view value);
  StateWriter& put(std::string_view key, const char* value) { return put(key, std::string_view(value)); }
  StateWriter& put(std::string_view key, const std::string& value) { return put(key, std::string_view(value)); }
  StateWriter& put_int(std::string_view key, int64_t value);
  StateWriter& put_uint(std::string_view key, uint64_t value);
  StateWriter& put_element(std::string_view key, const Element& element);
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

// Reads a StateWriter's string; every missing key or malformed value is an InvalidArgument that
// names the node kind and the key.
class StateReader {
 public:
  StateReader(const std::string& state, std::string_view kind);
  bool has(const std::string& key) const { return fields_.count(key) != 0; }
  const std::string& get(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  uint64_t get_uint(const std::string& key) const;
  Element get_element(const std::string& key) const;

 private:
  std::string kind_;
  std::map<std::string, std::string> fields_;
};

// Binary-safe encodings of a tensor / an element (dtype, shape, names, raw bytes).
std::string encode_element(const Element& element);
Element decode_element(std::string_view bytes);

}  // namespace strata::data
