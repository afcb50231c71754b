// Differentiable shape ops: reshape, transpose, broadcast, concat, stack, slices and gather.
#include "autograd/node.h"
#include "kernels/kernels.h"
#include "strata/ops.h"

namespace strata {

namespace k = kernels;
using detail::make_result;
using Grads = std::vector<Tensor>;
using Needs = detail::BackwardNeeds;

Variable reshape(const Variable& x, const Shape& shape) {
  const Shape xs = x.shape();
  return make_result(x.value().reshape(shape), "reshape", {x},
                     [xs](const Tensor& dy, const Needs&) -> Grads { return {dy.reshape(xs)}; });
}

Variable transpose(const Variable& x, const std::vector<int>& perm_in) {
  const int rank = x.value().rank();
  std::vector<int> perm = perm_in;
  if (perm.empty())
    for (int i = 0; i < rank; ++i) perm.push_back(rank - 1 - i);
  Tensor y = x.value().transpose(perm);  // validates perm
  std::vector<int> inverse(rank);
  for (int i = 0; i < rank; ++i) inverse[normalize_axis(perm[i], rank, "transpose")] = i;
  return make_result(y, "transpose", {x},
                     [inverse](const Tensor& dy, const Needs&) -> Grads { return {dy.transpose(inverse)}; });
}

Variable broadcast_to(const Variable& x, const Shape& shape) {
  const Shape xs = x.shape();
  return make_result(k::broadcast_to(x.value(), shape), "broadcast_to", {x},
                     [xs](const Tensor& dy, const Needs&) -> Grads { return {k::sum_to_shape(dy, xs)}; });
}

Variable concat(const std::vector<Variable>& xs, int axis) {
  STRATA_CHECK(!xs.empty(), InvalidArgument, "concat: no inputs");
  std::vector<Tensor> values;
  std::vector<int64_t> sizes;
  for (const Variable& x : xs) values.push_back(x.value());
  Tensor y = k::concat(values, axis);
  const int ax = normalize_axis(axis, y.rank(), "concat");
  for (const Tensor& v : values) sizes.push_back(v.shape()[ax]);
  return make_result(y, "concat", xs, [ax, sizes](const Tensor& dy, const Needs& needs) -> Grads {
    Grads grads(sizes.size());
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (needs[i]) grads[i] = k::slice_axis(dy, ax, offset, offset + sizes[i]);
      offset += sizes[i];
    }
    return grads;
  });
}

Variable stack(const std::vector<Variable>& xs, int axis) {
  STRATA_CHECK(!xs.empty(), InvalidArgument, "stack: no inputs");
  std::vector<Tensor> values;
  for (const Variable& x : xs) values.push_back(x.value());
  Tensor y = k::stack(values, axis);
  const int ax = normalize_axis(axis, y.rank(), "stack");
  const Shape item_shape = values[0].shape();
  const size_t n = xs.size();
  return make_result(y, "stack", xs, [ax, item_shape, n](const Tensor& dy, const Needs& needs) -> Grads {
    Grads grads(n);
    for (size_t i = 0; i < n; ++i)
      if (needs[i]) grads[i] = k::slice_axis(dy, ax, int64_t(i), int64_t(i) + 1).reshape(item_shape);
    return grads;
  });
}

Variable slice_axis(const Variable& x, int axis, int64_t start, int64_t end) {
  const Shape xs = x.shape();
  Tensor y = k::slice_axis(x.value(), axis, start, end);
  const int ax = normalize_axis(axis, static_cast<int>(xs.size()), "slice_axis");
  return make_result(y, "slice_axis", {x}, [xs, ax, start, end](const Tensor& dy, const Needs&) -> Grads {
    // Zeros around dy along the axis.
    std::vector<Tensor> parts;
    Shape before = xs, after = xs;
    before[ax] = start;
    after[ax] = xs[ax] - end;
    if (start > 0) parts.push_back(Tensor::zeros(before, dy.dtype(), dy.device()));
    parts.push_back(dy);
    if (after[ax] > 0) parts.push_back(Tensor::zeros(after, dy.dtype(), dy.device()));
    return {parts.size() == 1 ? dy : k::concat(parts, ax)};
  });
}

Variable gather(const Variable& params, const Tensor& indices) {
  Tensor y = k::gather(params.value(), indices);
  const int64_t rows = params.shape().empty() ? 0 : params.shape()[0];
  return make_result(y, "gather", {params}, [indices, rows](const Tensor& dy, const Needs&) -> Grads {
    return {k::scatter_add(indices, dy, rows)};
  });
}

Tensor one_hot(const Tensor& indices, int64_t depth) { return k::one_hot(indices, depth); }

Variable stop_gradient(const Variable& x) { return Variable(x.value()); }

}  // namespace strata
