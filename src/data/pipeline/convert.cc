// to_float: one pass from integer (or float) tensors to scaled float32 (see strata/data/convert.h).
#include "strata/data/convert.h"

// GCC 12's AVX-512 intrinsics read a deliberately undefined register (_mm512_undefined_*) and, inlined here, warn
// that it "may be used uninitialized" (GCC bug 105593, fixed in GCC 13). The pragma precedes the header: the
// warning is placed at the header's lines.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "strata/error.h"

namespace strata::data {

namespace {
template <class T>
void scale_into(const Tensor& t, float scale, float* dst) {
  const T* src = t.data<T>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * scale;
}

// Images are uint8 and this is every pixel of every batch: an AVX2 clone (chosen once at load time)
// converts 8 pixels per instruction where the baseline x86-64 build has 4, and AVX-512 16.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx2", "default")))
#endif
void scale_u8_loop(const uint8_t* src, int64_t n, float scale, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * scale;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) void scale_u8_avx512(const uint8_t* src, int64_t n, float scale, float* dst) {
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i pixels = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_cvtepi32_ps(pixels), s));
  }
  scale_u8_loop(src + i, n - i, scale, dst + i);
}
#endif

void scale_u8(const uint8_t* src, int64_t n, float scale, float* dst) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return scale_u8_avx512(src, n, scale, dst);
#endif
  scale_u8_loop(src, n, scale, dst);
}
}  // namespace

Tensor to_float(const Tensor& t, float scale) {
  STRATA_CHECK(t.defined(), InvalidArgument, "to_float: undefined tensor");
  Tensor out = Tensor::empty(t.shape(), DType::kFloat32);
  float* dst = out.data<float>();
  switch (t.dtype()) {
    case DType::kUInt8:
      scale_u8(t.data<uint8_t>(), t.numel(), scale, dst);
      break;
    case DType::kInt32:
      scale_into<int32_t>(t, scale, dst);
      break;
    case DType::kInt64:
      scale_into<int64_t>(t, scale, dst);
      break;
    case DType::kFloat32:
      scale_into<float>(t, scale, dst);
      break;
    default:
      STRATA_THROW(InvalidArgument, "to_float: unsupported dtype " << dtype_name(t.dtype()));
  }
  return out;
}

}  // namespace strata::data
