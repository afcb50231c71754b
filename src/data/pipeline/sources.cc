// Sources: tensor slices, integer ranges, file lists (list_files / from_files) and generators.
// Thread-safety: nodes are immutable except for the files node's epoch counter (atomic).
#include <algorithm>
#include <atomic>
#include <random>

#include "data/pipeline/nodes.h"
#include "strata/random.h"
#include "strata/threading.h"

namespace strata::data::detail {

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

int64_t resolve_parallelism(int64_t n, const char* what) {
  if (n == kAutotune) return std::max(2, default_num_threads());
  STRATA_CHECK(n >= 1, InvalidArgument, what << ": want a positive count or kAutotune, got " << n);
  return n;
}

namespace {

// ---- from_tensor_slices
class SlicesNode : public DatasetNode {
 public:
  SlicesNode(std::vector<Tensor> tensors, std::vector<std::string> names) : tensors_(std::move(tensors)) {
    STRATA_CHECK(!tensors_.empty(), InvalidArgument, "from_tensor_slices: no tensors given");
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      STRATA_CHECK(t.defined() && t.rank() >= 1, InvalidArgument,
                   "from_tensor_slices: tensor " << i << " must have a first dimension, got "
                                                 << (t.defined() ? t.shape_str() : "an undefined tensor"));
      STRATA_CHECK(t.dim(0) == tensors_[0].dim(0), InvalidArgument,
                   "from_tensor_slices: tensor " << i << " " << t.shape_str() << " has " << t.dim(0)
                                                 << " rows but tensor 0 " << tensors_[0].shape_str() << " has "
                                                 << tensors_[0].dim(0));
      row_shapes_.emplace_back(t.shape().begin() + 1, t.shape().end());
    }
    if (!names.empty()) {
      Element probe(tensors_, std::move(names));  // validates count and duplicates
      names_ = probe.shared_names();
    }
  }
  std::string name() const override { return "from_tensor_slices"; }
  int64_t cardinality() const override { return tensors_[0].dim(0); }
  std::unique_ptr<IteratorImpl> make_iterator() const override;

  std::vector<Tensor> tensors_;
  std::vector<Shape> row_shapes_;
  std::shared_ptr<const std::vector<std::string>> names_;
};

class SlicesIterator : public IteratorImpl {
 public:
  explicit SlicesIterator(const SlicesNode* node) : node_(node), n_(node->cardinality()) {}
  std::optional<Element> next() override {
    if (i_ >= n_) return std::nullopt;
    std::vector<Tensor> comps;
    comps.reserve(node_->tensors_.size());
    for (size_t k = 0; k < node_->tensors_.size(); ++k)
      comps.push_back(node_->tensors_[k].slice(i_, i_ + 1).reshape(node_->row_shapes_[k]));
    ++i_;
    return Element(std::move(comps), node_->names_);
  }
  std::string save_state() const override { return StateWriter("from_tensor_slices").put_int("i", i_).str(); }
  void restore_state(const std::string& state) override {
    i_ = StateReader(state, "from_tensor_slices").get_int("i");
  }

 private:
  const SlicesNode* node_;  // kept alive by the Dataset's graph: iterators hold the root node
  int64_t n_;
  int64_t i_ = 0;
};

std::unique_ptr<IteratorImpl> SlicesNode::make_iterator() const { return std::make_unique<SlicesIterator>(this); }

// ---- range
class RangeNode : public DatasetNode {
 public:
  RangeNode(int64_t start, int64_t stop, int64_t step) : start_(start), stop_(stop), step_(step) {
    STRATA_CHECK(step != 0, InvalidArgument, "range: step must not be 0");
  }
  std::string name() const override { return "range"; }
  int64_t cardinality() const override {
    if (step_ > 0) return stop_ > start_ ? (stop_ - start_ + step_ - 1) / step_ : 0;
    return start_ > stop_ ? (start_ - stop_ - step_ - 1) / -step_ : 0;
  }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  int64_t start_, stop_, step_;
};

class RangeIterator : public IteratorImpl {
 public:
  explicit RangeIterator(const RangeNode* node) : node_(node), n_(node->cardinality()) {}
  std::optional<Element> next() override {
    if (i_ >= n_) return std::nullopt;
    Tensor t = Tensor::empty({}, DType::kInt64);
    *t.data<int64_t>() = node_->start_ + i_ * node_->step_;
    ++i_;
    std::vector<Tensor> comps;
    comps.push_back(std::move(t));
    return Element(std::move(comps), std::shared_ptr<const std::vector<std::string>>());
  }
  std::string save_state() const override { return StateWriter("range").put_int("i", i_).str(); }
  void restore_state(const std::string& state) override { i_ = StateReader(state, "range").get_int("i"); }

