// oneDNN engine, per-thread streams and scratch, and the primitive cache (see dnnl_util.h).
// Thread-safety: the cache is guarded by a mutex held only for lookups and insertions, never while
// an entry is built (two threads missing the same key may both build it; the first one in wins).
#include "kernels/cpu/dnnl_util.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <list>
#include <mutex>
#include <utility>

#include "strata/error.h"
#include "strata/threading.h"

namespace strata::kernels::cpu {

const dnnl::engine& dnnl_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  // oneDNN streams are not meant to be shared between threads.
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

void sync_dnnl_threads() {
  if (omp_in_parallel()) return;  // nested: oneDNN runs single-threaded there anyway
  const int want = num_threads();
  if (omp_get_max_threads() != want) omp_set_num_threads(want);
}

dnnl::memory wrap(const dnnl::memory::desc& desc, const Tensor& t) {
  // oneDNN takes a non-const handle for inputs too; it only reads them.
  return dnnl::memory(desc, dnnl_engine(), const_cast<void*>(t.raw_data()));
}

dnnl::primitive_attr default_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

struct ScratchArena {
  std::unique_ptr<void, FreeDeleter> buffers[kScratchSlots];
  size_t sizes[kScratchSlots] = {};
};

}  // namespace

void* thread_scratch(int slot, size_t bytes) {
  STRATA_CHECK(slot >= 0 && slot < kScratchSlots, InvalidArgument, "thread_scratch: no slot " << slot);
  thread_local ScratchArena arena;
  if (bytes == 0) bytes = 64;
  if (arena.sizes[slot] < bytes) {
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    arena.buffers[slot].reset();
    void* p = std::aligned_alloc(64, rounded);
    STRATA_CHECK(p != nullptr, Error, "oneDNN scratch: out of memory allocating " << rounded << " bytes");
    arena.buffers[slot].reset(p);
    arena.sizes[slot] = rounded;
  }
  return arena.buffers[slot].get();
}

dnnl::memory scratch_memory(const dnnl::memory::desc& desc, int slot) {
  return dnnl::memory(desc, dnnl_engine(), thread_scratch(slot, desc.get_size()));
}

void throw_dnnl_error(const char* op, const dnnl::error& e) {
  STRATA_THROW(Error, op << ": oneDNN failed: " << e.what() << " (status " << static_cast<int>(e.status) << ")");
}

void execute(const char* op, const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory> args) {
  dnnl_call(op, [&] {
    const dnnl::memory::desc sp = pd.scratchpad_desc();
    if (sp.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, scratch_memory(sp, 0));
    sync_dnnl_threads();
    prim.execute(dnnl_stream(), args);
    dnnl_stream().wait();
  });
}

bool window_geometry(int64_t in, int64_t k, int stride, int dilation, Padding padding, int64_t& out, int64_t& before,
                     int64_t& after) {
  const int64_t span = (k - 1) * dilation + 1;
  if (padding == Padding::kValid) {
    before = after = 0;
    out = in >= span ? (in - span) / stride + 1 : 0;
    return in >= span;
  }
  out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + span - in, 0);
  before = total / 2;
  after = total - before;
  return true;
}

namespace {

struct ReorderEntry {
  dnnl::reorder::primitive_desc pd;
  dnnl::reorder prim;
};

// Appends a memory descriptor's identity (dims and layout) to a key.
void add_desc(CacheKey& key, const dnnl::memory::desc& d) {
  const dnnl_memory_desc_t& c = d.data;
  key << c.ndims << static_cast<int64_t>(c.data_type) << static_cast<int64_t>(c.format_kind);
  for (int i = 0; i < c.ndims; ++i) key << c.dims[i] << c.padded_dims[i];
  if (c.format_kind == dnnl_blocked) {
    const auto& b = c.format_desc.blocking;
    for (int i = 0; i < c.ndims; ++i) key << b.strides[i];
    key << b.inner_nblks;
    for (int i = 0; i < b.inner_nblks; ++i) key << b.inner_blks[i] << b.inner_idxs[i];
  }
  key << static_cast<int64_t>(c.extra.flags);
}

}  // namespace

void reorder(const char* op, const dnnl::memory& src, const dnnl::memory& dst) {
  const dnnl::memory::desc sd = src.get_desc(), dd = dst.get_desc();
  CacheKey key("reorder");
  add_desc(key, sd);
  add_desc(key, dd);
  auto entry = cached<ReorderEntry>(key, [&] {
    return dnnl_call(op, [&] {
      dnnl::reorder::primitive_desc pd(dnnl_engine(), sd, dnnl_engine(), dd, default_attr());
      return std::make_shared<const ReorderEntry>(ReorderEntry{pd, dnnl::reorder(pd)});
    });
  });
  execute(op, entry->prim, entry->pd, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}});
}

dnnl::memory input_in_format(const char* op, const dnnl::memory::desc& want, const dnnl::memory& user, int slot) {
  if (want == user.get_desc()) return user;
  dnnl::memory m = scratch_memory(want, slot);
  reorder(op, user, m);
  return m;
}

dnnl::memory output_in_format(const dnnl::memory::desc& want, const dnnl::memory& user, int slot) {
  if (want == user.get_desc()) return user;
  return scratch_memory(want, slot);
}

void output_to_user(const char* op, const dnnl::memory& produced, const dnnl::memory& user) {
  if (produced.get_data_handle() != user.get_data_handle()) reorder(op, produced, user);
}

namespace {

// A least-recently-used map from key to entry.
class PrimitiveCache {
 public:
  static constexpr size_t kCapacity = 1024;  // as oneDNN's own cache

  std::shared_ptr<const void> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);  // most recent first
    return it->second->second;
  }

  std::shared_ptr<const void> insert(const std::string& key, std::shared_ptr<const void> value) {
    std::lock_guard<std::mutex> lock(mu_);
    ++misses_;
    auto it = map_.find(key);
    if (it != map_.end()) return it->second->second;  // another thread built it first
    order_.emplace_front(key, std::move(value));
    map_.emplace(key, order_.begin());
    if (order_.size() > kCapacity) {
      map_.erase(order_.back().first);
      order_.pop_back();
    }
    return order_.front().second;
  }

  PrimitiveCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {static_cast<int64_t>(map_.size()), misses_};
  }

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const void>>;
  std::mutex mu_;
  std::list<Entry> order_;                                           // GUARDED_BY(mu_)
  std::unordered_map<std::string, std::list<Entry>::iterator> map_;  // GUARDED_BY(mu_)
  int64_t misses_ = 0;                                               // GUARDED_BY(mu_)
};

PrimitiveCache& primitive_cache() {
  static PrimitiveCache* cache = new PrimitiveCache();  // never destroyed: usable during exit
  return *cache;
}

}  // namespace

namespace detail {

std::shared_ptr<const void> cache_lookup(const std::string& key,
                                         const std::function<std::shared_ptr<const void>()>& make) {
  std::string full = key;
  const int64_t threads = num_threads();
  full.append(reinterpret_cast<const char*>(&threads), sizeof threads);
  if (auto hit = primitive_cache().find(full)) return hit;
  sync_dnnl_threads();  // primitives are tuned to the thread count they are built under
  return primitive_cache().insert(full, make());
}

}  // namespace detail

PrimitiveCacheStats primitive_cache_stats() { return primitive_cache().stats(); }

}  // namespace strata::kernels::cpu
