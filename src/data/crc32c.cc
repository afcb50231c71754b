// CRC32C: the VPCLMULQDQ fold (crc_fold.h) on long inputs where the CPU has it, else the SSE4.2
// crc32 instruction (three interleaved streams on long inputs), else a portable slicing-by-8 table.
// Thread-safety: pure functions (the tables are built once, thread-safely, by a function-local static).
#include "data/crc32c.h"

#include <array>
#include <cstring>

#include "data/crc_fold.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace strata::data::detail {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t;
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
      t[0][i] = c;
    }
    for (int s = 1; s < 8; ++s)
      for (uint32_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
};

uint32_t crc_table(uint32_t crc, const uint8_t* p, size_t n) {
  static const Tables tables;
  const auto& t = tables.t;
  crc = ~crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= crc;  // little-endian
    crc = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^ t[4][(v >> 24) & 0xff] ^
          t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

#if defined(__x86_64__)
// One crc32 instruction has a latency of ~3 cycles but the CPU starts one per cycle, so long inputs
// run as three interleaved streams of kBlock bytes, joined by CRC's linearity:
//   crc(s, A B) = shift_B(crc(s, A)) ^ crc(0, B),  shift_B(s) = s * x^(8|B|) mod P,
// a linear map of the 32-bit state, applied a byte at a time through four tables.
constexpr size_t kBlock = 128;

__attribute__((target("sse4.2"))) uint32_t shift_zeros(uint32_t s, size_t bytes) {
  uint64_t c = s;
  for (size_t i = 0; i < bytes; i += 8) c = _mm_crc32_u64(c, 0);
  return static_cast<uint32_t>(c);
}

struct ShiftTables {
  uint32_t t[4][256];
  ShiftTables() {
    for (int k = 0; k < 4; ++k)
      for (uint32_t b = 0; b < 256; ++b) t[k][b] = shift_zeros(b << (8 * k), kBlock);
  }
  uint32_t shift(uint32_t s) const {
    return t[0][s & 0xff] ^ t[1][(s >> 8) & 0xff] ^ t[2][(s >> 16) & 0xff] ^ t[3][s >> 24];
  }
};

__attribute__((target("sse4.2"))) uint32_t crc_sse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = ~crc;
  if (n >= 3 * kBlock) {
    static const ShiftTables tables;
    do {
      uint64_t a = c, b = 0, d = 0, v;
      for (size_t i = 0; i < kBlock; i += 8) {
        std::memcpy(&v, p + i, 8);
        a = _mm_crc32_u64(a, v);
        std::memcpy(&v, p + kBlock + i, 8);
        b = _mm_crc32_u64(b, v);
        std::memcpy(&v, p + 2 * kBlock + i, 8);
        d = _mm_crc32_u64(d, v);
      }
      c = tables.shift(tables.shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(d);
      p += 3 * kBlock;
      n -= 3 * kBlock;
    } while (n >= 3 * kBlock);
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}
#endif

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  if (has_sse42 && n >= kCrcFoldMinBytes + 16 && has_crc_fold()) {
    // The first n % 16 bytes on their own, so that the fold sees whole lanes.
    const size_t head = n % 16;
    if (head) crc = crc_sse42(crc, p, head);
    return crc_fold(CrcPolynomial::kCastagnoli, crc, p + head, n - head);
  }
  if (has_sse42) return crc_sse42(crc, p, n);
#endif
  return crc_table(crc, p, n);
}

}  // namespace strata::data::detail
