// Large scratch buffers that go back to a small process-wide cache when released, instead of to the
// kernel. Why: every epoch of a pipeline opens its files and builds its shuffle again, and each fresh
// multi-megabyte buffer costs the kernel a page fault and a page zeroing as it is first written
// (page zeroing alone was 2.6% of the 1-thread Fashion-MNIST GZIP pipeline's profile). A
// buffer of 2 MiB or more is aligned to 2 MiB and asked for in huge pages (a hint), which also spares
// TLB misses when it is read at random (shuffle rows).
//
// The cache keeps at most kMaxKeptBuffers buffers and kMaxKeptBytes bytes in all; beyond that, the
// buffer released longest ago is freed. Contents of a recycled buffer are unspecified (not zeroed).
// Thread-safety: RecycledBuffer is a move-only owner (one thread at a time); the cache is guarded by
// a mutex and shared by all threads.
#pragma once

#include <cstddef>
#include <utility>

namespace strata::data::detail {

inline constexpr size_t kMaxKeptBuffers = 8;
inline constexpr size_t kMaxKeptBytes = size_t{128} << 20;

class RecycledBuffer {
 public:
  RecycledBuffer() = default;
  // A buffer of at least `bytes` bytes: a cached one when one is large enough, else a new one.
  // Throws std::bad_alloc when memory runs out.
  explicit RecycledBuffer(size_t bytes);
  ~RecycledBuffer() { release(); }
  RecycledBuffer(RecycledBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}
  RecycledBuffer& operator=(RecycledBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      capacity_ = std::exchange(other.capacity_, 0);
    }
    return *this;
  }
  RecycledBuffer(const RecycledBuffer&) = delete;
  RecycledBuffer& operator=(const RecycledBuffer&) = delete;

  char* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  explicit operator bool() const { return data_ != nullptr; }
  // Makes room for at least `bytes`, keeping the first `keep` bytes (a larger buffer when needed).
  void grow(size_t bytes, size_t keep);
  // Gives the buffer back to the cache (or frees it); the object is empty afterwards.
  void release();

 private:
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

// How many bytes the cache holds now (tests).
size_t recycled_bytes_kept();

}  // namespace strata::data::detail
