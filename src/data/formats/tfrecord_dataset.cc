// TFRecordDataset and make_example_dataset: one DatasetNode that reads TFRecord files (in order, or
// several at once on worker threads handed out round-robin) and turns each record into an element,
// either its bytes or its parsed Example. A file read from its start to its end without a record (a 0-byte
// shard, most often a conversion cut short) is reported on stderr, once per file per dataset:
//   strata: warning: TFRecord shard 'DIR/train-00001-of-00004.tfrecord' holds no record (a file of 0 bytes)
// Thread-safety: the node is immutable but for the set of files already reported (under its mutex); an
// iterator is used by one thread and owns its workers, which it stops and joins before it is destroyed or
// restored.
#include "strata/data/tfrecord_dataset.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "data/pipeline/rows.h"
#include "strata/error.h"
#include "strata/threading.h"

namespace strata::data {
namespace {

using NodePtr = std::shared_ptr<const DatasetNode>;
using detail::RowIterator;
using detail::RowLayout;

// The files a dataset has reported as holding no record, so each is reported once, not every epoch.
struct ReportedFiles {
  std::mutex mu;
  std::set<std::string> files;  // GUARDED_BY(mu)
};

struct Config {
  std::vector<std::string> files;
  std::shared_ptr<ReportedFiles> empty_files = std::make_shared<ReportedFiles>();
  TFRecordDatasetOptions options;
  std::shared_ptr<const ExampleParser> parser;  // null: elements are the records' bytes
  std::shared_ptr<const std::vector<std::string>> names;
  // The parsed elements' structure when every feature has a fixed size (parser->fixed_size()): then
  // records can be parsed straight into a consumer's rows.
  std::optional<RowLayout> rows;
};

// Reads one file from an offset and converts each record.
class FileCursor {
 public:
  FileCursor(const Config& cfg, int64_t file, uint64_t offset, int64_t record)
      : cfg_(cfg),
        reader_(cfg.files[static_cast<size_t>(file)], {.compression = cfg.options.compression,
                                                       .buffer_size = cfg.options.buffer_size,
                                                       .skip_corrupt = cfg.options.skip_corrupt}),
        record_(record),
        from_start_(offset == 0 && record == 0) {
    if (offset) reader_.seek(offset, record);
  }

  bool next(Element* out) {
    std::string_view bytes;
    if (!read(&bytes)) return false;
    if (!cfg_.parser) {
      std::vector<Tensor> comps(1);
      comps[0] = Tensor::empty({static_cast<int64_t>(bytes.size())}, DType::kUInt8);
      if (!bytes.empty()) std::memcpy(comps[0].raw_data(), bytes.data(), bytes.size());
      *out = Element(std::move(comps), cfg_.names);
    } else {
      const RecordLocation where{
          .file = reader_.path(), .index = record_, .offset = static_cast<int64_t>(reader_.last_record_offset())};
      cfg_.parser->parse(bytes, where, &scratch_);
      std::vector<Tensor> comps(scratch_.size());
      for (size_t k = 0; k < scratch_.size(); ++k) {
        ParsedFeature& f = scratch_[k];
        comps[k] = f.values.defined() ? std::move(f.values) : string_tensor(f.bytes.empty() ? "" : f.bytes[0]);
      }
      *out = Element(std::move(comps), cfg_.names);
    }
    ++record_;
    return true;
  }
  // Parses the next record into dst[k] (cfg.rows' layout). REQUIRES: cfg.rows.
  bool next_row(char* const* dst) {
    std::string_view bytes;
    if (!read(&bytes)) return false;
    const RecordLocation where{
        .file = reader_.path(), .index = record_, .offset = static_cast<int64_t>(reader_.last_record_offset())};
    cfg_.parser->parse_into(bytes, where, reinterpret_cast<void* const*>(dst), &learned_);
    ++record_;
    return true;
  }
  uint64_t offset() const { return reader_.offset(); }
  int64_t record() const { return record_; }

 private:
  // The next record's bytes (counting and reporting skipped corrupt ones, and a file without records).
  bool read(std::string_view* bytes) {
    const bool got = reader_.read(bytes);
    if (reader_.corrupt_records() != corrupt_seen_) {
      if (corrupt_seen_ == 0)
        std::fprintf(stderr, "strata: skipping corrupt records: %s\n", reader_.first_corruption().c_str());
      if (cfg_.options.corrupt_records) *cfg_.options.corrupt_records += reader_.corrupt_records() - corrupt_seen_;
      corrupt_seen_ = reader_.corrupt_records();
    }
    if (!got && record_ == 0 && from_start_ && corrupt_seen_ == 0) report_empty();
    return got;
  }

