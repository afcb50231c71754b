// Internal: the element-wise sum of replicas' gradients in replica order, ((p0 + p1) + p2) + ..., the
// order every strategy (and the ring all-reduce) uses and GradientApplier::update_summed promises, so
// that every path gives the same bits. Thread-safety: a pure function of its arguments.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace strata::detail {

// dst[0, n) = the sum over r, in order, of parts[r][offset, offset + n); a null part is zeros (adding
// zeros changes nothing, so it is skipped); no part at all gives zeros.
inline void sum_in_order(const std::vector<const float*>& parts, int64_t offset, int64_t n, float* dst) {
  const float* first = nullptr;
  const float* second = nullptr;
  size_t next = 0;
  for (; next < parts.size() && second == nullptr; ++next) {
    if (parts[next] == nullptr) continue;
    (first == nullptr ? first : second) = parts[next] + offset;
  }
  if (first == nullptr) {
    std::fill(dst, dst + n, 0.0f);
    return;
  }
  if (second == nullptr) {
    std::copy(first, first + n, dst);
    return;
  }
  for (int64_t e = 0; e < n; ++e) dst[e] = first[e] + second[e];  // the first two in one pass
  for (; next < parts.size(); ++next) {
    if (parts[next] == nullptr) continue;
    const float* src = parts[next] + offset;
    for (int64_t e = 0; e < n; ++e) dst[e] += src[e];
  }
}

}  // namespace strata::detail
