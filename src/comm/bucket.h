// Bucket: a list of tensors of one dtype seen as one flat array without copying them, and the elementwise
// kernels the local collectives run over pieces of it (float32; bfloat16 accumulated in float32 and rounded
// once; int64).
//
// Every rank of a collective passes tensors of the same shapes, so a flat index [begin, end) maps to the same
// (tensor, offset) pieces on every rank; the collectives walk those pieces on their own view and address the
// other ranks' views at the same piece.
// Thread-safety: a Bucket is a value; the kernels touch only the memory they are given.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "strata/comm/communicator.h"

namespace strata::comm::detail {

class Bucket {
 public:
  void clear() {
    data_.clear();
    starts_.assign(1, 0);
  }
  void add(void* data, int64_t numel) {
    data_.push_back(static_cast<char*>(data));
    starts_.push_back(starts_.back() + numel);
  }
  int64_t numel() const { return starts_.empty() ? 0 : starts_.back(); }
  size_t segments() const { return data_.size(); }
  // Segment i's first element, as T (the bucket's dtype) or as bytes.
  template <class T = float>
  T* segment(size_t i) const {
    return reinterpret_cast<T*>(data_[i]);
  }

  // Calls fn(segment, offset, length) for each contiguous piece of the flat range [begin, end).
  template <class Fn>
  void for_each_piece(int64_t begin, int64_t end, Fn&& fn) const {
    if (begin >= end) return;
    size_t seg = 0;
    while (starts_[seg + 1] <= begin) ++seg;
    for (; seg < data_.size() && starts_[seg] < end; ++seg) {
      const int64_t lo = std::max(begin, starts_[seg]), hi = std::min(end, starts_[seg + 1]);
      if (hi > lo) fn(seg, lo - starts_[seg], hi - lo);
    }
  }

 private:
  std::vector<char*> data_;
  std::vector<int64_t> starts_{0};  // starts_[i] = flat index of segment i's first element; back() = numel
};

// out[j] = inputs[0][j] op inputs[1][j] op ... op inputs[count-1][j] for j < length, combined left to right (so
// the result does not depend on who computes it), then divided by `divisor` when it is non-zero (kMean passes
// the group size; kSum, kMax and kMin pass 0; kMean combines like kSum). `out` may be one of the inputs.
// REQUIRES: count >= 2.
void reduce_piece(float* out, const float* const* inputs, int count, int64_t length, ReduceOp op, float divisor);
// bfloat16: each element is combined in float32 left to right, divided, and rounded to bfloat16 once.
void reduce_piece(BFloat16* out, const BFloat16* const* inputs, int count, int64_t length, ReduceOp op, float divisor);
// int64: sums wrap around (two's complement) instead of overflowing; kMean divides the sum by the integer
// `divisor`, rounding toward zero.
void reduce_piece(int64_t* out, const int64_t* const* inputs, int count, int64_t length, ReduceOp op, float divisor);

// [begin, end) of chunk `index` when `numel` elements are split into `parts` chunks whose boundaries are
// multiples of `align` elements (16 float32 = 64 bytes), so two ranks never write one cache line.
std::pair<int64_t, int64_t> chunk_range(int64_t numel, int parts, int index, int64_t align = 16);

}  // namespace strata::comm::detail
