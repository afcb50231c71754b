// Reductions on a GPU: sum, mean and max over any set of axes, argmax, broadcast_to and sum_to_shape.
//
// As on the CPU (kernels/cpu/reduce.cc), reduced and kept axes are coalesced into alternating groups and each
// reduced group is removed in turn from a [outer, n, inner] view. A sum over contiguous runs (inner == 1) is CUB's
// DeviceReduce / DeviceSegmentedReduce; a sum over a strided axis (inner > 1) of up to kGemmSumMax is a cuBLAS
// product with a vector of ones (ones[1, n] x X_o[n, inner] per outer row), which reads X row by row, and a longer one
// CUB's segmented sum through a strided index iterator. Max is CUB's segmented reduction with
// the CPU's NaN-propagating max, reading a strided segment through an index iterator. Sums accumulate in float32 in
// the libraries' tree orders (the CPU's accumulate in double): agreement is to float rounding, ~1e-6 relative.
// argmax is one Thrust transform over the outputs, each thread walking its axis (first index on ties; a NaN wins,
// the first one, as NumPy). Nothing here waits for the stream.
// Thread-safety: as kernels.h; each call queues on the device's stream and writes only what it allocates.
#include <thrust/execution_policy.h>
#include <thrust/fill.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/transform.h>

#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_rows.h"
#include "kernels/cuda/library_handles.h"
#include "kernels/kernel_checks.h"

namespace strata::kernels::cuda {

namespace {

constexpr int kMaxDims = 12;

enum class Kind { kSum, kMean, kMax };

// A strided sum over at most this many rows is a cuBLAS product (as exact as matmul's dots of that length); a longer
// one goes through CUB, whose tree sums keep the rounding of a very long axis (the CNN's [N*H*W, C] bias sums) down.
constexpr int64_t kGemmSumMax = 4096;

// NaN-propagating max, as the CPU's: a NaN on either side wins.
struct NanMax {
  __host__ __device__ float operator()(float a, float b) const { return (b > a || b != b) ? b : a; }
};

// Segment s starts at s * n.
struct TimesN {
  int64_t n;
  __host__ __device__ int64_t operator()(int64_t s) const { return s * n; }
};

// Element t of the segmented order (segment s = (o, j), element k of it) read from the [outer, n, inner] layout.
struct StridedRead {
  const float* in;
  int64_t n, inner;
  __host__ __device__ float operator()(int64_t t) const {
    const int64_t s = t / n, k = t % n;
    const int64_t o = s / inner, j = s % inner;
    return in[(o * n + k) * inner + j];
  }
};

void check_cub(cudaError_t st, const char* what) { detail::cuda::check(st, what); }

// out[o, j] = sum_k in[o, k, j].
void sum_step(const float* in, int64_t outer, int64_t n, int64_t inner, float* out, Device dev) {
  cudaStream_t stream = detail::cuda::stream(dev.index);
  if (inner > 1 && n <= kGemmSumMax) {
    Tensor ones = Tensor::empty({n}, DType::kFloat32, dev);
    thrust::fill_n(thrust::cuda::par_nosync.on(stream), ones.data<float>(), n, 1.0f);
    sgemm_rows(cublas_handle(dev.index), false, false, 1, inner, n, ones.data<float>(), 0, in, n * inner, out, inner,
               outer);
    return;
  }
  size_t bytes = 0;
  if (inner > 1) {  // a long strided axis: CUB's block-wide tree sums round less than a product's long dot
    auto read = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), StridedRead{in, n, inner});
    auto begin = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), TimesN{n});
    auto end = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(1), TimesN{n});
    check_cub(cub::DeviceSegmentedReduce::Sum(nullptr, bytes, read, out, outer * inner, begin, end, stream),
              "cub::DeviceSegmentedReduce::Sum");
    Tensor tmp = scratch(bytes, dev);
    check_cub(cub::DeviceSegmentedReduce::Sum(tmp.raw_data(), bytes, read, out, outer * inner, begin, end, stream),
              "cub::DeviceSegmentedReduce::Sum");
    return;
  }
  if (outer == 1) {
    check_cub(cub::DeviceReduce::Sum(nullptr, bytes, in, out, n, stream), "cub::DeviceReduce::Sum");
    Tensor tmp = scratch(bytes, dev);
    check_cub(cub::DeviceReduce::Sum(tmp.raw_data(), bytes, in, out, n, stream), "cub::DeviceReduce::Sum");
    return;
  }
  auto begin = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), TimesN{n});
  auto end = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(1), TimesN{n});
  check_cub(cub::DeviceSegmentedReduce::Sum(nullptr, bytes, in, out, outer, begin, end, stream),
            "cub::DeviceSegmentedReduce::Sum");
  Tensor tmp = scratch(bytes, dev);
  check_cub(cub::DeviceSegmentedReduce::Sum(tmp.raw_data(), bytes, in, out, outer, begin, end, stream),
            "cub::DeviceSegmentedReduce::Sum");
}

