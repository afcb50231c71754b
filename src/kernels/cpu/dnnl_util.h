// oneDNN plumbing shared by the CPU convolution, pooling and batch-norm kernels: the CPU engine, a
// stream per calling thread, memory descriptors over strata tensors, a per-thread scratch arena,
// and a bounded cache of ready-to-run primitives keyed by op + shapes + parameters + thread count.
//
// Why a cache of our own: oneDNN caches primitives, but every call would still build a primitive
// descriptor (1-3 us warm, 25+ us cold per primitive, more with format_tag::any) and the reorders
// around it. A cached entry holds everything one call needs, so a call costs one hash lookup.
//
// Thread-safety: every function is safe from any thread. Cached entries are immutable after they
// are built and oneDNN primitives may run concurrently, so many threads may use one entry at once.
// The stream and the scratch arena are per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "kernels/kernels.h"
#include "strata/tensor.h"

namespace strata::kernels::cpu {

// The one CPU engine of the process.
const dnnl::engine& dnnl_engine();
// The calling thread's stream on dnnl_engine().
dnnl::stream& dnnl_stream();

// Makes oneDNN (which reads the calling thread's OpenMP count) use strata::num_threads() threads.
// Call before executing primitives.
void sync_dnnl_threads();

// Descriptor of a float32 tensor with the given logical oneDNN dims and plain layout.
inline dnnl::memory::desc f32_desc(const dnnl::memory::dims& dims, dnnl::memory::format_tag tag) {
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, tag);
}
// A oneDNN memory over a tensor's elements (no copy). REQUIRES: desc's size == t.nbytes().
dnnl::memory wrap(const dnnl::memory::desc& desc, const Tensor& t);

// Primitive attributes every strata primitive is built with: user-managed scratchpad (so
// concurrent calls never share library scratch and no call mallocs it).
dnnl::primitive_attr default_attr();

// Per-thread scratch buffers, 64-byte aligned, that grow and are kept for the thread's lifetime.
// `slot` (0..kScratchSlots-1) lets one call hold several at once. Slot 0 is reserved for the
// scratchpad of execute(); a pointer stays valid until the same slot is asked for more bytes.
inline constexpr int kScratchSlots = 4;
void* thread_scratch(int slot, size_t bytes);
// A memory for `desc` on thread_scratch(slot).
dnnl::memory scratch_memory(const dnnl::memory::desc& desc, int slot);

// Executes `prim` on the calling thread's stream with `args` plus a scratchpad for `pd` (slot 0),
// then waits. Translates dnnl::error into strata::Error naming `op`.
void execute(const char* op, const dnnl::primitive& prim, const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory> args);

[[noreturn]] void throw_dnnl_error(const char* op, const dnnl::error& e);
// Runs f() and turns a dnnl::error it throws into strata::Error naming `op` and oneDNN's message.
template <class F>
auto dnnl_call(const char* op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    throw_dnnl_error(op, e);
  }
}
// Converts `src` to `dst`'s layout (both float32, same logical dims). Reorder primitives are cached.
void reorder(const char* op, const dnnl::memory& src, const dnnl::memory& dst);

// `user` itself when the primitive wants its layout, else a copy in layout `want` on scratch `slot`.
dnnl::memory input_in_format(const char* op, const dnnl::memory::desc& want, const dnnl::memory& user, int slot);
// `user` itself when the primitive writes its layout, else scratch `slot` in layout `want`; after
// executing, call output_to_user to copy a scratch result into `user`.
dnnl::memory output_in_format(const dnnl::memory::desc& want, const dnnl::memory& user, int slot);
void output_to_user(const char* op, const dnnl::memory& produced, const dnnl::memory& user);

// Output size and padding of a sliding window (convolution or pooling) along one spatial axis.
// VALID: no padding, out = (in - span) / stride + 1 with span = (k - 1) * dilation + 1.
// SAME (TensorFlow's rule): out = ceil(in / stride), total = max((out - 1) * stride + span - in, 0),
// before = total / 2, after = the rest. Returns false when the window does not fit (VALID, in < span).
bool window_geometry(int64_t in, int64_t k, int stride, int dilation, Padding padding, int64_t& out, int64_t& before,
                     int64_t& after);

// Builds cache keys from integers: op name + dims + parameters. The calling thread's num_threads()
// is added by the cache, since oneDNN tunes a primitive to its thread count.
class CacheKey {
 public:
  explicit CacheKey(const char* op) : bytes_(op) { bytes_.push_back('\0'); }
  CacheKey& operator<<(int64_t v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  template <class Container>
  CacheKey& add_all(const Container& values) {
    *this << static_cast<int64_t>(values.size());
    for (auto v : values) *this << static_cast<int64_t>(v);
    return *this;
  }
  const std::string& str() const { return bytes_; }

 private:
  std::string bytes_;
};

namespace detail {
std::shared_ptr<const void> cache_lookup(const std::string& key,
                                         const std::function<std::shared_ptr<const void>()>& make);
}  // namespace detail

// The cached entry for `key`, built by `make()` (returning std::shared_ptr<const T>) on a miss.
// The cache holds the 1024 most recently used entries; an evicted entry stays alive
// while a caller holds it. `make` may throw; nothing is cached then.
template <class T, class Make>
std::shared_ptr<const T> cached(const CacheKey& key, Make&& make) {
  return std::static_pointer_cast<const T>(
      detail::cache_lookup(key.str(), [&]() -> std::shared_ptr<const void> { return make(); }));
}

// Entries in the primitive cache and the number of misses so far (for tests and benchmarks).
struct PrimitiveCacheStats {
  int64_t entries = 0;
  int64_t misses = 0;
};
PrimitiveCacheStats primitive_cache_stats();

}  // namespace strata::kernels::cpu
