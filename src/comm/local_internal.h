// The local backend's insides, shared by its files: local.cc (issuing, the worker, checks, timeouts),
// local_collectives.cc (the collective algorithms), local_p2p.cc (send/recv), local_group.cc (new_group).
// Not a public header.
//
// A LocalGroup is what the ranks of one group share: the barrier, each rank's descriptor slots and status,
// each rank's inbox of point-to-point messages, and the registry of its sub-groups. A LocalCommunicator is
// one rank's end: its queue and the worker thread that runs it.
// Thread-safety: one thread per rank issues (guarded by mu_); the worker owns the rest of a communicator;
// LocalGroup's shared parts are atomics or guarded by their own mutexes, as marked.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "comm/bucket.h"
#include "comm/completion.h"
#include "comm/group_barrier.h"
#include "strata/comm/local.h"

namespace strata::comm::local_detail {

using detail::Bucket;
using detail::GroupBarrier;
using Clock = std::chrono::steady_clock;

using Kind = detail::OpKind;
using detail::kind_name;
inline bool is_p2p(Kind kind) { return kind == Kind::kSend || kind == Kind::kRecv; }

class LocalWork final : public Work {
 public:
  // How Work::wait(timeout) names the operation ("local group of 3: all_reduce #2 on rank 0"); the text is
  // built only when needed, so issuing stays cheap.
  void set_name(const char* kind, int64_t seq, int rank, int group_size) {
    kind_ = kind;
    seq_ = seq;
    rank_ = rank;
    group_size_ = group_size;
  }

  bool is_completed() const override { return done_.load(std::memory_order_acquire); }

