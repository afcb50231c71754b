// Internal to the tensor-parallel layers: the differentiable collectives of strata/parallel/tensor_parallel.h over a
// communicator they keep alive (a layer's), so that a recorded backward can outlive the call that recorded it.
// Thread-safety: as the public ops (one thread per rank).
#pragma once

#include <memory>
#include <utility>

#include "strata/comm/communicator.h"
#include "strata/init.h"
#include "strata/variable.h"

namespace strata::parallel::detail {

using CommunicatorPtr = std::shared_ptr<comm::Communicator>;

Variable copy_to(const Variable& x, CommunicatorPtr comm);
Variable reduce_from(const Variable& x, CommunicatorPtr comm);
Variable gather_from(const Variable& x, CommunicatorPtr comm, int axis);
Variable scatter_to(const Variable& x, CommunicatorPtr comm, int axis);

// This rank and the group's size, from a communicator that must be there and be sane (InvalidArgument naming `layer`).
std::pair<int, int> rank_and_size(const CommunicatorPtr& comm, const char* layer);

// An initializer that draws the whole weight `whole_shape` with `whole` and keeps rank's slice along `axis`.
init::Initializer slice_of_whole(init::Initializer whole, Shape whole_shape, int axis, int rank, int world_size);

}  // namespace strata::parallel::detail
