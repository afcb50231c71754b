// CRC folding with VPCLMULQDQ (see crc_fold.h). The message is read as little-endian 128-bit lanes,
// bit-reflected like the CRCs themselves. A lane X (64-bit halves X0, X1) moved D bits further along
// the message keeps its remainder as  X0 * k(D + 32)  ^  X1 * k(D - 32)  (carry-less products), where
// k(n) = reflect32(x^n mod P) << 1; the last 128 bits are reduced to 32 with Barrett's method.
// Thread-safety: pure functions (the constants are compile-time values).
#include "data/crc_fold.h"

#include <libdeflate.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::data::detail {

namespace {

// ---- constants, from the polynomial (33 bits, with its x^32 term)

constexpr uint64_t kGzipPolynomial = 0x104C11DB7;
constexpr uint64_t kCastagnoliPolynomial = 0x11EDC6F41;

constexpr uint64_t reflect(uint64_t v, int bits) {
  uint64_t r = 0;
  for (int i = 0; i < bits; ++i)
    if ((v >> i) & 1) r |= uint64_t{1} << (bits - 1 - i);
  return r;
}

// x^n mod P.
constexpr uint64_t xpow_mod(unsigned n, uint64_t poly) {
  uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if ((r >> 32) & 1) r ^= poly;
  }
  return r;
}

constexpr uint64_t fold_k(unsigned n, uint64_t poly) { return reflect(xpow_mod(n, poly), 32) << 1; }

// floor(x^64 / P), the 33-bit quotient Barrett's reduction multiplies by.
constexpr uint64_t barrett_quotient(uint64_t poly) {
  unsigned __int128 rem = static_cast<unsigned __int128>(1) << 64;
  uint64_t q = 0;
  for (int bit = 64; bit >= 32; --bit) {
    if (static_cast<uint64_t>(rem >> bit) & 1) {
      q |= uint64_t{1} << (bit - 32);
      rem ^= static_cast<unsigned __int128>(poly) << (bit - 32);
    }
  }
  return q;
}

struct FoldConstants {
  // Per distance D: {k(D + 32), k(D - 32)}, the multipliers of a lane's low and high halves.
  uint64_t d2048[2], d512[2], d384[2], d256[2], d128[2];
  uint64_t k96, k64;    // 128 -> 64 -> 32 bits of remainder
  uint64_t mu, p;       // Barrett: reflected floor(x^64 / P) and P
};

constexpr FoldConstants fold_constants(uint64_t poly) {
  FoldConstants c{};
  auto pair = [&](unsigned d, uint64_t* out) {
    out[0] = fold_k(d + 32, poly);
    out[1] = fold_k(d - 32, poly);
  };
  pair(2048, c.d2048);
  pair(512, c.d512);
  pair(384, c.d384);
  pair(256, c.d256);
  pair(128, c.d128);
  c.k96 = fold_k(96, poly);
  c.k64 = fold_k(64, poly);
  c.mu = reflect(barrett_quotient(poly), 33);
  c.p = reflect(poly, 33);
  return c;
}

constexpr FoldConstants kGzip = fold_constants(kGzipPolynomial);
constexpr FoldConstants kCastagnoli = fold_constants(kCastagnoliPolynomial);

// The published constants of gzip's CRC-32 (Intel's paper, the Linux kernel's crc32-pclmul).
static_assert(kGzip.d512[0] == 0x154442bd4 && kGzip.d512[1] == 0x1c6e41596);
static_assert(kGzip.d128[0] == 0x1751997d0 && kGzip.d128[1] == 0x0ccaa009e);
static_assert(kGzip.k96 == 0x0ccaa009e && kGzip.k64 == 0x163cd6124);
static_assert(kGzip.mu == 0x1F7011641 && kGzip.p == 0x1DB710641);

#if defined(__x86_64__)
#define STRATA_CRC_FOLD_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")))

STRATA_CRC_FOLD_TARGET inline __m512i lanes(const uint64_t* k) { return _mm512_broadcast_i32x4(_mm_set_epi64x(k[1], k[0])); }

// Every lane of x moved along by the distance of `k`'s lanes, plus `next`.
STRATA_CRC_FOLD_TARGET inline __m512i fold(__m512i x, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), next,
                                   0x96);
}

