// Communicator: one rank's end of a group of replicas, and the collectives it runs with its peers (the role of
// PyTorch c10d's Backend / ProcessGroup).
//
// Collectives return a `Work` at once and run in the background, in the order each rank issued them (every
// rank must issue the same sequence, like NCCL or c10d). Tensors are host tensors (GPU tensors on "nccl") of one
// dtype per call (float32, bfloat16 or int64) written in place; the caller must not touch them until `wait()` returns.
// Backends: "local" (threads of one process, strata/comm/local.h). An operation a backend lacks throws
// Unavailable "backend <name> does not support <op>" (c10d's habit), so a new backend builds with only the
// pure virtuals and grows from there.
//
//   auto ranks = comm::make_local_group(2);            // rank i is used by thread i
//   // on thread i:
//   auto work = ranks[i]->all_reduce({grad_a, grad_b}, comm::ReduceOp::kMean);
//   ...                                                 // keep computing
//   work->wait();                                       // grad_a, grad_b now hold the mean over ranks
//   ranks[i]->all_reduce({loss}, {.op = comm::ReduceOp::kSum, .timeout = std::chrono::seconds(5)})->wait();
//
// Thread-safety: a Communicator is used by one thread at a time (one thread per rank); different ranks of a
// group may be used from different threads concurrently. A Work may be waited on from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "strata/tensor.h"

namespace strata::comm {

enum class ReduceOp { kSum, kMean, kMax, kMin };
// "sum", "mean", "max", "min".
std::string to_string(ReduceOp op);

// How an all-reduce's float32 values travel between processes (PyTorch's DDP communication hooks).
enum class Compression {
  kNone,
  // bfloat16 on the wire (PyTorch's bf16_compress_hook): each rank's values are rounded to bfloat16, every
  // pairwise reduction is computed in float32 and rounded back to bfloat16, and the result is widened to float32
  // (kMean divides it then). Half the bytes, about 3 significant digits; every rank still ends with the same
  // bits. Only float32 with kSum or kMean (InvalidArgument otherwise, on the backends that honour it).
  kBFloat16,
};
// "none", "bf16".
std::string to_string(Compression compression);

// The `timeout` of the options below when the caller sets none: the backend's group timeout applies.
inline constexpr std::chrono::milliseconds kDefaultTimeout{-1};

// One options struct per operation, as c10d's Types.hpp. `timeout` bounds every wait of that one operation
// for the other ranks, instead of the group's timeout.
struct AllReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // Honoured where bytes cross a wire (gloo, mpi, and the cross-worker level of hierarchical); the local backend,
  // whose ranks share memory, reduces in full precision.
  Compression compression = Compression::kNone;
};
struct BroadcastOptions {
  int root = 0;
  std::chrono::milliseconds timeout = kDefaultTimeout;
};
struct AllGatherOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
  std::chrono::milliseconds timeout = kDefaultTimeout;
};
struct BarrierOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;
};
// Point to point: a recv matches the sends of its source with the same tag, in the order they were issued.
struct SendOptions {
  int tag = 0;
  std::chrono::milliseconds timeout = kDefaultTimeout;
};
struct RecvOptions {
  int tag = 0;
  std::chrono::milliseconds timeout = kDefaultTimeout;
};

// An operation in flight (like c10d's Work / an NCCL stream event).
class Work {
 public:
  virtual ~Work();
  virtual bool is_completed() const = 0;
  // Blocks until done. Rethrows the operation's error: Timeout (strata/error.h) naming the operation, the
  // waiting rank and the ranks that never arrived; InvalidArgument when ranks passed mismatched
  // shapes/dtypes/counts.
  virtual void wait() = 0;
  // c10d's Work::wait(timeout): like wait(), but throws Timeout (naming the operation when the backend knows
  // it) if the operation has not completed within `timeout`. Giving up the wait does not cancel the
  // operation: it goes on under its own timeout, and the tensors stay untouchable until it completes. The
  // default polls is_completed() (a subclass overriding only wait() adds `using Work::wait;` to keep this one
  // callable on its own type).
  virtual void wait(std::chrono::milliseconds timeout);
  // The error of a failed operation; null while it runs and after a success. The default asks wait().
  virtual std::exception_ptr exception() const;
};

// One rank's end of a group. Collectives run in the order each rank issued them (every rank must issue the
// same sequence); they return at once and run in the background. Tensors are written in place; the caller
// must not touch them until wait() returns.
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

  // ---- With options. The defaults forward to the calls above when no timeout is set (ignoring compression), and
  // otherwise throw Unavailable "backend <name> does not support <op> with a per-call timeout".
  virtual std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, const AllReduceOptions& options);
  virtual std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, const BroadcastOptions& options);
  virtual std::shared_ptr<Work> all_gather(Tensor input, Tensor output, const AllGatherOptions& options);
  virtual void barrier(const BarrierOptions& options);

  // ---- Operations a backend may lack; the defaults throw Unavailable "backend <name> does not support <op>".
  // (A backend that overrides one overload of a name adds `using Communicator::<name>;` to keep the others
  // callable on its own type.)
  // input [size*n, ...] -> output [n, ...]: rank r gets the reduction over ranks of input rows [r*n, (r+1)*n).
  virtual std::shared_ptr<Work> reduce_scatter(Tensor input, Tensor output, const ReduceScatterOptions& options = {});
  // Sends `tensors` to rank `dst`, where a recv(tensors, this rank, same tag) takes them.
  virtual std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst, const SendOptions& options);
  // Receives into `tensors` (the sent shapes and dtype) what rank `src` sent with the same tag.
  virtual std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src, const RecvOptions& options);
  std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst, int tag = 0) {
    return send(std::move(tensors), dst, SendOptions{.tag = tag});
  }
  std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src, int tag = 0) {
    return recv(std::move(tensors), src, RecvOptions{.tag = tag});
  }
  // The sub-group of this group's `ranks` (torch.distributed.new_group): this rank's Communicator in it, its
  // rank being its position among the sorted `ranks`; nullptr when this rank is not among them. Every member
  // calls it with the same ranks; members' k-th calls for the same ranks make the same group. Sub-groups run
  // independently of their parent (their own queue and timeout), and nest.
  virtual std::shared_ptr<Communicator> new_group(std::vector<int> ranks);

  // Bytes of all-reduce payload this rank has handed to its transport so far: each all-reduce's elements times
  // their size on the wire (4 for float32 and for bfloat16 tensors, which travel widened; 2 with
  // Compression::kBFloat16; 8 for int64). A ring all-reduce sends about 2 (size - 1) / size times that. 0 where
  // nothing crosses a wire (local, hierarchical). For tests and benchmarks; safe from any thread.
  virtual int64_t all_reduce_wire_bytes() const { return 0; }
  // Tags the collectives this rank issues from now on with training step `step` (the gradient path sets the
  // optimizer's iterations() as a step begins), so that a timeout says the step of this rank's last collectives and
  // of its peers'. Cheap (an atomic store); may be called from any thread. The default ignores it (local backend).
  virtual void set_step(int64_t step);

 protected:
  // Throws Unavailable "backend <backend()> does not support <what>".
  [[noreturn]] void unsupported(const std::string& what) const;
};

}  // namespace strata::comm
