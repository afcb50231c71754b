// The "gloo" backend (strata/comm/gloo.h): collectives over Gloo's TCP transport.
//
// make_gloo_communicator claims the rank's slot under the group's store prefix ("joined/rank-<r>", a counter, so a
// reused prefix is caught), creates a TCP device bound to the given hostname (127.0.0.1 by default) and connects
// the full mesh through GlooStore (comm/gloo_store.h) under that prefix. Collectives are queued and run in issue
// order on the communicator's worker thread with Gloo's options-style functions only (gloo::allreduce, broadcast,
// allgather, barrier; mixing them with the older algorithm classes stalled, see DEPENDENCIES.md), each with its
// timeout (per call, or the group's) and a tag of its sequence number. A bucket of several tensors is copied into
// one flat buffer (Gloo's several-input all-reduce reduces copies of one buffer, not a list of different ones); one
// tensor is reduced in place. All-reduce uses Gloo's ring: every element is reduced along one path and then copied
// to every rank, so all ranks end with the same bits; kMean divides that sum by the size on every rank (same bits
// again). float32 and int64 are reduced as they are, bfloat16 in float32 (rounded once); broadcast and all_gather
// move bytes. reduce_scatter is an all-reduce of a copy (Gloo has no options-style reduce-scatter); new_group
// connects a new Gloo group under a sub-prefix.
//
// On a Gloo IoException (a timeout, or a peer that closed its connections) Gloo has closed every pair of the
// context: the collective fails with Timeout and the communicator is broken — every later collective fails at once
// with Timeout quoting that first failure. To name the ranks that never entered a failed collective, a reporter
// thread publishes "progress/rank-<r>" once this rank has waited in one collective for a quarter of its timeout.
// abort(reason) records the reason in the store (so that peers quote it), fails the queued collectives and closes
// the connections, which makes the peers' collectives fail at once; a collective this rank is running ends by its
// own timeout at the latest (Gloo cannot interrupt a local wait).
// Thread-safety: one thread per rank issues collectives (mu_ guards the queue); the worker owns the Gloo context
// and the scratch buffers; the reporter reads only atomics and the store.
#include "strata/comm/gloo.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/gloo_store.h"
#include "strata/error.h"

namespace strata::comm {
namespace {

using Clock = std::chrono::steady_clock;

enum class Kind { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kBarrier };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kAllReduce:
      return "all_reduce";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAllGather:
      return "all_gather";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kBarrier:
      return "barrier";
  }
  return "?";
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The error of a finished collective, kept as (type, message) so that every waiter throws its own copy.
struct Failure {
  enum class Type { kNone, kInvalidArgument, kTimeout, kError } type = Type::kNone;
  std::string message;
  std::exception_ptr as_exception_ptr() const {
    try {
      raise();
    } catch (...) {
      return std::current_exception();
    }
  }
  [[noreturn]] void raise() const {
    switch (type) {
      case Type::kInvalidArgument:
        throw InvalidArgument(message);
      case Type::kTimeout:
        throw Timeout(message);
      case Type::kNone:
      case Type::kError:
        break;
    }
    throw Error(message);
  }
};

class GlooWork final : public Work {
 public:
  GlooWork(Kind kind, int64_t seq, int rank) : kind_(kind), seq_(seq), rank_(rank) {}

  bool is_completed() const override { return done_.load(std::memory_order_acquire); }

  void wait(std::chrono::milliseconds timeout) override {
    if (!is_completed()) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, timeout, [&] { return is_completed(); })) {
        STRATA_THROW(Timeout, "gloo: " << kind_name(kind_) << " #" << seq_ << " on rank " << rank_
                                       << " did not complete within " << timeout.count()
                                       << " ms (it goes on running under its own timeout)");
      }
    }
    if (failure_.type != Failure::Type::kNone) failure_.raise();
  }

  std::exception_ptr exception() const override {
    if (!is_completed() || failure_.type == Failure::Type::kNone) return nullptr;
    return failure_.as_exception_ptr();
  }

  void wait() override {
    for (int i = 0; i < 2000 && !is_completed(); ++i) cpu_relax();
    if (!is_completed()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return is_completed(); });
    }
    if (failure_.type != Failure::Type::kNone) failure_.raise();
  }

  void finish(Failure failure) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      failure_ = std::move(failure);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

 private:
  const Kind kind_;
  const int64_t seq_;
  const int rank_;
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  Failure failure_;  // written once, before done_
};