STRATA_CRC_FOLD_TARGET uint32_t fold_avx512(const FoldConstants& c, uint32_t crc, const uint8_t* p, size_t n) {
  const __m512i k2048 = lanes(c.d2048), k512 = lanes(c.d512);
  // Four blocks of 64 bytes at a time; the CRC so far enters as the first 32 bits of the message.
  __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_inserti32x4(_mm512_setzero_si512(),
                                                                          _mm_cvtsi32_si128(static_cast<int>(~crc)), 0));
  __m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
  p += 256;
  n -= 256;
  for (; n >= 256; p += 256, n -= 256) {
    x0 = fold(x0, k2048, _mm512_loadu_si512(p));
    x1 = fold(x1, k2048, _mm512_loadu_si512(p + 64));
    x2 = fold(x2, k2048, _mm512_loadu_si512(p + 128));
    x3 = fold(x3, k2048, _mm512_loadu_si512(p + 192));
  }
  __m512i x = fold(fold(fold(x0, k512, x1), k512, x2), k512, x3);
  for (; n >= 64; p += 64, n -= 64) x = fold(x, k512, _mm512_loadu_si512(p));
  // The block's first three lanes moved onto its last.
  const __m512i to_last = _mm512_set_epi64(0, 0, static_cast<int64_t>(c.d128[1]), static_cast<int64_t>(c.d128[0]),
                                           static_cast<int64_t>(c.d256[1]), static_cast<int64_t>(c.d256[0]),
                                           static_cast<int64_t>(c.d384[1]), static_cast<int64_t>(c.d384[0]));
  const __m512i moved = fold(x, to_last, _mm512_setzero_si512());
  __m128i y = _mm_ternarylogic_epi64(_mm512_extracti32x4_epi32(moved, 0), _mm512_extracti32x4_epi32(moved, 1),
                                     _mm512_extracti32x4_epi32(moved, 2), 0x96);
  y = _mm_xor_si128(y, _mm512_extracti32x4_epi32(x, 3));
  const __m128i k128 = _mm_set_epi64x(static_cast<int64_t>(c.d128[1]), static_cast<int64_t>(c.d128[0]));
  for (; n >= 16; p += 16, n -= 16)
    y = _mm_ternarylogic_epi64(_mm_clmulepi64_si128(y, k128, 0x00), _mm_clmulepi64_si128(y, k128, 0x11),
                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), 0x96);
  // 128 -> 96 -> 64 bits, then Barrett's reduction to the 32-bit remainder.
  const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
  const __m128i k = _mm_set_epi64x(static_cast<int64_t>(c.k64), static_cast<int64_t>(c.k96));
  y = _mm_xor_si128(_mm_clmulepi64_si128(y, k, 0x00), _mm_srli_si128(y, 8));
  y = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(y, low32), k, 0x10), _mm_srli_si128(y, 4));
  const __m128i barrett = _mm_set_epi64x(static_cast<int64_t>(c.mu), static_cast<int64_t>(c.p));
  __m128i t = _mm_clmulepi64_si128(_mm_and_si128(y, low32), barrett, 0x10);
  t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
  return ~static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(y, t), 1));
}
#endif

}  // namespace

bool has_crc_fold() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul");
  return has;
#else
  return false;
#endif
}

uint32_t crc_fold(CrcPolynomial poly, uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  return fold_avx512(poly == CrcPolynomial::kGzip ? kGzip : kCastagnoli, crc, static_cast<const uint8_t*>(data), n);
#else
  (void)poly, (void)crc, (void)data, (void)n;
  return 0;  // unreachable: has_crc_fold() is false
#endif
}

uint32_t crc32_gzip(uint32_t crc, const void* data, size_t n) {
  if (n < kCrcFoldMinBytes + 16 || !has_crc_fold()) return static_cast<uint32_t>(libdeflate_crc32(crc, data, n));
  // The first n % 16 bytes on their own, so that the fold sees whole lanes.
  const size_t head = n % 16;
  const auto* p = static_cast<const uint8_t*>(data);
  if (head) crc = static_cast<uint32_t>(libdeflate_crc32(crc, p, head));
  return crc_fold(CrcPolynomial::kGzip, crc, p + head, n - head);
}

}  // namespace strata::data::detail
