// Raw memory on a device: allocate, free, and copy bytes between host and devices.
// The host path is always built; the CUDA path (core/cuda/) only with STRATA_WITH_CUDA, and without
// it every CUDA request raises Unavailable. Thread-safety: all functions are safe from any thread.
#pragma once

#include <cstddef>

#include "strata/device.h"

namespace strata::detail {

// 64-byte aligned on the host.
void* device_alloc(size_t nbytes, Device device);
void device_free(void* p, Device device);
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
// Whether this build can use CUDA devices and how many there are (0 without CUDA).
int cuda_device_count();

}  // namespace strata::detail
