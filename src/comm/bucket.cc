// The reduction kernel of the local collectives: blocks of 2048 elements are combined in a stack buffer (one
// plain loop per input, which the compiler vectorises at -O3) and then stored, so `out` may alias an input.
// Thread-safety: pure functions of their arguments.
#include "comm/bucket.h"

#include <algorithm>
#include <cstring>

namespace strata::comm::detail {
namespace {

constexpr int64_t kBlock = 2048;  // 8 KB: the block and a block of each input stay in L1

struct Add {
  static float apply(float a, float b) { return a + b; }
};
struct Max {
  static float apply(float a, float b) { return a < b ? b : a; }
};
struct Min {
  static float apply(float a, float b) { return b < a ? b : a; }
};

template <class Op>
void reduce_blocks(float* out, const float* const* inputs, int count, int64_t length, float divisor) {
  alignas(64) float acc[kBlock];
  for (int64_t base = 0; base < length; base += kBlock) {
    const int64_t n = std::min(kBlock, length - base);
    const float* a = inputs[0] + base;
    const float* b = inputs[1] + base;
    for (int64_t j = 0; j < n; ++j) acc[j] = Op::apply(a[j], b[j]);
    for (int k = 2; k < count; ++k) {
      const float* c = inputs[k] + base;
      for (int64_t j = 0; j < n; ++j) acc[j] = Op::apply(acc[j], c[j]);
    }
    float* o = out + base;
    if (divisor != 0.0f) {
      for (int64_t j = 0; j < n; ++j) o[j] = acc[j] / divisor;
    } else {
      std::memcpy(o, acc, static_cast<size_t>(n) * sizeof(float));
    }
  }
}

}  // namespace

void reduce_piece(float* out, const float* const* inputs, int count, int64_t length, ReduceOp op, float divisor) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      reduce_blocks<Add>(out, inputs, count, length, divisor);
      return;
    case ReduceOp::kMax:
      reduce_blocks<Max>(out, inputs, count, length, divisor);
      return;
    case ReduceOp::kMin:
      reduce_blocks<Min>(out, inputs, count, length, divisor);
      return;
  }
}

std::pair<int64_t, int64_t> chunk_range(int64_t numel, int parts, int index) {
  const int64_t per_part = (numel + parts - 1) / parts;
  const int64_t aligned = (per_part + 15) / 16 * 16;
  const int64_t begin = std::min(numel, aligned * index);
  return {begin, std::min(numel, begin + aligned)};
}

}  // namespace strata::comm::detail
