// A device's allocator as strata sees it: raw blocks come from a MemoryBackend (on a GPU, the device's
// cudaMallocAsync pool, which keeps freed blocks cached for reuse: core/cuda/device_memory_cuda.cc), and this class
// keeps the bookkeeping (bytes in use, the peak, live and total allocations) and turns a backend's "no room" into
// an OutOfMemory that names the device, the request, what strata has in use and what the device has free.
// It knows nothing of CUDA, so its counting and its errors are tested on the host with a host-memory backend.
// Thread-safety: allocate, deallocate, stats, reset_peak and empty_cache are safe from any thread (the counters are
// atomics); the backend must be too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "strata/device.h"
#include "strata/device_stats.h"

namespace strata::detail {

class MemoryBackend {
 public:
  struct DeviceMemory {
    size_t free = 0;
    size_t total = 0;
  };
  virtual ~MemoryBackend() = default;
  // A block of at least `nbytes` (> 0), or nullptr when the device has no room for it; other failures throw.
  virtual void* allocate(size_t nbytes) = 0;
  // Gives back a block of allocate(nbytes). Must not throw (it runs in destructors).
  virtual void deallocate(void* p, size_t nbytes) noexcept = 0;
  // Bytes the backend holds from the device, cached free blocks included.
  virtual size_t reserved() const = 0;
  // The device's free and total memory now, when the backend can tell (for the out-of-memory message).
  virtual std::optional<DeviceMemory> device_memory() const = 0;
  // Returns cached free blocks to the device.
  virtual void release_cached() = 0;
};

class DeviceAllocator {
 public:
  DeviceAllocator(Device device, std::unique_ptr<MemoryBackend> backend);
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // A block of `nbytes` (a request of 0 gets a 1-byte block, so every tensor has a distinct address). OutOfMemory
  // when the backend has no room, after it has been asked once more with its cached blocks released.
  void* allocate(size_t nbytes);
  // `nbytes` must be the one given to allocate. Never throws.
  void deallocate(void* p, size_t nbytes) noexcept;

  MemoryStats stats() const;
  void reset_peak();
  void empty_cache() { backend_->release_cached(); }
  Device device() const { return device_; }

  // The out-of-memory message: "cuda:0 is out of memory: asked for 2.00 GiB (2147483648 bytes); strata has 1.50 GiB
  // in 12 allocations, its pool reserves 1.75 GiB; the device has 512.00 MiB free of 80.00 GiB". Public for the tests.
  std::string out_of_memory_message(size_t nbytes) const;

 private:
  Device device_;
  std::unique_ptr<MemoryBackend> backend_;
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> total_allocations_{0};
};

// "1.50 GiB", "512.00 MiB", "12.00 KiB", "100 bytes".
std::string format_bytes(size_t bytes);

}  // namespace strata::detail
