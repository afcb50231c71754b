// The reduction kernels of the local collectives: blocks of 2048 elements are combined in a stack buffer (one
// plain loop per input, which the compiler vectorises at -O3) and then stored, so `out` may alias an input.
// bfloat16 blocks are widened to float32 in the buffer and rounded once on the way out.
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

template <class Op>
void reduce_blocks_bf16(BFloat16* out, const BFloat16* const* inputs, int count, int64_t length, float divisor) {
  alignas(64) float acc[kBlock];
  for (int64_t base = 0; base < length; base += kBlock) {
    const int64_t n = std::min(kBlock, length - base);
    const BFloat16* a = inputs[0] + base;
    for (int64_t j = 0; j < n; ++j) acc[j] = static_cast<float>(a[j]);
    for (int k = 1; k < count; ++k) {
      const BFloat16* c = inputs[k] + base;
      for (int64_t j = 0; j < n; ++j) acc[j] = Op::apply(acc[j], static_cast<float>(c[j]));
    }
    if (divisor != 0.0f) {
      for (int64_t j = 0; j < n; ++j) acc[j] = acc[j] / divisor;
    }
    BFloat16* o = out + base;
    for (int64_t j = 0; j < n; ++j) o[j] = BFloat16(acc[j]);
  }
}

struct AddWrap {
  static int64_t apply(int64_t a, int64_t b) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  }
};
struct MaxInt {
  static int64_t apply(int64_t a, int64_t b) { return a < b ? b : a; }
};
struct MinInt {
  static int64_t apply(int64_t a, int64_t b) { return b < a ? b : a; }
};

template <class Op>
void reduce_blocks_i64(int64_t* out, const int64_t* const* inputs, int count, int64_t length, int64_t divisor) {
  constexpr int64_t kBlock64 = kBlock / 2;
  alignas(64) int64_t acc[kBlock64];
  for (int64_t base = 0; base < length; base += kBlock64) {
    const int64_t n = std::min(kBlock64, length - base);
    const int64_t* a = inputs[0] + base;
    for (int64_t j = 0; j < n; ++j) acc[j] = a[j];
    for (int k = 1; k < count; ++k) {
      const int64_t* c = inputs[k] + base;
      for (int64_t j = 0; j < n; ++j) acc[j] = Op::apply(acc[j], c[j]);
    }
    if (divisor != 0) {
      for (int64_t j = 0; j < n; ++j) acc[j] = acc[j] / divisor;
    }
    std::memcpy(out + base, acc, static_cast<size_t>(n) * sizeof(int64_t));
  }
}

}  // namespace

void reduce_piece(BFloat16* out, const BFloat16* const* inputs, int count, int64_t length, ReduceOp op,
                  float divisor) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      reduce_blocks_bf16<Add>(out, inputs, count, length, divisor);
      return;
    case ReduceOp::kMax:
      reduce_blocks_bf16<Max>(out, inputs, count, length, divisor);
      return;
    case ReduceOp::kMin:
      reduce_blocks_bf16<Min>(out, inputs, count, length, divisor);
      return;
  }
}

void reduce_piece(int64_t* out, const int64_t* const* inputs, int count, int64_t length, ReduceOp op,
                  float divisor) {
  const auto d = static_cast<int64_t>(divisor);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      reduce_blocks_i64<AddWrap>(out, inputs, count, length, d);
      return;
    case ReduceOp::kMax:
      reduce_blocks_i64<MaxInt>(out, inputs, count, length, d);
      return;
    case ReduceOp::kMin:
      reduce_blocks_i64<MinInt>(out, inputs, count, length, d);
      return;
  }
}

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

std::pair<int64_t, int64_t> chunk_range(int64_t numel, int parts, int index, int64_t align) {
  const int64_t per_part = (numel + parts - 1) / parts;
  const int64_t aligned = (per_part + align - 1) / align * align;
  const int64_t begin = std::min(numel, aligned * index);
  return {begin, std::min(numel, begin + aligned)};
}

}  // namespace strata::comm::detail
