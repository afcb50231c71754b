// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and
// distributions built on it.
#include "strata/random.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "strata/error.h"
#include "strata/threading.h"

namespace strata {

namespace {
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

std::array<uint32_t, 4> philox(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return ctr;
}

// 24 random bits -> [0, 1).
inline float to_unit(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

// Bernoulli(p) values from kLanes consecutive counters, first.. first + kLanes - 1: out[4 * l + j] is 1 when word j
// of philox()'s block for counter first + l, as to_unit, is below p.
constexpr int kLanes = 16;
void bernoulli_lanes_scalar(uint64_t first, uint64_t stream, uint64_t seed, float p, float* out) {
  const std::array<uint32_t, 2> key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t off = first + static_cast<uint64_t>(l);
    const auto b = philox({static_cast<uint32_t>(off), static_cast<uint32_t>(off >> 32), static_cast<uint32_t>(stream),
                           static_cast<uint32_t>(stream >> 32)},
                          key);
    for (int j = 0; j < 4; ++j) out[4 * l + j] = to_unit(b[j]) < p ? 1.0f : 0.0f;
  }
}

// The same on 16 lanes of AVX-512 registers, one register per word (the build targets plain x86-64; GCC does not
// vectorise philox's high-half products by itself). vpmuludq multiplies the even 32-bit lanes; the odd ones are
// shifted down, multiplied, and the halves blended back.
__attribute__((target("avx512f"))) void bernoulli_lanes_avx512(uint64_t first, uint64_t stream, uint64_t seed,
                                                               float p, float* out) {
  alignas(64) uint32_t lo_words[kLanes], hi_words[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t off = first + static_cast<uint64_t>(l);
    lo_words[l] = static_cast<uint32_t>(off);
    hi_words[l] = static_cast<uint32_t>(off >> 32);
  }
  __m512i c0 = _mm512_load_si512(lo_words), c1 = _mm512_load_si512(hi_words);
  __m512i c2 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream)));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream >> 32)));
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const __m512i m0 = _mm512_set1_epi64(kMul0), m1 = _mm512_set1_epi64(kMul1);
  constexpr __mmask16 kOdd = 0xAAAA;
  const auto mul_hi_lo = [&](__m512i x, __m512i m, __m512i& hi, __m512i& lo) __attribute__((target("avx512f"))) {
    // The zero-masked forms with every lane kept: GCC 12's plain ones read an "undefined" register and -Werror
    // stops at its -Wuninitialized.
    constexpr __mmask8 kAll = 0xFF;
    const __m512i even = _mm512_maskz_mul_epu32(kAll, x, m);  // lanes 0, 2, ...: 64-bit products
    const __m512i odd = _mm512_maskz_mul_epu32(kAll, _mm512_maskz_srli_epi64(kAll, x, 32), m);  // lanes 1, 3, ...
    hi = _mm512_mask_blend_epi32(kOdd, _mm512_maskz_srli_epi64(kAll, even, 32), odd);
    lo = _mm512_mask_blend_epi32(kOdd, even, _mm512_maskz_slli_epi64(kAll, odd, 32));
  };
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    mul_hi_lo(c0, m0, hi0, lo0);
    mul_hi_lo(c2, m1, hi1, lo1);
    const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  // to_unit(x) < p compares 24-bit integers exactly: (x >> 8) * 2^-24 < p  <=>  (x >> 8) < ceil(p * 2^24). A p that
  // is not above 0 (NaN included) keeps nothing, as the float comparison would.
  const double scaled = p > 0.0f ? std::min(std::ceil(static_cast<double>(p) * 16777216.0), 16777216.0) : 0.0;
  const __m512i threshold = _mm512_set1_epi32(static_cast<int>(scaled));
  const __m512 one = _mm512_set1_ps(1.0f);
  alignas(64) float words[4][kLanes];
  const __m512i c[4] = {c0, c1, c2, c3};
  for (int j = 0; j < 4; ++j) {
    const __mmask16 below = _mm512_cmplt_epu32_mask(_mm512_maskz_srli_epi32(0xFFFF, c[j], 8), threshold);
    _mm512_store_ps(words[j], _mm512_maskz_mov_ps(below, one));
  }
  for (int l = 0; l < kLanes; ++l)
    for (int j = 0; j < 4; ++j) out[4 * l + j] = words[j][l];
}

