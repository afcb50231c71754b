// Raw memory on a device: allocate, free, and copy bytes between host and devices.
// The host path is always built; the CUDA path (core/cuda/) only with STRATA_WITH_CUDA, and without
// it every CUDA request raises Unavailable. Thread-safety: all functions are safe from any thread.
#pragma once

#include <cstddef>

#include "strata/device.h"

namespace strata::detail {

// 64-byte aligned on the host. Small host blocks (up to 256 KiB) are recycled through a bounded,
// size-bucketed cache of freed blocks (not in AddressSanitizer builds, so it still sees
// use-after-free); `nbytes` given to device_free must be the one given to device_alloc.
void* device_alloc(size_t nbytes, Device device);
void device_free(void* p, Device device, size_t nbytes);
// Frees every cached host block (tests; a program that wants its idle memory back).
void release_cached_host_blocks();
// Bytes currently held by the host block cache; whether this build has the cache.
size_t cached_host_bytes();
bool host_block_cache_enabled();
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
// Page-locked (pinned) host memory for copies to a GPU that need not wait (CUDA builds; Unavailable without CUDA).
// Blocks are cached by size: cudaHostAlloc costs milliseconds and an input pipeline pins a batch of one size each
// step. A freed block is handed out again only once every copy queued from it (copy_to_device_async) has run.
void* pinned_alloc(size_t nbytes);
void pinned_free(void* p) noexcept;
// Frees the cached pinned blocks whose copies have run; the bytes they hold.
void release_cached_pinned_blocks();
size_t cached_pinned_bytes();
// Queues a copy of `nbytes` from host memory `src`, inside the pinned block `block` (from pinned_alloc), to `dst`
// on CUDA device `dst_device`, and returns without waiting: the device's later work sees the bytes (same stream),
// the block is not reused until the copy ran, but the caller must not write to `src` before it has
// (a Tensor's pin_memory() gives a fresh block each time).
void copy_to_device_async(void* dst, Device dst_device, const void* src, const void* block, size_t nbytes);
// Whether this build can use CUDA devices and how many there are (0 without CUDA).
int cuda_device_count();

}  // namespace strata::detail
