// How a kernel of kernels.h picks its device: the CPU implementation (kernels/cpu) checks its inputs share one
// device and, when that is a GPU, hands the call to the CUDA kernel of the same name (kernels/cuda/cuda_kernels.h):
//
//   Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
//     if (on_cuda("matmul", {&a, &b})) STRATA_CUDA_KERNEL(return cuda::matmul(a, b, trans_a, trans_b));
//     ... the CPU code
//
// Without the CUDA build a tensor on a GPU cannot be made, and the CUDA call is compiled out, so the CPU library
// links without kernels/cuda. An op that has no CUDA kernel yet keeps cpu::require_host, which says so.
// Thread-safety: pure functions.
#pragma once

#include <initializer_list>

#include "kernels/cuda/cuda_kernels.h"
#include "strata/error.h"
#include "strata/tensor.h"

namespace strata::kernels {

#ifdef STRATA_WITH_CUDA
#define STRATA_CUDA_KERNEL(...) \
  do {                          \
    __VA_ARGS__;                \
  } while (0)
#else
#define STRATA_CUDA_KERNEL(...) STRATA_THROW(Unavailable, "this build of strata has no CUDA kernels")
#endif

// Throws InvalidArgument naming `op` and both devices unless every tensor is defined and all are on one device.
// True when that device is a CUDA GPU.
inline bool on_cuda(const char* op, std::initializer_list<const Tensor*> tensors) {
  check_same_device(op, tensors);
  return (*tensors.begin())->device().kind == Device::Kind::kCUDA;
}

}  // namespace strata::kernels