// out[o, j] = max_k in[o, k, j].
void max_step(const float* in, int64_t outer, int64_t n, int64_t inner, float* out, Device dev) {
  cudaStream_t stream = detail::cuda::stream(dev.index);
  const float lowest = -std::numeric_limits<float>::infinity();
  size_t bytes = 0;
  if (outer * inner == 1) {
    check_cub(cub::DeviceReduce::Reduce(nullptr, bytes, in, out, n, NanMax{}, lowest, stream),
              "cub::DeviceReduce::Reduce");
    Tensor tmp = scratch(bytes, dev);
    check_cub(cub::DeviceReduce::Reduce(tmp.raw_data(), bytes, in, out, n, NanMax{}, lowest, stream),
              "cub::DeviceReduce::Reduce");
    return;
  }
  auto begin = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), TimesN{n});
  auto end = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(1), TimesN{n});
  const int64_t segments = outer * inner;
  if (inner == 1) {
    check_cub(
        cub::DeviceSegmentedReduce::Reduce(nullptr, bytes, in, out, segments, begin, end, NanMax{}, lowest, stream),
        "cub::DeviceSegmentedReduce::Reduce");
    Tensor tmp = scratch(bytes, dev);
    check_cub(cub::DeviceSegmentedReduce::Reduce(tmp.raw_data(), bytes, in, out, segments, begin, end, NanMax{}, lowest,
                                                 stream),
              "cub::DeviceSegmentedReduce::Reduce");
    return;
  }
  auto read = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), StridedRead{in, n, inner});
  check_cub(
      cub::DeviceSegmentedReduce::Reduce(nullptr, bytes, read, out, segments, begin, end, NanMax{}, lowest, stream),
      "cub::DeviceSegmentedReduce::Reduce");
  Tensor tmp = scratch(bytes, dev);
  check_cub(cub::DeviceSegmentedReduce::Reduce(tmp.raw_data(), bytes, read, out, segments, begin, end, NanMax{}, lowest,
                                               stream),
            "cub::DeviceSegmentedReduce::Reduce");
}

