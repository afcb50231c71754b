// One-input transformations that run on the caller's thread: map, filter, take, skip, shard, repeat,
// enumerate; and zip.
// Thread-safety: nodes are immutable; each iterator is used by one thread at a time.
#include <algorithm>

#include "data/pipeline/nodes.h"

namespace strata::data::detail {

namespace {

using MapFn = std::function<Element(const Element&)>;

// ---- map
class MapNode : public UnaryNode {
 public:
  MapNode(NodePtr in, MapFn fn) : UnaryNode(std::move(in)), fn_(std::move(fn)) {}
  std::string name() const override { return "map"; }
  int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<MapNode>(std::move(in), fn_); }
  MapFn fn_;
};

class MapIterator : public IteratorImpl {
 public:
  explicit MapIterator(const MapNode* node) : node_(node), in_(node->input()->make_iterator()) {}
  std::optional<Element> next() override {
    auto e = in_->next();
    if (!e) return std::nullopt;
    return node_->fn_(*e);
  }
  std::string save_state() const override { return StateWriter("map").put("input", in_->save_state()).str(); }
  void restore_state(const std::string& state) override { in_->restore_state(StateReader(state, "map").get("input")); }

 private:
  const MapNode* node_;
  std::unique_ptr<IteratorImpl> in_;
};
std::unique_ptr<IteratorImpl> MapNode::make_iterator() const { return std::make_unique<MapIterator>(this); }

// ---- filter
using Predicate = std::function<bool(const Element&)>;
class FilterNode : public UnaryNode {
 public:
  FilterNode(NodePtr in, Predicate p) : UnaryNode(std::move(in)), predicate_(std::move(p)) {}
  std::string name() const override { return "filter"; }
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    return n == kInfiniteCardinality ? n : kUnknownCardinality;
  }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<FilterNode>(std::move(in), predicate_); }
  Predicate predicate_;
};

class FilterIterator : public IteratorImpl {
 public:
  explicit FilterIterator(const FilterNode* node) : node_(node), in_(node->input()->make_iterator()) {}
  std::optional<Element> next() override {
    while (auto e = in_->next())
      if (node_->predicate_(*e)) return e;
    return std::nullopt;
  }
  std::string save_state() const override { return StateWriter("filter").put("input", in_->save_state()).str(); }
  void restore_state(const std::string& state) override {
    in_->restore_state(StateReader(state, "filter").get("input"));
  }

 private:
  const FilterNode* node_;
  std::unique_ptr<IteratorImpl> in_;
};
std::unique_ptr<IteratorImpl> FilterNode::make_iterator() const { return std::make_unique<FilterIterator>(this); }

// ---- take / skip / shard: a counter over the input
enum class CountKind { kTake, kSkip, kShard };
const char* kind_name(CountKind k) { return k == CountKind::kTake ? "take" : k == CountKind::kSkip ? "skip" : "shard"; }

class CountNode : public UnaryNode {
 public:
  CountNode(NodePtr in, CountKind kind, int64_t a, int64_t b) : UnaryNode(std::move(in)), kind_(kind), a_(a), b_(b) {}
  std::string name() const override { return kind_name(kind_); }
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    switch (kind_) {
      case CountKind::kTake:
        if (a_ < 0) return n;
        if (n == kInfiniteCardinality) return a_;
        if (n == kUnknownCardinality) return n;
        return std::min(n, a_);
      case CountKind::kSkip:
        if (n < 0) return n;
        if (a_ < 0) return 0;
        return std::max<int64_t>(0, n - a_);
      case CountKind::kShard:
        if (n < 0) return n;
        return n > b_ ? (n - b_ + a_ - 1) / a_ : 0;
    }
    return kUnknownCardinality;
  }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<CountNode>(std::move(in), kind_, a_, b_); }
  CountKind kind_;
  int64_t a_, b_;  // take/skip: count; shard: num_shards, index
};

class CountIterator : public IteratorImpl {
 public:
  explicit CountIterator(const CountNode* node) : node_(node), in_(node->input()->make_iterator()) {}
  std::optional<Element> next() override {
    switch (node_->kind_) {
      case CountKind::kTake:
        if (node_->a_ >= 0 && seen_ >= node_->a_) return std::nullopt;
        ++seen_;
        return in_->next();
      case CountKind::kSkip:
        while (node_->a_ < 0 || seen_ < node_->a_) {
          if (!in_->next()) return std::nullopt;
          ++seen_;
        }
        return in_->next();
      case CountKind::kShard:
        while (true) {
          auto e = in_->next();
          if (!e) return std::nullopt;
          const int64_t i = seen_++;
          if (i % node_->a_ == node_->b_) return e;
        }
    }
    return std::nullopt;
  }
  std::string save_state() const override {
    return StateWriter(kind_name(node_->kind_)).put_int("seen", seen_).put("input", in_->save_state()).str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, kind_name(node_->kind_));
    seen_ = r.get_int("seen");
    in_->restore_state(r.get("input"));
  }

 private:
  const CountNode* node_;
  std::unique_ptr<IteratorImpl> in_;
  int64_t seen_ = 0;
};
std::unique_ptr<IteratorImpl> CountNode::make_iterator() const { return std::make_unique<CountIterator>(this); }