  void wait() override {
    spin_until_completed();
    if (!is_completed()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return is_completed(); });
    }
    // A copy, so every waiter owns what it catches: the stored one stays with the Work,
    // whichever thread drops the Work last.
    if (error_) strata::rethrow_copy(error_);
  }

  void wait(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    spin_until_completed();
    if (!is_completed()) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_until(lock, deadline, [&] { return is_completed(); })) {
        STRATA_THROW(Timeout, "local group of " << group_size_ << ": " << kind_ << " #" << seq_ << " on rank " << rank_
                                                << " did not complete within the " << timeout.count()
                                                << " ms of Work::wait (it goes on running under its own timeout)");
      }
    }
    if (error_) strata::rethrow_copy(error_);  // a copy, as in wait()
  }

  std::exception_ptr exception() const override { return is_completed() ? error_ : nullptr; }

  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::move(error);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

 private:
  void spin_until_completed() const {
    for (int i = 0; i < 512 && !is_completed(); ++i) {
      if (i < 256) {
        detail::spin_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;  // written once, before done_
  // Written before the Work is shared.
  const char* kind_ = "";
  int64_t seq_ = 0;
  int rank_ = 0;
  int group_size_ = 0;
};

// What one rank passed to the collective it is running; read by every rank between arrive and depart.
struct Descriptor {
  Kind kind = Kind::kNone;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  DType dtype = DType::kFloat32;  // of every tensor
  std::vector<Shape> shapes;      // all_gather, reduce_scatter: {input, output}
  Bucket bucket;                  // the tensors' elements; all_gather, reduce_scatter: {input, output}
  std::string local_error;        // a problem with this rank's own arguments
};

// Where a rank is, for the messages of the other ranks' timeouts. Written by the rank, read by anyone.
struct RankStatus {
  std::atomic<int64_t> issued{0};  // collectives issued so far (#1, #2, ...)
  std::atomic<int> issued_kind{0};
  std::atomic<int64_t> running{0};  // the collective its worker is in, 0 when idle
  std::atomic<int> running_kind{0};
  std::atomic<uint64_t> steps{0};        // barrier arrivals so far
  std::atomic<int64_t> sends_issued{0};  // sends issued so far (to any rank)
  std::atomic<int64_t> p2p_running{0};   // the send/recv its worker is in, 0 when none
  std::atomic<int> p2p_kind{0};
  std::atomic<int> p2p_peer{0};
  std::atomic<int> p2p_tag{0};
};

// A sent message waiting for its recv: a copy of the sender's tensors, taken when the send ran.
struct Message {
  int src = 0;
  int tag = 0;
  std::vector<Tensor> tensors;
};

struct Inbox {
  std::mutex mu;
  std::condition_variable cv;    // notified when a message arrives or the group is aborted
  std::deque<Message> messages;  // guarded by mu, in arrival order
};

struct LocalGroup {
  LocalGroup(int size, LocalGroupOptions options, std::string name)
      : size(size), options(options), name(std::move(name)), barrier(size), status(size), slots(size), inboxes(size) {}
  const int size;
  const LocalGroupOptions options;
  // How messages name the group: "local group of 4", a sub-group "local group of 2 (ranks 0, 2 of local group
  // of 4)".
  const std::string name;
  GroupBarrier barrier;
  std::vector<RankStatus> status;
  std::vector<std::array<Descriptor, 2>> slots;  // [rank][seq % 2], written by the rank before it arrives
  std::vector<Inbox> inboxes;                    // [dst]
  std::mutex subgroups_mu;
  // (sorted ranks, k) -> the k-th sub-group of those ranks; guarded by subgroups_mu.
  std::map<std::pair<std::vector<int>, int>, std::shared_ptr<LocalGroup>> subgroups;
};

struct Op {
  Kind kind = Kind::kNone;
  int64_t seq = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;                          // send: dst; recv: src
  int tag = 0;                           // send, recv
  std::chrono::milliseconds timeout{0};  // bounds each wait of this operation
  std::vector<Tensor> tensors;           // all_gather: {input, output}
  std::shared_ptr<LocalWork> work;
};

// "all_reduce #3"
std::string op_name(const Op& op);
// "recv #2 from rank 0 (tag 3)": the send/recv #seq a rank's worker is in.
std::string p2p_status(const RankStatus& s, int64_t seq);
// "1 tensor [4, 3] (12 elements) float32"
std::string describe_tensors(const Descriptor& d);

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank) : group_(std::move(group)), rank_(rank) {
    if (group_->size > 1) worker_ = std::thread([this] { worker_loop(); });
  }

  ~LocalCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (worker_.joinable()) worker_.join();  // runs what is queued first
  }

  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  std::string backend() const override { return "local"; }

  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, ReduceOp op) override {
    return issue(Kind::kAllReduce, std::move(tensors), op, 0, group_->options.timeout);
  }
  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, int root) override {
    return issue(Kind::kBroadcast, std::move(tensors), ReduceOp::kSum, root, group_->options.timeout);
  }
  std::shared_ptr<Work> all_gather(Tensor input, Tensor output) override {
    return issue(Kind::kAllGather, {std::move(input), std::move(output)}, ReduceOp::kSum, 0, group_->options.timeout);
  }
  void barrier() override { issue(Kind::kBarrier, {}, ReduceOp::kSum, 0, group_->options.timeout)->wait(); }
  void abort(const std::string& reason) override;

  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, const AllReduceOptions& options) override {
    return issue(Kind::kAllReduce, std::move(tensors), options.op, 0, timeout_of("all_reduce", options.timeout));
  }
  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, const BroadcastOptions& options) override {
    return issue(Kind::kBroadcast, std::move(tensors), ReduceOp::kSum, options.root,
                 timeout_of("broadcast", options.timeout));
  }
  std::shared_ptr<Work> all_gather(Tensor input, Tensor output, const AllGatherOptions& options) override {
    return issue(Kind::kAllGather, {std::move(input), std::move(output)}, ReduceOp::kSum, 0,
                 timeout_of("all_gather", options.timeout));
  }
  std::shared_ptr<Work> reduce_scatter(Tensor input, Tensor output, const ReduceScatterOptions& options) override {
    return issue(Kind::kReduceScatter, {std::move(input), std::move(output)}, options.op, 0,
                 timeout_of("reduce_scatter", options.timeout));
  }
  void barrier(const BarrierOptions& options) override {
    issue(Kind::kBarrier, {}, ReduceOp::kSum, 0, timeout_of("barrier", options.timeout))->wait();
  }
  using Communicator::recv;
  using Communicator::send;
  std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst,
                             const SendOptions& options) override;  // local_p2p.cc
  std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src, const RecvOptions& options) override;
  std::shared_ptr<Communicator> new_group(std::vector<int> ranks) override;  // local_group.cc

 private:
  std::shared_ptr<Work> issue(Kind kind, std::vector<Tensor> tensors, ReduceOp reduce, int root,
                              std::chrono::milliseconds timeout, int tag = 0);
  // An options' timeout, or the group's when it is kDefaultTimeout; InvalidArgument when not positive.
  std::chrono::milliseconds timeout_of(const char* what, std::chrono::milliseconds timeout) const {
    if (timeout == kDefaultTimeout) return group_->options.timeout;
    STRATA_CHECK(timeout.count() > 0, InvalidArgument,
                 what << " on rank " << rank_ << ": timeout must be positive, got " << timeout.count() << " ms");
    return timeout;
  }
  void run_alone(Op& op);
  void worker_loop();
  void execute(Op& op);  // local_collectives.cc
  void describe(Op& op, Descriptor& d) const;
  void validate(const Op& op) const;
  void step(const Op& op, const std::string& what);
  std::string timeout_message(const Op& op, const std::string& what, uint64_t step) const;
  std::string missing_ranks(const Op& op, uint64_t step) const;
  void run_all_reduce(const Op& op);

  const Descriptor& slot(int rank, const Op& op) const { return group_->slots[rank][op.seq & 1]; }
  const Bucket& view(int rank, const Op& op) const { return slot(rank, op).bucket; }
  // This rank's elements [begin, end) of the bucket = the same elements of `src`'s.
  void copy_from(const Op& op, int src, int64_t begin, int64_t end) const {
    const Bucket& mine = view(rank_, op);
    const Bucket& theirs = view(src, op);
    const size_t elem = dtype_size(slot(rank_, op).dtype);
    mine.for_each_piece(begin, end, [&](size_t seg, int64_t offset, int64_t length) {
      std::memcpy(mine.segment<char>(seg) + offset * elem, theirs.segment<char>(seg) + offset * elem,
                  static_cast<size_t>(length) * elem);
    });
  }
  // This rank's elements [begin, end) = the reduction of `ranks`' elements, in the order given.
  void reduce_into_mine(const Op& op, int64_t begin, int64_t end, const std::vector<int>& ranks, float divisor) {
    switch (slot(rank_, op).dtype) {
      case DType::kBFloat16:
        return reduce_into_mine_as<BFloat16>(op, begin, end, ranks, divisor);
      case DType::kInt64:
        return reduce_into_mine_as<int64_t>(op, begin, end, ranks, divisor);
      default:
        return reduce_into_mine_as<float>(op, begin, end, ranks, divisor);
    }
  }
  template <class T>
  void reduce_into_mine_as(const Op& op, int64_t begin, int64_t end, const std::vector<int>& ranks, float divisor) {
    const Bucket& mine = view(rank_, op);
    std::vector<const T*>& inputs = scratch<T>();
    inputs.resize(ranks.size());
    mine.for_each_piece(begin, end, [&](size_t seg, int64_t offset, int64_t length) {
      for (size_t k = 0; k < ranks.size(); ++k) inputs[k] = view(ranks[k], op).template segment<T>(seg) + offset;
      detail::reduce_piece(mine.template segment<T>(seg) + offset, inputs.data(), static_cast<int>(ranks.size()),
                           length, op.reduce, divisor);
    });
  }
  void run_reduce_scatter(const Op& op);
  // Point to point (local_p2p.cc).
  void check_peer(const char* what, const char* role, int peer) const;
  void run_send(Op& op);
  void run_recv(Op& op);
  std::string recv_timeout_message(const Op& op) const;

  const std::shared_ptr<LocalGroup> group_;
  const int rank_;
  // Worker scratch: the inputs of a reduction, one list per element type.
  std::vector<const float*> inputs_f32_;
  std::vector<const BFloat16*> inputs_bf16_;
  std::vector<const int64_t*> inputs_i64_;
  template <class T>
  std::vector<const T*>& scratch() {
    if constexpr (std::is_same_v<T, float>) {
      return inputs_f32_;
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      return inputs_bf16_;
    } else {
      return inputs_i64_;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;                             // guarded by mu_
  std::atomic<int64_t> pending_{0};                  // queue_.size(), readable without mu_
  bool worker_sleeping_ = false;                     // guarded by mu_: the worker blocks on cv_ and needs a notify
  bool stop_ = false;                                // guarded by mu_
  int64_t issued_ = 0;                               // guarded by mu_: collectives
  int64_t p2p_issued_ = 0;                           // guarded by mu_: sends and recvs
  std::map<std::vector<int>, int> new_group_calls_;  // how often this rank made a group of these ranks
  std::thread worker_;                               // last: starts once the members above exist
};

}  // namespace strata::comm::local_detail
