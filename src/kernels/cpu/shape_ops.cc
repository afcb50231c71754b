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
#include "kernels/kernel_checks.h"
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
  require_tensors("concat", xs, "concatenate");
  if (on_cuda("concat", {&xs[0]})) STRATA_CUDA_KERNEL(return cuda::concat(xs, axis));
  for (const Tensor& x : xs) cpu::require_host("concat", {&xs[0], &x});
  const Tensor& first = xs[0];
  const auto [ax, out_shape] = concat_shape(xs, axis);
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
  require_tensors("stack", xs, "stack");
  if (on_cuda("stack", {&xs[0]})) STRATA_CUDA_KERNEL(return cuda::stack(xs, axis));
  for (const Tensor& x : xs) cpu::require_host("stack", {&xs[0], &x});
  const StackViews s = stack_views(xs, axis);
  return concat(s.views, s.axis);
}

Tensor slice_axis(const Tensor& x, int axis, int64_t start, int64_t end) {
  if (on_cuda("slice_axis", {&x})) STRATA_CUDA_KERNEL(return cuda::slice_axis(x, axis, start, end));
  cpu::require_host("slice_axis", {&x});
  const auto [ax, dim, out_shape] = slice_shape(x, axis, start, end);
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
  const Shape out_shape = gather_shape(params, indices);
  const int64_t rows = params.shape()[0];
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
  const Shape out_shape = scatter_add_shape(indices, updates, num_rows);
  Tensor out = Tensor::zeros(out_shape);
  scatter_add_into(out, indices, updates);
  return out;
}

void scatter_add_into(Tensor& out, const Tensor& indices, const Tensor& updates) {
  if (on_cuda("scatter_add", {&indices, &updates, &out})) {
    STRATA_CUDA_KERNEL(return cuda::scatter_add_into(out, indices, updates));
  }
  cpu::require_host("scatter_add", {&indices, &updates, &out});
  const Shape row_shape = scatter_add_row_shape(out, indices, updates);
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
  const Shape out_shape = one_hot_shape(indices, depth);
  Tensor out = Tensor::zeros(out_shape);
  const std::vector<int64_t> idx = read_indices(indices);
  float* po = out.data<float>();
  for (size_t i = 0; i < idx.size(); ++i) {
    if (idx[i] >= 0 && idx[i] < depth) po[static_cast<int64_t>(i) * depth + idx[i]] = 1.0f;
  }
  return out;
}

}  // namespace strata::kernels
