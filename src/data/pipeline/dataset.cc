// Dataset and Iterator: the public value types over the node graph, and the sources that need the
// file system (from_idx, list_files).
#include "strata/data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "data/pipeline/nodes.h"

namespace strata::data {

using detail::NodePtr;

// ---- Iterator
Iterator::Iterator(std::unique_ptr<IteratorImpl> impl, std::shared_ptr<const DatasetNode> keep_alive)
    : keep_alive_(std::move(keep_alive)), impl_(std::move(impl)) {
  STRATA_CHECK(impl_ != nullptr, InvalidArgument, "Iterator: a node made a null iterator");
}
Iterator::Iterator(Iterator&&) noexcept = default;
Iterator& Iterator::operator=(Iterator&& other) noexcept {
  if (this != &other) {
    impl_ = std::move(other.impl_);  // destroy our iterator before releasing our graph
    keep_alive_ = std::move(other.keep_alive_);
  }
  return *this;
}
Iterator::~Iterator() = default;

std::optional<Element> Iterator::next() {
  STRATA_CHECK(impl_ != nullptr, InvalidArgument, "Iterator::next on a moved-from iterator");
  return impl_->next();
}
std::string Iterator::save_state() const {
  STRATA_CHECK(impl_ != nullptr, InvalidArgument, "Iterator::save_state on a moved-from iterator");
  return impl_->save_state();
}
void Iterator::restore_state(const std::string& state) {
  STRATA_CHECK(impl_ != nullptr, InvalidArgument, "Iterator::restore_state on a moved-from iterator");
  impl_->restore_state(state);
}

// ---- Dataset
Dataset::Dataset(std::shared_ptr<const DatasetNode> node) : node_(std::move(node)) {
  STRATA_CHECK(node_ != nullptr, InvalidArgument, "Dataset: null node");
}

Iterator Dataset::make_iterator() const { return Iterator(node_->make_iterator(), node_); }
int64_t Dataset::cardinality() const { return node_->cardinality(); }

Dataset Dataset::from_node(std::shared_ptr<const DatasetNode> node) { return Dataset(std::move(node)); }

Dataset Dataset::from_tensor_slices(std::vector<Tensor> tensors, std::vector<std::string> names) {
  return Dataset(detail::tensor_slices_node(std::move(tensors), std::move(names)));
}

Dataset Dataset::range(int64_t start, int64_t stop, int64_t step) {
  return Dataset(detail::range_node(start, stop, step));
}

Dataset Dataset::from_generator(std::function<std::function<std::optional<Element>()>()> make_generator,
                                int64_t cardinality) {
  return Dataset(detail::generator_node(std::move(make_generator), cardinality));
}

Dataset Dataset::list_files(const std::string& pattern, bool shuffle, std::optional<uint64_t> seed) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  STRATA_CHECK(rc == 0 || rc == GLOB_NOMATCH, IoError, "list_files: glob failed for '" << pattern << "'");
  STRATA_CHECK(!files.empty(), InvalidArgument, "list_files: no file matches '" << pattern << "'");
  std::sort(files.begin(), files.end());
  return Dataset(detail::files_node(std::move(files), shuffle, seed, "list_files"));
}

Dataset Dataset::from_files(std::vector<std::string> files) {
  return Dataset(detail::files_node(std::move(files), false, 0, "from_files"));
}

Dataset Dataset::from_idx(const std::string& directory, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  auto find = [&](const std::string& stem) {
    const std::string plain = directory + "/" + prefix + "-" + stem + "-ubyte";
    for (const std::string& p : {plain, plain + ".gz"})
      if (std::filesystem::exists(p)) return p;
    STRATA_THROW(IoError, "from_idx: neither " << plain << " nor " << plain << ".gz exists");
  };
  const std::string images_path = find("images-idx3"), labels_path = find("labels-idx1");
  Tensor images = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  STRATA_CHECK(images.rank() == 3, DataCorrupt,
               "from_idx: " << images_path << " should hold [N, rows, cols] images, got " << images.shape_str());
  STRATA_CHECK(labels.rank() == 1 && labels.dim(0) == images.dim(0), DataCorrupt,
               "from_idx: " << labels_path << " holds " << labels.shape_str() << " labels for " << images.dim(0)
                            << " images in " << images_path);
  images = images.reshape({images.dim(0), images.dim(1), images.dim(2), 1});
  return from_tensor_slices({images, labels.to(DType::kInt64)}, {"image", "label"});
}