  // The file ended without a record (and none was corrupt, which is reported already): say so once per
  // dataset. A 0-record shard among shards is almost always a conversion cut short.
  [[gnu::cold, gnu::noinline]] void report_empty() const {
    const std::string& path = reader_.path();
    {
      std::lock_guard<std::mutex> lock(cfg_.empty_files->mu);
      if (!cfg_.empty_files->files.insert(path).second) return;
    }
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    const std::string what = ec ? "" : " (a file of " + std::to_string(size) + " bytes)";
    std::fprintf(stderr, "strata: warning: TFRecord shard '%s' holds no record%s\n", path.c_str(), what.c_str());
  }

  const Config& cfg_;
  TFRecordReader reader_;
  int64_t record_;
  const bool from_start_;  // reading began at the file's first record
  int64_t corrupt_seen_ = 0;
  std::vector<ParsedFeature> scratch_;
  ExampleTemplate learned_;  // the layout of the records next_row parsed last
};

// Where a reader stands: the next record is `record` at `offset` of file `file`.
struct Position {
  int64_t file = 0;
  uint64_t offset = 0;
  int64_t record = 0;
};

const char* kState = "TFRecordDataset";

// ---- one file after another, on the caller's thread
class SequentialIterator : public IteratorImpl, public RowIterator {
 public:
  explicit SequentialIterator(std::shared_ptr<const Config> cfg) : cfg_(std::move(cfg)) {}

  std::optional<Element> next() override {
    Element e;
    if (!advance([&](FileCursor& c) { return c.next(&e); })) return std::nullopt;
    return e;
  }
  Result next_row(const RowLayout& layout, char* const* dst) override {
    if (!cfg_->rows || !same_layout_(layout, *cfg_->rows)) return Result::kElement;
    return advance([&](FileCursor& c) { return c.next_row(dst); }) ? Result::kRow : Result::kEnd;
  }
  std::string save_state() const override {
    return StateWriter(kState)
        .put_int("file", pos_.file)
        .put_uint("offset", pos_.offset)
        .put_int("record", pos_.record)
        .str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, kState);
    cursor_.reset();
    pos_ = {r.get_int("file"), r.get_uint("offset"), r.get_int("record")};
  }

 private:
  // Reads the next record with read(cursor), moving on to the next file at the end of one.
  template <class Read>
  bool advance(Read read) {
    const int64_t n = static_cast<int64_t>(cfg_->files.size());
    while (pos_.file < n) {
      if (!cursor_) cursor_.emplace(*cfg_, pos_.file, pos_.offset, pos_.record);
      if (read(*cursor_)) {
        pos_.offset = cursor_->offset();
        pos_.record = cursor_->record();
        return true;
      }
      cursor_.reset();
      pos_ = {pos_.file + 1, 0, 0};
    }
    return false;
  }

  std::shared_ptr<const Config> cfg_;
  Position pos_;
  std::optional<FileCursor> cursor_;
  detail::SameLayout same_layout_;
};

// ---- n files at once: slot k reads files k, k+n, ... on its own thread; records are handed out
// round-robin over the slots that still have files. A slot's thread hands its records over in chunks
// (one lock per chunk): rows of the parsed structure when it has a fixed size (cfg.rows), so a record
// crosses threads as bytes in a shared buffer, else Elements.
class ParallelIterator : public IteratorImpl, public RowIterator {
 public:
  ParallelIterator(std::shared_ptr<const Config> cfg, int64_t n)
      : cfg_(std::move(cfg)), capacity_(capacity_for(*cfg_)), slots_(static_cast<size_t>(n)) {
    for (int64_t k = 0; k < n; ++k) slots_[static_cast<size_t>(k)].pos = {k, 0, 0};
  }
  ~ParallelIterator() override { stop(); }

  std::optional<Element> next() override {
    Element e;
    if (!advance(nullptr, &e)) return std::nullopt;
    return e;
  }
  Result next_row(const RowLayout& layout, char* const* dst) override {
    if (!cfg_->rows || !same_layout_(layout, *cfg_->rows)) return Result::kElement;
    return advance(dst, nullptr) ? Result::kRow : Result::kEnd;
  }

