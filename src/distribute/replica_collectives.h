// The cross-replica exchanges of ReplicaContext and Strategy (all_reduce of a tensor or a number, gather along an
// axis), each one rank's part of a collective on a comm::Communicator, so that the same code serves replicas that
// are threads of one process and, later, replicas in other processes. Not a public header.
// Each takes `on`, where the communicator's tensors must be (exchange_device): the host, or the rank's GPU for nccl,
// whose collectives take GPU tensors only; host values are then copied there and back.
// Thread-safety: as the communicator (one thread per rank); every rank calls the same function in the same order.
#pragma once

#include <string>
#include <vector>

#include "strata/comm/communicator.h"
#include "strata/distribute/values.h"
#include "strata/tensor.h"

namespace strata::distribute::detail {

// Where `comm` exchanges tensors for a replica on `replica`: that GPU for the nccl backend, else the host.
Device exchange_device(const comm::Communicator& comm, Device replica);

// The sum or mean over the ranks of `value` (float32, bfloat16 or int64; the same shape on every rank), added in
// rank order; a float mean is the sum times 1/size. Every rank gets the same bits.
Tensor all_reduce_tensor(comm::Communicator& comm, ReduceOp op, const Tensor& value, Device on = Device::cpu());
// The sum or mean over the ranks of `value`, added in rank order in double precision.
double all_reduce_number(comm::Communicator& comm, ReduceOp op, double value, Device on = Device::cpu());
// Element-wise sums over the ranks of `values` (the same length on every rank), added in rank order in double
// precision; every rank gets the same bits.
std::vector<double> all_reduce_numbers(comm::Communicator& comm, const std::vector<double>& values,
                                       Device on = Device::cpu());
// Every rank's `bytes` (of any lengths), in rank order: the lengths first, then one all_gather of the bytes padded
// to the longest (as int64 words, a dtype every backend moves).
std::vector<std::string> all_gather_bytes(comm::Communicator& comm, const std::string& bytes,
                                          Device on = Device::cpu());
// Every rank's `value` concatenated along `axis` in rank order (tf's gather). Any dtype; the ranks' shapes may
// differ along `axis` only, else ShapeError naming the ranks.
Tensor all_gather_tensor(comm::Communicator& comm, const Tensor& value, int axis, Device on = Device::cpu());

}  // namespace strata::distribute::detail
