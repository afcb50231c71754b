// The stages that own threads: parallel map and prefetch (one engine, AsyncIterator), and interleave.
//
// AsyncIterator: `workers` threads each reserve up to `chunk` sequence numbers, pull that many input
// elements (input reads are serialised by in_mu_, which also hands out the numbers so they follow
// input order), apply the function (none for prefetch) and store the results in a ring of `capacity`
// slots.
// The consumer takes slot out_seq_ (deterministic) or the oldest finished result (not deterministic).
// Exceptions from the input or the function are stored in the slot and rethrown by next() at that
// element's position. Condition variables are notified only when someone waits on them, so a
// pipeline that keeps up costs a mutex, not a system call, per element.
// save_state pauses the workers, waits for the ones in flight, and records the finished results plus
// the input's state; restore puts those results back in front.
// Shutdown: the destructor sets `cancelled`, wakes everyone and joins; a worker finishes the element
// it holds (its input read or function call) and exits.
//
// Thread-safety: one consumer thread per iterator; workers synchronise through mu_ / in_mu_.
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>

#include "data/pipeline/nodes.h"
#include "data/pipeline/thread_pool.h"

namespace strata::data::detail {

namespace {

using MapFn = std::function<Element(const Element&)>;

struct Result {
  std::optional<Element> value;
  std::exception_ptr error;
  bool ready = false;
};

std::string error_message(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

class AsyncIterator : public IteratorImpl {
 public:
  AsyncIterator(const DatasetNode* input, const MapFn* fn, int64_t workers, int64_t capacity, int64_t chunk,
                bool deterministic, std::string kind)
      : fn_(fn),
        workers_(workers),
        capacity_(capacity),
        chunk_(std::max<int64_t>(1, std::min(chunk, capacity))),
        deterministic_(deterministic),
        kind_(std::move(kind)),
        in_(input->make_iterator()),
        ring_(static_cast<size_t>(capacity)) {}

  ~AsyncIterator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
    }
    worker_cv_.notify_all();
    consumer_cv_.notify_all();
    threads_.join();
  }

