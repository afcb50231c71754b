// shuffle (tf.data's buffer algorithm driven by Philox) and cache (memory or file).
//
// shuffle: fill a buffer of `buffer_size` elements; each next() draws a uniform slot, hands out its
// element and refills the slot from the input. The generator is Philox(seed, epoch) where epoch
// counts the iterators made of this dataset (so `repeat` reshuffles) unless reshuffle_each_iteration
// is false. The state holds the buffer, the generator's offset and the epoch.
//
// cache: the first iteration that runs to its end publishes its elements (memory) or renames its
// temporary file into place (file); later iterators read those. An iteration abandoned or restored
// mid-way publishes nothing, so a cache never holds a partial epoch.
//
// Thread-safety: the shuffle node's epoch counter is atomic; the memory cache is guarded by a mutex.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <unistd.h>

#include "data/pipeline/nodes.h"
#include "data/pipeline/shuffle_buffer.h"
#include "strata/random.h"

namespace strata::data::detail {

namespace {

// "b17": built with append (GCC 12 misreports `slot_key(i)` under -Wrestrict).
std::string slot_key(size_t i) {
  std::string key = "b";
  key += std::to_string(i);
  return key;
}

// ---- shuffle
class ShuffleNode : public UnaryNode {
 public:
  ShuffleNode(NodePtr in, int64_t buffer, uint64_t seed, bool reshuffle)
      : UnaryNode(std::move(in)), buffer_(buffer), seed_(seed), reshuffle_(reshuffle) {}
  std::string name() const override { return "shuffle"; }
  int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override {
    return std::make_shared<ShuffleNode>(std::move(in), buffer_, seed_, reshuffle_);
  }
  uint64_t take_epoch() const { return reshuffle_ ? next_epoch_.fetch_add(1) : 0; }
  void note_epoch(uint64_t epoch) const {
    uint64_t cur = next_epoch_.load();
    while (reshuffle_ && cur <= epoch && !next_epoch_.compare_exchange_weak(cur, epoch + 1)) {
    }
  }

  int64_t buffer_;
  uint64_t seed_;
  bool reshuffle_;
  mutable std::atomic<uint64_t> next_epoch_{0};
};

class ShuffleIterator : public IteratorImpl, public RowIterator {
 public:
  explicit ShuffleIterator(const ShuffleNode* node)
      : node_(node),
        in_(node->input()->make_iterator()),
        in_rows_(dynamic_cast<RowIterator*>(in_.get())),
        epoch_(node->take_epoch()),
        gen_(node->seed_, epoch_),
        buffer_(static_cast<size_t>(node->buffer_)) {}
  std::optional<Element> next() override {
    fill();
    if (buffer_.empty()) return std::nullopt;
    const size_t i = draw();
    Element out = buffer_.take(i);
    refill(i);
    return out;
  }
  Result next_row(const RowLayout& layout, char* const* dst) override {
    fill();
    if (buffer_.empty()) return Result::kEnd;
    if (!buffer_.layout() || !same_layout_(layout, *buffer_.layout())) return Result::kElement;
    const size_t i = draw();
    buffer_.copy_row(i, dst);
    refill(i);
    return Result::kRow;
  }
  std::string save_state() const override {
    StateWriter w("shuffle");
    const Generator::State& s = ahead_ > 0 ? drawn_[0].before : gen_.state();
    w.put_uint("epoch", epoch_).put_uint("seed", s.seed).put_uint("stream", s.stream).put_uint("offset", s.offset);
    w.put_int("input_done", input_done_).put("input", in_->save_state());
    w.put_int("buffered", static_cast<int64_t>(buffer_.size()));
    for (size_t i = 0; i < buffer_.size(); ++i) w.put_element(slot_key(i), buffer_.at(i));
    return w.str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, "shuffle");
    epoch_ = r.get_uint("epoch");
    node_->note_epoch(epoch_);
    gen_.set_state({r.get_uint("seed"), r.get_uint("stream"), r.get_uint("offset")});
    input_done_ = r.get_int("input_done") != 0;
    ahead_ = 0;
    in_->restore_state(r.get("input"));
    buffer_.clear();
    const int64_t n = r.get_int("buffered");
    for (int64_t i = 0; i < n; ++i) buffer_.push_back(r.get_element(slot_key(static_cast<size_t>(i))));
  }

