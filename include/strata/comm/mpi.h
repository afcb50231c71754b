// The "mpi" backend: ranks are the processes an `mpirun` started (OpenMPI), rank and size those of MPI_COMM_WORLD.
//
//   // mpirun --allow-run-as-root --oversubscribe -np 4 ./train
//   if (comm::started_by_mpirun()) {
//     auto comm = comm::make_mpi_communicator({.timeout = std::chrono::seconds(30)});
//     comm->all_reduce({grad_w, grad_b}, comm::ReduceOp::kMean)->wait();
//   }
//
// Every process of the job calls make_mpi_communicator once (MPI_Init_thread on the first call, MPI_Finalize at
// exit); outside mpirun it throws Unavailable instead of initialising MPI. Collectives (all_reduce, broadcast,
// all_gather, reduce_scatter, barrier; float32, bfloat16, int64), send/recv with tags and new_group run on the
// communicator's worker thread in issue order with MPI's non-blocking operations, polled until done or until the
// timeout (per call, or the group's); all_reduce's compression sends bfloat16 elements (a user MPI_Op).
// Floating-point all_reduce reduces to rank 0 and broadcasts, so every rank ends
// with the same bits. MPI cannot cancel a collective: one that passes its timeout fails with Timeout (naming the ranks
// that never reported waiting in it, and listing this rank's last collectives with bytes and training step) and
// leaves the communicator unusable (every later call fails at once) — the process should exit. abort() marks the communicator
// unusable on this rank only (MPI_Abort would kill the whole job); the peers' collectives end by their timeout.
// docs/comm.md ("MPI backend") has the details.
// Thread-safety: as every Communicator (strata/comm/communicator.h); make_mpi_communicator and started_by_mpirun are
// safe from any thread.
#pragma once

#include <chrono>
#include <memory>

#include "strata/comm/communicator.h"

namespace strata::comm {

struct MpiOptions {
  // Bound on every collective and message that sets no timeout of its own.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
};

// True when this process was started by OpenMPI's mpirun (OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE are set).
bool started_by_mpirun();

// This rank's end of MPI_COMM_WORLD (a duplicate of it). Collective: every process of the job calls it. Throws
// Unavailable when the process was not started by mpirun, or MPI offers less than MPI_THREAD_SERIALIZED.
std::shared_ptr<Communicator> make_mpi_communicator(MpiOptions options = {});

}  // namespace strata::comm
