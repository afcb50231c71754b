// Column sums through cuBLAS gemv (column_sums.h). Thread-safety: per-thread handles; nothing shared.
#include "kernels/cuda/column_sums.h"

#include <climits>

#include "kernels/cuda/library_handles.h"
#include "strata/error.h"

namespace strata::kernels::cuda {

Tensor column_sums(const Tensor& x, float alpha) {
  const int64_t c = x.dim(-1);
  const int64_t m = c == 0 ? 0 : x.numel() / c;
  STRATA_CHECK(m >= 1 && m <= INT_MAX && c <= INT_MAX, ShapeError,
               "column sums of " << x.shape_str() << ": need 1 to " << INT_MAX << " rows and at most " << INT_MAX
                                 << " channels");
  const Tensor ones = Tensor::ones({m}, DType::kFloat32, x.device());
  Tensor out = Tensor::empty({c}, DType::kFloat32, x.device());
  const float zero = 0.0f;
  // Row-major [M, C] is the column-major C x M matrix with leading dimension C: times ones(M), the C row sums.
  check_cublas(cublasSgemv(cublas_handle(x.device().index), CUBLAS_OP_N, static_cast<int>(c), static_cast<int>(m),
                           &alpha, x.data<float>(), static_cast<int>(c), ones.data<float>(), 1, &zero,
                           out.data<float>(), 1),
               "cublasSgemv (column sums)");
  return out;
}

}  // namespace strata::kernels::cuda
