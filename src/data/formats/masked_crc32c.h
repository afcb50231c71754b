// CRC-32C (Castagnoli), the checksum of TFRecord files, through ISA-L's crc32_iscsi (which picks the
// fastest code this CPU runs), and TensorFlow's "masked" form of it.
// Thread-safety: pure functions.
#pragma once

#include <isa-l/crc.h>

#include <cstddef>
#include <cstdint>

namespace strata::data::detail {

// Extends `crc`, the CRC-32C of some prefix (0 for none), with data[0, n); crc32c_extend(0, d, n) is
// crc32c(d, n). crc32_iscsi neither inverts its seed nor its result: the standard inversions are added.
inline uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));  // crc32_iscsi only reads
  crc = ~crc;
  while (n > 0) {  // crc32_iscsi takes an int length
    const int chunk = static_cast<int>(n < (size_t{1} << 30) ? n : (size_t{1} << 30));
    crc = crc32_iscsi(p, chunk, crc);
    p += chunk;
    n -= static_cast<size_t>(chunk);
  }
  return ~crc;
}
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// TFRecord stores masked CRCs, so that a CRC of bytes holding CRCs is not degenerate.
inline uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace strata::data::detail
