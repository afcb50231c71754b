// DeviceAllocator's bookkeeping (device_allocator.h). Thread-safety: the counters are atomics; the peak is raised
// with a compare-and-swap loop, so it never misses a concurrent high.
#include "core/device_allocator.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "strata/error.h"

namespace strata::detail {

std::string format_bytes(size_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  double v = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (v >= 1024 && unit < 4) v /= 1024, ++unit;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[unit]);
  return buf;
}

DeviceAllocator::DeviceAllocator(Device device, std::unique_ptr<MemoryBackend> backend)
    : device_(device), backend_(std::move(backend)) {}

void* DeviceAllocator::allocate(size_t nbytes) {
  const size_t asked = std::max<size_t>(nbytes, 1);
  void* p = backend_->allocate(asked);
  if (p == nullptr) {
    // The pool's cached blocks may not fit this request where fresh memory would: give them back, try once more.
    backend_->release_cached();
    p = backend_->allocate(asked);
  }
  if (p == nullptr) throw OutOfMemory(out_of_memory_message(nbytes));
  const size_t now = in_use_.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  allocations_.fetch_add(1, std::memory_order_relaxed);
  total_allocations_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void DeviceAllocator::deallocate(void* p, size_t nbytes) noexcept {
  if (p == nullptr) return;
  backend_->deallocate(p, std::max<size_t>(nbytes, 1));
  in_use_.fetch_sub(nbytes, std::memory_order_relaxed);
  allocations_.fetch_sub(1, std::memory_order_relaxed);
}

MemoryStats DeviceAllocator::stats() const {
  MemoryStats s;
  s.in_use = in_use_.load(std::memory_order_relaxed);
  s.peak = std::max(peak_.load(std::memory_order_relaxed), s.in_use);
  s.allocations = allocations_.load(std::memory_order_relaxed);
  s.total_allocations = total_allocations_.load(std::memory_order_relaxed);
  s.reserved = backend_->reserved();
  return s;
}

void DeviceAllocator::reset_peak() { peak_.store(in_use_.load(std::memory_order_relaxed), std::memory_order_relaxed); }

std::string DeviceAllocator::out_of_memory_message(size_t nbytes) const {
  const MemoryStats s = stats();
  std::ostringstream os;
  os << device_.str() << " is out of memory: asked for " << format_bytes(nbytes);
  if (nbytes >= 1024) os << " (" << nbytes << " bytes)";
  os << "; strata has " << format_bytes(s.in_use) << " in " << s.allocations
     << (s.allocations == 1 ? " allocation" : " allocations") << ", its pool reserves " << format_bytes(s.reserved);
  if (const auto m = backend_->device_memory())
    os << "; the device has " << format_bytes(m->free) << " free of " << format_bytes(m->total);
  os << " (a smaller batch_size needs less; empty_cache() returns the pool's cached blocks to other processes)";
  return os.str();
}

}  // namespace strata::detail
