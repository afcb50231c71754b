// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and
// distributions built on it.
#include "strata/random.h"

#include <cmath>

#include "strata/error.h"

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
  for (int64_t i = 0; i < n; i += 4) {
    const auto b = next_block();
    for (int64_t j = 0; j < 4 && i + j < n; ++j) out[i + j] = to_unit(b[j]) < p ? 1.0f : 0.0f;
  }
}

Generator& default_generator() {
  thread_local Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator() = Generator(seed); }

}  // namespace strata
