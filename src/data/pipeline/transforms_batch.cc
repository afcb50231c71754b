// batch, padded_batch and unbatch. batch copies each element straight into one preallocated tensor
// per component (no intermediate list); unbatch hands out views of its input's rows.
// Thread-safety: nodes are immutable; each iterator is used by one thread at a time.
#include <cstring>

#include "data/pipeline/nodes.h"
#include "data/pipeline/rows.h"

namespace strata::data::detail {

namespace {

std::string component_name(const Element& e, size_t i) {
  if (!e.names().empty() && !e.names()[i].empty()) return "'" + e.names()[i] + "'";
  return std::to_string(i);
}

void check_host(const Tensor& t, const char* op, const Element& e, size_t i) {
  STRATA_CHECK(t.defined() && t.device().is_cpu(), InvalidArgument,
               op << ": component " << component_name(e, i) << " of " << e.str() << " is not a host tensor");
}

// Shape equality without a library call (batch checks every element; ranks are tiny).
bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

int64_t batch_cardinality(int64_t n, int64_t b, bool drop) {
  if (n < 0) return n;
  return drop ? n / b : (n + b - 1) / b;
}

// ---- batch
class BatchNode : public UnaryNode {
 public:
  BatchNode(NodePtr in, int64_t b, bool drop) : UnaryNode(std::move(in)), batch_(b), drop_(drop) {
    STRATA_CHECK(b >= 1, InvalidArgument, "batch: batch_size must be >= 1, got " << b);
  }
  std::string name() const override { return "batch"; }
  int64_t cardinality() const override { return batch_cardinality(input_->cardinality(), batch_, drop_); }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<BatchNode>(std::move(in), batch_, drop_); }
  std::optional<int64_t> batch_size() const override { return batch_; }
  NodePtr with_batch_size(int64_t b) const override { return std::make_shared<BatchNode>(input_, b, drop_); }
  int64_t batch_;
  bool drop_;
};

class BatchIterator : public IteratorImpl {
 public:
  explicit BatchIterator(const BatchNode* node)
      : node_(node), in_(node->input()->make_iterator()), in_rows_(dynamic_cast<RowIterator*>(in_.get())) {}
  std::optional<Element> next() override {
    if (ended_) return std::nullopt;
    auto first = in_->next();
    if (!first) {
      ended_ = true;
      return std::nullopt;
    }
    const int64_t b = node_->batch_;
    const size_t nc = first->size();
    std::vector<Tensor> out;
    out.reserve(nc);
    for (size_t i = 0; i < nc; ++i) {
      const Tensor& t = first->components()[i];
      check_host(t, "batch", *first, i);
      Shape s;
      s.reserve(t.shape().size() + 1);
      s.push_back(b);
      s.insert(s.end(), t.shape().begin(), t.shape().end());
      out.push_back(Tensor::empty(s, t.dtype()));
      std::memcpy(out.back().raw_data(), t.raw_data(), t.nbytes());
    }
    // Elements of the first one's structure are written by the input straight into their rows.
    const bool rows = in_rows_ && layout_.assign(*first);
    dst_.resize(nc);
    int64_t k = 1;
    for (; k < b; ++k) {
      if (rows) {
        for (size_t i = 0; i < nc; ++i)
          dst_[i] = static_cast<char*>(out[i].raw_data()) + static_cast<size_t>(k) * layout_.bytes[i];
        const RowIterator::Result r = in_rows_->next_row(layout_, dst_.data());
        if (r == RowIterator::Result::kRow) continue;
        if (r == RowIterator::Result::kEnd) {
          ended_ = true;
          break;
        }
      }
      auto e = in_->next();
      if (!e) {
        ended_ = true;
        break;
      }
      STRATA_CHECK(e->size() == nc, InvalidArgument,
                   "batch: element " << k << " of a batch has " << e->size() << " components " << e->str()
                                     << " but element 0 has " << nc << " " << first->str());
      for (size_t i = 0; i < nc; ++i) {
        const Tensor& t = e->components()[i];
        const Tensor& f = first->components()[i];
        check_host(t, "batch", *e, i);
        STRATA_CHECK(t.dtype() == f.dtype() && same_shape(t.shape(), f.shape()), ShapeError,
                     "batch: component " << component_name(*first, i) << " of element " << k << " is "
                                         << dtype_name(t.dtype()) << " " << t.shape_str() << " but element 0's is "
                                         << dtype_name(f.dtype()) << " " << f.shape_str()
                                         << " (use padded_batch for varying shapes)");
        const size_t nb = t.nbytes();
        std::memcpy(static_cast<char*>(out[i].raw_data()) + static_cast<size_t>(k) * nb, t.raw_data(), nb);
      }
    }
    if (k < b) {
      if (node_->drop_) return std::nullopt;
      for (auto& t : out) t = t.slice(0, k);
    }
    return Element(std::move(out), first->shared_names());
  }
  std::string save_state() const override {
    return StateWriter("batch").put_int("ended", ended_).put("input", in_->save_state()).str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, "batch");
    ended_ = r.get_int("ended") != 0;
    in_->restore_state(r.get("input"));
  }

