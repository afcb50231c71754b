// Elementwise functions that oneDNN computes faster than a scalar loop over libm: its eltwise primitives are
// vectorised (jit) with their own polynomial for erf. The elementwise kernels (elementwise.cc) call these for GELU.
// Thread-safety: safe to call concurrently (see dnnl_util.h).
#pragma once

#include "strata/tensor.h"

namespace strata::kernels::cpu {

// 0.5 x (1 + erf(x / sqrt 2)), Keras's exact GELU. REQUIRES: x float32, contiguous, on the host.
Tensor dnnl_gelu_erf(const Tensor& x);
// dy * GELU'(x). REQUIRES: x and dy float32 of one shape, on the host.
Tensor dnnl_gelu_erf_backward(const Tensor& x, const Tensor& dy);

}  // namespace strata::kernels::cpu
