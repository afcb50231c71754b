// The "local" backend: a group of ranks that are threads of one process, exchanging data through shared
// memory (TensorFlow's cross-device ops for CPU replicas; MirroredStrategy's in-process all-reduce).
//
// Each rank has a worker thread that runs its collectives, sends and recvs in issue order; ranks meet at
// barriers that spin briefly and then block, and every wait is bounded by the group timeout (or the call's
// own, from its options). A rank whose collective times out aborts the group: every later collective on any
// rank fails at once with Timeout naming the first failure. A recv that times out fails alone. Every
// operation takes float32, bfloat16 (reduced in float32, rounded once) and int64 (sums wrap around; mean
// rounds toward zero). Sub-groups (new_group) get their parent's LocalGroupOptions and run independently.
// Thread-safety: see strata/comm/communicator.h; make_local_group is safe from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "strata/comm/communicator.h"

namespace strata::comm {

// TF's cross-device ops for replicas that are threads of one process. All three end with bit-identical values
// on every rank. kReduceToOne and kRing add in rank order 0..N-1 (so they agree bit for bit); kTree adds
// pairwise (rank r + 2^k into rank r), except for bfloat16, which it reduces as kRing (in rank order, rounded
// once).
//   kReduceToOne: rank 0 reduces every rank's buffers, the others copy its result (ReductionToOneDevice).
//   kRing: reduce-scatter + all-gather in shared memory: rank r reduces chunk r of the bucket, then every
//          rank copies the other chunks from their owners (each rank does 1/N of the work).
//   kTree: pairwise binary-tree reduce into rank 0, then every rank copies rank 0's result.
enum class AllReduceAlgorithm { kReduceToOne, kRing, kTree };

struct LocalGroupOptions {
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kRing;
  // Bound on every wait for the other ranks (each step of each collective, and barrier()).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// `size` communicators sharing memory, rank i for thread i. Ranks may be used from any threads, one thread per rank.
std::vector<std::shared_ptr<Communicator>> make_local_group(int size, LocalGroupOptions options = {});

// "reduction_to_one_device", "ring", "tree".
std::string to_string(AllReduceAlgorithm algorithm);
// The inverse of to_string; an unknown name is InvalidArgument listing the choices.
AllReduceAlgorithm all_reduce_algorithm_from_string(const std::string& name);

}  // namespace strata::comm
