// The framing of one TFRecord record, the one place it is written down: data's TFRecord files
// (strata/data/tfrecord.h) and io's TensorBoard event files (io/event_writer.h) both frame records with it.
//
//   uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
//
// little-endian, as TensorFlow's RecordWriter writes it. CRC-32C is io/crc32c.h's; the "masked" form rotates it and
// adds a constant, so that a CRC of bytes that hold CRCs is not degenerate.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "io/crc32c.h"

namespace strata::io::detail {

inline uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t unmask_crc(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

inline constexpr size_t kRecordHeaderBytes = 12;  // the length and its masked CRC
inline constexpr size_t kRecordFooterBytes = 4;   // the data's masked CRC

// The header of a record of `length` bytes.
inline void encode_record_header(uint64_t length, char header[kRecordHeaderBytes]) {
  std::memcpy(header, &length, 8);  // little-endian hosts only (x86-64, aarch64)
  const uint32_t length_crc = mask_crc(crc32c(header, 8));
  std::memcpy(header + 8, &length_crc, 4);
}

// The footer of a record whose data is data[0, n).
inline void encode_record_footer(const void* data, size_t n, char footer[kRecordFooterBytes]) {
  const uint32_t data_crc = mask_crc(crc32c(data, n));
  std::memcpy(footer, &data_crc, 4);
}

// The length the 12 bytes at `header` hold; false when their CRC does not match (they are not a record header).
inline bool decode_record_header(const char* header, uint64_t* length) {
  uint32_t length_crc;
  std::memcpy(&length_crc, header + 8, 4);
  if (mask_crc(crc32c(header, 8)) != length_crc) return false;
  std::memcpy(length, header, 8);
  return true;
}

// Whether the 4 bytes at `footer` are the masked CRC of data[0, n). The data's CRC is computed before the stored one
// is loaded: the bytes are read front to back, which the cache's prefetcher follows (loading the stored CRC first
// was a cache miss per record in data's reader).
inline bool record_footer_matches(const char* data, size_t n, const char* footer) {
  const uint32_t computed = mask_crc(crc32c(data, n));
  uint32_t stored;
  std::memcpy(&stored, footer, 4);
  return computed == stored;
}

}  // namespace strata::io::detail
