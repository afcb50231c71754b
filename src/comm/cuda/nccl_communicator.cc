// The nccl backend's communicator (strata/comm/nccl.h), built only with STRATA_WITH_CUDA: NCCL collectives on the
// GPU tensors of one device, bootstrapped through a Store (comm/nccl_internal.h: the steps that need no GPU).
//
// Each communicator owns a non-blocking NCCL communicator (ncclCommInitRankConfig with blocking = 0, so that every
// NCCL call returns at once and is settled by polling ncclCommGetAsyncError against a deadline: a peer that never
// comes is a Timeout, never a hang) and a CUDA stream of its own. A collective is queued on that stream after an
// event recorded on strata's stream of the device (detail::cuda::stream), and strata's stream then waits on the
// collective's completion event: kernels before it feed it and kernels after it read its result, with no host sync.
// A Work polls the completion event (cudaEventQuery) and NCCL's asynchronous error; past the collective's deadline,
// or on an error, it aborts the NCCL communicator (ncclCommAbort makes the NCCL kernels return, so strata's stream
// goes on) and throws Timeout or Error naming the operation, the rank and the size. The NCCL communicator is only
// touched under Group::mu, since Works may be waited on from other threads.
//
// Thread-safety: one thread at a time issues collectives on a communicator (its sequence numbers are its own);
// Works may be waited on, and abort called, from any thread (Group::mu).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/completion.h"
#include "comm/nccl_internal.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/cuda_event.h"
#include "strata/error.h"

namespace strata::comm::nccl_detail {
namespace {

using Clock = std::chrono::steady_clock;
using strata::comm::detail::Failure;
using strata::comm::detail::kind_name;
using strata::comm::detail::OpKind;
using strata::detail::cuda::Event;

// NCCL's name for `result`, and its last message for `comm` (which may be null) when it has one.
std::string nccl_message(ncclResult_t result, ncclComm_t comm) {
  std::string message = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') message += std::string(" (") + last + ")";
  return message;
}

// Runs `throwing` (which throws a strata error) and returns it as a Failure, keeping the check macro's location.
template <class F>
Failure failure_of(F throwing) {
  try {
    throwing();
  } catch (...) {
    return Failure::of(std::current_exception());
  }
  return {ErrorCode::kUnknown, "(no error)"};
}

// What a communicator and its Works share: the NCCL communicator, its stream, and whether it was aborted.
struct Group {
  int rank = 0;
  int size = 1;
  int device = 0;
  std::string prefix;
  std::shared_ptr<Store> store;
  std::chrono::milliseconds timeout{0};          // bounds each collective
  std::chrono::milliseconds connect_timeout{0};  // bounds connecting (a sub-group too); 0: timeout
  cudaStream_t stream = nullptr;                 // NCCL's stream; destroyed with the group

  std::mutex mu;
  ncclComm_t comm = nullptr;  // GUARDED_BY(mu); null once aborted (ncclCommAbort frees it)
  bool aborted = false;       // GUARDED_BY(mu)
  std::string abort_reason;   // GUARDED_BY(mu)

  std::string name() const {
    return "nccl group of " + std::to_string(size) + " (prefix '" + prefix + "', rank " + std::to_string(rank) +
           " on cuda:" + std::to_string(device) + ")";
  }
  std::string aborted_key() const { return prefix + "/aborted"; }