  std::optional<Element> next() override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!threads_.running()) start_locked();
    Result r;
    if (deterministic_) {
      Result& slot = ring_[static_cast<size_t>(out_seq_ % capacity_)];
      if (!slot.ready && !(ended_ && out_seq_ >= end_seq_)) {
        ++consumer_waiting_;
        consumer_cv_.wait(lock, [&] { return slot.ready || (ended_ && out_seq_ >= end_seq_); });
        --consumer_waiting_;
      }
      if (!slot.ready) return std::nullopt;
      r = std::move(slot);
      slot = Result();
    } else {
      if (done_.empty() && !(ended_ && consumed_ >= end_seq_)) {
        ++consumer_waiting_;
        consumer_cv_.wait(lock, [&] { return !done_.empty() || (ended_ && consumed_ >= end_seq_); });
        --consumer_waiting_;
      }
      if (done_.empty()) return std::nullopt;
      r = std::move(done_.front());
      done_.pop_front();
    }
    ++out_seq_;
    ++consumed_;
    --reserved_;
    // Wake blocked workers once half the buffer is free, not on every element: they then refill it in
    // one go and the two sides do not ping-pong a wake-up per element.
    if (workers_waiting_ > 0 && capacity_ - reserved_ >= std::max<int64_t>(1, capacity_ / 2)) worker_cv_.notify_all();
    lock.unlock();
    if (r.error) std::rethrow_exception(r.error);
    return std::move(r.value);
  }

  std::string save_state() const override {
    std::unique_lock<std::mutex> lock(mu_);
    pause_locked(lock);
    StateWriter w(kind_);
    {
      std::lock_guard<std::mutex> in_lock(in_mu_);
      w.put("input", in_->save_state());
    }
    w.put_int("ended", ended_);
    std::vector<const Result*> pending;
    if (deterministic_) {
      const int64_t stop = ended_ ? std::min(end_seq_, next_seq_) : next_seq_;
      for (int64_t s = out_seq_; s < stop; ++s) pending.push_back(&ring_[static_cast<size_t>(s % capacity_)]);
    } else {
      for (const Result& r : done_) pending.push_back(&r);
    }
    w.put_int("buffered", static_cast<int64_t>(pending.size()));
    for (size_t i = 0; i < pending.size(); ++i) {
      const std::string key = std::to_string(i);
      if (pending[i]->error) w.put("error" + key, error_message(pending[i]->error));
      else w.put_element("value" + key, *pending[i]->value);
    }
    resume_locked();
    return w.str();
  }

  void restore_state(const std::string& state) override {
    StateReader r(state, kind_);
    std::unique_lock<std::mutex> lock(mu_);
    pause_locked(lock);
    {
      std::lock_guard<std::mutex> in_lock(in_mu_);
      in_->restore_state(r.get("input"));
    }
    const int64_t n = r.get_int("buffered");
    STRATA_CHECK(n <= capacity_, InvalidArgument,
                 kind_ << ": the state holds " << n << " buffered elements, more than this stage's " << capacity_);
    for (auto& slot : ring_) slot = Result();
    done_.clear();
    out_seq_ = consumed_ = 0;
    next_seq_ = reserved_ = n;
    for (int64_t i = 0; i < n; ++i) {
      const std::string key = std::to_string(i);
      Result res;
      res.ready = true;
      if (r.has("error" + key)) res.error = std::make_exception_ptr(Error(r.get("error" + key)));
      else res.value = r.get_element("value" + key);
      if (deterministic_) ring_[static_cast<size_t>(i)] = std::move(res);
      else done_.push_back(std::move(res));
    }
    ended_ = r.get_int("ended") != 0;
    end_seq_ = ended_ ? n : kNever;
    resume_locked();
  }

 private:
  static constexpr int64_t kNever = INT64_MAX;

  void start_locked() {
    threads_.start(workers_, [this](int64_t) { work(); });
  }

  // Stops workers from taking new elements and waits for those in flight. REQUIRES: lock holds mu_.
  void pause_locked(std::unique_lock<std::mutex>& lock) const {
    ++paused_;
    if (in_flight_ > 0) {
      ++consumer_waiting_;
      consumer_cv_.wait(lock, [&] { return in_flight_ == 0; });
      --consumer_waiting_;
    }
  }
  void resume_locked() const {
    --paused_;
    if (workers_waiting_ > 0) worker_cv_.notify_all();
  }

  void work() {
    std::vector<Result> local;
    local.reserve(static_cast<size_t>(chunk_));
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (cancelled_) return;
      if (paused_ > 0 || ended_ || reserved_ >= capacity_) {
        ++workers_waiting_;
        worker_cv_.wait(lock, [&] { return cancelled_ || (paused_ == 0 && !ended_ && reserved_ < capacity_); });
        --workers_waiting_;
        continue;
      }
      // Take up to chunk_ consecutive elements at once: one lock round trip per chunk, not per element.
      const int64_t k = std::min(chunk_, capacity_ - reserved_);
      reserved_ += k;
      in_flight_ += k;
      lock.unlock();

      local.clear();
      int64_t first_seq = 0;
      bool end = false;
      {
        std::lock_guard<std::mutex> in_lock(in_mu_);
        first_seq = next_seq_;
        for (int64_t j = 0; j < k; ++j) {
          Result res;
          try {
            res.value = in_->next();
          } catch (...) {
            res.error = std::current_exception();
          }
          ++next_seq_;
          if (!res.value && !res.error) {
            end = true;
            break;
          }
          local.push_back(std::move(res));
        }
      }
      if (fn_) {
        for (Result& res : local) {
          if (res.error) continue;
          try {
            res.value = (*fn_)(*res.value);
          } catch (...) {
            res.error = std::current_exception();
            res.value.reset();
          }
        }
      }

      lock.lock();
      in_flight_ -= k;
      reserved_ -= k - static_cast<int64_t>(local.size());  // the end marker and what was never read
      for (size_t j = 0; j < local.size(); ++j) {
        local[j].ready = true;
        if (deterministic_) ring_[static_cast<size_t>((first_seq + static_cast<int64_t>(j)) % capacity_)] = std::move(local[j]);
        else done_.push_back(std::move(local[j]));
      }
      if (end) {
        ended_ = true;
        end_seq_ = std::min(end_seq_, first_seq + static_cast<int64_t>(local.size()));
        if (workers_waiting_ > 0) worker_cv_.notify_all();  // they stop reserving
      }
      if (consumer_waiting_ > 0) consumer_cv_.notify_all();
    }
  }

  const MapFn* fn_;  // null for prefetch
  const int64_t workers_, capacity_, chunk_;
  const bool deterministic_;
  const std::string kind_;

  mutable std::mutex in_mu_;  // serialises in_ and hands out next_seq_
  std::unique_ptr<IteratorImpl> in_;
  int64_t next_seq_ = 0;

  mutable std::mutex mu_;  // everything below
  mutable std::condition_variable worker_cv_, consumer_cv_;
  std::vector<Result> ring_;  // deterministic: slot seq % capacity
  std::deque<Result> done_;   // not deterministic: finished results in completion order
  int64_t out_seq_ = 0, consumed_ = 0;
  int64_t reserved_ = 0;   // sequence numbers taken and not yet consumed
  mutable int64_t in_flight_ = 0;  // taken and not yet finished
  bool ended_ = false;
  int64_t end_seq_ = kNever;
  bool cancelled_ = false;
  mutable int paused_ = 0;
  mutable int consumer_waiting_ = 0;
  mutable int workers_waiting_ = 0;
  WorkerThreads threads_;  // last: joined in the destructor body, before the members above go
};

