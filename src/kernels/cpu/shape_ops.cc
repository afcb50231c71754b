// Shape kernels on the CPU: concat, stack and slice_axis (any dtype, by memcpy of contiguous
// blocks), gather and its gradient scatter_add (rows selected by int32/int64 indices), one_hot.
//
// Copies are split across threads by bytes, so a single large block is shared out as well as many
// small ones. scatter_add splits the columns of a row across threads, so every output element is
// accumulated by one thread in index order (no atomics, same result for any thread count).
// Thread-safety: safe to call concurrently on distinct outputs.
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernels.h"

namespace strata::kernels {

namespace {

constexpr int64_t kCopyGrain = 64 * 1024;  // bytes per parallel copy chunk

// Copies `rows` blocks of `block` bytes: block r from src + r * src_stride to dst + r * dst_stride.
void copy_blocks(const char* src, int64_t src_stride, char* dst, int64_t dst_stride, int64_t rows, int64_t block) {
  if (rows == 0 || block == 0) return;
  parallel_for(0, rows * block, kCopyGrain, [&](int64_t b, int64_t e) {
    int64_t r = b / block, c = b % block;
    while (b < e) {
      const int64_t len = std::min(block - c, e - b);
      std::memcpy(dst + r * dst_stride + c, src + r * src_stride + c, static_cast<size_t>(len));
      b += len;
      ++r;
      c = 0;
    }
  });
}

void require_index_dtype(const char* op, const Tensor& indices) {
  STRATA_CHECK(indices.dtype() == DType::kInt32 || indices.dtype() == DType::kInt64, InvalidArgument,
               op << ": indices must be int32 or int64, got " << dtype_name(indices.dtype()) << indices.shape_str());
}

// The indices as int64, whatever their integer dtype.
std::vector<int64_t> read_indices(const Tensor& indices) {
  const int64_t n = indices.numel();
  std::vector<int64_t> out(n);
  if (indices.dtype() == DType::kInt64) {
    if (n) std::memcpy(out.data(), indices.data<int64_t>(), n * sizeof(int64_t));
  } else {
    const int32_t* p = indices.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  }
  return out;
}

// Throws InvalidArgument naming the first index outside [0, rows).
void check_indices_in_range(const char* op, const std::vector<int64_t>& idx, int64_t rows, const Tensor& indices) {
  for (size_t i = 0; i < idx.size(); ++i) {
    STRATA_CHECK(idx[i] >= 0 && idx[i] < rows, InvalidArgument,
                 op << ": index " << idx[i] << " (at flat position " << i << " of indices " << indices.shape_str()
                    << ") is out of range for " << rows << " rows");
  }
}

}  // namespace

Tensor concat(const std::vector<Tensor>& xs, int axis) {
  STRATA_CHECK(!xs.empty(), InvalidArgument, "concat: no tensors to concatenate");
  if (on_cuda("concat", {&xs[0]})) STRATA_CUDA_KERNEL(return cuda::concat(xs, axis));
  for (const Tensor& x : xs) cpu::require_host("concat", {&xs[0], &x});
  const Tensor& first = xs[0];
  const int ax = normalize_axis(axis, first.rank(), "concat");
  Shape out_shape = first.shape();
  out_shape[ax] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    STRATA_CHECK(x.dtype() == first.dtype(), InvalidArgument,
                 "concat: tensor " << i << " holds " << dtype_name(x.dtype()) << ", tensor 0 holds "
                                   << dtype_name(first.dtype()));
    bool fits = x.rank() == first.rank();
    for (int j = 0; fits && j < x.rank(); ++j) fits = j == ax || x.shape()[j] == first.shape()[j];
    STRATA_CHECK(fits, ShapeError,
                 "concat: along axis " << axis << ", tensor " << i << " " << x.shape_str() << " does not fit tensor 0 "
                                       << first.shape_str());
    out_shape[ax] += x.shape()[ax];
  }
  Tensor out = Tensor::empty(out_shape, first.dtype());
  if (out.numel() == 0) return out;
  const cpu::AxisSplit s = cpu::split_at_axis(out_shape, ax);
  const int64_t esize = static_cast<int64_t>(dtype_size(first.dtype()));
  const int64_t row_bytes = s.n * s.inner * esize;
  char* dst = static_cast<char*>(out.raw_data());
  for (const Tensor& x : xs) {
    const int64_t block = x.shape()[ax] * s.inner * esize;
    copy_blocks(static_cast<const char*>(x.raw_data()), block, dst, row_bytes, s.outer, block);
    dst += block;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int axis) {
  STRATA_CHECK(!xs.empty(), InvalidArgument, "stack: no tensors to stack");
  if (on_cuda("stack", {&xs[0]})) STRATA_CUDA_KERNEL(return cuda::stack(xs, axis));
  for (const Tensor& x : xs) cpu::require_host("stack", {&xs[0], &x});
  const int ax = normalize_axis(axis, xs[0].rank() + 1, "stack");
  std::vector<Tensor> views;
  views.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    STRATA_CHECK(xs[i].shape() == xs[0].shape(), ShapeError,
                 "stack: tensor " << i << " " << xs[i].shape_str() << " differs from tensor 0 " << xs[0].shape_str());
    Shape s = xs[i].shape();
    s.insert(s.begin() + ax, 1);
    views.push_back(xs[i].reshape(s));
  }
  return concat(views, ax);
}