 private:
  // The next element of the input: written straight into a new last slot when the buffer holds rows
  // and the input can, else through next().
  void fill() {
    while (!input_done_ && static_cast<int64_t>(buffer_.size()) < node_->buffer_) {
      if (in_rows_ && buffer_.layout()) {
        buffer_.append_row();
        Result r;
        try {
          r = in_rows_->next_row(*buffer_.layout(), buffer_.row_pointers(buffer_.size() - 1).data());
        } catch (...) {
          buffer_.pop_row();
          throw;
        }
        if (r == Result::kRow) continue;
        buffer_.pop_row();
        if (r == Result::kEnd) {
          input_done_ = true;
          break;
        }
      }
      auto e = in_->next();
      if (!e) {
        input_done_ = true;
        break;
      }
      buffer_.push_back(std::move(*e));
    }
  }
  // The slot this call hands out.
  size_t draw() {
    if (ahead_ > 0 && drawn_[0].range == buffer_.size()) {
      const size_t i = drawn_[0].slot;
      drawn_[0] = drawn_[1];
      --ahead_;
      return i;
    }
    if (ahead_ > 0) gen_.set_state(drawn_[0].before);
    ahead_ = 0;
    return static_cast<size_t>(gen_.uniform_int(buffer_.size()));
  }
  // Refills slot i (just handed out) from the input, or drops it when the input has ended.
  void refill(size_t i) {
    while (!input_done_) {
      if (in_rows_ && buffer_.layout()) {
        const Result r = in_rows_->next_row(*buffer_.layout(), buffer_.row_pointers(i).data());
        if (r == Result::kRow) break;
        if (r == Result::kEnd) {
          input_done_ = true;
          break;
        }
      }
      auto e = in_->next();
      if (!e) {
        input_done_ = true;
        break;
      }
      buffer_.replace(i, std::move(*e));
      break;
    }
    if (input_done_) buffer_.remove(i);
    draw_ahead();
  }

  // Draws the slots the next two calls hand out (the same draws they would make, in the same order:
  // while the input lasts the buffer stays full, after it ends it shrinks by one a call, so the ranges
  // are known; a draw whose range turns out wrong is undone from the state saved before it) and
  // prefetches those slots: the buffer has gone cold in the cache by then. Two calls ahead a slot is
  // prefetched shallow (an element's tensor array), one call ahead deep (its bytes). save_state saves
  // the state before the first pending draw, so a restored iterator draws them again.
  void draw_ahead() {
    if (!input_done_ && static_cast<int64_t>(buffer_.size()) < node_->buffer_) return;
    if (ahead_ == 1 && drawn_[0].slot < buffer_.size()) buffer_.prefetch(drawn_[0].slot, true);
    while (ahead_ < 2) {
      const size_t shrink = input_done_ ? static_cast<size_t>(ahead_) : 0;
      if (buffer_.size() <= shrink) return;
      const size_t range = buffer_.size() - shrink;
      Draw& d = drawn_[ahead_];
      d.before = gen_.state();
      d.range = range;
      d.slot = static_cast<size_t>(gen_.uniform_int(range));
      const size_t slot = std::min(d.slot, buffer_.size() - 1);
      buffer_.prefetch(slot, false);
      if (ahead_ == 0) buffer_.prefetch(slot, true);  // handed out by the very next call: its bytes too
      ++ahead_;
    }
  }

