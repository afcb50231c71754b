// Inverted dropout on the CPU: each element is kept with probability 1 - rate and scaled by
// 1 / (1 - rate), so the expected output equals the input and inference needs no rescaling.
// The mask is drawn from the caller's Generator (Philox, sequential), so a seed gives the same mask
// at any thread count; rate 0 draws nothing and returns a mask of ones.
//
// Thread-safety: safe to call concurrently with distinct generators (a Generator is not synchronised).
#include "kernels/cpu/cpu_util.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernel_checks.h"
#include "kernels/kernels.h"

namespace strata::kernels {

DropoutResult dropout(const Tensor& x, float rate, Generator& gen) {
  const char* op = "dropout";
  if (on_cuda(op, {&x})) STRATA_CUDA_KERNEL(return cuda::dropout(x, rate, gen));
  cpu::require_host(op, {&x});
  cpu::require_float(op, {&x});
  check_dropout_rate(rate);
  DropoutResult r;
  if (rate == 0.0f) {
    r.y = x.clone();
    r.mask = Tensor::ones(x.shape());
    return r;
  }
  const int64_t n = x.numel();
  const float keep = 1.0f - rate;
  const float scale = 1.0f / keep;
  r.mask = Tensor::empty(x.shape());
  r.y = Tensor::empty(x.shape());
  float* mask = r.mask.data<float>();
  gen.fill_bernoulli(mask, n, keep);
  const float* px = x.data<float>();
  float* py = r.y.data<float>();
  parallel_for(0, n, cpu::kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      mask[i] *= scale;
      py[i] = px[i] * mask[i];
    }
  });
  return r;
}

}  // namespace strata::kernels
