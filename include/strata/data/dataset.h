// Dataset: a lazy, composable input pipeline with tf.data's semantics.
//
//   auto train = data::Dataset::from_idx("/usr/share/datasets/fashion-mnist", data::Split::kTrain)
//                    .map(normalize, {.num_parallel_calls = data::kAutotune})
//                    .cache().shuffle(10000, /*seed=*/42).batch(64)
//                    .prefetch(data::kAutotune);
//   auto it = train.make_iterator();
//   while (auto batch = it.next()) { const Tensor& x = (*batch)[0]; ... }
//
// A Dataset is a cheap value sharing an immutable description (a graph of DatasetNodes); every
// iterator is independent and walks it from the start. Parallel stages (map, interleave, prefetch)
// own real threads that stop and join when their iterator is destroyed; with `deterministic` they
// never change the element order. Seeds go through strata's Philox Generator, so the same seed gives
// the same order on every run and machine. An iterator's state (positions, shuffle buffers, RNG
// offsets, buffered elements) saves into a string and restores into a fresh iterator of the same
// dataset, which then continues exactly where the first one stood.
//
// Thread-safety: Dataset is immutable and safe to share across threads. An Iterator is used by one
// thread at a time. User functions (map/filter/interleave) may run on worker threads concurrently
// with each other and must be safe to call that way; an exception they throw reaches the caller of
// next() (at that element's position when the order is deterministic).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/data/dataset_node.h"
#include "strata/data/element.h"
#include "strata/data/idx.h"
#include "strata/data/image_folder.h"
#include "strata/data/options.h"

namespace strata::data {

class Dataset;

class Iterator {
 public:
  // `keep_alive` is the dataset graph the iterator walks (its nodes must outlive it).
  explicit Iterator(std::unique_ptr<IteratorImpl> impl, std::shared_ptr<const DatasetNode> keep_alive = nullptr);
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();

  // The next element; nullopt at the end.
  std::optional<Element> next();
  // Opaque state; restore it into a fresh iterator of the same dataset.
  std::string save_state() const;
  void restore_state(const std::string& state);

 private:
  std::shared_ptr<const DatasetNode> keep_alive_;  // declared first: destroyed after impl_
  std::unique_ptr<IteratorImpl> impl_;
};

enum class Split { kTrain, kTest };

struct MapOptions {
  int64_t num_parallel_calls = 1;  // 1: inline on the caller's thread; kAutotune: one per core
  bool deterministic = true;       // false: a parallel map may hand out results as they finish
};

struct InterleaveOptions {
  int64_t cycle_length = kAutotune;  // kAutotune: one per core
  int64_t block_length = 1;
  int64_t num_parallel_calls = 1;    // > 1 or kAutotune: each open input is read ahead on its own thread
  bool deterministic = true;
};

struct PaddedBatchOptions {
  // Per component: the padded shape (-1 in a dimension: the largest in the batch); empty: all -1.
  std::vector<Shape> padded_shapes;
  // Per component: the padding value; empty: 0 everywhere.
  std::vector<double> padding_values;
  bool drop_remainder = false;
};

class Dataset {
 public:
  static constexpr int64_t kInfinite = kInfiniteCardinality, kUnknown = kUnknownCardinality;

