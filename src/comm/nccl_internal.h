// Internals of the nccl backend (strata/comm/nccl.h) that need no GPU, so that the CPU tests reach them: the
// bootstrap through the store (claiming a prefix, publishing and fetching NCCL's unique id) and the choice of the
// rank's GPU; and the CUDA part's factory (comm/cuda/nccl_communicator.cc, CUDA builds only).
// Thread-safety: every function is safe from any thread (the store is).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "strata/comm/nccl.h"
#include "strata/comm/store.h"

namespace strata::comm::nccl_detail {

// "<prefix>/unique_id": where rank 0 sets NCCL's unique id.
std::string unique_id_key(const std::string& prefix);
// Claims rank `rank`'s slot under `prefix` ("<prefix>/joined/rank-<r>"); InvalidArgument when the prefix was
// already used by a group (a stale unique id would be read).
void claim_rank(Store& store, const std::string& prefix, int rank, int size);
// Rank 0: sets the unique id's bytes under unique_id_key(prefix).
void publish_unique_id(Store& store, const std::string& prefix, const std::string& id);
// The others: waits up to `timeout` for the unique id and returns its bytes. Timeout naming the key, the prefix and
// this rank; InvalidArgument when the value is not `expected_bytes` long.
std::string fetch_unique_id(Store& store, const std::string& prefix, int rank, size_t expected_bytes,
                            std::chrono::milliseconds timeout);
// The GPU of `rank`: `requested` when >= 0, else rank % visible. Unavailable naming "no CUDA device" when `visible`
// is 0; InvalidArgument when `requested` is not a visible device.
int choose_device(int rank, int requested, int visible);

#ifdef STRATA_WITH_CUDA
// The CUDA build's factory (arguments checked by make_nccl_communicator).
std::shared_ptr<Communicator> make_cuda_communicator(std::shared_ptr<Store> store, int rank, int size,
                                                     NcclOptions options);
#endif

}  // namespace strata::comm::nccl_detail
