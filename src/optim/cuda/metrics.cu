// The accuracy-style metrics of metrics.cc on a GPU (optim_kernels.h): a batch's predictions stay on the device and
// only two numbers come back. A Thrust transform scores each row: the CPU's score() for that row (argmax with the
// first maximum winning, the same comparisons in double), times 1 / width and the row's weight. Then one CUB
// reduction sums the rows' scores and weights in double. Per row the arithmetic is the CPU loop's; the sum over rows
// is in another order, so weighted results agree to double rounding and unweighted counts exactly.
// The reduction is instantiated once, for the rows' sums whatever the labels' dtype: Thrust's transform_reduce per
// label dtype was 6.9 MB of sm_90 code, two thirds of strata's device code, for two sums a batch.
// Thread-safety: see optim_kernels.h.
#include <cuda_runtime_api.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include <cub/device/device_reduce.cuh>

#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernel_util.h"
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

// Each row's Sums into `out`, a device buffer of `rows`.
template <class T>
void score_rows(cudaStream_t stream, const RowScore<T>& score, int64_t rows, Sums* out) {
  thrust::transform(thrust::cuda::par_nosync.on(stream), thrust::counting_iterator<int64_t>(0),
                    thrust::counting_iterator<int64_t>(rows), out, score);
}

// The sum of `rows` Sums on the device, brought back (waits for the stream).
Sums sum_rows(int device, cudaStream_t stream, const Sums* in, int64_t rows) {
  const Device dev = Device::cuda(device);
  Tensor result = kernels::cuda::scratch(sizeof(Sums), dev);
  Sums* out = reinterpret_cast<Sums*>(result.raw_data());
  size_t bytes = 0;
  ::strata::detail::cuda::check(cub::DeviceReduce::Reduce(nullptr, bytes, in, out, rows, AddSums{}, Sums{0, 0}, stream),
                                "cub::DeviceReduce::Reduce (metric sums)");
  Tensor tmp = kernels::cuda::scratch(bytes, dev);
  ::strata::detail::cuda::check(
      cub::DeviceReduce::Reduce(tmp.raw_data(), bytes, in, out, rows, AddSums{}, Sums{0, 0}, stream),
      "cub::DeviceReduce::Reduce (metric sums)");
  Sums host{0, 0};
  ::strata::detail::cuda::check(cudaMemcpyAsync(&host, out, sizeof(Sums), cudaMemcpyDeviceToHost, stream),
                                "cudaMemcpyAsync (metric sums)");
  ::strata::detail::cuda::check(cudaStreamSynchronize(stream), "metric sums");
  return host;
}

}  // namespace

MetricSums metric_sums(int device, MetricScore which, const float* p, const void* t, DType t_dtype, const float* w,
                       int64_t rows, int64_t width, float threshold) {
  if (rows <= 0) return {};
  const double inv_width = width > 0 ? 1.0 / static_cast<double>(width) : 0.0;
  cudaStream_t stream = ::strata::detail::cuda::stream(device);
  Tensor row_sums = kernels::cuda::scratch(static_cast<size_t>(rows) * sizeof(Sums), Device::cuda(device));
  Sums* per_row = reinterpret_cast<Sums*>(row_sums.raw_data());
  const auto run = [&](const auto* labels) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(labels)>>;
    score_rows(stream, RowScore<T>{which, p, labels, w, width, threshold, inv_width}, rows, per_row);
    const Sums s = sum_rows(device, stream, per_row, rows);
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
