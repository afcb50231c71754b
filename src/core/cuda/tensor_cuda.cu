// Fill and dtype conversion of GPU tensors (tensor_cuda.h): one grid-stride kernel each, queued on the device's
// stream. Thread-safety: safe from any thread (each call only queues work).
#include "core/cuda/tensor_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/cuda/cuda_context.h"
#include "strata/error.h"

namespace strata::detail {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 8192));
}

template <class T>
__global__ void fill_kernel(T* p, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    p[i] = value;
}

// bfloat16's bits, as a type of its own for the conversion kernel.
struct Bf16 {
  uint16_t bits;
};

// The host's BFloat16(float) (strata/dtype.h), bit for bit.
__device__ uint16_t to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <class To, class From>
__device__ To convert_one(From v) {
  if constexpr (std::is_same_v<From, Bf16>) {
    return convert_one<To>(__uint_as_float(static_cast<uint32_t>(v.bits) << 16));
  } else if constexpr (std::is_same_v<To, Bf16>) {
    return Bf16{to_bf16_bits(static_cast<float>(v))};
  } else {
    return static_cast<To>(v);
  }
}

template <class From, class To>
__global__ void convert_kernel(const From* src, To* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x)
    dst[i] = convert_one<To>(src[i]);
}

// Calls fn(T{}) with the element type of `dtype`.
template <class Fn>
void visit(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(float{}); return;
    case DType::kInt32: fn(int32_t{}); return;
    case DType::kInt64: fn(int64_t{}); return;
    case DType::kUInt8: fn(uint8_t{}); return;
    case DType::kBFloat16: fn(Bf16{}); return;
  }
  STRATA_THROW(InvalidArgument, "unknown dtype " << static_cast<int>(dtype));
}

template <class T>
void launch_fill(void* p, uint64_t pattern, int64_t n, cudaStream_t s) {
  T v;
  std::memcpy(&v, &pattern, sizeof v);  // the low bytes on a little-endian host
  fill_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(p), v, n);
}

}  // namespace

void cuda_fill(void* p, size_t elem_size, uint64_t pattern, int64_t n, int device) {
  if (n <= 0) return;
  cudaStream_t s = cuda::stream(device);
  const uint64_t mask = elem_size >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * elem_size)) - 1;
  if ((pattern & mask) == 0 || elem_size == 1) {
    cuda::check(cudaMemsetAsync(p, static_cast<int>(pattern & 0xff), static_cast<size_t>(n) * elem_size, s),
                "cudaMemsetAsync");
    return;
  }
  switch (elem_size) {
    case 2: launch_fill<uint16_t>(p, pattern, n, s); break;
    case 4: launch_fill<uint32_t>(p, pattern, n, s); break;
    case 8: launch_fill<uint64_t>(p, pattern, n, s); break;
    default: STRATA_THROW(InvalidArgument, "cuda_fill: elements of " << elem_size << " bytes");
  }
  cuda::check(cudaGetLastError(), "fill kernel launch");
}

void cuda_convert(const void* src, DType from, void* dst, DType to, int64_t n, int device) {
  if (n <= 0) return;
  cudaStream_t s = cuda::stream(device);
  visit(from, [&](auto a) {
    visit(to, [&](auto b) {
      using From = decltype(a);
      using To = decltype(b);
      convert_kernel<From, To><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const From*>(src),
                                                                  static_cast<To*>(dst), n);
    });
  });
  cuda::check(cudaGetLastError(), "dtype conversion kernel launch");
}

}  // namespace strata::detail