// ---- repeat
class RepeatNode : public UnaryNode {
 public:
  RepeatNode(NodePtr in, int64_t count) : UnaryNode(std::move(in)), count_(count) {}
  std::string name() const override { return "repeat"; }
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    if (n == 0 || count_ == 0) return 0;
    if (n == kInfiniteCardinality) return n;
    if (count_ < 0) return n == kUnknownCardinality ? n : kInfiniteCardinality;
    return n < 0 ? n : n * count_;
  }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<RepeatNode>(std::move(in), count_); }
  int64_t count_;
};

class RepeatIterator : public IteratorImpl {
 public:
  explicit RepeatIterator(const RepeatNode* node) : node_(node) {}
  std::optional<Element> next() override {
    while (true) {
      if (!in_) {
        if (done_ || (node_->count_ >= 0 && epoch_ >= node_->count_)) return std::nullopt;
        in_ = node_->input()->make_iterator();
        produced_in_epoch_ = false;
      }
      auto e = in_->next();
      if (e) {
        produced_in_epoch_ = true;
        return e;
      }
      in_.reset();
      ++epoch_;
      if (!produced_in_epoch_) {  // an empty input would repeat forever
        done_ = true;
        return std::nullopt;
      }
    }
  }
  std::string save_state() const override {
    StateWriter w("repeat");
    w.put_int("epoch", epoch_).put_int("done", done_).put_int("produced", produced_in_epoch_);
    if (in_) w.put("input", in_->save_state());
    return w.str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, "repeat");
    epoch_ = r.get_int("epoch");
    done_ = r.get_int("done") != 0;
    produced_in_epoch_ = r.get_int("produced") != 0;
    in_.reset();
    if (r.has("input")) {
      in_ = node_->input()->make_iterator();
      in_->restore_state(r.get("input"));
    }
  }

 private:
  const RepeatNode* node_;
  std::unique_ptr<IteratorImpl> in_;
  int64_t epoch_ = 0;
  bool produced_in_epoch_ = false;
  bool done_ = false;
};
std::unique_ptr<IteratorImpl> RepeatNode::make_iterator() const { return std::make_unique<RepeatIterator>(this); }

// ---- enumerate
class EnumerateNode : public UnaryNode {
 public:
  EnumerateNode(NodePtr in, int64_t start) : UnaryNode(std::move(in)), start_(start) {}
  std::string name() const override { return "enumerate"; }
  int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<EnumerateNode>(std::move(in), start_); }
  int64_t start_;
};

class EnumerateIterator : public IteratorImpl {
 public:
  explicit EnumerateIterator(const EnumerateNode* node)
      : node_(node), in_(node->input()->make_iterator()), i_(node->start_) {}
  std::optional<Element> next() override {
    auto e = in_->next();
    if (!e) return std::nullopt;
    Tensor idx = Tensor::empty({}, DType::kInt64);
    *idx.data<int64_t>() = i_++;
    std::vector<Tensor> comps;
    comps.reserve(e->size() + 1);
    comps.push_back(std::move(idx));
    for (auto& t : e->mutable_components()) comps.push_back(std::move(t));
    if (e->names().empty()) return Element(std::move(comps), std::shared_ptr<const std::vector<std::string>>());
    if (names_for_ != e->shared_names()) {  // one name list per input name list
      names_for_ = e->shared_names();
      std::vector<std::string> names = {"index"};
      names.insert(names.end(), e->names().begin(), e->names().end());
      names_ = Element(comps, std::move(names)).shared_names();
    }
    return Element(std::move(comps), names_);
  }
  std::string save_state() const override {
    return StateWriter("enumerate").put_int("i", i_).put("input", in_->save_state()).str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, "enumerate");
    i_ = r.get_int("i");
    in_->restore_state(r.get("input"));
  }

 private:
  const EnumerateNode* node_;
  std::unique_ptr<IteratorImpl> in_;
  int64_t i_;
  std::shared_ptr<const std::vector<std::string>> names_for_, names_;
};
std::unique_ptr<IteratorImpl> EnumerateNode::make_iterator() const {
  return std::make_unique<EnumerateIterator>(this);
}

