// Internal: the element-wise sum of replicas' gradients in replica order, ((p0 + p1) + p2) + ..., the
// order every strategy (and the ring all-reduce) uses, so that every path gives the same bits.
// Thread-safety: a pure function of its arguments.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace strata::distribute::detail {

// dst[begin, end) = the sum of parts[r][begin, end) over r in order; a null part is zeros (adding
// zeros changes nothing, so it is skipped); no part at all gives zeros.
inline void sum_in_order(const std::vector<const float*>& parts, float* dst, int64_t begin, int64_t end) {
  const float* first = nullptr;
  const float* second = nullptr;
  size_t next = 0;
  for (; next < parts.size() && second == nullptr; ++next) {
    if (parts[next] == nullptr) continue;
    (first == nullptr ? first : second) = parts[next];
  }
  if (first == nullptr) {
    std::fill(dst + begin, dst + end, 0.0f);
    return;
  }
  if (second == nullptr) {
    std::copy(first + begin, first + end, dst + begin);
    return;
  }
  for (int64_t e = begin; e < end; ++e) dst[e] = first[e] + second[e];  // the first two in one pass
  for (; next < parts.size(); ++next) {
    const float* src = parts[next];
    if (src == nullptr) continue;
    for (int64_t e = begin; e < end; ++e) dst[e] += src[e];
  }
}

}  // namespace strata::distribute::detail