  std::string save_state() const override {
    StateWriter w(kState);
    w.put_int("slots", static_cast<int64_t>(slots_.size())).put_int("cur", static_cast<int64_t>(cur_));
    for (size_t k = 0; k < slots_.size(); ++k) {
      const Slot& s = slots_[k];
      const std::string key = std::to_string(k);
      w.put_int("file" + key, s.finished ? static_cast<int64_t>(cfg_->files.size()) : s.pos.file)
          .put_uint("offset" + key, s.pos.offset)
          .put_int("record" + key, s.pos.record);
    }
    return w.str();
  }
  void restore_state(const std::string& state) override {
    StateReader r(state, kState);
    STRATA_CHECK(
        r.get_int("slots") == static_cast<int64_t>(slots_.size()), InvalidArgument,
        "TFRecordDataset: the state has " << r.get_int("slots") << " parallel reads, this dataset " << slots_.size());
    stop();
    cur_ = static_cast<size_t>(r.get_int("cur"));
    for (size_t k = 0; k < slots_.size(); ++k) {
      const std::string key = std::to_string(k);
      Slot& s = slots_[k];
      s.pos = {r.get_int("file" + key), r.get_uint("offset" + key), r.get_int("record" + key)};
      s.queue.clear();
      s.queued = 0;
      s.head = Item();
      s.head_next = 0;
      s.finished = false;
      s.stop = false;
    }
  }

 private:
  // What a slot's thread hands over: a chunk of `count` records (rows, or one Element), the end of
  // its files, or the error that stopped it.
  struct Item {
    size_t count = 0;
    Element element;               // count == 1, without cfg.rows
    std::unique_ptr<char[]> rows;  // count rows of cfg.rows' layout
    std::vector<Position> pos;     // after each record
    bool end = false;
    std::exception_ptr error;
  };
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Item> queue;
    size_t queued = 0;  // records in queue
    bool stop = false;
    bool producer_waiting = false, consumer_waiting = false;
    // Consumer side.
    Position pos;  // the next record to hand out
    Item head;     // the chunk being handed out, from record head_next
    size_t head_next = 0;
    bool finished = false;
    std::thread thread;
  };
  // Records per chunk of rows / of Elements. A consumer that waits for a slot is woken when the slot
  // holds kWake records (or its end): one wake-up (two context switches) per many records rather than
  // per chunk. capacity_: the records a slot may hold ahead of the consumer. The consumer takes from
  // the slots in turn, so while it waits for a lagging slot the others keep reading until they are
  // full; room for a few times kWake keeps them from stopping (and leaving a core idle) whenever the
  // scheduler lets one reader fall behind. Rows get ~2 MiB a slot, Elements (of unknown size) 256.
  static constexpr size_t kRowChunk = 64, kElementChunk = 16, kWake = 256;
  static size_t capacity_for(const Config& cfg) {
    if (!cfg.rows) return 256;
    return std::clamp<size_t>((size_t{2} << 20) / std::max<size_t>(cfg.rows->row_bytes, 1), 4 * kWake, 8192);
  }

  // Hands out the next record: its row into dst (REQUIRES: cfg.rows), or its Element into *out.
  bool advance(char* const* dst, Element* out) {
    if (!started_) start();
    const size_t n = slots_.size();
    for (size_t tries = 0; tries < n;) {
      Slot& s = slots_[cur_];
      if (s.finished) {
        cur_ = (cur_ + 1) % n;
        ++tries;
        continue;
      }
      if (s.head_next >= s.head.count && !s.head.end && !s.head.error) {
        s.head = pop(s);
        s.head_next = 0;
      }
      Item& item = s.head;
      if (item.error) {
        s.finished = true;
        std::exception_ptr error = item.error;
        item = Item();
        std::rethrow_exception(error);
      }
      if (item.end) {
        s.finished = true;
        item = Item();
        cur_ = (cur_ + 1) % n;
        tries = 0;
        continue;
      }
      const size_t r = s.head_next++;
      s.pos = item.pos[r];
      if (item.rows) {
        const RowLayout& layout = *cfg_->rows;
        const char* src = item.rows.get() + r * layout.row_bytes;
        if (dst) {
          for (size_t c = 0; c < layout.size(); ++c) std::memcpy(dst[c], src + layout.offsets[c], layout.bytes[c]);
        } else {
          *out = layout.read(src);
        }
      } else {
        *out = std::move(item.element);
      }
      cur_ = (cur_ + 1) % n;
      return true;
    }
    return false;
  }

