// bfloat16 on the wire (Compression::kBFloat16, strata/comm/communicator.h), shared by the process backends (gloo,
// mpi): a float32 bucket narrowed into one bfloat16 array, the pairwise sum their all-reduce runs on it, and the
// result widened back into the tensors.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "strata/comm/communicator.h"

namespace strata::comm::detail {

// A problem with compressing this all-reduce, or "": only float32 summed (kSum, kMean) is compressed.
inline std::string check_compression(Compression compression, ReduceOp op, DType dtype) {
  if (compression == Compression::kNone) return "";
  if (dtype != DType::kFloat32) return std::string("bf16 compression wants float32 tensors, got ") + dtype_name(dtype);
  if (op != ReduceOp::kSum && op != ReduceOp::kMean) return "bf16 compression wants sum or mean, got " + to_string(op);
  return "";
}

// out[i] = bf16(float(a[i]) + float(b[i])): one pairwise reduction, computed in float32 and rounded back (what
// NCCL does for a bfloat16 all-reduce, and so PyTorch's bf16_compress_hook). `out` may alias `a` or `b`.
inline void sum_bf16(BFloat16* out, const BFloat16* a, const BFloat16* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = BFloat16(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

// The float32 `tensors` rounded into `wire` (resized to their elements; its capacity is kept between calls).
inline void narrow_to_bf16(const std::vector<Tensor>& tensors, std::vector<BFloat16>& wire) {
  size_t numel = 0;
  for (const Tensor& t : tensors) numel += static_cast<size_t>(t.numel());
  wire.resize(numel);
  BFloat16* out = wire.data();
  for (const Tensor& t : tensors) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) *out++ = BFloat16(p[i]);
  }
}

// `wire` widened back into the float32 `tensors`, each element divided by `divisor` (kMean: the group size; 1:
// none), in float32 as the uncompressed kMean divides.
inline void widen_from_bf16(const BFloat16* wire, std::vector<Tensor>& tensors, float divisor) {
  for (Tensor& t : tensors) {
    float* p = t.data<float>();
    if (divisor == 1.0f) {
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(*wire++);
    } else {
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(*wire++) / divisor;
    }
  }
}

}  // namespace strata::comm::detail
