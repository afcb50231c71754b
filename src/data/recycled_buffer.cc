// RecycledBuffer and its process-wide cache (see recycled_buffer.h). Thread-safety: the cache is
// guarded by its mutex; a RecycledBuffer belongs to one thread at a time.
#include "data/recycled_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>

namespace strata::data::detail {

namespace {

// Buffers of at least this size are 2 MiB-aligned, asked for in huge pages and cached; smaller ones
// are plain allocations (their first-touch cost is small and malloc reuses them anyway).
constexpr size_t kHuge = size_t{2} << 20;
size_t huge_rounded(size_t bytes) { return (bytes + kHuge - 1) / kHuge * kHuge; }

struct Kept {
  char* data;
  size_t capacity;
};

// Released buffers, oldest first.
struct Cache {
  std::mutex mu;
  std::deque<Kept> kept;
  size_t bytes = 0;
};
// Never destroyed, so a buffer released during static destruction still finds it (the process's exit
// returns the memory).
Cache& cache() {
  static Cache& c = *new Cache;
  return c;
}

char* allocate(size_t bytes, size_t* capacity) {
  if (bytes < kHuge) {
    *capacity = std::max<size_t>(bytes, 1);
    void* p = std::malloc(*capacity);
    if (!p) throw std::bad_alloc();
    return static_cast<char*>(p);
  }
  const size_t rounded = huge_rounded(bytes);
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto best = c.kept.end();
    for (auto it = c.kept.begin(); it != c.kept.end(); ++it)
      if (it->capacity >= rounded && (best == c.kept.end() || it->capacity < best->capacity)) best = it;
    if (best != c.kept.end()) {
      const Kept k = *best;
      c.kept.erase(best);
      c.bytes -= k.capacity;
      *capacity = k.capacity;
      return k.data;
    }
  }
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  ::madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without it the buffer still works
#endif
  *capacity = rounded;
  return static_cast<char*>(p);
}

}  // namespace

RecycledBuffer::RecycledBuffer(size_t bytes) { data_ = allocate(bytes, &capacity_); }

void RecycledBuffer::grow(size_t bytes, size_t keep) {
  if (bytes <= capacity_) return;
  RecycledBuffer bigger(bytes);
  if (keep > 0) std::memcpy(bigger.data_, data_, std::min(keep, capacity_));
  *this = std::move(bigger);
}

void RecycledBuffer::release() {
  if (!data_) return;
  char* p = std::exchange(data_, nullptr);
  const size_t capacity = std::exchange(capacity_, 0);
  if (capacity < kHuge || capacity > kMaxKeptBytes) {
    std::free(p);
    return;
  }
  std::deque<Kept> evicted;
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    c.kept.push_back({p, capacity});
    c.bytes += capacity;
    while (c.kept.size() > kMaxKeptBuffers || c.bytes > kMaxKeptBytes) {
      evicted.push_back(c.kept.front());
      c.bytes -= c.kept.front().capacity;
      c.kept.pop_front();
    }
  }
  for (const Kept& k : evicted) std::free(k.data);  // outside the lock
}

size_t recycled_bytes_kept() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

}  // namespace strata::data::detail
