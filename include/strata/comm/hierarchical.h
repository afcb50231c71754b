// The "hierarchical" communicator: the ranks of several processes (workers), each with a local group of
// replicas, as one group — local first, then across the workers (TensorFlow's hierarchical cross-device ops,
// Horovod's hierarchical all-reduce). Rank = worker × local size + local rank.
//
//   auto local = comm::make_local_group(2);                          // this worker's replica threads
//   auto cross = comm::make_gloo_communicator(store, worker, workers); // one rank per worker
//   auto ranks = comm::make_hierarchical_group(local, cross);         // rank i for local replica i
//   ranks[i]->all_reduce({grad})->wait();                             // summed over every replica of every worker
//
// all_reduce: the local group reduces, local rank 0 reduces across the workers, and broadcasts the result to the
// local group (kMean divides the sum once, on every rank alike, so all ranks get the same bits). broadcast from
// global rank g: within g's worker to its local rank 0, across the workers, then within each worker. all_gather:
// locally, across the workers, then broadcast locally (rows in global rank order). barrier: local, across, local.
// bfloat16 sums are rounded at each level. AllReduceOptions::compression applies across the workers only. Every
// worker must have the same local size. reduce_scatter, send, recv and new_group are not supported.
// Each rank runs its operations in issue order on a thread of its own; only local rank 0 uses `cross`.
// Thread-safety: as every Communicator (strata/comm/communicator.h).
#pragma once

#include <memory>
#include <vector>

#include "strata/comm/communicator.h"

namespace strata::comm {

// One communicator per rank of `local`, spanning local × cross. `local` and `cross` stay in use by the result
// (local rank 0's operations run on `cross`, which nothing else may use meanwhile).
std::vector<std::shared_ptr<Communicator>> make_hierarchical_group(std::vector<std::shared_ptr<Communicator>> local,
                                                                   std::shared_ptr<Communicator> cross);

}  // namespace strata::comm