struct Op {
  Kind kind = Kind::kBarrier;
  int64_t seq = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  std::chrono::milliseconds timeout{0};  // this collective's bound (the group's unless the call set one)
  std::vector<Tensor> tensors;           // all_gather: {input, output}
  std::shared_ptr<GlooWork> work;
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// int64 sums wrap around (as the local backend's), computed in uint64 so that overflow is defined.
void sum_int64(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<int64_t*>(c);
  const auto* x = static_cast<const int64_t*>(a);
  const auto* y = static_cast<const int64_t*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(static_cast<uint64_t>(x[i]) + static_cast<uint64_t>(y[i]));
}

// Gloo's element-wise functions for `op` on float32 or int64 (bfloat16 is reduced as float32).
ReduceFn reduce_function(ReduceOp op, DType dtype) {
  const bool ints = dtype == DType::kInt64;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return ints ? &sum_int64 : static_cast<ReduceFn>(&gloo::sum<float>);
    case ReduceOp::kMax:
      return ints ? static_cast<ReduceFn>(&gloo::max<int64_t>) : static_cast<ReduceFn>(&gloo::max<float>);
    case ReduceOp::kMin:
      return ints ? static_cast<ReduceFn>(&gloo::min<int64_t>) : static_cast<ReduceFn>(&gloo::min<float>);
  }
  return &gloo::sum<float>;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank" : "ranks");
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : " ") << ranks[i];
  return out.str();
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<Store> root_store, std::shared_ptr<Store> group_store,
                   std::shared_ptr<gloo::rendezvous::Context> context, GlooOptions options)
      : root_store_(std::move(root_store)),
        store_(std::move(group_store)),
        context_(std::move(context)),
        options_(std::move(options)),
        name_("gloo group of " + std::to_string(context_->size) + " (prefix '" + options_.prefix + "')") {
    worker_ = std::thread([this] { worker_loop(); });
    if (context_->size > 1) reporter_ = std::thread([this] { reporter_loop(); });
  }

  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    worker_.join();  // runs what is queued first
    {
      std::lock_guard<std::mutex> lock(reporter_mu_);
      reporter_stop_ = true;
    }
    reporter_cv_.notify_one();
    if (reporter_.joinable()) reporter_.join();
    context_.reset();
  }

  // The option-taking overloads of the base class stay visible beside the overrides below.
  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::barrier;
  using Communicator::broadcast;

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string backend() const override { return "gloo"; }

  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, ReduceOp op) override {
    return issue(Kind::kAllReduce, std::move(tensors), op, 0, kDefaultTimeout);
  }
  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, int root) override {
    return issue(Kind::kBroadcast, std::move(tensors), ReduceOp::kSum, root, kDefaultTimeout);
  }
  std::shared_ptr<Work> all_gather(Tensor input, Tensor output) override {
    return issue(Kind::kAllGather, {std::move(input), std::move(output)}, ReduceOp::kSum, 0, kDefaultTimeout);
  }
  void barrier() override { issue(Kind::kBarrier, {}, ReduceOp::kSum, 0, kDefaultTimeout)->wait(); }

  // With a per-call timeout: Gloo's setTimeout for that one collective.
  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, const AllReduceOptions& options) override {
    return issue(Kind::kAllReduce, std::move(tensors), options.op, 0, options.timeout);
  }
  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, const BroadcastOptions& options) override {
    return issue(Kind::kBroadcast, std::move(tensors), ReduceOp::kSum, options.root, options.timeout);
  }
  std::shared_ptr<Work> all_gather(Tensor input, Tensor output, const AllGatherOptions& options) override {
    return issue(Kind::kAllGather, {std::move(input), std::move(output)}, ReduceOp::kSum, 0, options.timeout);
  }
  void barrier(const BarrierOptions& options) override {
    issue(Kind::kBarrier, {}, ReduceOp::kSum, 0, options.timeout)->wait();
  }
  // Gloo has no options-style reduce-scatter (and the legacy class must not be mixed in): an all-reduce of a copy of
  // the input, of which this rank keeps its rows — correct, at about twice the traffic of a true reduce-scatter.
  std::shared_ptr<Work> reduce_scatter(Tensor input, Tensor output, const ReduceScatterOptions& options) override {
    return issue(Kind::kReduceScatter, {std::move(input), std::move(output)}, options.op, 0, options.timeout);
  }

  // A Gloo group of `ranks` (sorted; this rank's position among them is its rank there), connected under the
  // prefix "<prefix>/sub/<r0>-<r1>-...#<k>" for a member's k-th call with those ranks. Blocks until every member
  // has connected; non-members get nullptr and take no part.
  std::shared_ptr<Communicator> new_group(std::vector<int> ranks) override {
    std::sort(ranks.begin(), ranks.end());
    std::ostringstream list;
    for (size_t i = 0; i < ranks.size(); ++i) list << (i ? "-" : "") << ranks[i];
    STRATA_CHECK(!ranks.empty(), InvalidArgument, "new_group on rank " << rank() << " of " << name_ << ": no ranks given");
    STRATA_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), InvalidArgument,
                 "new_group on rank " << rank() << " of " << name_ << ": ranks " << list.str() << " name a rank twice");
    STRATA_CHECK(ranks.front() >= 0 && ranks.back() < size(), InvalidArgument,
                 "new_group on rank " << rank() << " of " << name_ << ": ranks " << list.str()
                                      << " are not all ranks of the group");
    const auto me = std::find(ranks.begin(), ranks.end(), rank());
    if (me == ranks.end()) return nullptr;
    const int k = ++new_group_calls_[ranks];
    GlooOptions sub = options_;
    sub.prefix = options_.prefix + "/sub/" + list.str() + "#" + std::to_string(k);
    return make_gloo_communicator(root_store_, static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()),
                                  sub);
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.empty()) return;
      broken_ = "it was aborted on rank " + std::to_string(rank()) + ": " + reason;
      for (Op& op : queue_) op.work->finish(not_run(op));
      queue_.clear();
      pending_.store(0, std::memory_order_relaxed);
    }
    try {
      store_->set("aborted", "rank " + std::to_string(rank()) + ": " + reason);
    } catch (const Error&) {
      // The peers still fail (their connections close below); they only miss the reason.
    }
    // Peers blocked on this rank fail at once; Gloo's pairs are closed under their own locks.
    context_->closeConnections();
  }

 private:
  std::string op_name(const Op& op) const { return std::string(kind_name(op.kind)) + " #" + std::to_string(op.seq); }

  // REQUIRES: mu_ held (reads broken_).
  Failure not_run(const Op& op) const {
    return {Failure::Type::kTimeout,
            strata::detail::with_location(name_ + ": " + op_name(op) + " on rank " + std::to_string(rank()) +
                                              " was not run: the communicator is unusable since " + broken_ +
                                              "; rebuild the group under a fresh store prefix",
                                          __FILE__, __LINE__)};
  }

  std::shared_ptr<Work> issue(Kind kind, std::vector<Tensor> tensors, ReduceOp reduce, int root,
                              std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mu_);
    auto work = std::make_shared<GlooWork>(kind, issued_ + 1, rank());
    Op op{kind, 0, reduce, root, timeout == kDefaultTimeout ? options_.timeout : timeout, std::move(tensors), work};
    op.seq = ++issued_;
    if (!broken_.empty()) {
      op.work->finish(not_run(op));
      return work;
    }
    queue_.push_back(std::move(op));
    pending_.fetch_add(1, std::memory_order_release);
    // Notified under mu_: cheap, since the worker only sleeps on cv_ after checking the queue under mu_.
    if (worker_sleeping_) cv_.notify_one();
    return work;
  }

  void worker_loop() {
    while (true) {
      // Collectives often come back to back: look for the next one briefly before sleeping.
      for (int i = 0; i < 2000 && pending_.load(std::memory_order_acquire) == 0; ++i) cpu_relax();
      Op op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        worker_sleeping_ = true;
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        worker_sleeping_ = false;
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
        pending_.fetch_sub(1, std::memory_order_relaxed);
        if (!broken_.empty()) {
          op.work->finish(not_run(op));
          continue;
        }
      }
      running_kind_.store(static_cast<int>(op.kind), std::memory_order_relaxed);
      running_since_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
      running_timeout_.store(op.timeout.count(), std::memory_order_relaxed);
      running_.store(op.seq, std::memory_order_release);
      Failure failure = run(op);
      running_.store(0, std::memory_order_release);
      op.tensors.clear();
      op.work->finish(std::move(failure));
    }
  }

  // How long a collective with `timeout` runs before the reporter publishes it: a quarter of the timeout, within
  // [5 ms, 1 s].
  static std::chrono::milliseconds report_after(std::chrono::milliseconds timeout) {
    return std::clamp(timeout / 4, std::chrono::milliseconds(5), std::chrono::milliseconds(1000));
  }
  static constexpr std::chrono::milliseconds kReporterPeriod{20};

  // Publishes "progress/rank-<r>" = "<seq> <kind>" once a collective has run for a report interval, so that a
  // rank whose collective times out can name the ranks that never entered it. Fast collectives publish nothing
  // (no store traffic on the fast path).
  void reporter_loop() {
    int64_t posted = 0;
    std::unique_lock<std::mutex> lock(reporter_mu_);
    while (!reporter_cv_.wait_for(lock, kReporterPeriod, [&] { return reporter_stop_; })) {
      const int64_t seq = running_.load(std::memory_order_acquire);
      if (seq == 0 || seq == posted) continue;
      const Clock::time_point since{Clock::duration(running_since_.load(std::memory_order_relaxed))};
      const std::chrono::milliseconds timeout{running_timeout_.load(std::memory_order_relaxed)};
      if (Clock::now() - since < report_after(timeout)) continue;
      const Kind kind = static_cast<Kind>(running_kind_.load(std::memory_order_relaxed));
      try {
        store_->set("progress/rank-" + std::to_string(rank()), std::to_string(seq) + " " + kind_name(kind));
        posted = seq;
      } catch (const Error&) {
        posted = seq;  // the store is gone too; the timeout message will say the rank was not seen
      }
    }
  }

  // After `op` failed: the ranks that had not reported being in it, with where they last reported being.
  std::string absent_ranks(const Op& op) {
    // A peer that entered the collective reports within about one interval; wait that long before judging.
    std::this_thread::sleep_for(std::min(report_after(op.timeout), std::chrono::milliseconds(100)) + kReporterPeriod);
    std::vector<int> absent;
    std::ostringstream where;
    for (int q = 0; q < size(); ++q) {
      if (q == rank()) continue;
      const std::string key = "progress/rank-" + std::to_string(q);
      std::string seen;
      try {
        if (store_->check({key})) seen = store_->get(key);
      } catch (const Error&) {
      }
      const auto space = seen.find(' ');
      const int64_t seq = space == std::string::npos ? 0 : std::strtoll(seen.c_str(), nullptr, 10);
      if (seq == op.seq) continue;
      absent.push_back(q);
      where << "; rank " << q
            << (seq == 0 ? std::string(" was never seen waiting in a collective")
                         : " was last seen in " + seen.substr(space + 1) + " #" + std::to_string(seq));
    }
    if (absent.empty()) return "every rank had entered it";
    return rank_list(absent) + " had not entered it" + where.str();
  }

  // Runs one collective on the worker; a Gloo failure breaks the communicator.
  Failure run(Op& op) {
    const auto start = Clock::now();
    try {
      const std::string problem = check_arguments(op);
      if (!problem.empty()) {
        return {Failure::Type::kInvalidArgument,
                strata::detail::with_location(name_ + ": " + op_name(op) + " on rank " + std::to_string(rank()) + ": " +
                                                  problem,
                                              __FILE__, __LINE__)};
      }
      execute(op);
      return {};
    } catch (const gloo::IoException& e) {
      return broken(op, start, "Timeout", e.what());
    } catch (const std::exception& e) {
      return broken(op, start, "Error", e.what());
    }
  }

  Failure broken(const Op& op, Clock::time_point start, const char* what, const std::string& gloo_message) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::string aborted;
    try {
      if (store_->check({"aborted"})) aborted = store_->get("aborted");
    } catch (const Error&) {
    }
    std::ostringstream out;
    out << name_ << ": " << op_name(op) << " on rank " << rank() << " failed after " << waited << " ms (timeout "
        << op.timeout.count() << " ms): ";
    if (!aborted.empty()) {
      out << "the group was aborted by " << aborted << "; ";
    } else if (size() > 1) {
      out << absent_ranks(op) << "; ";
    }
    out << "gloo: " << gloo_message
        << "; Gloo closed every connection of the group, so this communicator cannot be used again: rebuild the "
           "group under a fresh store prefix";
    const std::string message = strata::detail::with_location(out.str(), __FILE__, __LINE__);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.empty()) {
        broken_ = op_name(op) + " failed after " + std::to_string(waited) + " ms" +
                  (aborted.empty() ? "" : ", aborted by " + aborted) + " (gloo: " + gloo_message + ")";
      }
    }
    return {std::string(what) == "Timeout" ? Failure::Type::kTimeout : Failure::Type::kError, message};
  }

  // A problem with this rank's own arguments, or "". (Gloo cannot compare arguments across ranks without a
  // round trip; mismatched shapes across ranks end in a Gloo error or the timeout.)
  std::string check_arguments(const Op& op) const {
    if (op.timeout.count() <= 0) return "timeout must be positive, got " + std::to_string(op.timeout.count()) + " ms";
    for (size_t i = 0; i < op.tensors.size(); ++i) {
      const Tensor& t = op.tensors[i];
      const bool pair = op.kind == Kind::kAllGather || op.kind == Kind::kReduceScatter;
      const std::string what = pair ? (i == 0 ? "input" : "output") : "tensor " + std::to_string(i);
      if (!t.defined()) return what + " is undefined";
      if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kBFloat16 && t.dtype() != DType::kInt64) {
        return what + " is " + dtype_name(t.dtype()) + ", wants float32, bfloat16 or int64";
      }
      if (i > 0 && t.dtype() != op.tensors[0].dtype()) {
        return what + " is " + dtype_name(t.dtype()) + " but " + (pair ? "input" : "tensor 0") +
               " is " + dtype_name(op.tensors[0].dtype()) + " (one dtype per call)";
      }
      if (!t.device().is_cpu()) return what + " is on " + t.device().str() + ", wants host memory";
    }
    if (op.kind == Kind::kBroadcast && (op.root < 0 || op.root >= size())) {
      return "root " + std::to_string(op.root) + " is not a rank of a group of " + std::to_string(size());
    }
    if (op.kind == Kind::kReduceScatter) {
      const Shape& in = op.tensors[0].shape();
      if (in.empty() || in[0] % size() != 0) {
        return "input is " + shape_str(in) + ", wants a first dimension divisible by the group size " +
               std::to_string(size());
      }
      Shape want = in;
      want[0] /= size();
      if (op.tensors[1].shape() != want) {
        return "output is " + shape_str(op.tensors[1].shape()) + ", wants " + shape_str(want) + " (input " +
               shape_str(in) + " / " + std::to_string(size()) + ")";
      }
    }
    if (op.kind == Kind::kAllGather) {
      const Shape& in = op.tensors[0].shape();
      Shape want = in.empty() ? Shape{static_cast<int64_t>(size())} : in;
      if (!in.empty()) want[0] *= size();
      if (op.tensors[1].shape() != want) {
        return "output is " + shape_str(op.tensors[1].shape()) + ", wants " + shape_str(want) + " (" +
               std::to_string(size()) + " x input " + shape_str(in) + ")";
      }
    }
    return "";
  }

  // The bucket as one array of its dtype: the tensor's own memory when there is one, else flat_ holding a copy.
  void* gather_bucket(std::vector<Tensor>& tensors, size_t nbytes, bool copy_in) {
    if (tensors.size() == 1) return tensors[0].raw_data();
    flat_.resize(nbytes);
    if (copy_in) {
      size_t offset = 0;
      for (Tensor& t : tensors) {
        std::memcpy(flat_.data() + offset, t.raw_data(), t.nbytes());
        offset += t.nbytes();
      }
    }
    return flat_.data();
  }

  void scatter_bucket(std::vector<Tensor>& tensors) {
    if (tensors.size() == 1) return;
    size_t offset = 0;
    for (Tensor& t : tensors) {
      std::memcpy(t.raw_data(), flat_.data() + offset, t.nbytes());
      offset += t.nbytes();
    }
  }

  // float32 and int64: reduced in place (one tensor) or in flat_. bfloat16: widened to float32 in wide_, reduced,
  // and rounded back once, as the local backend does.
  void run_all_reduce(Op& op, size_t numel) {
    const DType dtype = op.tensors[0].dtype();
    void* data = nullptr;
    if (dtype == DType::kBFloat16) {
      wide_.resize(numel);
      size_t k = 0;
      for (Tensor& t : op.tensors) {
        const auto* p = t.data<BFloat16>();
        for (int64_t i = 0; i < t.numel(); ++i) wide_[k++] = static_cast<float>(p[i]);
      }
      data = wide_.data();
    } else {
      data = gather_bucket(op.tensors, numel * dtype_size(dtype), true);
    }
    gloo::AllreduceOptions opts(context_);
    if (dtype == DType::kInt64) {
      opts.setOutput(static_cast<int64_t*>(data), numel);
    } else {
      opts.setOutput(static_cast<float*>(data), numel);
    }
    opts.setReduceFunction(reduce_function(op.reduce, dtype));
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setTag(static_cast<uint32_t>(op.seq));
    opts.setTimeout(op.timeout);
    gloo::allreduce(opts);
    if (op.reduce == ReduceOp::kMean) {
      if (dtype == DType::kInt64) {
        auto* p = static_cast<int64_t*>(data);
        for (size_t i = 0; i < numel; ++i) p[i] /= size();
      } else {
        auto* p = static_cast<float*>(data);
        const float divisor = static_cast<float>(size());
        for (size_t i = 0; i < numel; ++i) p[i] /= divisor;
      }
    }
    if (dtype == DType::kBFloat16) {
      size_t k = 0;
      for (Tensor& t : op.tensors) {
        auto* p = t.data<BFloat16>();
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = BFloat16(wide_[k++]);
      }
    } else {
      scatter_bucket(op.tensors);
    }
  }

  void execute(Op& op) {
    const auto tag = static_cast<uint32_t>(op.seq);
    size_t numel = 0, nbytes = 0;
    for (const Tensor& t : op.tensors) {
      numel += static_cast<size_t>(t.numel());
      nbytes += t.nbytes();
    }
    switch (op.kind) {
      case Kind::kAllReduce:
        if (numel > 0) run_all_reduce(op, numel);
        return;
      case Kind::kBroadcast: {  // bytes: any dtype
        if (nbytes == 0) return;
        auto* data = static_cast<unsigned char*>(gather_bucket(op.tensors, nbytes, rank() == op.root));
        gloo::BroadcastOptions opts(context_);
        opts.setOutput(data, nbytes);
        opts.setRoot(op.root);
        opts.setTag(tag);
        opts.setTimeout(op.timeout);
        gloo::broadcast(opts);
        if (rank() != op.root) scatter_bucket(op.tensors);
        return;
      }
      case Kind::kAllGather: {  // bytes: any dtype
        const size_t n = op.tensors[0].nbytes();
        if (n == 0) return;
        gloo::AllgatherOptions opts(context_);
        opts.setInput(static_cast<unsigned char*>(op.tensors[0].raw_data()), n);
        opts.setOutput(static_cast<unsigned char*>(op.tensors[1].raw_data()), n * static_cast<size_t>(size()));
        opts.setTag(tag);
        opts.setTimeout(op.timeout);
        gloo::allgather(opts);
        return;
      }
      case Kind::kReduceScatter: {
        const size_t chunk = op.tensors[1].nbytes();
        if (chunk == 0) return;
        Tensor output = op.tensors[1];
        op.tensors = {op.tensors[0].clone()};  // reduced in a copy: the input stays as it was
        run_all_reduce(op, static_cast<size_t>(op.tensors[0].numel()));
        std::memcpy(output.raw_data(), static_cast<const unsigned char*>(op.tensors[0].raw_data()) + rank() * chunk, chunk);
        return;
      }
      case Kind::kBarrier: {
        gloo::BarrierOptions opts(context_);
        opts.setTag(tag);
        opts.setTimeout(op.timeout);
        gloo::barrier(opts);
        return;
      }
    }
  }

  const std::shared_ptr<Store> root_store_;  // the store the group was made from (sub-groups use it too)
  const std::shared_ptr<Store> store_;       // the group's prefix store
  std::map<std::vector<int>, int> new_group_calls_;  // the issuing thread's: calls per set of ranks
  std::shared_ptr<gloo::rendezvous::Context> context_;
  const GlooOptions options_;
  const std::string name_;
  std::vector<unsigned char> flat_;  // worker scratch: a bucket of several tensors
  std::vector<float> wide_;          // worker scratch: a bfloat16 bucket widened to float32

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;             // guarded by mu_
  std::atomic<int64_t> pending_{0};  // queue_.size(), readable without mu_
  bool worker_sleeping_ = false;     // guarded by mu_
  bool stop_ = false;                // guarded by mu_
  int64_t issued_ = 0;               // guarded by mu_
  std::string broken_;               // guarded by mu_: why the communicator is unusable, or ""
  // Where the worker is, for the reporter thread: the collective running (0: none), its kind and start.
  std::atomic<int64_t> running_{0};
  std::atomic<int> running_kind_{0};
  std::atomic<int64_t> running_since_{0};  // Clock ticks since its epoch
  std::atomic<int64_t> running_timeout_{0};  // its timeout in ms
  std::mutex reporter_mu_;
  std::condition_variable reporter_cv_;
  bool reporter_stop_ = false;  // guarded by reporter_mu_
  std::thread reporter_;
  std::thread worker_;  // last: starts once the members above exist
};

}  // namespace

