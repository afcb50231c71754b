// Shape kernels on a GPU: concat, stack and slice_axis (any dtype, as strided 2-D copies with cudaMemcpy2DAsync),
// gather and scatter_add (rows picked by int32/int64 indices, Thrust transforms; scatter_add adds with atomicAdd, so
// the order in which duplicate indices add up, and the float rounding with it, may differ from the CPU's), one_hot.
//
// gather and scatter_add promise an InvalidArgument naming the first index outside [0, rows): that answer has to
// reach the host, so these two look for such an index with thrust::find_if, which waits for the stream (the only
// kernels here that do). Everything else is queued and returns.
// Thread-safety: as kernels.h; each call queues on the device's stream and writes only what it allocates (or `out`).
#include <thrust/execution_policy.h>
#include <thrust/find.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernel_checks.h"

namespace strata::kernels::cuda {

namespace {

// Copies `rows` blocks of `block` bytes: block r from src + r * src_stride to dst + r * dst_stride.
void copy_blocks(const char* src, int64_t src_stride, char* dst, int64_t dst_stride, int64_t rows, int64_t block,
                 cudaStream_t stream) {
  if (rows == 0 || block == 0) return;
  if (rows == 1 || (block == src_stride && block == dst_stride)) {
    detail::cuda::check(cudaMemcpyAsync(dst, src, static_cast<size_t>(rows * block), cudaMemcpyDeviceToDevice, stream),
                        "cudaMemcpyAsync");
    return;
  }
  detail::cuda::check(
      cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride), src, static_cast<size_t>(src_stride),
                        static_cast<size_t>(block), static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream),
      "cudaMemcpy2DAsync");
}

template <class I>
struct OutOfRange {
  int64_t rows;
  __device__ bool operator()(I v) const { return v < 0 || static_cast<int64_t>(v) >= rows; }
};