  // REQUIRES: mu held. Waits while NCCL reports ncclInProgress (a non-blocking call still running) until
  // `deadline`; returns NCCL's final result (ncclInProgress when the deadline passed first).
  ncclResult_t settle(ncclResult_t result, Clock::time_point deadline) {
    for (int polls = 0; result == ncclInProgress && comm != nullptr; ++polls) {
      if (Clock::now() >= deadline) return ncclInProgress;
      if (polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (ncclCommGetAsyncError(comm, &result) != ncclSuccess) return ncclInternalError;
    }
    return result;
  }

  // REQUIRES: mu held. Aborts the NCCL communicator once; `reason` is what later collectives quote.
  void abort_locked(const std::string& reason) {
    if (aborted) return;
    aborted = true;
    abort_reason = reason;
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }

  // What a peer said when it aborted the group (abort(reason) sets it in the store), or "".
  std::string peer_abort_reason() const {
    try {
      if (store != nullptr && store->check({aborted_key()})) return store->get(aborted_key());
    } catch (const std::exception&) {
      // The store is gone too: nothing to quote.
    }
    return "";
  }

  ~Group() {
    std::lock_guard<std::mutex> lock(mu);
    try {
      strata::detail::cuda::set_device(device);
      if (comm != nullptr) {
        // Flush what was issued (bounded by the timeout), then free; a group that does not flush is aborted.
        ncclResult_t result = settle(ncclCommFinalize(comm), Clock::now() + timeout);
        if (result == ncclSuccess) {
          ncclCommDestroy(comm);
        } else {
          ncclCommAbort(comm);
        }
        comm = nullptr;
      }
      if (stream != nullptr) cudaStreamDestroy(stream);
    } catch (const std::exception&) {
      // A destructor does not throw; the process's exit frees what is left.
    }
  }
};

// Joins the NCCL group of `size` ranks under `prefix` on `device`: rank 0 makes and publishes the unique id, the
// others fetch it, and every rank polls its non-blocking init until `connect_timeout` (0: `timeout`, which bounds
// the group's collectives).
std::shared_ptr<Group> connect(std::shared_ptr<Store> store, int rank, int size, int device, const std::string& prefix,
                               std::chrono::milliseconds timeout, std::chrono::milliseconds connect_timeout) {
  const std::chrono::milliseconds connect_limit = connect_timeout.count() > 0 ? connect_timeout : timeout;
  const Clock::time_point deadline = Clock::now() + connect_limit;
  claim_rank(*store, prefix, rank, size);
  strata::detail::cuda::set_device(device);
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t made = ncclGetUniqueId(&id);
    STRATA_CHECK(
        made == ncclSuccess, Unavailable,
        "nccl: rank 0 of a group of " << size << " could not make NCCL's unique id: " << nccl_message(made, nullptr));
    publish_unique_id(*store, prefix, std::string(id.internal, sizeof(id.internal)));
  } else {
    const std::string bytes = fetch_unique_id(*store, prefix, rank, sizeof(id.internal), connect_limit);
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  auto group = std::make_shared<Group>();
  group->rank = rank;
  group->size = size;
  group->device = device;
  group->prefix = prefix;
  group->store = std::move(store);
  group->timeout = timeout;
  group->connect_timeout = connect_timeout;
  strata::detail::cuda::check(cudaStreamCreateWithFlags(&group->stream, cudaStreamNonBlocking),
                              "cudaStreamCreateWithFlags (the nccl communicator's stream)");

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  std::lock_guard<std::mutex> lock(group->mu);
  ncclResult_t result = ncclCommInitRankConfig(&group->comm, size, id, rank, &config);
  if (result == ncclInProgress || result == ncclSuccess) result = group->settle(result, deadline);
  if (result == ncclInProgress) {
    group->abort_locked("the group did not connect");
    STRATA_THROW(Timeout, "nccl: rank " << rank << " of a group of " << size << " (prefix '" << prefix
                                        << "', cuda:" << device << ") did not connect within " << connect_limit.count()
                                        << " ms: did every rank call make_nccl_communicator?");
  }
  if (result != ncclSuccess) {
    const std::string message = nccl_message(result, group->comm);
    group->abort_locked("the group did not connect");
    STRATA_THROW(Unavailable, "nccl: rank " << rank << " of a group of " << size << " (prefix '" << prefix
                                            << "', cuda:" << device << ") could not connect: " << message);
  }
  return group;
}

ncclDataType_t nccl_dtype(DType dtype, const char* op) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt64:
      return ncclInt64;
    default:
      break;
  }
  STRATA_THROW(InvalidArgument,
               "nccl " << op << ": dtype " << dtype_name(dtype) << " is not supported (float32, bfloat16 or int64)");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMean:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  STRATA_THROW(InvalidArgument, "nccl: unknown reduction " << static_cast<int>(op));
}

// One collective in flight: done when its completion event (recorded on NCCL's stream) has fired.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Group> group, OpKind kind, int64_t seq, std::unique_ptr<Event> done,
           std::vector<Tensor> tensors, Clock::time_point deadline, std::chrono::milliseconds limit)
      : group_(std::move(group)),
        kind_(kind),
        seq_(seq),
        done_(std::move(done)),
        deadline_(deadline),
        limit_(limit),
        tensors_(std::move(tensors)) {}

  bool is_completed() const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return true;
    }
    // An event that failed counts as completed: wait() says how.
    return cudaEventQuery(done_->get()) != cudaErrorNotReady;
  }

  void wait() override { wait_until(deadline_, true, limit_); }

  // Gives up at `timeout` (a Timeout that leaves the collective running) unless the collective's own deadline comes
  // first, which aborts the group as wait() does.
  void wait(std::chrono::milliseconds timeout) override {
    const Clock::time_point until = Clock::now() + timeout;
    if (until >= deadline_) {
      wait_until(deadline_, true, limit_);
    } else {
      wait_until(until, false, timeout);
    }
  }

  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_ && failure_.failed() ? failure_.as_exception_ptr() : nullptr;
  }

 private:
  std::string what() const {
    return std::string(kind_name(kind_)) + " #" + std::to_string(seq_) + " on rank " + std::to_string(group_->rank) +
           " of " + group_->name();
  }

  [[noreturn]] void fail(Failure failure) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!finished_) {
        finished_ = true;
        failure_ = std::move(failure);
      }
    }
    failure_.raise();
  }

  void succeed() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!finished_) finished_ = true;
    tensors_.clear();
  }

  void wait_until(Clock::time_point until, bool own_deadline, std::chrono::milliseconds limit) {
    for (int polls = 0;; ++polls) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (finished_) {
          if (failure_.failed()) failure_.raise();
          return;
        }
      }
      {
        std::lock_guard<std::mutex> lock(group_->mu);
        if (group_->aborted) {
          const std::string reason = group_->abort_reason;
          fail(failure_of([&] {
            STRATA_THROW(Timeout, "nccl: " << what() << " failed: the communicator was aborted: " << reason);
          }));
        }
        const cudaError_t query = cudaEventQuery(done_->get());
        if (query == cudaSuccess) {
          succeed();
          return;
        }
        if (query != cudaErrorNotReady) {
          cudaGetLastError();
          const std::string message = cudaGetErrorString(query);
          group_->abort_locked(std::string(kind_name(kind_)) + " #" + std::to_string(seq_) + " failed on the GPU");
          fail(failure_of([&] { STRATA_THROW(Error, "nccl: " << what() << " failed on the GPU: " << message); }));
        }
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(group_->comm, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
          const std::string message = nccl_message(async, group_->comm);
          group_->abort_locked(std::string(kind_name(kind_)) + " #" + std::to_string(seq_) + " failed: " + message);
          fail(failure_of([&] { STRATA_THROW(Error, "nccl: " << what() << " failed: " << message); }));
        }
        if (Clock::now() >= until) {
          if (!own_deadline) {
            STRATA_THROW(Timeout, "nccl: " << what() << " did not complete within " << limit.count()
                                           << " ms (it goes on running under its own timeout of " << limit_.count()
                                           << " ms)");
          }
          std::string peer = group_->peer_abort_reason();
          group_->abort_locked(std::string(kind_name(kind_)) + " #" + std::to_string(seq_) + " timed out");
          if (!peer.empty()) peer = "; a peer aborted the group: " + peer;
          fail(failure_of([&] {
            STRATA_THROW(Timeout, "nccl: " << what() << " did not complete within " << limit.count()
                                           << " ms; the communicator is aborted (did every rank call the same "
                                              "collective, with the same dtype and count?)"
                                           << peer);
          }));
        }
      }
      if (polls < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  const std::shared_ptr<Group> group_;
  const OpKind kind_;
  const int64_t seq_;
  const std::unique_ptr<Event> done_;
  const Clock::time_point deadline_;
  const std::chrono::milliseconds limit_;
  mutable std::mutex mu_;
  bool finished_ = false;        // GUARDED_BY(mu_)
  Failure failure_;              // GUARDED_BY(mu_)
  std::vector<Tensor> tensors_;  // GUARDED_BY(mu_); kept alive until the collective is done
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<Group> group) : group_(std::move(group)) {}

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  using Communicator::recv;
  using Communicator::send;

  int rank() const override { return group_->rank; }
  int size() const override { return group_->size; }
  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, ReduceOp op) override {
    return all_reduce(std::move(tensors), AllReduceOptions{.op = op});
  }
  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, int root) override {
    return broadcast(std::move(tensors), BroadcastOptions{.root = root});
  }
  std::shared_ptr<Work> all_gather(Tensor input, Tensor output) override {
    return all_gather(std::move(input), std::move(output), AllGatherOptions{});
  }
  void barrier() override { barrier(BarrierOptions{}); }

  // Compression is ignored: NCCL reduces in the tensors' dtype (bfloat16 in bfloat16 with float accumulation).
  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, const AllReduceOptions& options) override {
    const char* op = "all_reduce";
    const ncclDataType_t dtype = check_tensors(op, tensors);
    const ncclRedOp_t reduce = nccl_op(options.op);
    return issue(OpKind::kAllReduce, std::move(tensors), options.timeout,
                 [&](const std::vector<Tensor>& t, ncclComm_t comm, cudaStream_t stream) {
                   for (const Tensor& x : t) {
                     void* p = const_cast<Tensor&>(x).raw_data();
                     const ncclResult_t r = ncclAllReduce(p, p, x.numel(), dtype, reduce, comm, stream);
                     if (r != ncclSuccess && r != ncclInProgress) return r;
                   }
                   return ncclSuccess;
                 });
  }

  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, const BroadcastOptions& options) override {
    const char* op = "broadcast";
    const ncclDataType_t dtype = check_tensors(op, tensors);
    STRATA_CHECK(
        options.root >= 0 && options.root < size(), InvalidArgument,
        "nccl broadcast on rank " << rank() << ": root " << options.root << " is not a rank of a group of " << size());
    const int root = options.root;
    return issue(OpKind::kBroadcast, std::move(tensors), options.timeout,
                 [&](const std::vector<Tensor>& t, ncclComm_t comm, cudaStream_t stream) {
                   for (const Tensor& x : t) {
                     void* p = const_cast<Tensor&>(x).raw_data();
                     const ncclResult_t r = ncclBroadcast(p, p, x.numel(), dtype, root, comm, stream);
                     if (r != ncclSuccess && r != ncclInProgress) return r;
                   }
                   return ncclSuccess;
                 });
  }

  std::shared_ptr<Work> all_gather(Tensor input, Tensor output, const AllGatherOptions& options) override {
    const char* op = "all_gather";
    const ncclDataType_t dtype = check_tensors(op, {input, output});
    STRATA_CHECK(output.numel() == input.numel() * size(), InvalidArgument,
                 "nccl all_gather on rank " << rank() << ": the output has " << output.numel() << " elements where "
                                            << size() << " ranks of " << input.numel() << " need "
                                            << input.numel() * size());
    return issue(OpKind::kAllGather, {std::move(input), std::move(output)}, options.timeout,
                 [&](const std::vector<Tensor>& t, ncclComm_t comm, cudaStream_t stream) {
                   return ncclAllGather(t[0].raw_data(), const_cast<Tensor&>(t[1]).raw_data(), t[0].numel(), dtype,
                                        comm, stream);
                 });
  }

  std::shared_ptr<Work> reduce_scatter(Tensor input, Tensor output, const ReduceScatterOptions& options) override {
    const char* op = "reduce_scatter";
    const ncclDataType_t dtype = check_tensors(op, {input, output});
    STRATA_CHECK(input.numel() == output.numel() * size(), InvalidArgument,
                 "nccl reduce_scatter on rank " << rank() << ": the input has " << input.numel() << " elements where "
                                                << size() << " ranks of " << output.numel() << " need "
                                                << output.numel() * size());
    const ncclRedOp_t reduce = nccl_op(options.op);
    return issue(OpKind::kReduceScatter, {std::move(input), std::move(output)}, options.timeout,
                 [&](const std::vector<Tensor>& t, ncclComm_t comm, cudaStream_t stream) {
                   return ncclReduceScatter(t[0].raw_data(), const_cast<Tensor&>(t[1]).raw_data(), t[1].numel(), dtype,
                                            reduce, comm, stream);
                 });
  }

  // An all-reduce of one float on this device, waited for.
  void barrier(const BarrierOptions& options) override {
    if (!barrier_scratch_.defined()) barrier_scratch_ = Tensor::zeros({1}, DType::kFloat32, Device::cuda(device()));
    std::vector<Tensor> one{barrier_scratch_};
    issue(OpKind::kBarrier, std::move(one), options.timeout,
          [&](const std::vector<Tensor>& t, ncclComm_t comm, cudaStream_t stream) {
            void* p = const_cast<Tensor&>(t[0]).raw_data();
            return ncclAllReduce(p, p, 1, ncclFloat32, ncclSum, comm, stream);
          })
        ->wait();
  }

  std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst, const SendOptions& options) override {
    const ncclDataType_t dtype = check_tensors("send", tensors);
    check_peer("send", dst);
    return issue(OpKind::kSend, std::move(tensors), options.timeout,
                 [&](const std::vector<Tensor>& t, ncclComm_t comm, cudaStream_t stream) {
                   for (const Tensor& x : t) {
                     const ncclResult_t r = ncclSend(x.raw_data(), x.numel(), dtype, dst, comm, stream);
                     if (r != ncclSuccess && r != ncclInProgress) return r;
                   }
                   return ncclSuccess;
                 });
  }

  std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src, const RecvOptions& options) override {
    const ncclDataType_t dtype = check_tensors("recv", tensors);
    check_peer("recv", src);
    return issue(OpKind::kRecv, std::move(tensors), options.timeout,
                 [&](const std::vector<Tensor>& t, ncclComm_t comm, cudaStream_t stream) {
                   for (const Tensor& x : t) {
                     const ncclResult_t r =
                         ncclRecv(const_cast<Tensor&>(x).raw_data(), x.numel(), dtype, src, comm, stream);
                     if (r != ncclSuccess && r != ncclInProgress) return r;
                   }
                   return ncclSuccess;
                 });
  }

  // A new NCCL group of the members alone, bootstrapped through the store under a sub-prefix (ncclCommSplit would
  // need every rank of this group to call it; new_group asks only the members).
  std::shared_ptr<Communicator> new_group(std::vector<int> ranks) override {
    std::sort(ranks.begin(), ranks.end());
    std::ostringstream list;
    for (size_t i = 0; i < ranks.size(); ++i) list << (i ? "-" : "") << ranks[i];
    STRATA_CHECK(!ranks.empty(), InvalidArgument, "nccl new_group on rank " << rank() << ": no ranks given");
    STRATA_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), InvalidArgument,
                 "nccl new_group on rank " << rank() << ": ranks " << list.str() << " name a rank twice");
    STRATA_CHECK(ranks.front() >= 0 && ranks.back() < size(), InvalidArgument,
                 "nccl new_group on rank " << rank() << ": ranks " << list.str() << " are not all ranks of a group of "
                                           << size());
    const auto me = std::find(ranks.begin(), ranks.end(), rank());
    if (me == ranks.end()) return nullptr;
    const int k = ++new_group_calls_[ranks];
    const std::string prefix = group_->prefix + "/sub/" + list.str() + "#" + std::to_string(k);
    return std::make_shared<NcclCommunicator>(connect(group_->store, static_cast<int>(me - ranks.begin()),
                                                      static_cast<int>(ranks.size()), device(), prefix, group_->timeout,
                                                      group_->connect_timeout));
  }

  // Aborts the NCCL communicator (its kernels return; pending and later collectives fail quoting `reason`) and
  // tells the peers through the store, whose timeouts then quote it.
  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(group_->mu);
      group_->abort_locked("aborted by rank " + std::to_string(rank()) + ": " + reason);
    }
    try {
      group_->store->set(group_->aborted_key(), "rank " + std::to_string(rank()) + ": " + reason);
    } catch (const std::exception&) {
      // The store is gone: the peers' collectives end by their timeouts without the reason.
    }
  }

 private:
  int device() const { return group_->device; }

  void check_peer(const char* op, int peer) const {
    STRATA_CHECK(
        peer >= 0 && peer < size() && peer != rank(), InvalidArgument,
        "nccl " << op << " on rank " << rank() << ": peer " << peer << " is not another rank of a group of " << size());
  }

  // The tensors' NCCL dtype; InvalidArgument unless every one is defined, on this rank's GPU, of one dtype.
  ncclDataType_t check_tensors(const char* op, const std::vector<Tensor>& tensors) const {
    STRATA_CHECK(!tensors.empty(), InvalidArgument, "nccl " << op << " on rank " << rank() << ": no tensors");
    for (const Tensor& t : tensors) {
      STRATA_CHECK(t.defined(), InvalidArgument, "nccl " << op << " on rank " << rank() << ": an undefined tensor");
      STRATA_CHECK(!t.device().is_cpu(), InvalidArgument,
                   "nccl " << op << " on rank " << rank() << ": a tensor on " << t.device().str()
                           << "; nccl collectives take GPU tensors; use gloo for host tensors");
      STRATA_CHECK(t.device() == Device::cuda(device()), InvalidArgument,
                   "nccl " << op << " on rank " << rank() << ": a tensor on " << t.device().str()
                           << " where this rank's communicator uses cuda:" << device());
      STRATA_CHECK(t.dtype() == tensors.front().dtype(), InvalidArgument,
                   "nccl " << op << " on rank " << rank() << ": mixed dtypes " << dtype_name(tensors.front().dtype())
                           << " and " << dtype_name(t.dtype()));
    }
    return nccl_dtype(tensors.front().dtype(), op);
  }

  // Queues `launch` (NCCL calls on the communicator's stream, inside one NCCL group) after the kernels queued on
  // strata's stream so far, and makes strata's stream wait for it.
  template <class Launch>
  std::shared_ptr<Work> issue(OpKind kind, std::vector<Tensor> tensors, std::chrono::milliseconds timeout,
                              Launch launch) {
    const std::chrono::milliseconds limit = timeout == kDefaultTimeout ? group_->timeout : timeout;
    STRATA_CHECK(limit.count() > 0, InvalidArgument,
                 "nccl " << kind_name(kind) << " on rank " << rank() << ": the timeout must be positive (got "
                         << limit.count() << " ms)");
    const int64_t seq = ++seq_;
    const Clock::time_point deadline = Clock::now() + limit;
    std::lock_guard<std::mutex> lock(group_->mu);
    if (group_->aborted) {
      STRATA_THROW(Timeout, "nccl: " << kind_name(kind) << " #" << seq << " on rank " << rank() << " of "
                                     << group_->name()
                                     << " failed: the communicator was aborted: " << group_->abort_reason);
    }
    const cudaStream_t strata_stream = strata::detail::cuda::stream(device());
    Event ready(device(), /*timing=*/false);
    ready.record(strata_stream);
    ready.wait_on(group_->stream);

    ncclResult_t result = ncclGroupStart();
    if (result == ncclSuccess) {
      const ncclResult_t queued = launch(tensors, group_->comm, group_->stream);
      const ncclResult_t ended = ncclGroupEnd();
      result = (queued != ncclSuccess && queued != ncclInProgress) ? queued : ended;
    }
    result = group_->settle(result, deadline);
    if (result != ncclSuccess) {
      const bool late = result == ncclInProgress;
      const std::string message =
          late ? std::string("NCCL did not accept it in time") : nccl_message(result, group_->comm);
      group_->abort_locked(std::string(kind_name(kind)) + " #" + std::to_string(seq) + " failed: " + message);
      if (late) {
        STRATA_THROW(Timeout, "nccl: " << kind_name(kind) << " #" << seq << " on rank " << rank() << " of "
                                       << group_->name() << ": " << message << " (" << limit.count()
                                       << " ms); the communicator is aborted");
      }
      STRATA_THROW(Error, "nccl: " << kind_name(kind) << " #" << seq << " on rank " << rank() << " of "
                                   << group_->name() << " failed: " << message << "; the communicator is aborted");
    }
    auto done = std::make_unique<Event>(device(), /*timing=*/false);
    done->record(group_->stream);
    done->wait_on(strata_stream);
    return std::make_shared<NcclWork>(group_, kind, seq, std::move(done), std::move(tensors), deadline, limit);
  }

  const std::shared_ptr<Group> group_;
  int64_t seq_ = 0;
  Tensor barrier_scratch_;
  std::map<std::vector<int>, int> new_group_calls_;
};

}  // namespace

std::shared_ptr<Communicator> make_cuda_communicator(std::shared_ptr<Store> store, int rank, int size,
                                                     NcclOptions options) {
  return std::make_shared<NcclCommunicator>(
      connect(std::move(store), rank, size, options.device, options.prefix, options.timeout, options.connect_timeout));
}

}  // namespace strata::comm::nccl_detail