  void start() {
    started_ = true;
    for (Slot& s : slots_)
      if (!s.finished) s.thread = std::thread([this, &s, start = s.pos] { produce(s, start); });
  }
  void stop() {
    for (Slot& s : slots_) {
      {
        std::lock_guard<std::mutex> lock(s.mu);
        s.stop = true;
      }
      s.cv.notify_all();
    }
    for (Slot& s : slots_)
      if (s.thread.joinable()) s.thread.join();
    started_ = false;
  }

  // Moves `items` into the slot's queue, waiting for room; false when asked to stop.
  bool push(Slot& s, std::vector<Item>& items) {
    size_t records = 0;
    for (const Item& it : items) records += it.count;
    std::unique_lock<std::mutex> lock(s.mu);
    s.producer_waiting = true;
    s.cv.wait(lock, [&] { return s.stop || s.queued < capacity_; });
    s.producer_waiting = false;
    if (s.stop) return false;
    const bool last = !items.empty() && (items.back().end || items.back().error);
    for (Item& it : items) s.queue.push_back(std::move(it));
    s.queued += records;
    items.clear();
    if (s.consumer_waiting && (s.queued >= kWake || last)) s.cv.notify_all();
    return true;
  }
  Item pop(Slot& s) {
    std::unique_lock<std::mutex> lock(s.mu);
    if (s.queue.empty()) {
      s.consumer_waiting = true;
      s.cv.wait(lock, [&] { return !s.queue.empty(); });
      s.consumer_waiting = false;
    }
    Item item = std::move(s.queue.front());
    s.queue.pop_front();
    s.queued -= item.count;
    if (s.producer_waiting && s.queued < capacity_ / 2) s.cv.notify_all();
    return item;
  }

  void produce(Slot& s, const Position start) {
    set_num_threads(1);
    const int64_t n = static_cast<int64_t>(slots_.size());
    const int64_t nfiles = static_cast<int64_t>(cfg_->files.size());
    const RowLayout* layout = cfg_->rows ? &*cfg_->rows : nullptr;
    std::vector<Item> pending;
    Item chunk;
    std::vector<char*> dst(layout ? layout->size() : 0);
    auto flush_rows = [&] {
      if (chunk.count) pending.push_back(std::move(chunk));
      chunk = Item();
    };
    try {
      for (int64_t f = start.file; f < nfiles; f += n) {
        FileCursor cursor(*cfg_, f, f == start.file ? start.offset : 0, f == start.file ? start.record : 0);
        if (layout) {
          for (;;) {
            if (!chunk.rows) {
              chunk.rows.reset(new char[kRowChunk * layout->row_bytes]);
              chunk.pos.reserve(kRowChunk);
            }
            char* row = chunk.rows.get() + chunk.count * layout->row_bytes;
            for (size_t c = 0; c < dst.size(); ++c) dst[c] = row + layout->offsets[c];
            if (!cursor.next_row(dst.data())) break;
            chunk.pos.push_back({f, cursor.offset(), cursor.record()});
            if (++chunk.count == kRowChunk) {
              flush_rows();
              if (!push(s, pending)) return;
            }
          }
          continue;
        }
        Item item;
        while (cursor.next(&item.element)) {
          item.count = 1;
          item.pos.push_back({f, cursor.offset(), cursor.record()});
          pending.push_back(std::move(item));
          item = Item();
          if (pending.size() >= kElementChunk && !push(s, pending)) return;
        }
      }
      flush_rows();
      Item end;
      end.end = true;
      pending.push_back(std::move(end));
    } catch (...) {
      flush_rows();
      Item err;
      err.error = std::current_exception();
      pending.push_back(std::move(err));
    }
    push(s, pending);
  }

  std::shared_ptr<const Config> cfg_;
  const size_t capacity_;
  std::vector<Slot> slots_;
  size_t cur_ = 0;
  bool started_ = false;
  detail::SameLayout same_layout_;
};