template <class I>
void check_range_typed(const char* op, const Tensor& indices, int64_t rows) {
  const int64_t n = indices.numel();
  if (n == 0) return;
  const I* p = indices.data<I>();
  cudaStream_t stream = stream_of(indices);
  const I* hit = thrust::find_if(thrust::cuda::par.on(stream), p, p + n, OutOfRange<I>{rows});  // waits
  const int64_t pos = hit - p;
  if (pos >= n) return;
  I value = 0;
  detail::cuda::check(cudaMemcpyAsync(&value, hit, sizeof(I), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  detail::cuda::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  STRATA_THROW(InvalidArgument, op << ": index " << static_cast<int64_t>(value) << " (at flat position " << pos
                                   << " of indices " << indices.shape_str() << ") is out of range for " << rows
                                   << " rows");
}

// Throws InvalidArgument naming the first index outside [0, rows); waits for the stream.
void check_indices_in_range(const char* op, const Tensor& indices, int64_t rows) {
  if (indices.dtype() == DType::kInt64) {
    check_range_typed<int64_t>(op, indices, rows);
  } else {
    check_range_typed<int32_t>(op, indices, rows);
  }
}

// out[e] = params[idx[e / row] * row + e % row], in elements of T.
template <class T, class I>
struct GatherF {
  const T* params;
  const I* idx;
  int64_t row;
  __device__ T operator()(int64_t e) const {
    const int64_t i = e / row;
    return params[static_cast<int64_t>(idx[i]) * row + (e - i * row)];
  }
};

template <class T, class I>
void gather_typed(const Tensor& params, const Tensor& indices, Tensor& out, int64_t row_bytes) {
  const int64_t row = row_bytes / static_cast<int64_t>(sizeof(T));
  thrust::transform(thrust::cuda::par_nosync.on(stream_of(out)), thrust::counting_iterator<int64_t>(0),
                    thrust::counting_iterator<int64_t>(indices.numel() * row), static_cast<T*>(out.raw_data()),
                    GatherF<T, I>{static_cast<const T*>(params.raw_data()), indices.data<I>(), row});
}

template <class I>
void gather_index(const Tensor& params, const Tensor& indices, Tensor& out, int64_t row_bytes) {
  // The widest element that divides a row and params' address (a view may start mid-storage): the copy moves rows,
  // not values, so any type of that size will do.
  const auto fits = [&](int64_t size) {
    return row_bytes % size == 0 && reinterpret_cast<uintptr_t>(params.raw_data()) % size == 0;
  };
  if (fits(8)) {
    gather_typed<uint64_t, I>(params, indices, out, row_bytes);
  } else if (fits(4)) {
    gather_typed<uint32_t, I>(params, indices, out, row_bytes);
  } else if (fits(2)) {
    gather_typed<uint16_t, I>(params, indices, out, row_bytes);
  } else {
    gather_typed<uint8_t, I>(params, indices, out, row_bytes);
  }
}

// out[idx[t / row] * row + t % row] += updates[t].
template <class I>
struct ScatterAddF {
  float* out;
  const float* updates;
  const I* idx;
  int64_t row;
  __device__ void operator()(int64_t t) const {
    const int64_t i = t / row;
    atomicAdd(out + static_cast<int64_t>(idx[i]) * row + (t - i * row), updates[t]);
  }
};

template <class I>
struct OneHotF {
  float* out;
  const I* idx;
  int64_t depth;
  __device__ void operator()(int64_t i) const {
    const int64_t v = static_cast<int64_t>(idx[i]);
    if (v >= 0 && v < depth) out[i * depth + v] = 1.0f;
  }
};

}  // namespace

Tensor concat(const std::vector<Tensor>& xs, int axis) {
  require_tensors("concat", xs, "concatenate");
  for (const Tensor& x : xs) check_same_device("concat", {&xs[0], &x});
  const Tensor& first = xs[0];
  const auto [ax, out_shape] = concat_shape(xs, axis);
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  if (out.numel() == 0) return out;
  const cpu::AxisSplit s = cpu::split_at_axis(out_shape, ax);
  const int64_t esize = static_cast<int64_t>(dtype_size(first.dtype()));
  const int64_t row_bytes = s.n * s.inner * esize;
  cudaStream_t stream = stream_of(out);
  char* dst = static_cast<char*>(out.raw_data());
  for (const Tensor& x : xs) {
    const int64_t block = x.shape()[ax] * s.inner * esize;
    copy_blocks(static_cast<const char*>(x.raw_data()), block, dst, row_bytes, s.outer, block, stream);
    dst += block;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int axis) {
  require_tensors("stack", xs, "stack");
  for (const Tensor& x : xs) check_same_device("stack", {&xs[0], &x});
  const StackViews s = stack_views(xs, axis);
  return concat(s.views, s.axis);
}

Tensor slice_axis(const Tensor& x, int axis, int64_t start, int64_t end) {
  const auto [ax, dim, out_shape] = slice_shape(x, axis, start, end);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  const cpu::AxisSplit s = cpu::split_at_axis(x.shape(), ax);
  const int64_t esize = static_cast<int64_t>(dtype_size(x.dtype()));
  const int64_t block = (end - start) * s.inner * esize;
  copy_blocks(static_cast<const char*>(x.raw_data()) + start * s.inner * esize, dim * s.inner * esize,
              static_cast<char*>(out.raw_data()), block, s.outer, block, stream_of(x));
  return out;
}

Tensor gather(const Tensor& params, const Tensor& indices) {
  check_same_device("gather", {&params, &indices});
  const Shape out_shape = gather_shape(params, indices);
  const int64_t rows = params.shape()[0];
  check_indices_in_range("gather", indices, rows);
  Tensor out = Tensor::empty(out_shape, params.dtype(), params.device());
  if (out.numel() == 0) return out;
  const int64_t row_bytes = static_cast<int64_t>(params.nbytes()) / rows;
  if (indices.dtype() == DType::kInt64) {
    gather_index<int64_t>(params, indices, out, row_bytes);
  } else {
    gather_index<int32_t>(params, indices, out, row_bytes);
  }
  return out;
}

Tensor scatter_add(const Tensor& indices, const Tensor& updates, int64_t num_rows) {
  const Shape out_shape = scatter_add_shape(indices, updates, num_rows);
  check_same_device("scatter_add", {&indices, &updates});
  Tensor out = zeros_on(out_shape, DType::kFloat32, updates.device());
  scatter_add_into(out, indices, updates);
  return out;
}

void scatter_add_into(Tensor& out, const Tensor& indices, const Tensor& updates) {
  check_same_device("scatter_add", {&indices, &updates, &out});
  const Shape row_shape = scatter_add_row_shape(out, indices, updates);
  check_indices_in_range("scatter_add", indices, out.dim(0));
  const int64_t n = indices.numel();
  const int64_t row = shape_numel(row_shape);
  if (n == 0 || row == 0) return;
  auto policy = thrust::cuda::par_nosync.on(stream_of(out));
  if (indices.dtype() == DType::kInt64) {
    thrust::for_each_n(policy, thrust::counting_iterator<int64_t>(0), n * row,
                       ScatterAddF<int64_t>{out.data<float>(), updates.data<float>(), indices.data<int64_t>(), row});
  } else {
    thrust::for_each_n(policy, thrust::counting_iterator<int64_t>(0), n * row,
                       ScatterAddF<int32_t>{out.data<float>(), updates.data<float>(), indices.data<int32_t>(), row});
  }
}

Tensor one_hot(const Tensor& indices, int64_t depth) {
  const Shape out_shape = one_hot_shape(indices, depth);
  Tensor out = zeros_on(out_shape, DType::kFloat32, indices.device());
  const int64_t n = indices.numel();
  if (n == 0 || depth == 0) return out;
  auto policy = thrust::cuda::par_nosync.on(stream_of(out));
  if (indices.dtype() == DType::kInt64) {
    thrust::for_each_n(policy, thrust::counting_iterator<int64_t>(0), n,
                       OneHotF<int64_t>{out.data<float>(), indices.data<int64_t>(), depth});
  } else {
    thrust::for_each_n(policy, thrust::counting_iterator<int64_t>(0), n,
                       OneHotF<int32_t>{out.data<float>(), indices.data<int32_t>(), depth});
  }
  return out;
}

}  // namespace strata::kernels::cuda
