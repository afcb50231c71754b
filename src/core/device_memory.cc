// Host memory (with a cache of freed small blocks), and the dispatch to the CUDA allocator when the
// build has one. Thread-safety: every function is safe from any thread; the cache's buckets each
// have their own mutex.
#include "core/device_memory.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <new>
#include <vector>

#include "strata/error.h"

namespace strata::detail {

namespace {
// A training step frees and re-allocates the same large activation buffers every step. glibc's default
// hands blocks above its (adaptive) mmap threshold back to the kernel and trims the heap top, so every
// step paid page faults and zeroing for fresh pages (measured: ~10% of a CNN step). Keeping freed memory
// in the heap makes the next step reuse it, as PyTorch's CPU allocator effectively does.
const bool kMallocTuned = [] {
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return true;
}();
}  // namespace

#ifdef STRATA_WITH_CUDA
// Defined in core/cuda/device_memory_cuda.cc and core/cuda/pinned_memory_cuda.cc.
void* cuda_alloc(size_t nbytes, int index);
void cuda_free(void* p, int index, size_t nbytes);
void cuda_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
int cuda_count();
#else
namespace {
[[noreturn]] void no_cuda(const std::string& what) {
  STRATA_THROW(Unavailable, "cannot use " << what
                                          << ": this build of strata has no CUDA support (configure with "
                                             "-DSTRATA_WITH_CUDA=ON)");
}
}  // namespace

void* pinned_alloc(size_t) { no_cuda("pinned (page-locked) host memory"); }
void pinned_free(void*) noexcept {}
void release_cached_pinned_blocks() {}
size_t cached_pinned_bytes() { return 0; }
void copy_to_device_async(void*, Device dst_device, const void*, const void*, size_t) { no_cuda(dst_device.str()); }
#endif

namespace {

constexpr size_t kAlignment = 64;

// ---- the host block cache
// An input pipeline makes and drops several small tensors per record (an image, a label, a batch);
// aligned_alloc cannot use glibc's per-thread cache, so each one paid a trip through the heap's bins
// (measured: ~12% of the Fashion-MNIST TFRecord pipeline). Freed blocks up to kMaxCached bytes wait
// here, bucketed by size class, for the next allocation of their class. Classes are exact multiples
// of 64 bytes up to 1 KiB, then four per power of two (a block is at most 25% larger than asked).
// The cache is bounded (kMaxCachedTotal bytes in all, kMaxBucketBytes per class); a block that does
// not fit goes back to the heap. Address-sanitized builds skip the cache, so that a use after free
// still lands on freed (poisoned) memory.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheEnabled = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCacheEnabled = false;
#else
constexpr bool kCacheEnabled = true;
#endif
#else
constexpr bool kCacheEnabled = true;
#endif

constexpr size_t kMaxCached = 256 << 10;
constexpr size_t kMaxCachedTotal = size_t{64} << 20;
constexpr size_t kMaxBucketBytes = size_t{16} << 20;
constexpr int kSmallClasses = 16;  // 64, 128, ..., 1024
constexpr int kNumClasses = kSmallClasses + 4 * 8;  // then 4 per power of two: (1 KiB, 256 KiB]

// The class of a block of `n` bytes (1 <= n <= kMaxCached) and that class's block size.
int size_class(size_t n, size_t* class_bytes) {
  const size_t r = (n + kAlignment - 1) / kAlignment * kAlignment;
  if (r <= 1024) {
    *class_bytes = r;
    return static_cast<int>(r / kAlignment) - 1;
  }
  const int p = static_cast<int>(std::bit_width(r - 1)) - 1;  // 2^p < r <= 2^(p+1)
  const size_t step = size_t{1} << (p - 2);
  const size_t steps = (r + step - 1) / step;  // 5..8
  *class_bytes = steps * step;
  return kSmallClasses + (p - 10) * 4 + static_cast<int>(steps - 5);
}

// The block size of class `k` (the inverse of size_class).
size_t class_size(int k) {
  if (k < kSmallClasses) return static_cast<size_t>(k + 1) * kAlignment;
  const int j = k - kSmallClasses;
  return static_cast<size_t>(5 + j % 4) << (10 + j / 4 - 2);
}

struct Bucket {
  std::mutex mu;
  std::vector<void*> blocks;
};

struct BlockCache {
  Bucket buckets[kNumClasses];
  std::atomic<size_t> bytes{0};
};

// Never destroyed: tensors in static objects may be freed after any static destructor has run.
BlockCache& cache() {
  static BlockCache* c = new BlockCache;
  return *c;
}

void* heap_alloc(size_t bytes) {
  void* p = std::aligned_alloc(kAlignment, bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

void* device_alloc(size_t nbytes, Device device) {
  if (device.is_cpu()) {
    nbytes = std::max<size_t>(nbytes, 1);
    if (kCacheEnabled && nbytes <= kMaxCached) {
      size_t class_bytes;
      Bucket& b = cache().buckets[size_class(nbytes, &class_bytes)];
      {
        std::lock_guard<std::mutex> lock(b.mu);
        if (!b.blocks.empty()) {
          void* p = b.blocks.back();
          b.blocks.pop_back();
          cache().bytes.fetch_sub(class_bytes, std::memory_order_relaxed);
          return p;
        }
      }
      return heap_alloc(class_bytes);
    }
    return heap_alloc((nbytes + kAlignment - 1) / kAlignment * kAlignment);
  }
#ifdef STRATA_WITH_CUDA
  return cuda_alloc(nbytes, device.index);
#else
  no_cuda(device.str());
#endif
}

void device_free(void* p, Device device, size_t nbytes) {
  if (device.is_cpu()) {
    if (!p) return;
    nbytes = std::max<size_t>(nbytes, 1);
    if (kCacheEnabled && nbytes <= kMaxCached) {
      size_t class_bytes;
      Bucket& b = cache().buckets[size_class(nbytes, &class_bytes)];
      BlockCache& c = cache();
      if (c.bytes.load(std::memory_order_relaxed) + class_bytes <= kMaxCachedTotal) {
        std::lock_guard<std::mutex> lock(b.mu);
        if ((b.blocks.size() + 1) * class_bytes <= kMaxBucketBytes) {
          b.blocks.push_back(p);
          c.bytes.fetch_add(class_bytes, std::memory_order_relaxed);
          return;
        }
      }
    }
    std::free(p);
    return;
  }
#ifdef STRATA_WITH_CUDA
  cuda_free(p, device.index, nbytes);
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, nbytes);
    return;
  }
#ifdef STRATA_WITH_CUDA
  cuda_copy(dst, dst_device, src, src_device, nbytes);
#else
  no_cuda((dst_device.is_cpu() ? src_device : dst_device).str());
#endif
}

void release_cached_host_blocks() {
  if (!kCacheEnabled) return;
  BlockCache& c = cache();
  for (int k = 0; k < kNumClasses; ++k) {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(c.buckets[k].mu);
      blocks.swap(c.buckets[k].blocks);
    }
    c.bytes.fetch_sub(blocks.size() * class_size(k), std::memory_order_relaxed);
    for (void* p : blocks) std::free(p);
  }
}

size_t cached_host_bytes() { return cache().bytes.load(std::memory_order_relaxed); }
bool host_block_cache_enabled() { return kCacheEnabled; }

int cuda_device_count() {
#ifdef STRATA_WITH_CUDA
  return cuda_count();
#else
  return 0;
#endif
}

}  // namespace strata::detail