// ---- zip
class ZipNode : public DatasetNode {
 public:
  explicit ZipNode(std::vector<NodePtr> inputs) : inputs_(std::move(inputs)) {
    STRATA_CHECK(!inputs_.empty(), InvalidArgument, "zip: no datasets given");
  }
  std::string name() const override { return "zip"; }
  int64_t cardinality() const override {
    int64_t out = kInfiniteCardinality;
    bool unknown = false;
    for (const auto& in : inputs_) {
      const int64_t n = in->cardinality();
      if (n == kUnknownCardinality) unknown = true;
      else if (n >= 0) out = out < 0 ? n : std::min(out, n);
    }
    if (out >= 0 && !unknown) return out;
    return unknown ? kUnknownCardinality : out;
  }
  std::vector<NodePtr> inputs() const override { return inputs_; }
  NodePtr with_inputs(std::vector<NodePtr> inputs) const override {
    STRATA_CHECK(inputs.size() == inputs_.size(), InvalidArgument, "zip: with_inputs wants " << inputs_.size());
    return std::make_shared<ZipNode>(std::move(inputs));
  }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  std::vector<NodePtr> inputs_;
};

class ZipIterator : public IteratorImpl {
 public:
  explicit ZipIterator(const ZipNode* node) {
    for (const auto& in : node->inputs_) ins_.push_back(in->make_iterator());
  }
  std::optional<Element> next() override {
    std::vector<Tensor> comps;
    std::vector<std::string> names;
    bool any_name = false;
    for (auto& in : ins_) {
      auto e = in->next();
      if (!e) return std::nullopt;
      for (size_t i = 0; i < e->size(); ++i) {
        comps.push_back(e->components()[i]);
        names.push_back(e->names().empty() ? std::string() : e->names()[i]);
        any_name = any_name || !names.back().empty();
      }
    }
    if (!any_name) return Element(std::move(comps), std::shared_ptr<const std::vector<std::string>>());
    if (!names_ || *names_ != names) names_ = Element(comps, std::move(names)).shared_names();
    return Element(std::move(comps), names_);
  }
  std::string save_state() const override {
    StateWriter w("zip");
    w.put_int("n", static_cast<int64_t>(ins_.size()));
    for (size_t i = 0; i < ins_.size(); ++i) w.put("input" + std::to_string(i), ins_[i]->save_state());
    return w.str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, "zip");
    STRATA_CHECK(r.get_int("n") == static_cast<int64_t>(ins_.size()), InvalidArgument,
                 "restore_state: the zip state has " << r.get_int("n") << " inputs, this zip " << ins_.size());
    for (size_t i = 0; i < ins_.size(); ++i) ins_[i]->restore_state(r.get("input" + std::to_string(i)));
  }

 private:
  std::vector<std::unique_ptr<IteratorImpl>> ins_;
  std::shared_ptr<const std::vector<std::string>> names_;
};
std::unique_ptr<IteratorImpl> ZipNode::make_iterator() const { return std::make_unique<ZipIterator>(this); }

}  // namespace

NodePtr map_node(NodePtr in, MapFn fn) { return std::make_shared<MapNode>(std::move(in), std::move(fn)); }
NodePtr filter_node(NodePtr in, Predicate p) { return std::make_shared<FilterNode>(std::move(in), std::move(p)); }
NodePtr take_node(NodePtr in, int64_t count) {
  return std::make_shared<CountNode>(std::move(in), CountKind::kTake, count, 0);
}
NodePtr skip_node(NodePtr in, int64_t count) {
  return std::make_shared<CountNode>(std::move(in), CountKind::kSkip, count, 0);
}
NodePtr shard_node(NodePtr in, int64_t num_shards, int64_t index) {
  STRATA_CHECK(num_shards >= 1, InvalidArgument, "shard: num_shards must be >= 1, got " << num_shards);
  STRATA_CHECK(index >= 0 && index < num_shards, InvalidArgument,
               "shard: index " << index << " is outside [0, " << num_shards << ")");
  return std::make_shared<CountNode>(std::move(in), CountKind::kShard, num_shards, index);
}
NodePtr repeat_node(NodePtr in, int64_t count) { return std::make_shared<RepeatNode>(std::move(in), count); }

namespace {
// ---- options: iterates as its input (same iterator, same state), carrying the options.
class OptionsNode : public UnaryNode {
 public:
  OptionsNode(NodePtr in, Options options) : UnaryNode(std::move(in)), options_(options) {}
  std::string name() const override { return "options"; }
  int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator() const override { return input_->make_iterator(); }
  const Options* options() const override { return &options_; }
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<OptionsNode>(std::move(in), options_); }

 private:
  Options options_;
};
}  // namespace

NodePtr options_node(NodePtr in, Options options) { return std::make_shared<OptionsNode>(std::move(in), options); }
NodePtr enumerate_node(NodePtr in, int64_t start) { return std::make_shared<EnumerateNode>(std::move(in), start); }
NodePtr zip_node(std::vector<NodePtr> inputs) { return std::make_shared<ZipNode>(std::move(inputs)); }

}  // namespace strata::data::detail