  const ShuffleNode* node_;
  std::unique_ptr<IteratorImpl> in_;
  RowIterator* in_rows_;  // in_ when it can write rows, else null
  uint64_t epoch_;
  Generator gen_;
  ShuffleBuffer buffer_;
  bool input_done_ = false;
  struct Draw {
    size_t slot = 0, range = 0;  // drawn over `range` slots
    Generator::State before;     // the generator before this draw
  };
  Draw drawn_[2];  // draws made ahead for the next calls, oldest first
  int ahead_ = 0;
  SameLayout same_layout_;
};
std::unique_ptr<IteratorImpl> ShuffleNode::make_iterator() const { return std::make_unique<ShuffleIterator>(this); }

// ---- cache
struct MemoryCache {
  std::mutex mu;
  bool complete = false;
  std::shared_ptr<const std::vector<Element>> elements;
};

class CacheNode : public UnaryNode {
 public:
  CacheNode(NodePtr in, std::string path) : UnaryNode(std::move(in)), path_(std::move(path)) {}
  std::string name() const override { return "cache"; }
  int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<CacheNode>(std::move(in), path_); }

  std::string path_;
  std::shared_ptr<MemoryCache> memory_ = std::make_shared<MemoryCache>();
};

// Cache file: "STRATACACHE1\n" then one length-prefixed encode_element per element.
constexpr char kCacheMagic[] = "STRATACACHE1\n";

class CacheIterator : public IteratorImpl {
 public:
  explicit CacheIterator(const CacheNode* node) : node_(node) { start(); }
  ~CacheIterator() override { abandon_file(); }

  std::optional<Element> next() override {
    switch (mode_) {
      case Mode::kReadMemory:
        if (pos_ >= static_cast<int64_t>(cached_->size())) return std::nullopt;
        return (*cached_)[static_cast<size_t>(pos_++)];
      case Mode::kReadFile: return read_file_element();
      case Mode::kFill: {
        auto e = in_->next();
        if (!e) {
          publish();
          return std::nullopt;
        }
        ++pos_;
        if (!partial_) {
          if (node_->path_.empty()) {
            filling_.push_back(*e);
          } else {
            const std::string bytes = encode_element(*e);
            const uint64_t n = bytes.size();
            out_.write(reinterpret_cast<const char*>(&n), sizeof(n));
            out_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
            STRATA_CHECK(out_.good(), IoError, "cache: writing " << tmp_path_ << " failed");
          }
        }
        return e;
      }
      case Mode::kDone: return std::nullopt;
    }
    return std::nullopt;
  }

