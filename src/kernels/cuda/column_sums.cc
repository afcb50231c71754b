// Column sums through the per-channel reduction kernel (column_sums.h, batch_norm_kernels.h).
// Thread-safety: each call queues on the device's stream and writes only what it allocates.
#include "kernels/cuda/column_sums.h"

#include <climits>

#include "kernels/cuda/batch_norm_kernels.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "strata/error.h"

namespace strata::kernels::cuda {

Tensor column_sums(const Tensor& x, float alpha) {
  const int64_t c = x.dim(-1);
  const int64_t m = c == 0 ? 0 : x.numel() / c;
  STRATA_CHECK(m >= 1 && c <= INT_MAX, ShapeError,
               "column sums of " << x.shape_str() << ": need at least one row and at most " << INT_MAX << " channels");
  Tensor out = Tensor::empty({c}, DType::kFloat32, x.device());
  Tensor work = scratch(channel_scratch_floats(m, c) * sizeof(float), x.device());
  detail::cuda::check(
      channel_sums(x.data<float>(), m, c, alpha, out.data<float>(), static_cast<float*>(work.raw_data()), stream_of(x)),
      "channel_sums (column sums)");
  return out;
}

}  // namespace strata::kernels::cuda
