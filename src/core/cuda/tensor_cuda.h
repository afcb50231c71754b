// The element-wise work a Tensor does on its own storage when that lives on a GPU (core/tensor.cc): fill and dtype
// conversion. Plain C++ declarations (no CUDA header), defined by nvcc in tensor_cuda.cu; built only with
// STRATA_WITH_CUDA. Both queue their kernel on the device's stream and return without waiting (the stream orders
// them before later kernels, copies and frees of the device). Thread-safety: safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "strata/dtype.h"

namespace strata::detail {

// Sets `n` elements of `elem_size` bytes (1, 2, 4 or 8; `p` aligned to it) on CUDA device `device` to the bit
// pattern in the low `elem_size` bytes of `pattern`.
void cuda_fill(void* p, size_t elem_size, uint64_t pattern, int64_t n, int device);
// dst[i] = src[i] converted from `from` to `to` for n elements on `device`, as the host converts (bfloat16 rounds
// to nearest even and keeps NaN a NaN; float to integer truncates toward zero).
void cuda_convert(const void* src, DType from, void* dst, DType to, int64_t n, int device);

}  // namespace strata::detail
