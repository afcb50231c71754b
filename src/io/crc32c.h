// CRC-32C (Castagnoli; iSCSI, ext4, the checksum of safetensors tensors here and of TFRecord records) through ISA-L's
// crc32_iscsi, which picks the fastest code this CPU runs. io holds it because io is the lowest layer that checks
// bytes: data's TFRecord format (data/formats/masked_crc32c.h) uses it too.
// Thread-safety: pure functions.
#pragma once

#include <isa-l/crc.h>

#include <cstddef>
#include <cstdint>

namespace strata::io::detail {

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

}  // namespace strata::io::detail
