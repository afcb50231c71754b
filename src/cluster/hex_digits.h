// Lowercase hex of raw bytes: how the job's secret, id and call proofs are spelled.
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <string>

namespace strata::cluster::detail {

inline std::string hex_digits(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

}  // namespace strata::cluster::detail
