// The differentiable collectives of tensor parallelism (Megatron's f and g: copy_to / reduce_from, and the gather /
// scatter pair along an axis) and the shard arithmetic the split layers share.
// Thread-safety: each call runs on its rank's thread with that rank's communicator; nothing is shared between calls.
#include "strata/parallel/tensor_parallel.h"

#include <string>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "kernels/kernels.h"
#include "parallel/tensor_parallel_ops.h"
#include "strata/error.h"

namespace strata::parallel {

namespace {

using Grads = std::vector<Tensor>;
using Needs = strata::detail::BackwardNeeds;
using detail::CommunicatorPtr;

void check_host_float(const Tensor& t, const char* op) {
  STRATA_CHECK(t.device().is_cpu(), InvalidArgument, op << " takes host tensors, got one on another device");
  STRATA_CHECK(t.dtype() == DType::kFloat32, InvalidArgument,
               op << " takes float32 tensors, got " << dtype_name(t.dtype()));
}

// A new tensor holding `t` summed over the ranks.
Tensor all_reduce_sum(comm::Communicator& comm, const Tensor& t, const char* op) {
  check_host_float(t, op);
  Tensor out = t.clone();
  if (comm.size() > 1) comm.all_reduce({out}, comm::ReduceOp::kSum)->wait();
  return out;
}

// The ranks' `t` (same shape everywhere) concatenated along `axis` in rank order.
Tensor all_gather_along(comm::Communicator& comm, const Tensor& t, int axis, const char* op) {
  check_host_float(t, op);
  const int ax = normalize_axis(axis, t.rank(), op);
  const int size = comm.size();
  if (size == 1) return t.clone();
  Tensor gathered = Tensor::empty({size, t.numel()}, t.dtype());
  comm.all_gather(t.reshape({1, t.numel()}), gathered)->wait();
  Shape whole = t.shape();
  whole[ax] *= size;
  if (ax == 0) return gathered.reshape(whole);  // rank r's rows already follow rank r - 1's
  std::vector<Tensor> parts;
  parts.reserve(size);
  for (int r = 0; r < size; ++r) parts.push_back(gathered.slice(r, r + 1).reshape(t.shape()));
  return kernels::concat(parts, ax);
}

// This rank's slice of `t` along `axis`.
Tensor own_slice(const Tensor& t, int axis, int rank, int size, const char* op) {
  const int ax = normalize_axis(axis, t.rank(), op);
  const ShardRange range = shard_range(t.dim(ax), rank, size, std::string(op) + " axis " + std::to_string(ax));
  if (size == 1) return t;
  return kernels::slice_axis(t, ax, range.begin, range.end);
}

CommunicatorPtr borrow(comm::Communicator& comm) { return CommunicatorPtr(CommunicatorPtr(), &comm); }

}  // namespace

// ---------------------------------------------------------------- collectives

namespace detail {

Variable copy_to(const Variable& x, CommunicatorPtr comm) {
  return strata::detail::make_result(x.value(), "copy_to_tensor_parallel", {x},
                                     [comm](const Tensor& dy, const Needs& needs) -> Grads {
                                       if (!needs[0]) return {Tensor()};
                                       return {all_reduce_sum(*comm, dy, "copy_to_tensor_parallel (backward)")};
                                     });
}

Variable reduce_from(const Variable& x, CommunicatorPtr comm) {
  Tensor y = all_reduce_sum(*comm, x.value(), "reduce_from_tensor_parallel");
  return strata::detail::make_result(y, "reduce_from_tensor_parallel", {x},
                                     [](const Tensor& dy, const Needs&) -> Grads { return {dy}; });
}

Variable gather_from(const Variable& x, CommunicatorPtr comm, int axis) {
  Tensor y = all_gather_along(*comm, x.value(), axis, "gather_from_tensor_parallel");
  return strata::detail::make_result(
      y, "gather_from_tensor_parallel", {x}, [comm, axis](const Tensor& dy, const Needs& needs) -> Grads {
        if (!needs[0]) return {Tensor()};
        return {own_slice(dy, axis, comm->rank(), comm->size(), "gather_from_tensor_parallel (backward)").clone()};
      });
}

Variable scatter_to(const Variable& x, CommunicatorPtr comm, int axis) {
  Tensor y = own_slice(x.value(), axis, comm->rank(), comm->size(), "scatter_to_tensor_parallel");
  if (comm->size() == 1) y = y.clone();
  return strata::detail::make_result(
      y, "scatter_to_tensor_parallel", {x}, [comm, axis](const Tensor& dy, const Needs& needs) -> Grads {
        if (!needs[0]) return {Tensor()};
        return {all_gather_along(*comm, dy, axis, "scatter_to_tensor_parallel (backward)")};
      });
}

std::pair<int, int> rank_and_size(const CommunicatorPtr& comm, const char* layer) {
  STRATA_CHECK(comm != nullptr, InvalidArgument, layer << " needs a communicator, got none");
  const int rank = comm->rank(), size = comm->size();
  shard_range(size, rank, size, "world size");  // rank in [0, size), size >= 1
  return {rank, size};
}

init::Initializer slice_of_whole(init::Initializer whole, Shape whole_shape, int axis, int rank, int world_size) {
  return [whole = std::move(whole), whole_shape = std::move(whole_shape), axis, rank, world_size](
             const Shape&, Generator& gen) { return shard_of(whole(whole_shape, gen), axis, rank, world_size); };
}

}  // namespace detail

Variable copy_to_tensor_parallel(const Variable& x, comm::Communicator& comm) {
  return detail::copy_to(x, borrow(comm));
}

Variable reduce_from_tensor_parallel(const Variable& x, comm::Communicator& comm) {
  return detail::reduce_from(x, borrow(comm));
}

Variable gather_from_tensor_parallel(const Variable& x, comm::Communicator& comm, int axis) {
  return detail::gather_from(x, borrow(comm), axis);
}

Variable scatter_to_tensor_parallel(const Variable& x, comm::Communicator& comm, int axis) {
  return detail::scatter_to(x, borrow(comm), axis);
}

// ---------------------------------------------------------------- shards

ShardRange shard_range(int64_t total, int rank, int world_size, const std::string& what) {
  STRATA_CHECK(world_size >= 1, InvalidArgument,
               "tensor parallelism needs a group of at least 1 rank, got world size " << world_size);
  STRATA_CHECK(rank >= 0 && rank < world_size, InvalidArgument,
               "tensor parallelism: rank " << rank << " is outside [0, " << world_size << ")");
  STRATA_CHECK(
      total > 0 && total % world_size == 0, InvalidArgument,
      "tensor parallelism: " << what << " " << total << " is not a positive multiple of the world size " << world_size);
  const int64_t each = total / world_size;
  return {rank * each, (rank + 1) * each};
}

Tensor shard_of(const Tensor& full, int axis, int rank, int world_size) {
  const int ax = normalize_axis(axis, full.rank(), "shard_of");
  const ShardRange range =
      shard_range(full.dim(ax), rank, world_size, "axis " + std::to_string(ax) + " of " + full.shape_str());
  return kernels::slice_axis(full, ax, range.begin, range.end).clone();
}

}  // namespace strata::parallel