Tensor reduce_impl(const char* op, const Tensor& x, const std::vector<bool>& flags, bool keepdims, Kind kind) {
  const Device dev = x.device();
  cudaStream_t stream = stream_of(x);
  const ReduceLayout layout = reduce_layout(x, flags, keepdims);
  const Shape& out_shape = layout.out_shape;
  const int64_t count = layout.count;
  Tensor out = Tensor::empty(out_shape, DType::kFloat32, dev);
  const int64_t out_numel = out.numel();
  if (out_numel == 0) return out;
  if (count == 0) {
    check_empty_reduction(op, x, kind == Kind::kMax);
    thrust::fill_n(thrust::cuda::par_nosync.on(stream), out.data<float>(), out_numel,
                   kind == Kind::kMean ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
    return out;
  }
  int groups = static_cast<int>(layout.steps.size());
  if (groups == 0) {  // only unit axes were reduced: a copy
    detail::cuda::check(cudaMemcpyAsync(out.raw_data(), x.raw_data(), out.nbytes(), cudaMemcpyDeviceToDevice, stream),
                        "cudaMemcpyAsync");
    return out;
  }
  Tensor cur = x;
  for (const ReduceStep& st : layout.steps) {
    --groups;
    Tensor next = groups == 0 ? out : Tensor::empty({st.outer * st.inner}, DType::kFloat32, dev);
    if (kind == Kind::kMax) {
      max_step(cur.data<float>(), st.outer, st.n, st.inner, next.data<float>(), dev);
    } else {
      sum_step(cur.data<float>(), st.outer, st.n, st.inner, next.data<float>(), dev);
    }
    cur = next;
  }
  if (kind == Kind::kMean) {
    const float scale = static_cast<float>(1.0 / static_cast<double>(count));
    check_cublas(cublasSscal_64(cublas_handle(dev.index), out_numel, &scale, out.data<float>(), 1),
                 "mean: cublasSscal");
  }
  return out;
}

void check_reduce_input(const char* op, const Tensor& x) { cpu::require_float(op, {&x}); }

// argmax over n for output (o, j): the first index of the largest, a NaN counting as the largest.
struct ArgmaxF {
  const float* in;
  int64_t n, inner;
  __device__ int64_t operator()(int64_t t) const {
    const int64_t o = t / inner, j = t % inner;
    const float* base = in + o * n * inner + j;
    float best = base[0];
    int64_t idx = 0;
    for (int64_t k = 1; k < n; ++k) {
      const float v = base[k * inner];
      if (v > best || (v != v && best == best)) {
        best = v;
        idx = k;
      }
    }
    return idx;
  }
};

// The broadcast of an input with the given coalesced dimensions and strides: output element e reads input offset.
struct BroadcastOffset {
  int rank;
  int64_t dims[kMaxDims];
  int64_t strides[kMaxDims];
  __host__ __device__ int64_t operator()(int64_t e) const {
    int64_t off = 0;
    for (int j = rank - 1; j >= 0; --j) {
      off += (e % dims[j]) * strides[j];
      e /= dims[j];
    }
    return off;
  }
};

template <class T>
struct BroadcastCopy {
  const T* in;
  BroadcastOffset map;
  __device__ T operator()(int64_t e) const { return in[map(e)]; }
};

template <class T>
void broadcast_copy(const BroadcastOffset& map, const void* in, void* out, int64_t n, cudaStream_t stream) {
  thrust::transform(thrust::cuda::par_nosync.on(stream), thrust::counting_iterator<int64_t>(0),
                    thrust::counting_iterator<int64_t>(n), static_cast<T*>(out),
                    BroadcastCopy<T>{static_cast<const T*>(in), map});
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  check_reduce_input("sum", x);
  return reduce_impl("sum", x, reduced_axes("sum", x, axes), keepdims, Kind::kSum);
}

Tensor mean(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  check_reduce_input("mean", x);
  return reduce_impl("mean", x, reduced_axes("mean", x, axes), keepdims, Kind::kMean);
}

Tensor max(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  check_reduce_input("max", x);
  return reduce_impl("max", x, reduced_axes("max", x, axes), keepdims, Kind::kMax);
}

Tensor argmax(const Tensor& x, int axis) {
  check_reduce_input("argmax", x);
  const auto [ax, out_shape] = argmax_shape(x, axis);
  Tensor out = Tensor::empty(out_shape, DType::kInt64, x.device());
  if (out.numel() == 0) return out;
  const cpu::AxisSplit s = cpu::split_at_axis(x.shape(), ax);
  thrust::transform(thrust::cuda::par_nosync.on(stream_of(x)), thrust::counting_iterator<int64_t>(0),
                    thrust::counting_iterator<int64_t>(out.numel()), out.data<int64_t>(),
                    ArgmaxF{x.data<float>(), s.n, s.inner});
  return out;
}

// Any dtype.
Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  check_broadcast_to(x, shape);
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  const cpu::BroadcastPlan p = cpu::plan_broadcast(shape, {&x.shape()});
  STRATA_CHECK(static_cast<int>(p.dims.size()) <= kMaxDims, Unavailable,
               "broadcast_to: " << x.shape_str() << " to " << shape_str(shape) << " needs " << p.dims.size()
                                << " dimensions; the GPU kernel takes up to " << kMaxDims);
  BroadcastOffset map{};
  map.rank = static_cast<int>(p.dims.size());
  for (int j = 0; j < map.rank; ++j) {
    map.dims[j] = p.dims[j];
    map.strides[j] = p.strides[0][j];
  }
  cudaStream_t stream = stream_of(x);
  const int64_t n = out.numel();
  switch (dtype_size(x.dtype())) {
    case 1:
      broadcast_copy<uint8_t>(map, x.raw_data(), out.raw_data(), n, stream);
      break;
    case 2:
      broadcast_copy<uint16_t>(map, x.raw_data(), out.raw_data(), n, stream);
      break;
    case 4:
      broadcast_copy<uint32_t>(map, x.raw_data(), out.raw_data(), n, stream);
      break;
    case 8:
      broadcast_copy<uint64_t>(map, x.raw_data(), out.raw_data(), n, stream);
      break;
    default:
      throw_broadcast_dtype(x);
  }
  return out;
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  check_reduce_input("sum_to_shape", x);
  const std::vector<bool> flags = sum_to_shape_axes(x, shape);
  return reduce_impl("sum_to_shape", x, flags, true, Kind::kSum).reshape(shape);
}

}  // namespace strata::kernels::cuda
