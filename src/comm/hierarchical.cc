// The hierarchical communicator (strata/comm/hierarchical.h): each operation is a short sequence of operations on
// the local group and, on local rank 0, on the workers' communicator, run in issue order on the rank's own thread.
// A failure on local rank 0 (a worker lost across) aborts the local group, so the other local ranks fail at once
// instead of waiting for a broadcast that will not come. set_step tags both levels (across: local rank 0's, which
// issues there).
// Thread-safety: one thread per rank issues (mu_ guards the queue); the rank's thread alone runs the operations.
#include "strata/comm/hierarchical.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/completion.h"

namespace strata::comm {
namespace {

using detail::BackendWork;
using detail::Failure;
using detail::OpKind;

// Divides every element by `n` (kMean after summing at both levels), the same way on every rank.
void divide(std::vector<Tensor>& tensors, int n) {
  for (Tensor& t : tensors) {
    if (t.dtype() == DType::kInt64) {
      auto* p = t.data<int64_t>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] /= n;
    } else if (t.dtype() == DType::kBFloat16) {
      auto* p = t.data<BFloat16>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = BFloat16(static_cast<float>(p[i]) / static_cast<float>(n));
    } else {
      auto* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] /= static_cast<float>(n);
    }
  }
}

class HierarchicalCommunicator final : public Communicator {
 public:
  HierarchicalCommunicator(std::shared_ptr<Communicator> local, std::shared_ptr<Communicator> cross)
      : local_(std::move(local)), cross_(std::move(cross)) {
    thread_ = std::thread([this] { loop(); });
  }

  ~HierarchicalCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();  // runs what is queued first
  }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::barrier;
  using Communicator::broadcast;

  int rank() const override { return cross_->rank() * local_->size() + local_->rank(); }
  int size() const override { return cross_->size() * local_->size(); }
  std::string backend() const override { return "hierarchical"; }

  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, ReduceOp op) override {
    return all_reduce(std::move(tensors), AllReduceOptions{.op = op});
  }
  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, const AllReduceOptions& options) override {
    return issue(OpKind::kAllReduce, [this, tensors, options]() mutable {
      const AllReduceOptions level{.op = options.op == ReduceOp::kMean ? ReduceOp::kSum : options.op,
                                   .timeout = options.timeout};
      local_->all_reduce(tensors, level)->wait();  // in full precision: the local ranks share memory
      if (local_->rank() == 0) {
        AllReduceOptions across = level;
        across.compression = options.compression;
        cross_->all_reduce(tensors, across)->wait();
      }
      local_->broadcast(tensors, BroadcastOptions{.root = 0, .timeout = options.timeout})->wait();
      if (options.op == ReduceOp::kMean) divide(tensors, size());
    });
  }

  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, int root) override {
    return broadcast(std::move(tensors), BroadcastOptions{.root = root});
  }
  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, const BroadcastOptions& options) override {
    STRATA_CHECK(options.root >= 0 && options.root < size(), InvalidArgument,
                 "hierarchical broadcast on rank " << rank() << ": root " << options.root << " is not a rank of a group of "
                                                   << size());
    return issue(OpKind::kBroadcast, [this, tensors, options] {
      const int worker = options.root / local_->size(), local_root = options.root % local_->size();
      if (cross_->rank() == worker && local_root != 0) {
        local_->broadcast(tensors, BroadcastOptions{.root = local_root, .timeout = options.timeout})->wait();
      }
      if (local_->rank() == 0) {
        cross_->broadcast(tensors, BroadcastOptions{.root = worker, .timeout = options.timeout})->wait();
      }
      local_->broadcast(tensors, BroadcastOptions{.root = 0, .timeout = options.timeout})->wait();
    });
  }

  std::shared_ptr<Work> all_gather(Tensor input, Tensor output) override {
    return all_gather(std::move(input), std::move(output), AllGatherOptions{});
  }
  std::shared_ptr<Work> all_gather(Tensor input, Tensor output, const AllGatherOptions& options) override {
    return issue(OpKind::kAllGather, [this, input, output, options] {
      Shape local_shape = input.shape().empty() ? Shape{static_cast<int64_t>(local_->size())} : input.shape();
      if (!input.shape().empty()) local_shape[0] *= local_->size();
      Tensor gathered = Tensor::empty(local_shape, input.dtype());
      local_->all_gather(input, gathered, options)->wait();
      if (local_->rank() == 0) cross_->all_gather(gathered, output, options)->wait();
      local_->broadcast({output}, BroadcastOptions{.root = 0, .timeout = options.timeout})->wait();
    });
  }

  void barrier() override { barrier(BarrierOptions{}); }
  void barrier(const BarrierOptions& options) override {
    issue(OpKind::kBarrier, [this, options] {
      local_->barrier(options);
      if (local_->rank() == 0) cross_->barrier(options);
      local_->barrier(options);
    })->wait();
  }

  void abort(const std::string& reason) override {
    local_->abort(reason);
    cross_->abort(reason);
  }

  // Every local rank tags the same step; local rank 0 is the one that issues across workers.
  void set_step(int64_t step) override {
    local_->set_step(step);
    if (local_->rank() == 0) cross_->set_step(step);
  }

 private:
  struct Op {
    std::function<void()> body;
    std::shared_ptr<BackendWork> work;
  };

  std::shared_ptr<Work> issue(OpKind kind, std::function<void()> body) {
    std::lock_guard<std::mutex> lock(mu_);
    auto work = std::make_shared<BackendWork>("hierarchical", kind, ++issued_, rank());
    queue_.push_back({std::move(body), work});
    cv_.notify_one();
    return work;
  }

  void loop() {
    while (true) {
      Op op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      Failure failure;
      try {
        op.body();
      } catch (...) {
        failure = Failure::of(std::current_exception());
      }
      // Local rank 0 failing across the workers leaves the others waiting for its broadcast: end it for them.
      if (failure.failed() && local_->rank() == 0) local_->abort("local rank 0 failed: " + failure.message);
      op.body = nullptr;
      op.work->finish(std::move(failure));
    }
  }

  const std::shared_ptr<Communicator> local_, cross_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  int64_t issued_ = 0;    // guarded by mu_
  std::thread thread_;    // last: starts once the members above exist
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_hierarchical_group(std::vector<std::shared_ptr<Communicator>> local,
                                                                   std::shared_ptr<Communicator> cross) {
  STRATA_CHECK(!local.empty() && cross != nullptr, InvalidArgument,
               "make_hierarchical_group: needs a local group and a communicator across the workers");
  std::vector<std::shared_ptr<Communicator>> ranks;
  ranks.reserve(local.size());
  for (auto& l : local) {
    STRATA_CHECK(l != nullptr && l->size() == static_cast<int>(local.size()), InvalidArgument,
                 "make_hierarchical_group: the local group's communicators must be its " << local.size() << " ranks");
    ranks.push_back(std::make_shared<HierarchicalCommunicator>(l, cross));
  }
  return ranks;
}

}  // namespace strata::comm
