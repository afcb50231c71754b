// Pinned (page-locked) host memory for the input pipeline's copies to a GPU (core/device_memory.h), built only with
// STRATA_WITH_CUDA. cudaHostAlloc costs milliseconds and a pipeline pins a batch of one size every step, so freed
// blocks are cached by size (as PyTorch's CachingHostAllocator does). Each block carries an event per copy queued
// from it (copy_to_device_async); a cached block is handed out again only once all of them have completed, so a
// new batch never overwrites bytes a queued copy has yet to read.
// Thread-safety: one mutex guards the blocks; CUDA calls that may block (cudaHostAlloc, cudaFreeHost) run outside it.
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cuda/cuda_context.h"
#include "core/device_allocator.h"
#include "core/device_memory.h"
#include "strata/error.h"

namespace strata::detail {

namespace {

constexpr size_t kPage = 4096;

struct Block {
  size_t size = 0;
  std::vector<cudaEvent_t> pending;  // recorded after each copy queued from the block
};

struct PinnedCache {
  std::mutex mu;
  std::unordered_map<void*, Block> live;    // handed out
  std::multimap<size_t, std::pair<void*, Block>> cached;  // freed, by size
  size_t cached_bytes = 0;
};

// Never destroyed: a pinned tensor in a static object may be freed after every static destructor ran.
PinnedCache& cache() {
  static PinnedCache* c = new PinnedCache;
  return *c;
}

// Whether every copy queued from `b` has run; destroys the events of those that have.
bool copies_done(Block& b) {
  while (!b.pending.empty()) {
    const cudaError_t status = cudaEventQuery(b.pending.back());
    if (status == cudaErrorNotReady) return false;
    cudaGetLastError();  // an earlier kernel's error surfaces on the stream's next synchronization
    cudaEventDestroy(b.pending.back());
    b.pending.pop_back();
  }
  return true;
}

// Takes the cached blocks whose copies have run out of the cache (under the lock) for freeing outside it.
std::vector<void*> take_idle_blocks(PinnedCache& c) {
  std::vector<void*> idle;
  for (auto it = c.cached.begin(); it != c.cached.end();) {
    if (copies_done(it->second.second)) {
      idle.push_back(it->second.first);
      c.cached_bytes -= it->first;
      it = c.cached.erase(it);
    } else {
      ++it;
    }
  }
  return idle;
}

}  // namespace

void* pinned_alloc(size_t nbytes) {
  const size_t size = (std::max<size_t>(nbytes, 1) + kPage - 1) / kPage * kPage;
  PinnedCache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto [it, end] = c.cached.equal_range(size); it != end; ++it) {
      if (!copies_done(it->second.second)) continue;
      void* p = it->second.first;
      c.live.emplace(p, std::move(it->second.second));
      c.cached_bytes -= size;
      c.cached.erase(it);
      return p;
    }
  }
  void* p = nullptr;
  cudaError_t status = cudaHostAlloc(&p, size, cudaHostAllocPortable);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    release_cached_pinned_blocks();
    status = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      STRATA_THROW(OutOfMemory, "pinned host memory is exhausted: cudaHostAlloc of " << format_bytes(size)
                                    << " failed (the system limits page-locked memory: ulimit -l)");
    }
  }
  cuda::check(status, "cudaHostAlloc (pinned host memory)");
  std::lock_guard<std::mutex> lock(c.mu);
  c.live.emplace(p, Block{size, {}});
  return p;
}

void pinned_free(void* p) noexcept {
  if (p == nullptr) return;
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.live.find(p);
  if (it == c.live.end()) return;  // not ours: nothing to give back
  const size_t size = it->second.size;
  c.cached.emplace(size, std::make_pair(p, std::move(it->second)));
  c.cached_bytes += size;
  c.live.erase(it);
}

void release_cached_pinned_blocks() {
  PinnedCache& c = cache();
  std::vector<void*> idle;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    idle = take_idle_blocks(c);
  }
  for (void* p : idle) cudaFreeHost(p);
  cudaGetLastError();
}

size_t cached_pinned_bytes() {
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.cached_bytes;
}

// Records, on `stream`, that a copy from pinned block `block` was queued there (core/cuda/device_memory_cuda.cc).
void record_pinned_use(const void* block, cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  cuda::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  const cudaError_t status = cudaEventRecord(event, stream);
  if (status != cudaSuccess) {
    cudaEventDestroy(event);
    cuda::check(status, "cudaEventRecord");
  }
  PinnedCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.live.find(const_cast<void*>(block));
  if (it == c.live.end()) {  // not a block of pinned_alloc: the caller broke the contract, but wait rather than race
    cudaEventSynchronize(event);
    cudaEventDestroy(event);
    return;
  }
  it->second.pending.push_back(event);
}

}  // namespace strata::detail