void bernoulli_lanes(uint64_t first, uint64_t stream, uint64_t seed, float p, float* out) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    bernoulli_lanes_avx512(first, stream, seed, p, out);
  } else {
    bernoulli_lanes_scalar(first, stream, seed, p, out);
  }
}
}  // namespace

std::array<uint32_t, 4> Generator::next_block() {
  const uint64_t off = state_.offset++;
  const std::array<uint32_t, 4> ctr = {static_cast<uint32_t>(off), static_cast<uint32_t>(off >> 32),
                                       static_cast<uint32_t>(state_.stream),
                                       static_cast<uint32_t>(state_.stream >> 32)};
  return philox(ctr, {static_cast<uint32_t>(state_.seed), static_cast<uint32_t>(state_.seed >> 32)});
}

float Generator::uniform() { return to_unit(next_block()[0]); }

uint64_t Generator::uniform_int(uint64_t n) {
  STRATA_CHECK(n > 0, InvalidArgument, "uniform_int: n must be positive");
  const auto b = next_block();
  const uint64_t x = (static_cast<uint64_t>(b[0]) << 32) | b[1];
  return x % n;  // bias below 2^-32 for n < 2^32
}

void Generator::fill_uniform(float* out, int64_t n, float low, float high) {
  const float range = high - low;
  for (int64_t i = 0; i < n; i += 4) {
    const auto b = next_block();
    for (int64_t j = 0; j < 4 && i + j < n; ++j) out[i + j] = low + range * to_unit(b[j]);
  }
}

void Generator::fill_normal(float* out, int64_t n, float mean, float stddev) {
  constexpr double kTwoPi = 6.283185307179586;
  for (int64_t i = 0; i < n; i += 4) {
    const auto b = next_block();
    for (int pair = 0; pair < 2; ++pair) {
      // u1 in (0, 1] so log(u1) is finite.
      const double u1 = (static_cast<double>(b[2 * pair]) + 1.0) / 4294967296.0;
      const double u2 = static_cast<double>(b[2 * pair + 1]) / 4294967296.0;
      const double r = std::sqrt(-2.0 * std::log(u1));
      const double z[2] = {r * std::cos(kTwoPi * u2), r * std::sin(kTwoPi * u2)};
      for (int k = 0; k < 2; ++k) {
        const int64_t idx = i + 2 * pair + k;
        if (idx < n) out[idx] = mean + stddev * static_cast<float>(z[k]);
      }
    }
  }
}

void Generator::fill_truncated_normal(float* out, int64_t n, float mean, float stddev) {
  float z[4];
  int64_t filled = 0;
  while (filled < n) {
    fill_normal(z, 4, 0.0f, 1.0f);
    for (float v : z)
      if (std::fabs(v) <= 2.0f && filled < n) out[filled++] = mean + stddev * v;
  }
}

void Generator::fill_bernoulli(float* out, int64_t n, float p) {
  if (n <= 0) return;
  // Reserve the blocks a sequential fill would consume, then draw them in runs of kLanes on any thread.
  const uint64_t first = state_.offset;
  const int64_t blocks = (n + 3) / 4;
  state_.offset += static_cast<uint64_t>(blocks);
  const State s = state_;
  const int64_t runs = (blocks + kLanes - 1) / kLanes;
  constexpr int64_t kRunsPerChunk = 64;  // 4096 values: philox's work dwarfs a thread hand-off
  parallel_for(0, runs, kRunsPerChunk, [&](int64_t r0, int64_t r1) {
    float tail[4 * kLanes];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r * 4 * kLanes;  // the run's first value
      const uint64_t block0 = first + static_cast<uint64_t>(r * kLanes);
      if (i + 4 * kLanes <= n) {
        bernoulli_lanes(block0, s.stream, s.seed, p, out + i);
      } else {  // the last, partial run
        bernoulli_lanes(block0, s.stream, s.seed, p, tail);
        std::copy(tail, tail + (n - i), out + i);
      }
    }
  });
}

Generator& default_generator() {
  thread_local Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator() = Generator(seed); }

}  // namespace strata