  // ---- sources
  // Element i is row i of every tensor (all share their first dimension); the rows are views.
  static Dataset from_tensor_slices(std::vector<Tensor> tensors, std::vector<std::string> names = {});
  // int64 scalars start, start+step, ... before stop.
  static Dataset range(int64_t start, int64_t stop, int64_t step = 1);
  static Dataset range(int64_t stop) { return range(0, stop, 1); }
  // Fashion-MNIST/MNIST layout: <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]; elements
  // {"image": uint8 [rows, cols, 1], "label": int64 scalar}.
  static Dataset from_idx(const std::string& directory, Split split);
  // NumPy arrays, as a Keras user hands over (x, y) from numpy.load: element i is {"x": x[i], "y": y[i]}. x keeps
  // its dtype (float32, uint8, int32 or int64: what .npy files hold, strata/io/npy.h); integer y (uint8, int32, int64)
  // becomes int64 labels and float32 y stays float32. Both are read whole now. InvalidArgument naming both files
  // when their first dimensions differ or one is a scalar; the readers' errors (IoError, DataCorrupt, a dtype strata
  // does not hold) name the file.
  static Dataset from_npy(const std::string& x_path, const std::string& y_path);
  // The same from two arrays of one .npz archive (numpy.savez / savez_compressed), named as numpy.load names them
  // (x_key "x_train" is the member x_train.npy); a missing name is an InvalidArgument listing the archive's names.
  static Dataset from_npz(const std::string& path, const std::string& x_key, const std::string& y_key);
  // Images in one subfolder per class, like keras.utils.image_dataset_from_directory (strata/data/image_folder.h):
  // elements {"image": uint8 [height, width, channels], "label": int64 []}, decoded as they are read.
  static Dataset from_image_folder(const std::string& directory, const ImageFolderOptions& options = {});
  // The files matching `pattern` (glob(3)), sorted; shuffled by `seed` when `shuffle` (a fresh order
  // each iteration, like tf.data). Elements: {"filename": string_tensor}. No match: InvalidArgument.
  static Dataset list_files(const std::string& pattern, bool shuffle = true, std::optional<uint64_t> seed = {});
  // The files given, in order (the FILE auto-shard policy can split them); elements like list_files.
  static Dataset from_files(std::vector<std::string> files);
  // Each iterator calls `make_generator()` for a function that returns elements until nullopt.
  // Restoring state replays the generator up to the saved position.
  static Dataset from_generator(std::function<std::function<std::optional<Element>()>()> make_generator,
                                int64_t cardinality = kUnknown);
  // A node written elsewhere (TFRecordDataset, CsvDataset).
  static Dataset from_node(std::shared_ptr<const DatasetNode> node);
  // Elements of the datasets side by side: components (and names) concatenated.
  static Dataset zip(std::vector<Dataset> datasets);

  // ---- transformations
  Dataset map(std::function<Element(const Element&)> fn, MapOptions options = {}) const;
  Dataset filter(std::function<bool(const Element&)> predicate) const;
  Dataset shuffle(int64_t buffer_size, std::optional<uint64_t> seed = {}, bool reshuffle_each_iteration = true) const;
  // Stacks each component of `batch_size` elements into one tensor [batch_size, ...].
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;
  Dataset padded_batch(int64_t batch_size, PaddedBatchOptions options = {}) const;
  // Splits each component along its first dimension (all components must agree on it).
  Dataset unbatch() const;
  // count < 0: forever.
  Dataset repeat(int64_t count = -1) const;
  // A background thread keeps up to `buffer_size` elements ready (kAutotune: the library picks).
  Dataset prefetch(int64_t buffer_size = kAutotune) const;
  // For each input element, fn makes a dataset; `cycle_length` of them are read in turn,
  // `block_length` elements at a time.
  Dataset interleave(std::function<Dataset(const Element&)> fn, InterleaveOptions options = {}) const;
  // The elements of the first complete iteration are kept in memory; later iterations read them.
  Dataset cache() const;
  // ... or in a file at `path` (written under a temporary name, renamed when an iteration completes).
  Dataset cache(const std::string& path) const;
  // Every num_shards-th element, starting at `index`.
  Dataset shard(int64_t num_shards, int64_t index) const;
  Dataset take(int64_t count) const;  // count < 0: all
  Dataset skip(int64_t count) const;  // count < 0: all
  Dataset zip(const Dataset& other) const { return zip({*this, other}); }
  // Prepends an int64 scalar counter (named "index" when the elements are named).
  Dataset enumerate(int64_t start = 0) const;
  // The same elements, carrying `options` for whoever distributes the dataset (tf.data's with_options); the
  // options given last (outermost) win.
  Dataset with_options(const Options& options) const;
  // The options of the outermost with_options stage; defaults when there is none.
  Options options() const;
  // Applies a custom transformation: fn(node) -> node (for stages written elsewhere).
  Dataset apply(const std::function<Dataset(const Dataset&)>& fn) const { return fn(*this); }

  Iterator make_iterator() const;
  // Number of elements, or kInfinite / kUnknown.
  int64_t cardinality() const;
  const std::shared_ptr<const DatasetNode>& node() const { return node_; }

 private:
  explicit Dataset(std::shared_ptr<const DatasetNode> node);
  std::shared_ptr<const DatasetNode> node_;
};

}  // namespace strata::data