Dataset Dataset::zip(std::vector<Dataset> datasets) {
  std::vector<NodePtr> nodes;
  for (const auto& d : datasets) nodes.push_back(d.node_);
  return Dataset(detail::zip_node(std::move(nodes)));
}

Dataset Dataset::map(std::function<Element(const Element&)> fn, MapOptions options) const {
  STRATA_CHECK(fn != nullptr, InvalidArgument, "map: no function given");
  if (options.num_parallel_calls == 1) return Dataset(detail::map_node(node_, std::move(fn)));
  return Dataset(detail::parallel_map_node(node_, std::move(fn),
                                           detail::resolve_parallelism(options.num_parallel_calls, "map"),
                                           options.deterministic));
}

Dataset Dataset::filter(std::function<bool(const Element&)> predicate) const {
  STRATA_CHECK(predicate != nullptr, InvalidArgument, "filter: no predicate given");
  return Dataset(detail::filter_node(node_, std::move(predicate)));
}

Dataset Dataset::shuffle(int64_t buffer_size, std::optional<uint64_t> seed, bool reshuffle_each_iteration) const {
  return Dataset(detail::shuffle_node(node_, buffer_size, seed, reshuffle_each_iteration));
}

Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  return Dataset(detail::batch_node(node_, batch_size, drop_remainder));
}

Dataset Dataset::padded_batch(int64_t batch_size, PaddedBatchOptions options) const {
  return Dataset(detail::padded_batch_node(node_, batch_size, std::move(options)));
}

Dataset Dataset::unbatch() const { return Dataset(detail::unbatch_node(node_)); }
Dataset Dataset::repeat(int64_t count) const { return Dataset(detail::repeat_node(node_, count)); }
Dataset Dataset::prefetch(int64_t buffer_size) const { return Dataset(detail::prefetch_node(node_, buffer_size)); }

Dataset Dataset::interleave(std::function<Dataset(const Element&)> fn, InterleaveOptions options) const {
  STRATA_CHECK(fn != nullptr, InvalidArgument, "interleave: no function given");
  return Dataset(detail::interleave_node(node_, std::move(fn), options));
}

Dataset Dataset::cache() const { return Dataset(detail::cache_node(node_, "")); }
Dataset Dataset::cache(const std::string& path) const {
  STRATA_CHECK(!path.empty(), InvalidArgument, "cache: empty file path (use cache() for memory)");
  return Dataset(detail::cache_node(node_, path));
}

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  return Dataset(detail::shard_node(node_, num_shards, index));
}
Dataset Dataset::take(int64_t count) const { return Dataset(detail::take_node(node_, count)); }
Dataset Dataset::skip(int64_t count) const { return Dataset(detail::skip_node(node_, count)); }
Dataset Dataset::enumerate(int64_t start) const { return Dataset(detail::enumerate_node(node_, start)); }

Dataset Dataset::with_options(const Options& options) const { return Dataset(detail::options_node(node_, options)); }

namespace {
// Depth first from the end of the pipeline: the outermost options stage.
const Options* find_options(const DatasetNode& node) {
  if (const Options* o = node.options()) return o;
  for (const auto& in : node.inputs())
    if (const Options* o = find_options(*in)) return o;
  return nullptr;
}
}  // namespace

Options Dataset::options() const {
  const Options* o = find_options(*node_);
  return o != nullptr ? *o : Options{};
}

}  // namespace strata::data
