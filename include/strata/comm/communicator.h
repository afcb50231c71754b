// Communicator: one rank's end of a group of replicas, and the collectives it runs with its peers.
//
// Collectives return a `Work` handle at once and run in the background, in the order each rank issued them
// (every rank must issue the same sequence, like NCCL or c10d). Tensors are float32 host tensors written in
// place; the caller must not touch them until `wait()` returns. Backends: "local" (threads of one process,
// strata/comm/local.h).
//
//   auto ranks = comm::make_local_group(2);            // rank i is used by thread i
//   // on thread i:
//   auto work = ranks[i]->all_reduce({grad_a, grad_b}, comm::ReduceOp::kMean);
//   ...                                                 // keep computing
//   work->wait();                                       // grad_a, grad_b now hold the mean over ranks
//
// Thread-safety: a Communicator is used by one thread at a time (one thread per rank); different ranks of a
// group may be used from different threads concurrently. A Work may be waited on from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/tensor.h"

namespace strata::comm {

enum class ReduceOp { kSum, kMean, kMax, kMin };
// "sum", "mean", "max", "min".
std::string to_string(ReduceOp op);

// A collective in flight (like c10d's Work / an NCCL stream event).
class Work {
 public:
  virtual ~Work();
  virtual bool is_completed() const = 0;
  // Blocks until done. Rethrows the collective's error: Timeout (strata/error.h) naming the collective, the
  // waiting rank and the ranks that never arrived; InvalidArgument when ranks passed mismatched shapes/dtypes/counts.
  virtual void wait() = 0;
};

// One rank's end of a group. Collectives run in the order each rank issued them (every rank must issue the
// same sequence); they return at once and run in the background. Tensors are float32 host tensors and are
// written in place; the caller must not touch them until wait() returns.
class Communicator {
 public:
  virtual ~Communicator();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "local"
  // Reduces `tensors` (one flat bucket; every rank passes the same shapes) across ranks; every rank ends
  // with the same bits.
  virtual std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, ReduceOp op = ReduceOp::kSum) = 0;
  // Copies root's `tensors` into every other rank's (same shapes on every rank).
  virtual std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, int root) = 0;
  // input [n, ...] on every rank -> output [size*n, ...]: rank r's input lands at rows [r*n, (r+1)*n).
  virtual std::shared_ptr<Work> all_gather(Tensor input, Tensor output) = 0;
  // Blocks until every rank has called it (with the group timeout).
  virtual void barrier() = 0;
  // Gives up on the whole group at once (e.g. a replica failed and will issue no more collectives): every
  // pending and later collective on every rank fails with Timeout quoting `reason`. The group cannot be
  // used again.
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace strata::comm