class TFRecordNode : public DatasetNode {
 public:
  explicit TFRecordNode(std::shared_ptr<const Config> cfg) : cfg_(std::move(cfg)) {}
  std::unique_ptr<IteratorImpl> make_iterator() const override {
    int64_t n = cfg_->options.num_parallel_reads;
    if (n == kAutotune) n = std::max(1, default_num_threads());
    n = std::min<int64_t>(n, static_cast<int64_t>(cfg_->files.size()));
    if (n <= 1) return std::make_unique<SequentialIterator>(cfg_);
    return std::make_unique<ParallelIterator>(cfg_, n);
  }
  std::string name() const override { return cfg_->parser ? "make_example_dataset" : "TFRecordDataset"; }
  std::optional<std::vector<std::string>> files() const override { return cfg_->files; }
  NodePtr with_files(std::vector<std::string> files) const override {
    auto cfg = std::make_shared<Config>(*cfg_);
    cfg->files = std::move(files);
    cfg->empty_files = std::make_shared<ReportedFiles>();
    return std::make_shared<TFRecordNode>(std::move(cfg));
  }

 private:
  std::shared_ptr<const Config> cfg_;
};

void check_options(const TFRecordDatasetOptions& o, const char* what) {
  STRATA_CHECK(o.num_parallel_reads >= 1 || o.num_parallel_reads == kAutotune, InvalidArgument,
               what << ": num_parallel_reads must be >= 1 or kAutotune, got " << o.num_parallel_reads);
}

}  // namespace

Dataset TFRecordDataset(std::vector<std::string> files, TFRecordDatasetOptions options) {
  check_options(options, "TFRecordDataset");
  auto cfg = std::make_shared<Config>();
  cfg->files = std::move(files);
  cfg->options = std::move(options);
  cfg->names = nullptr;
  return Dataset::from_node(std::make_shared<TFRecordNode>(std::move(cfg)));
}

Dataset make_example_dataset(std::vector<std::string> files, ExampleSpec spec, TFRecordDatasetOptions options) {
  check_options(options, "make_example_dataset");
  for (const auto& [name, s] : spec)
    STRATA_CHECK(
        s.type != FeatureType::kBytes || s.decode_raw || (s.kind == FeatureSpec::Kind::kFixedLen && s.shape.empty()),
        InvalidArgument,
        "make_example_dataset: bytes feature '"
            << name << "' must be a scalar FixedLenFeature or have decode_raw (several byte strings make no tensor)");
  auto cfg = std::make_shared<Config>();
  cfg->files = std::move(files);
  cfg->options = std::move(options);
  cfg->parser = std::make_shared<const ExampleParser>(std::move(spec));
  cfg->names = std::make_shared<const std::vector<std::string>>(cfg->parser->names());
  if (cfg->parser->fixed_size()) {
    RowLayout rows;
    rows.names = cfg->names;
    for (size_t k = 0; k < cfg->parser->specs().size(); ++k)
      rows.add(cfg->parser->output_dtype(k), cfg->parser->specs()[k].shape);
    cfg->rows = std::move(rows);
  }
  return Dataset::from_node(std::make_shared<TFRecordNode>(std::move(cfg)));
}

ExampleSpec fashion_mnist_example_spec(int64_t rows, int64_t cols) {
  return {{"image", RawBytesFeature(DType::kUInt8, {rows, cols, 1})}, {"label", FixedLenFeature(FeatureType::kInt64)}};
}

FeatureSpec make_feature_spec(std::string_view type, Shape shape, std::string_view decode_raw, bool var_len) {
  const FeatureType t = parse_feature_type(type);
  if (var_len) {
    STRATA_CHECK(decode_raw.empty(), InvalidArgument, "a VarLenFeature cannot decode_raw");
    return VarLenFeature(t);
  }
  if (decode_raw.empty()) return FixedLenFeature(t, std::move(shape));
  DType d;
  if (decode_raw == "uint8")
    d = DType::kUInt8;
  else if (decode_raw == "float32" || decode_raw == "float")
    d = DType::kFloat32;
  else if (decode_raw == "int32")
    d = DType::kInt32;
  else if (decode_raw == "int64")
    d = DType::kInt64;
  else
    STRATA_THROW(InvalidArgument, "decode_raw: unknown dtype '" << decode_raw << "' (uint8, float32, int32, int64)");
  STRATA_CHECK(t == FeatureType::kBytes, InvalidArgument, "decode_raw needs a bytes feature, not " << type);
  return RawBytesFeature(d, std::move(shape));
}

}  // namespace strata::data