 private:
  const BatchNode* node_;
  std::unique_ptr<IteratorImpl> in_;
  RowIterator* in_rows_;  // in_ when it can write rows, else null
  RowLayout layout_;      // the current batch's element structure
  std::vector<char*> dst_;
  bool ended_ = false;
};
std::unique_ptr<IteratorImpl> BatchNode::make_iterator() const { return std::make_unique<BatchIterator>(this); }

// ---- padded_batch
// Copies `src` into the leading corner of `dst` (same rank, dst at least as large in every dimension).
void copy_padded(const char* src, const Shape& ss, char* dst, const Shape& ds, size_t esize, size_t axis) {
  if (axis + 1 >= ss.size()) {
    if (!ss.empty()) std::memcpy(dst, src, static_cast<size_t>(ss.back()) * esize);
    else std::memcpy(dst, src, esize);
    return;
  }
  size_t src_stride = esize, dst_stride = esize;
  for (size_t a = axis + 1; a < ss.size(); ++a) {
    src_stride *= static_cast<size_t>(ss[a]);
    dst_stride *= static_cast<size_t>(ds[a]);
  }
  for (int64_t i = 0; i < ss[axis]; ++i)
    copy_padded(src + static_cast<size_t>(i) * src_stride, ss, dst + static_cast<size_t>(i) * dst_stride, ds, esize,
                axis + 1);
}

class PaddedBatchNode : public UnaryNode {
 public:
  PaddedBatchNode(NodePtr in, int64_t b, PaddedBatchOptions o) : UnaryNode(std::move(in)), batch_(b), opt_(std::move(o)) {
    STRATA_CHECK(b >= 1, InvalidArgument, "padded_batch: batch_size must be >= 1, got " << b);
  }
  std::string name() const override { return "padded_batch"; }
  int64_t cardinality() const override { return batch_cardinality(input_->cardinality(), batch_, opt_.drop_remainder); }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<PaddedBatchNode>(std::move(in), batch_, opt_); }
  std::optional<int64_t> batch_size() const override { return batch_; }
  NodePtr with_batch_size(int64_t b) const override { return std::make_shared<PaddedBatchNode>(input_, b, opt_); }
  int64_t batch_;
  PaddedBatchOptions opt_;
};

class PaddedBatchIterator : public IteratorImpl {
 public:
  explicit PaddedBatchIterator(const PaddedBatchNode* node) : node_(node), in_(node->input()->make_iterator()) {}
  std::optional<Element> next() override {
    if (ended_) return std::nullopt;
    std::vector<Element> items;
    items.reserve(static_cast<size_t>(node_->batch_));
    while (static_cast<int64_t>(items.size()) < node_->batch_) {
      auto e = in_->next();
      if (!e) {
        ended_ = true;
        break;
      }
      items.push_back(std::move(*e));
    }
    if (items.empty() || (node_->opt_.drop_remainder && static_cast<int64_t>(items.size()) < node_->batch_))
      return std::nullopt;
    const Element& first = items[0];
    const size_t nc = first.size();
    const auto& o = node_->opt_;
    STRATA_CHECK(o.padded_shapes.empty() || o.padded_shapes.size() == nc, InvalidArgument,
                 "padded_batch: " << o.padded_shapes.size() << " padded shapes for elements of " << nc
                                  << " components " << first.str());
    STRATA_CHECK(o.padding_values.empty() || o.padding_values.size() == nc, InvalidArgument,
                 "padded_batch: " << o.padding_values.size() << " padding values for elements of " << nc
                                  << " components " << first.str());
    std::vector<Tensor> out;
    for (size_t c = 0; c < nc; ++c) {
      const Tensor& f = first.components()[c];
      Shape target = f.shape();
      for (size_t k = 0; k < items.size(); ++k) {
        STRATA_CHECK(items[k].size() == nc, InvalidArgument,
                     "padded_batch: element " << k << " has " << items[k].size() << " components, element 0 has " << nc);
        const Tensor& t = items[k].components()[c];
        check_host(t, "padded_batch", items[k], c);
        STRATA_CHECK(t.dtype() == f.dtype() && t.rank() == f.rank(), ShapeError,
                     "padded_batch: component " << component_name(first, c) << " of element " << k << " is "
                                                << dtype_name(t.dtype()) << " " << t.shape_str()
                                                << " but element 0's is " << dtype_name(f.dtype()) << " "
                                                << f.shape_str() << " (ranks and dtypes must agree)");
        for (int a = 0; a < t.rank(); ++a) target[a] = std::max(target[a], t.dim(a));
      }
      if (!o.padded_shapes.empty()) {
        const Shape& want = o.padded_shapes[c];
        STRATA_CHECK(static_cast<int>(want.size()) == f.rank(), ShapeError,
                     "padded_batch: padded shape " << shape_str(want) << " for component " << component_name(first, c)
                                                   << " of rank " << f.rank());
        for (size_t a = 0; a < want.size(); ++a) {
          if (want[a] < 0) continue;
          STRATA_CHECK(want[a] >= target[a], ShapeError,
                       "padded_batch: component " << component_name(first, c) << " has size " << target[a]
                                                  << " in dimension " << a << ", larger than its padded shape "
                                                  << shape_str(want));
          target[a] = want[a];
        }
      }
      Shape s = {static_cast<int64_t>(items.size())};
      s.insert(s.end(), target.begin(), target.end());
      Tensor batch = Tensor::full(s, o.padding_values.empty() ? 0.0 : o.padding_values[c], f.dtype());
      const size_t row = static_cast<size_t>(shape_numel(target)) * dtype_size(f.dtype());
      for (size_t k = 0; k < items.size(); ++k) {
        const Tensor& t = items[k].components()[c];
        copy_padded(static_cast<const char*>(t.raw_data()), t.shape(), static_cast<char*>(batch.raw_data()) + k * row,
                    target, dtype_size(f.dtype()), 0);
      }
      out.push_back(std::move(batch));
    }
    return Element(std::move(out), first.shared_names());
  }
  std::string save_state() const override {
    return StateWriter("padded_batch").put_int("ended", ended_).put("input", in_->save_state()).str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, "padded_batch");
    ended_ = r.get_int("ended") != 0;
    in_->restore_state(r.get("input"));
  }

 private:
  const PaddedBatchNode* node_;
  std::unique_ptr<IteratorImpl> in_;
  bool ended_ = false;
};
std::unique_ptr<IteratorImpl> PaddedBatchNode::make_iterator() const {
  return std::make_unique<PaddedBatchIterator>(this);
}

