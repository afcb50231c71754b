// The accuracy-style metrics of metrics.cc on a GPU (optim_kernels.h): a batch's predictions stay on the device and
// only two numbers come back. One Thrust transform_reduce over the rows: each row's score is the CPU's score() for
// that row (argmax with the first maximum winning, the same comparisons in double), times 1 / width and the row's
// weight, summed with the weights in double. Per row the arithmetic is the CPU loop's; the sum over rows is in
// another order, so weighted results agree to double rounding and unweighted counts exactly.
// Thread-safety: see optim_kernels.h.
#include <cuda_runtime_api.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_context.h"
#include "optim/cuda/optim_kernels.h"
#include "strata/error.h"

namespace strata::optim::cuda {

namespace {

struct Sums {
  double total;
  double count;
};

struct AddSums {
  __host__ __device__ Sums operator()(const Sums& a, const Sums& b) const {
    return Sums{a.total + b.total, a.count + b.count};
  }
};

template <class T>
__device__ int64_t argmax_row(const T* x, int64_t width) {
  int64_t best = 0;
  for (int64_t k = 1; k < width; ++k)
    if (x[k] > x[best]) best = k;
  return best;
}

template <class T>
struct RowScore {
  MetricScore which;
  const float* p;
  const T* t;
  const float* w;
  int64_t width;
  float threshold;
  double inv_width;

  __device__ Sums operator()(int64_t r) const {
    const float* pr = p + r * width;
    double s = 0;
    switch (which) {
      case MetricScore::kAccuracy:
        for (int64_t k = 0; k < width; ++k) s += static_cast<double>(t[r * width + k]) == pr[k] ? 1 : 0;
        break;
      case MetricScore::kSparseCategoricalAccuracy:
        s = static_cast<double>(argmax_row(pr, width)) == static_cast<double>(t[r]) ? static_cast<double>(width) : 0;
        break;
      case MetricScore::kCategoricalAccuracy:
        s = argmax_row(pr, width) == argmax_row(t + r * width, width) ? static_cast<double>(width) : 0;
        break;
      case MetricScore::kBinaryAccuracy:
        for (int64_t k = 0; k < width; ++k)
          s += static_cast<double>(t[r * width + k]) == (pr[k] > threshold ? 1.0 : 0.0) ? 1 : 0;
        break;
      case MetricScore::kSquaredError:
        for (int64_t k = 0; k < width; ++k) {
          const double d = static_cast<double>(t[r * width + k]) - pr[k];
          s += d * d;
        }
        break;
    }
    const double weight = w ? static_cast<double>(w[r]) : 1.0;
    return Sums{s * inv_width * weight, weight};
  }
};

template <class T>
Sums reduce_rows(int device, const RowScore<T>& score, int64_t rows) {
  cudaStream_t stream = ::strata::detail::cuda::stream(device);
  const Sums s = thrust::transform_reduce(thrust::cuda::par.on(stream), thrust::counting_iterator<int64_t>(0),
                                          thrust::counting_iterator<int64_t>(rows), score, Sums{0, 0}, AddSums{});
  ::strata::detail::cuda::check(cudaGetLastError(), "metric sums");
  return s;
}

}  // namespace

MetricSums metric_sums(int device, MetricScore which, const float* p, const void* t, DType t_dtype, const float* w,
                       int64_t rows, int64_t width, float threshold) {
  if (rows <= 0) return {};
  const double inv_width = width > 0 ? 1.0 / static_cast<double>(width) : 0.0;
  const auto run = [&](const auto* labels) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(labels)>>;
    const Sums s = reduce_rows(device, RowScore<T>{which, p, labels, w, width, threshold, inv_width}, rows);
    return MetricSums{s.total, s.count};
  };
  switch (t_dtype) {
    case DType::kFloat32:
      return run(static_cast<const float*>(t));
    case DType::kInt32:
      return run(static_cast<const int32_t*>(t));
    case DType::kInt64:
      return run(static_cast<const int64_t*>(t));
    case DType::kUInt8:
      return run(static_cast<const uint8_t*>(t));
    default:
      break;
  }
  STRATA_THROW(InvalidArgument, "metric on the GPU: y_true has unsupported dtype " << dtype_name(t_dtype));
}

}  // namespace strata::optim::cuda
