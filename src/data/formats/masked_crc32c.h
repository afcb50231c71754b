// CRC-32C (Castagnoli), the checksum of TFRecord files (io/crc32c.h: ISA-L's crc32_iscsi), and TensorFlow's
// "masked" form of it.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "io/crc32c.h"

namespace strata::data::detail {

using io::detail::crc32c;
using io::detail::crc32c_extend;

// TFRecord stores masked CRCs, so that a CRC of bytes holding CRCs is not degenerate.
inline uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace strata::data::detail