// Elements a map worker takes per round trip through the locks (results are published together).
constexpr int64_t kMapChunk = 8;

class ParallelMapNode : public UnaryNode {
 public:
  ParallelMapNode(NodePtr in, MapFn fn, int64_t parallel, bool deterministic)
      : UnaryNode(std::move(in)), fn_(std::move(fn)), parallel_(parallel), deterministic_(deterministic) {}
  std::string name() const override { return "parallel_map"; }
  int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator() const override {
    return std::make_unique<AsyncIterator>(input_.get(), &fn_, parallel_, 2 * parallel_ * kMapChunk, kMapChunk,
                                           deterministic_, "parallel_map");
  }
  NodePtr rebuild(NodePtr in) const override {
    return std::make_shared<ParallelMapNode>(std::move(in), fn_, parallel_, deterministic_);
  }
  MapFn fn_;
  int64_t parallel_;
  bool deterministic_;
};

class PrefetchNode : public UnaryNode {
 public:
  PrefetchNode(NodePtr in, int64_t buffer) : UnaryNode(std::move(in)), buffer_(buffer) {}
  std::string name() const override { return "prefetch"; }
  int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator() const override {
    return std::make_unique<AsyncIterator>(input_.get(), nullptr, 1, buffer_, 1, true, "prefetch");
  }
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<PrefetchNode>(std::move(in), buffer_); }
  int64_t buffer_;
};

// ---- interleave (tf.data's cycle: take block_length elements from each open input in turn; an input
// that ends frees its place, which the next input element fills when the cycle comes back to it).
using InterleaveFn = std::function<Dataset(const Element&)>;

class InterleaveNode : public UnaryNode {
 public:
  InterleaveNode(NodePtr in, InterleaveFn fn, InterleaveOptions o) : UnaryNode(std::move(in)), fn_(std::move(fn)), opt_(o) {
    opt_.cycle_length = resolve_parallelism(o.cycle_length, "interleave cycle_length");
    STRATA_CHECK(o.block_length >= 1, InvalidArgument, "interleave: block_length must be >= 1, got " << o.block_length);
    if (o.num_parallel_calls != 1) resolve_parallelism(o.num_parallel_calls, "interleave num_parallel_calls");
  }
  std::string name() const override { return "interleave"; }
  int64_t cardinality() const override {
    const int64_t n = input_->cardinality();
    return n == 0 ? 0 : kUnknownCardinality;
  }
  std::unique_ptr<IteratorImpl> make_iterator() const override;
  NodePtr rebuild(NodePtr in) const override { return std::make_shared<InterleaveNode>(std::move(in), fn_, opt_); }
  // The dataset of one input element; read ahead on its own thread when the interleave is parallel.
  Dataset open(const Element& e) const {
    Dataset d = fn_(e);
    if (opt_.num_parallel_calls != 1) d = d.prefetch(std::max<int64_t>(2, opt_.block_length));
    return d;
  }
  InterleaveFn fn_;
  InterleaveOptions opt_;
};