// ---- unbatch
class UnbatchNode : public UnaryNode {
 public:
  explicit UnbatchNode(NodePtr in) : UnaryNode(std::move(in)) {}
  std::string name() const override { return "unbatch"; }
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    return n == kInfiniteCardinality || n == 0 ? n : kUnknownCardinality;
  }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<UnbatchNode>(std::move(in)); }
};

class UnbatchIterator : public IteratorImpl {
 public:
  explicit UnbatchIterator(const UnbatchNode* node) : in_(node->input()->make_iterator()) {}
  std::optional<Element> next() override {
    while (!current_ || row_ >= rows_) {
      current_ = in_->next();
      if (!current_) return std::nullopt;
      set_current();
    }
    std::vector<Tensor> comps;
    comps.reserve(current_->size());
    for (size_t i = 0; i < current_->size(); ++i)
      comps.push_back(current_->components()[i].slice(row_, row_ + 1).reshape(row_shapes_[i]));
    ++row_;
    return Element(std::move(comps), current_->shared_names());
  }
  std::string save_state() const override {
    StateWriter w("unbatch");
    w.put("input", in_->save_state()).put_int("row", row_);
    if (current_) w.put_element("current", *current_);
    return w.str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, "unbatch");
    in_->restore_state(r.get("input"));
    current_.reset();
    if (r.has("current")) {
      current_ = r.get_element("current");
      set_current();
    }
    row_ = r.get_int("row");
  }

 private:
  void set_current() {
    row_ = 0;
    rows_ = -1;
    row_shapes_.clear();
    for (size_t i = 0; i < current_->size(); ++i) {
      const Tensor& t = current_->components()[i];
      STRATA_CHECK(t.defined() && t.rank() >= 1, InvalidArgument,
                   "unbatch: component " << component_name(*current_, i) << " of " << current_->str()
                                         << " has no first dimension");
      STRATA_CHECK(rows_ < 0 || t.dim(0) == rows_, ShapeError,
                   "unbatch: the components of " << current_->str() << " disagree on their first dimension");
      rows_ = t.dim(0);
      row_shapes_.emplace_back(t.shape().begin() + 1, t.shape().end());
    }
    if (rows_ < 0) rows_ = 0;
  }

  std::unique_ptr<IteratorImpl> in_;
  std::optional<Element> current_;
  std::vector<Shape> row_shapes_;
  int64_t row_ = 0, rows_ = 0;
};
std::unique_ptr<IteratorImpl> UnbatchNode::make_iterator() const { return std::make_unique<UnbatchIterator>(this); }

}  // namespace

NodePtr batch_node(NodePtr in, int64_t batch_size, bool drop_remainder) {
  return std::make_shared<BatchNode>(std::move(in), batch_size, drop_remainder);
}
NodePtr padded_batch_node(NodePtr in, int64_t batch_size, PaddedBatchOptions options) {
  return std::make_shared<PaddedBatchNode>(std::move(in), batch_size, std::move(options));
}
NodePtr unbatch_node(NodePtr in) { return std::make_shared<UnbatchNode>(std::move(in)); }

}  // namespace strata::data::detail
