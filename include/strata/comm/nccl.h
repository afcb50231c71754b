// The "nccl" backend: the seam only. Its factory has the gloo backend's shape (a Store to bootstrap through, rank,
// size, options), so that strategies and the cluster layer can name it today; until the CUDA issue lands it throws
// Unavailable in every build: "the nccl backend needs the CUDA build (STRATA_WITH_CUDA=ON) and GPU tensors; on CPU
// use gloo or mpi".
//
//   auto comm = comm::make_nccl_communicator(store, rank, size, {.timeout = std::chrono::seconds(30)});
//
// Thread-safety: make_nccl_communicator is safe from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "strata/comm/communicator.h"
#include "strata/comm/store.h"

namespace strata::comm {

struct NcclOptions {
  // Bound on connecting the group and on every collective.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // The group's keys (NCCL's unique id) live under "<prefix>/" in the store.
  std::string prefix = "nccl";
};

// This rank's end of an NCCL group of `size` ranks. Today: always throws Unavailable (see above).
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store> store, int rank, int size,
                                                     NcclOptions options = {});

}  // namespace strata::comm