class InterleaveIterator : public IteratorImpl {
 public:
  explicit InterleaveIterator(const InterleaveNode* node)
      : node_(node), in_(node->input()->make_iterator()), cycle_(static_cast<size_t>(node->opt_.cycle_length)) {}

  std::optional<Element> next() override {
    while (!input_ended_ || open_ > 0) {
      Slot& slot = cycle_[cycle_index_];
      if (slot.it) {
        auto e = slot.it->next();
        if (e) {
          if (++block_index_ == node_->opt_.block_length) advance();
          return e;
        }
        slot.close();
        --open_;
        advance();
      } else if (!input_ended_) {
        auto src = in_->next();
        if (!src) {
          input_ended_ = true;
          continue;
        }
        open(slot, std::move(*src));
      } else {
        advance();
      }
    }
    return std::nullopt;
  }

  std::string save_state() const override {
    StateWriter w("interleave");
    w.put("input", in_->save_state()).put_int("ended", input_ended_);
    w.put_int("cycle_index", static_cast<int64_t>(cycle_index_)).put_int("block_index", block_index_);
    for (size_t i = 0; i < cycle_.size(); ++i) {
      if (!cycle_[i].it) continue;
      const std::string key = std::to_string(i);
      w.put_element("source" + key, *cycle_[i].source).put("state" + key, cycle_[i].it->save_state());
    }
    return w.str();
  }

  void restore_state(const std::string& state) override {
    StateReader r(state, "interleave");
    in_->restore_state(r.get("input"));
    input_ended_ = r.get_int("ended") != 0;
    cycle_index_ = static_cast<size_t>(r.get_int("cycle_index"));
    block_index_ = r.get_int("block_index");
    STRATA_CHECK(cycle_index_ < cycle_.size(), InvalidArgument,
                 "interleave: the state's cycle position " << cycle_index_ << " is outside this cycle of " << cycle_.size());
    open_ = 0;
    for (size_t i = 0; i < cycle_.size(); ++i) {
      cycle_[i].close();
      const std::string key = std::to_string(i);
      if (!r.has("source" + key)) continue;
      open(cycle_[i], r.get_element("source" + key));
      cycle_[i].it->restore_state(r.get("state" + key));
    }
  }

 private:
  struct Slot {
    std::optional<Element> source;             // the input element this slot reads (for save_state)
    std::shared_ptr<const DatasetNode> graph;  // keeps the slot's dataset alive while `it` exists
    std::unique_ptr<IteratorImpl> it;
    ~Slot() { close(); }
    void close() {  // the iterator first: it may point into the graph
      it.reset();
      graph.reset();
      source.reset();
    }
  };

  void open(Slot& slot, Element source) {
    Dataset d = node_->open(source);
    slot.source = std::move(source);
    slot.graph = d.node();
    slot.it = d.node()->make_iterator();
    ++open_;
  }
  void advance() {
    block_index_ = 0;
    cycle_index_ = (cycle_index_ + 1) % cycle_.size();
  }

  const InterleaveNode* node_;
  std::unique_ptr<IteratorImpl> in_;
  std::vector<Slot> cycle_;
  size_t cycle_index_ = 0;
  int64_t block_index_ = 0;
  int64_t open_ = 0;
  bool input_ended_ = false;
};
std::unique_ptr<IteratorImpl> InterleaveNode::make_iterator() const {
  return std::make_unique<InterleaveIterator>(this);
}

}  // namespace

NodePtr parallel_map_node(NodePtr in, MapFn fn, int64_t num_parallel_calls, bool deterministic) {
  return std::make_shared<ParallelMapNode>(std::move(in), std::move(fn), num_parallel_calls, deterministic);
}
NodePtr prefetch_node(NodePtr in, int64_t buffer_size) {
  const int64_t n = buffer_size == kAutotune ? 8 : buffer_size;
  STRATA_CHECK(n >= 1, InvalidArgument, "prefetch: buffer_size must be >= 1 or kAutotune, got " << buffer_size);
  return std::make_shared<PrefetchNode>(std::move(in), n);
}
NodePtr interleave_node(NodePtr in, InterleaveFn fn, InterleaveOptions options) {
  return std::make_shared<InterleaveNode>(std::move(in), std::move(fn), options);
}

}  // namespace strata::data::detail
