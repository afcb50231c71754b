// GradientReducer: one replica's gradients summed with every other replica's through a comm::Communicator, in
// buckets whose all-reduce starts while backward is still running (the role of PyTorch DDP's Reducer, Horovod's
// tensor fusion). Not a public header: strategies build on it.
//
// For each list of sources it plans buckets once: the sources it takes (the `takes` filter), in reverse order
// (backward produces the last layers' gradients first), packed into flat float32 buffers of about
// bytes_per_pack (a larger source is a bucket of its own). Every bucket also carries one flag per member (1 where
// this replica has a gradient for it) and one `vote`, summed with the gradients, so that every replica learns
// from the same bits which sources had a gradient on any replica and how many replicas voted.
//
// A call may also carry `side` values (Model::fit's metric states, a pipeline replica's loss and rows): they ride in
// the last bucket as float32 pairs (hi, lo: each double to ~1e-14) and side_sums() gives their sums over the
// replicas — as close as float32 adds of the hi parts allow, ~6e-8 relative per replica (integers below 2^24, such as
// counts, exact) — so that a small exchange costs no collective of its own (on Gloo each collective a step adds costs
// milliseconds here). When no source is reduced, they get a bucket of their own, issued as the call begins.
//
// With `compression` (Compression::kBFloat16) each bucket's all-reduce sends bfloat16 and the sums read back are its
// float32 widening (the flags and the vote, small integers, stay exact up to 256 replicas).
//
// One call: begin(sources, vote); add(i, grad) once per source, as soon as it is final (it is copied into its
// bucket; a full bucket's all-reduce is issued at once, buckets in plan order, the same order on every replica);
// end(). Then wait_all() (or poll/wait per bucket), and read reduced(i) and votes(k).
// The buckets live on `device`, the replica's (a GPU replica's buckets are on its GPU, for NCCL): the plan, the flags,
// the votes and the order of the all-reduces are the same code on every device; only the bytes move differently (a
// host bucket is written through its pointer, a GPU bucket by copies and fills on the device's stream, and its flags,
// votes and side values are read back with a copy to the host).
// Thread-safety: used by one thread at a time (a replica's; a pipeline replica's stages take turns under a lock),
// with its own communicator rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strata/comm/communicator.h"
#include "strata/variable.h"

namespace strata::distribute::detail {

class GradientReducer {
 public:
  using Filter = std::function<bool(const Variable&)>;
  // `owner` names the strategy in errors. `takes`: which sources are reduced (the others are left alone).
  // `timeout` bounds each bucket's all-reduce (comm::kDefaultTimeout: the group's). `device`: the buckets' (the
  // gradients added must be there too).
  GradientReducer(comm::Communicator& comm, std::string owner, int64_t bytes_per_pack, Filter takes,
                  comm::Compression compression = comm::Compression::kNone,
                  std::chrono::milliseconds timeout = comm::kDefaultTimeout, Device device = Device::cpu());
  ~GradientReducer();

  // Starts a call for `sources` (the same list on every replica); `vote` is summed over the replicas per bucket,
  // `side` (as many values on every replica) over the replicas in the last bucket. InvalidArgument for side
  // values with compression (bfloat16 would round them).
  void begin(const std::vector<Variable>& sources, float vote = 0, const std::vector<double>& side = {});
  // The gradient of sources[index] (undefined: none on this replica, counted as zeros).
  void add(size_t index, const Tensor& grad);
  // Ends the call; every source must have been added.
  void end();
  // begin + add every gradient + end, for gradients that did not come from a tape call.
  void reduce(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);
  // Whether the last ended call had exactly these gradients (the same variables, the same tensors).
  bool matches(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) const;

  // ---- the last ended call (or the one in progress, for buckets already issued)
  size_t num_buckets() const;
  // Whether bucket k's all-reduce has finished (false if not issued yet); rethrows its error.
  bool poll(size_t k) const;
  void wait_all() const;
  // The sources packed in bucket k.
  const std::vector<size_t>& members(size_t k) const;
  // After bucket k finished: how many replicas voted (the sum of the votes).
  float votes(size_t k) const;
  // After the last bucket finished: the side values summed over the replicas (empty when the call had none).
  std::vector<double> side_sums() const;
  bool compressed() const { return all_reduce_options_.compression != comm::Compression::kNone; }
  // After its bucket finished: sources[index]'s gradient summed over the replicas (a view into the bucket, with
  // the variable's shape); undefined when no replica had one or the source is not reduced.
  Tensor reduced(size_t index, const Shape& shape) const;

 private:
  struct Plan;
  void make_plan(Plan& p, const std::vector<Variable>& sources, size_t side) const;
  const Plan& last() const;
  // Issues every bucket whose members have all been added, in plan order, up to the first that is not full.
  void issue_ready(Plan& p);

  comm::Communicator& comm_;
  const std::string owner_;
  const int64_t bytes_per_pack_;
  const Filter takes_;
  const comm::AllReduceOptions all_reduce_options_;               // kSum, with the compression and timeout
  const Device device_;                                           // where the buckets live
  std::map<std::vector<uint64_t>, std::unique_ptr<Plan>> plans_;  // by the sources' ids
  Plan* call_ = nullptr;  // the call in progress, or the last ended one
  bool ended_ = false;
};

// The ids of `vars`, in order (how plans are keyed).
std::vector<uint64_t> ids_of(const std::vector<Variable>& vars);

}  // namespace strata::distribute::detail