Tensor slice_axis(const Tensor& x, int axis, int64_t start, int64_t end) {
  if (on_cuda("slice_axis", {&x})) STRATA_CUDA_KERNEL(return cuda::slice_axis(x, axis, start, end));
  cpu::require_host("slice_axis", {&x});
  const int ax = normalize_axis(axis, x.rank(), "slice_axis");
  const int64_t dim = x.shape()[ax];
  STRATA_CHECK(
      0 <= start && start <= end && end <= dim, InvalidArgument,
      "slice_axis: range [" << start << ", " << end << ") is outside axis " << axis << " of " << x.shape_str());
  Shape out_shape = x.shape();
  out_shape[ax] = end - start;
  Tensor out = Tensor::empty(out_shape, x.dtype());
  if (out.numel() == 0) return out;
  const cpu::AxisSplit s = cpu::split_at_axis(x.shape(), ax);
  const int64_t esize = static_cast<int64_t>(dtype_size(x.dtype()));
  const int64_t block = (end - start) * s.inner * esize;
  copy_blocks(static_cast<const char*>(x.raw_data()) + start * s.inner * esize, dim * s.inner * esize,
              static_cast<char*>(out.raw_data()), block, s.outer, block);
  return out;
}

// params of any dtype.
Tensor gather(const Tensor& params, const Tensor& indices) {
  if (on_cuda("gather", {&params, &indices})) STRATA_CUDA_KERNEL(return cuda::gather(params, indices));
  cpu::require_host("gather", {&params, &indices});
  require_index_dtype("gather", indices);
  STRATA_CHECK(params.rank() >= 1, ShapeError, "gather: params must have rank >= 1, got " << params.shape_str());
  const int64_t rows = params.shape()[0];
  Shape out_shape = indices.shape();
  out_shape.insert(out_shape.end(), params.shape().begin() + 1, params.shape().end());
  const std::vector<int64_t> idx = read_indices(indices);
  check_indices_in_range("gather", idx, rows, indices);
  Tensor out = Tensor::empty(out_shape, params.dtype());
  if (out.numel() == 0) return out;
  const int64_t row_bytes = static_cast<int64_t>(params.nbytes()) / rows;
  const char* src = static_cast<const char*>(params.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  parallel_for(0, static_cast<int64_t>(idx.size()), std::max<int64_t>(1, kCopyGrain / row_bytes),
               [&](int64_t b, int64_t e) {
                 for (int64_t i = b; i < e; ++i) {
                   std::memcpy(dst + i * row_bytes, src + idx[i] * row_bytes, static_cast<size_t>(row_bytes));
                 }
               });
  return out;
}

Tensor scatter_add(const Tensor& indices, const Tensor& updates, int64_t num_rows) {
  if (on_cuda("scatter_add", {&indices, &updates})) {
    STRATA_CUDA_KERNEL(return cuda::scatter_add(indices, updates, num_rows));
  }
  STRATA_CHECK(num_rows >= 0, InvalidArgument, "scatter_add: num_rows " << num_rows << " is negative");
  Shape out_shape{num_rows};
  const size_t index_rank = std::min(indices.shape().size(), updates.shape().size());
  out_shape.insert(out_shape.end(), updates.shape().begin() + static_cast<std::ptrdiff_t>(index_rank),
                   updates.shape().end());
  Tensor out = Tensor::zeros(out_shape);
  scatter_add_into(out, indices, updates);
  return out;
}

void scatter_add_into(Tensor& out, const Tensor& indices, const Tensor& updates) {
  if (on_cuda("scatter_add", {&indices, &updates, &out})) {
    STRATA_CUDA_KERNEL(return cuda::scatter_add_into(out, indices, updates));
  }
  cpu::require_host("scatter_add", {&indices, &updates, &out});
  require_index_dtype("scatter_add", indices);
  cpu::require_float("scatter_add", {&updates, &out});
  const Shape& is = indices.shape();
  const Shape& us = updates.shape();
  STRATA_CHECK(
      us.size() >= is.size() && std::equal(is.begin(), is.end(), us.begin()), ShapeError,
      "scatter_add: updates " << updates.shape_str() << " must start with the indices' shape " << indices.shape_str());
  const Shape row_shape(us.begin() + static_cast<std::ptrdiff_t>(is.size()), us.end());
  STRATA_CHECK(out.rank() >= 1 && Shape(out.shape().begin() + 1, out.shape().end()) == row_shape, ShapeError,
               "scatter_add: into " << out.shape_str() << ", whose rows are not the updates' rows "
                                    << shape_str(row_shape));
  const int64_t num_rows = out.dim(0);
  const std::vector<int64_t> idx = read_indices(indices);
  check_indices_in_range("scatter_add", idx, num_rows, indices);
  const int64_t n = static_cast<int64_t>(idx.size());
  const int64_t row = shape_numel(row_shape);
  if (n == 0 || row == 0) return;
  const float* pu = updates.data<float>();
  float* po = out.data<float>();
  parallel_for(0, row, std::max<int64_t>(16, cpu::kGrain / n), [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      float* __restrict__ dst = po + idx[i] * row;
      const float* __restrict__ src = pu + i * row;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

Tensor one_hot(const Tensor& indices, int64_t depth) {
  if (on_cuda("one_hot", {&indices})) STRATA_CUDA_KERNEL(return cuda::one_hot(indices, depth));
  cpu::require_host("one_hot", {&indices});
  require_index_dtype("one_hot", indices);
  STRATA_CHECK(depth >= 0, InvalidArgument, "one_hot: depth " << depth << " is negative");
  Shape out_shape = indices.shape();
  out_shape.push_back(depth);
  Tensor out = Tensor::zeros(out_shape);
  const std::vector<int64_t> idx = read_indices(indices);
  float* po = out.data<float>();
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] >= 0 && idx[i] < depth) po[static_cast<int64_t>(i) * depth + idx[i]] = 1.0f;
  }
  return out;
}

}  // namespace strata::kernels