  std::string save_state() const override {
    StateWriter w("cache");
    w.put_int("mode", static_cast<int>(mode_)).put_int("pos", pos_);
    if (mode_ == Mode::kFill) w.put("input", in_->save_state());
    return w.str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, "cache");
    const auto mode = static_cast<Mode>(r.get_int("mode"));
    const int64_t pos = r.get_int("pos");
    abandon_file();
    filling_.clear();
    if (mode == Mode::kFill) {
      // Continue from the input; this iteration no longer sees the whole epoch, so it publishes nothing.
      mode_ = Mode::kFill;
      partial_ = true;
      in_ = node_->input()->make_iterator();
      in_->restore_state(r.get("input"));
      pos_ = pos;
      return;
    }
    if (mode == Mode::kDone) {
      mode_ = Mode::kDone;
      return;
    }
    // Saved while reading a completed cache: read it again up to `pos` (or, where this process has no
    // completed cache yet, fill it from the input; the input gives the same elements in the same order).
    start();
    for (int64_t i = 0; i < pos; ++i) next();
  }

 private:
  enum class Mode { kReadMemory = 0, kReadFile = 1, kFill = 2, kDone = 3 };

  void start() {
    pos_ = 0;
    partial_ = false;
    if (node_->path_.empty()) {
      std::lock_guard<std::mutex> lock(node_->memory_->mu);
      if (node_->memory_->complete) {
        cached_ = node_->memory_->elements;
        mode_ = Mode::kReadMemory;
        return;
      }
    } else if (std::filesystem::exists(node_->path_)) {
      in_file_.open(node_->path_, std::ios::binary);
      STRATA_CHECK(in_file_.good(), IoError, "cache: cannot open " << node_->path_);
      char magic[sizeof(kCacheMagic) - 1];
      in_file_.read(magic, sizeof(magic));
      STRATA_CHECK(in_file_.good() && std::string(magic, sizeof(magic)) == kCacheMagic, DataCorrupt,
                   "cache: " << node_->path_ << " is not a strata cache file");
      mode_ = Mode::kReadFile;
      return;
    } else {
      static std::atomic<uint64_t> counter{0};
      tmp_path_ = node_->path_ + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
      out_.open(tmp_path_, std::ios::binary | std::ios::trunc);
      STRATA_CHECK(out_.good(), IoError, "cache: cannot create " << tmp_path_);
      out_.write(kCacheMagic, sizeof(kCacheMagic) - 1);
    }
    mode_ = Mode::kFill;
    in_ = node_->input()->make_iterator();
  }

  std::optional<Element> read_file_element() {
    uint64_t n = 0;
    in_file_.read(reinterpret_cast<char*>(&n), sizeof(n));
    if (in_file_.gcount() == 0 && in_file_.eof()) {
      mode_ = Mode::kDone;
      return std::nullopt;
    }
    STRATA_CHECK(in_file_.gcount() == sizeof(n) && n < (uint64_t{1} << 40), DataCorrupt,
                 "cache: " << node_->path_ << " is corrupt at element " << pos_);
    std::string bytes(n, '\0');
    in_file_.read(bytes.data(), static_cast<std::streamsize>(n));
    STRATA_CHECK(static_cast<uint64_t>(in_file_.gcount()) == n, DataCorrupt,
                 "cache: " << node_->path_ << " is truncated at element " << pos_);
    ++pos_;
    return decode_element(bytes);
  }

  void publish() {
    mode_ = Mode::kDone;
    if (partial_) return;
    if (node_->path_.empty()) {
      std::lock_guard<std::mutex> lock(node_->memory_->mu);
      if (!node_->memory_->complete) {
        node_->memory_->elements = std::make_shared<const std::vector<Element>>(std::move(filling_));
        node_->memory_->complete = true;
      }
      filling_.clear();
      return;
    }
    out_.close();
    STRATA_CHECK(!out_.fail(), IoError, "cache: writing " << tmp_path_ << " failed");
    std::error_code ec;
    std::filesystem::rename(tmp_path_, node_->path_, ec);
    STRATA_CHECK(!ec, IoError, "cache: renaming " << tmp_path_ << " to " << node_->path_ << ": " << ec.message());
    tmp_path_.clear();
  }

  void abandon_file() {
    if (out_.is_open()) out_.close();
    if (!tmp_path_.empty()) {
      std::error_code ec;
      std::filesystem::remove(tmp_path_, ec);
      tmp_path_.clear();
    }
    if (in_file_.is_open()) in_file_.close();
  }

  const CacheNode* node_;
  Mode mode_ = Mode::kDone;
  int64_t pos_ = 0;
  bool partial_ = false;
  std::unique_ptr<IteratorImpl> in_;
  std::vector<Element> filling_;
  std::shared_ptr<const std::vector<Element>> cached_;
  std::ofstream out_;
  std::ifstream in_file_;
  std::string tmp_path_;
};
std::unique_ptr<IteratorImpl> CacheNode::make_iterator() const { return std::make_unique<CacheIterator>(this); }

}  // namespace

NodePtr shuffle_node(NodePtr in, int64_t buffer_size, std::optional<uint64_t> seed, bool reshuffle) {
  STRATA_CHECK(buffer_size >= 1, InvalidArgument, "shuffle: buffer_size must be >= 1, got " << buffer_size);
  return std::make_shared<ShuffleNode>(std::move(in), buffer_size, seed ? *seed : random_seed(), reshuffle);
}
NodePtr cache_node(NodePtr in, std::string path) { return std::make_shared<CacheNode>(std::move(in), std::move(path)); }

}  // namespace strata::data::detail
