// The "nccl" backend: collectives on GPU tensors through NVIDIA's NCCL. Its factory has the gloo backend's shape (a
// Store to bootstrap through, rank, size, options); comm::make_communicator("nccl", args) calls it.
//
//   auto comm = comm::make_nccl_communicator(store, rank, size, {.timeout = std::chrono::seconds(30)});
//   comm->all_reduce({grad_on_gpu}, comm::ReduceOp::kMean)->wait();
//
// Bootstrap: rank 0 makes NCCL's unique id and sets it under "<prefix>/unique_id" in the store; the others wait for
// it (a Timeout naming the key and the prefix when rank 0 never comes within the connect timeout). Each rank then joins
// the group on its GPU `device` with a non-blocking ncclCommInitRankConfig, polled until the connect timeout (a peer
// that never comes is a Timeout, not a hang). A prefix serves one group: "<prefix>/joined/rank-<r>" counts the ranks
// that claimed it, and a second claim is an InvalidArgument (a rebuilt group takes a fresh prefix).
//
// Collectives take GPU tensors of this rank's device (float32, bfloat16, int64), a host tensor is an InvalidArgument
// ("nccl collectives take GPU tensors; use gloo for host tensors"). They are ordered with strata's stream of the
// device (core/cuda/cuda_context.h) without a host sync: the collective runs on the communicator's own stream after
// the kernels queued before it, and kernels queued after it see its result. Work::wait polls the collective's
// completion and NCCL's asynchronous error; past the collective's timeout (per call, or `timeout`) or on an NCCL
// error the communicator is aborted (ncclCommAbort) and the wait throws Timeout or Error naming the operation, the
// rank and the size. Like NCCL itself, ranks are not checked to call the same collective with the same dtype and
// count (gloo does, through an extra exchange): a mismatched call hangs or corrupts until the timeout catches it.
// Compression::kBFloat16 is ignored (NCCL reduces in the tensors' own dtype). send/recv match in issue order per
// peer (NCCL has no tags; `tag` is not compared). new_group bootstraps a new NCCL group of the members alone,
// under "<prefix>/sub/<r0>-<r1>-...#<k>".
//
// Without the CUDA build (STRATA_WITH_CUDA=ON) the factory throws Unavailable "the nccl backend needs the CUDA
// build ..."; in a CUDA build on a machine without a GPU, Unavailable naming "no CUDA device".
//
// Thread-safety: make_nccl_communicator is safe from any thread. A communicator is used by one thread at a time
// (as every Communicator); its Works may be waited on from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "strata/comm/communicator.h"
#include "strata/comm/store.h"

namespace strata::comm {

struct NcclOptions {
  // Bound on every collective, and on connecting the group unless connect_timeout says otherwise.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds connect_timeout{0};  // 0: timeout
  // The group's keys (NCCL's unique id) live under "<prefix>/" in the store.
  std::string prefix = "nccl";
  // The GPU this rank uses (cuda:<device>). -1: rank % the number of visible GPUs, torchrun's LOCAL_RANK convention
  // for ranks numbered host by host with one rank per GPU (set CUDA_VISIBLE_DEVICES or this field otherwise).
  int device = -1;
};

// This rank's end of an NCCL group of `size` ranks (see above). Throws Unavailable without CUDA or without a GPU,
// Timeout when the group does not connect within the connect timeout, InvalidArgument for a bad rank, size, device or
// a reused prefix.
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store> store, int rank, int size,
                                                     NcclOptions options = {});

// An NCCL group inside this process, rank r on GPU devices[r] (options.device is ignored): the ranks' ends are made on
// a thread each (NCCL's ranks join together) through a fresh in-memory store. For the replicas of one process, each
// used by its own thread (MirroredStrategy over GPUs). Throws the first rank's error (as make_nccl_communicator);
// InvalidArgument for no devices or one listed twice.
std::vector<std::shared_ptr<Communicator>> make_nccl_local_group(const std::vector<int>& devices,
                                                                 NcclOptions options = {});

}  // namespace strata::comm
