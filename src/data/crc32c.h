// CRC32C (Castagnoli), the checksum of TFRecord files, and TensorFlow's "masked" form of it.
//
// Uses carry-less multiplication folding (crc_fold.h) on inputs of 272 bytes or more and the SSE4.2
// crc32 instruction on shorter ones when the CPU has them (checked once at run time), else a
// slicing-by-8 table. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::data::detail {

// Extends `crc` (the CRC32C of some prefix) with `n` more bytes; crc32c_extend(0, d, n) is crc32c(d, n).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// TFRecord stores masked CRCs, so that a CRC of bytes holding CRCs is not degenerate.
inline uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace strata::data::detail
