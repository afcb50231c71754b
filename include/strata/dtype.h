// Element types a Tensor can hold, their sizes and names, and the bfloat16 storage type.
// Thread-safety: pure values and functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace strata {

enum class DType : uint8_t { kFloat32, kInt32, kInt64, kUInt8, kBFloat16 };

// bfloat16 storage: the upper 16 bits of an IEEE float32 (round-to-nearest-even on conversion).
// Reserved for mixed precision: tensors can hold and convert it; kernels compute in float32.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40);  // keep NaN a NaN
    } else {
      bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
  explicit operator float() const {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
    case DType::kBFloat16: return 2;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
    case DType::kBFloat16: return "bfloat16";
  }
  return "?";
}

template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace strata