 private:
  const RangeNode* node_;
  int64_t n_;
  int64_t i_ = 0;
};

std::unique_ptr<IteratorImpl> RangeNode::make_iterator() const { return std::make_unique<RangeIterator>(this); }

// ---- list_files / from_files
class FilesNode : public DatasetNode {
 public:
  FilesNode(std::vector<std::string> files, bool shuffle, uint64_t seed, std::string origin)
      : files_(std::move(files)),
        shuffle_(shuffle),
        seed_(seed),
        origin_(std::move(origin)),
        names_(std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"filename"})) {}
  std::string name() const override { return origin_; }
  int64_t cardinality() const override { return static_cast<int64_t>(files_.size()); }
  std::optional<std::vector<std::string>> files() const override { return files_; }
  NodePtr with_files(std::vector<std::string> files) const override {
    return std::make_shared<FilesNode>(std::move(files), shuffle_, seed_, origin_);
  }
  std::unique_ptr<IteratorImpl> make_iterator() const override;

  // The order of iteration `epoch`: Fisher-Yates driven by Philox(seed, epoch).
  std::vector<int64_t> order(uint64_t epoch) const {
    std::vector<int64_t> idx(files_.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
    if (shuffle_) {
      Generator gen(seed_, epoch);
      for (size_t i = idx.size(); i > 1; --i) std::swap(idx[i - 1], idx[gen.uniform_int(i)]);
    }
    return idx;
  }
  void note_epoch(uint64_t epoch) const {
    uint64_t cur = next_epoch_.load();
    while (cur <= epoch && !next_epoch_.compare_exchange_weak(cur, epoch + 1)) {
    }
  }

  std::vector<std::string> files_;
  bool shuffle_;
  uint64_t seed_;
  std::string origin_;
  std::shared_ptr<const std::vector<std::string>> names_;
  mutable std::atomic<uint64_t> next_epoch_{0};
};

class FilesIterator : public IteratorImpl {
 public:
  explicit FilesIterator(const FilesNode* node)
      : node_(node), epoch_(node->shuffle_ ? node->next_epoch_.fetch_add(1) : 0), order_(node->order(epoch_)) {}
  std::optional<Element> next() override {
    if (i_ >= static_cast<int64_t>(order_.size())) return std::nullopt;
    std::vector<Tensor> comps;
    comps.push_back(string_tensor(node_->files_[static_cast<size_t>(order_[static_cast<size_t>(i_++)])]));
    return Element(std::move(comps), node_->names_);
  }
  std::string save_state() const override {
    return StateWriter("files").put_int("i", i_).put_uint("epoch", epoch_).str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, "files");
    i_ = r.get_int("i");
    epoch_ = r.get_uint("epoch");
    if (node_->shuffle_) node_->note_epoch(epoch_);
    order_ = node_->order(epoch_);
  }

 private:
  const FilesNode* node_;
  uint64_t epoch_;
  std::vector<int64_t> order_;
  int64_t i_ = 0;
};

std::unique_ptr<IteratorImpl> FilesNode::make_iterator() const { return std::make_unique<FilesIterator>(this); }

// ---- from_generator
using GeneratorFn = std::function<std::optional<Element>()>;
class GeneratorNode : public DatasetNode {
 public:
  GeneratorNode(std::function<GeneratorFn()> make, int64_t cardinality)
      : make_(std::move(make)), cardinality_(cardinality) {}
  std::string name() const override { return "from_generator"; }
  int64_t cardinality() const override { return cardinality_; }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  std::function<GeneratorFn()> make_;
  int64_t cardinality_;
};

class GeneratorIterator : public IteratorImpl {
 public:
  explicit GeneratorIterator(const GeneratorNode* node) : node_(node), fn_(node->make_()) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    auto e = fn_();
    if (!e) {
      done_ = true;
      return std::nullopt;
    }
    ++count_;
    return e;
  }
  std::string save_state() const override { return StateWriter("from_generator").put_int("count", count_).str(); }
  void restore_state(const std::string& state) override {
    const int64_t target = StateReader(state, "from_generator").get_int("count");
    fn_ = node_->make_();
    count_ = 0;
    done_ = false;
    while (count_ < target) {
      STRATA_CHECK(next().has_value(), InvalidArgument,
                   "from_generator: the state is at element " << target << " but the generator ends after "
                                                              << count_);
    }
  }

 private:
  const GeneratorNode* node_;
  GeneratorFn fn_;
  int64_t count_ = 0;
  bool done_ = false;
};

std::unique_ptr<IteratorImpl> GeneratorNode::make_iterator() const {
  return std::make_unique<GeneratorIterator>(this);
}

}  // namespace

NodePtr tensor_slices_node(std::vector<Tensor> tensors, std::vector<std::string> names) {
  return std::make_shared<SlicesNode>(std::move(tensors), std::move(names));
}
NodePtr range_node(int64_t start, int64_t stop, int64_t step) { return std::make_shared<RangeNode>(start, stop, step); }
NodePtr files_node(std::vector<std::string> files, bool shuffle, std::optional<uint64_t> seed, std::string origin) {
  return std::make_shared<FilesNode>(std::move(files), shuffle, seed ? *seed : random_seed(), std::move(origin));
}
NodePtr generator_node(std::function<GeneratorFn()> make, int64_t cardinality) {
  STRATA_CHECK(make != nullptr, InvalidArgument, "from_generator: no generator function given");
  return std::make_shared<GeneratorNode>(std::move(make), cardinality);
}

}  // namespace strata::data::detail