std::shared_ptr<Communicator> make_gloo_communicator(std::shared_ptr<Store> store, int rank, int size,
                                                     GlooOptions options) {
  STRATA_CHECK(store != nullptr, InvalidArgument, "make_gloo_communicator: the store is null");
  STRATA_CHECK(size >= 1, InvalidArgument, "make_gloo_communicator: size must be at least 1, got " << size);
  STRATA_CHECK(rank >= 0 && rank < size, InvalidArgument,
               "make_gloo_communicator: rank " << rank << " is not in a group of " << size);
  STRATA_CHECK(options.timeout.count() > 0, InvalidArgument,
               "make_gloo_communicator: timeout must be positive, got " << options.timeout.count() << " ms");
  STRATA_CHECK(!options.prefix.empty(), InvalidArgument, "make_gloo_communicator: the store prefix is empty");
  const std::string name = "gloo group of " + std::to_string(size) + " (prefix '" + options.prefix + "')";

  auto group_store = make_prefix_store(store, options.prefix);
  const int64_t joins = group_store->add("joined/rank-" + std::to_string(rank), 1);
  STRATA_CHECK(joins == 1, InvalidArgument,
               name << ": rank " << rank << " already joined a group under this prefix; a rebuilt group needs a fresh "
                    << "store prefix");

  gloo::transport::tcp::attr attr;
  attr.hostname = options.hostname;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    STRATA_THROW(Unavailable, name << ": rank " << rank << " cannot listen on '" << options.hostname
                                   << "': " << e.what());
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(options.timeout);
  detail::GlooStore rendezvous(group_store, options.timeout);
  auto missing_ranks = [&] {
    std::vector<int> missing;
    for (int q = 0; q < size; ++q) {
      if (!group_store->check({"joined/rank-" + std::to_string(q)})) missing.push_back(q);
    }
    return missing;
  };
  try {
    context->connectFullMesh(rendezvous, device);
  } catch (const Timeout& e) {
    const auto missing = missing_ranks();
    STRATA_THROW(Timeout, name << ": rank " << rank << " could not connect within " << options.timeout.count()
                               << " ms: "
                               << (missing.empty() ? std::string("every rank joined but the mesh did not form")
                                                   : rank_list(missing) + " never joined")
                               << " (" << e.what() << ")");
  } catch (const std::exception& e) {
    const auto missing = missing_ranks();
    STRATA_THROW(Timeout, name << ": rank " << rank << " could not connect within " << options.timeout.count()
                               << " ms" << (missing.empty() ? std::string() : ": " + rank_list(missing) + " never joined")
                               << " (gloo: " << e.what() << ")");
  }
  return std::make_shared<GlooCommunicator>(std::move(store), std::move(group_store), std::move(context),
                                            std::move(options));
}

}  // namespace strata::comm
