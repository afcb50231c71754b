// The "local" backend (strata/comm/local.h): ranks are threads of one process and collectives work directly
// on each other's tensors in shared memory.
//
// Issuing a collective queues it on the rank's worker thread and returns a LocalWork. The worker runs the
// queue in order. For collective #s a rank publishes a Descriptor (its tensors as a flat Bucket, shapes, op,
// root, any local problem) in its slot s % 2, then every step of the collective ends at the group barrier:
//   arrive  -> every rank checks every descriptor (the same verdict everywhere: run, or InvalidArgument)
//   work    -> each rank writes only its own tensors, reading the others' (see the algorithms below)
//   depart  -> no rank returns (letting its caller reuse the tensors) while another still reads them.
// Two slots suffice: a rank writes slot s % 2 again only for #s+2, after every rank arrived at #s+1, that is
// after every rank is done reading #s.
// Thread-safety: one thread per rank issues collectives (guarded by mu_); the worker owns everything else.
#include "strata/comm/local.h"

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "comm/bucket.h"
#include "comm/group_barrier.h"

namespace strata::comm {
namespace {

using detail::Bucket;
using detail::GroupBarrier;
using Clock = std::chrono::steady_clock;

enum class Kind : int { kNone, kAllReduce, kBroadcast, kAllGather, kBarrier, kReduceScatter };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "nothing";
    case Kind::kAllReduce:
      return "all_reduce";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAllGather:
      return "all_gather";
    case Kind::kBarrier:
      return "barrier";
    case Kind::kReduceScatter:
      return "reduce_scatter";
  }
  return "?";
}

// Throws a new exception of the same strata type and message as `error`, so that every waiter owns what it
// catches (the stored one stays with the Work, whichever thread drops the Work last).
[[noreturn]] void rethrow_copy(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const ShapeError& e) {
    throw ShapeError(e.what());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(e.what());
  } catch (const Timeout& e) {
    throw Timeout(e.what());
  } catch (const Unavailable& e) {
    throw Unavailable(e.what());
  } catch (const IoError& e) {
    throw IoError(e.what());
  } catch (const DataCorrupt& e) {
    throw DataCorrupt(e.what());
  } catch (const Error& e) {
    throw Error(e.what());
  }
}

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
    if (error_) rethrow_copy(error_);
  }

  void wait(std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    spin_until_completed();
    if (!is_completed()) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_until(lock, deadline, [&] { return is_completed(); })) {
        STRATA_THROW(Timeout, "local group of " << group_size_ << ": " << kind_ << " #" << seq_ << " on rank "
                                                << rank_ << " did not complete within the " << timeout.count()
                                    << " ms of Work::wait (it goes on running under its own timeout)");
      }
    }
    if (error_) rethrow_copy(error_);
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
  std::string local_error;    // a problem with this rank's own arguments
};

// Where a rank is, for the messages of the other ranks' timeouts. Written by the rank, read by anyone.
struct RankStatus {
  std::atomic<int64_t> issued{0};  // collectives issued so far (#1, #2, ...)
  std::atomic<int> issued_kind{0};
  std::atomic<int64_t> running{0};  // the collective its worker is in, 0 when idle
  std::atomic<int> running_kind{0};
  std::atomic<uint64_t> steps{0};  // barrier arrivals so far
};

struct LocalGroup {
  LocalGroup(int size, LocalGroupOptions options)
      : size(size), options(options), barrier(size), status(size), slots(size) {}
  const int size;
  const LocalGroupOptions options;
  GroupBarrier barrier;
  std::vector<RankStatus> status;
  std::vector<std::array<Descriptor, 2>> slots;  // [rank][seq % 2], written by the rank before it arrives
};

struct Op {
  Kind kind = Kind::kNone;
  int64_t seq = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  std::chrono::milliseconds timeout{0};  // bounds each wait of this operation
  std::vector<Tensor> tensors;           // all_gather: {input, output}
  std::shared_ptr<LocalWork> work;
};

std::string op_name(const Op& op) { return std::string(kind_name(op.kind)) + " #" + std::to_string(op.seq); }

std::string describe_tensors(const Descriptor& d) {
  std::ostringstream out;
  int64_t numel = 0;
  out << d.shapes.size() << (d.shapes.size() == 1 ? " tensor" : " tensors");
  for (const Shape& s : d.shapes) {
    out << " " << shape_str(s);
    numel += shape_numel(s);
  }
  out << " (" << numel << " elements)";
  if (!d.shapes.empty()) out << " " << dtype_name(d.dtype);
  return out.str();
}

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
    return issue(Kind::kAllGather, {std::move(input), std::move(output)}, ReduceOp::kSum, 0,
                 group_->options.timeout);
  }
  void barrier() override { issue(Kind::kBarrier, {}, ReduceOp::kSum, 0, group_->options.timeout)->wait(); }
  void abort(const std::string& reason) override { group_->barrier.abort(reason); }

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

 private:
  std::shared_ptr<Work> issue(Kind kind, std::vector<Tensor> tensors, ReduceOp reduce, int root,
                              std::chrono::milliseconds timeout);
  // An options' timeout, or the group's when it is kDefaultTimeout; InvalidArgument when not positive.
  std::chrono::milliseconds timeout_of(const char* what, std::chrono::milliseconds timeout) const {
    if (timeout == kDefaultTimeout) return group_->options.timeout;
    STRATA_CHECK(timeout.count() > 0, InvalidArgument,
                 what << " on rank " << rank_ << ": timeout must be positive, got " << timeout.count() << " ms");
    return timeout;
  }
  void run_alone(Op& op);
  void worker_loop();
  void execute(Op& op);
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
    inputs_.resize(ranks.size());
    mine.for_each_piece(begin, end, [&](size_t seg, int64_t offset, int64_t length) {
      for (size_t k = 0; k < ranks.size(); ++k) inputs_[k] = view(ranks[k], op).segment<T>(seg) + offset;
      detail::reduce_piece(mine.segment<T>(seg) + offset, reinterpret_cast<const T* const*>(inputs_.data()),
                           static_cast<int>(ranks.size()), length, op.reduce, divisor);
    });
  }
  void run_reduce_scatter(const Op& op);

  const std::shared_ptr<LocalGroup> group_;
  const int rank_;
  std::vector<const void*> inputs_;  // worker scratch

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;             // guarded by mu_
  std::atomic<int64_t> pending_{0};  // queue_.size(), readable without mu_
  bool worker_sleeping_ = false;     // guarded by mu_: the worker blocks on cv_ and needs a notify
  bool stop_ = false;                // guarded by mu_
  int64_t issued_ = 0;               // guarded by mu_
  std::thread worker_;               // last: starts once the members above exist
};

std::shared_ptr<Work> LocalCommunicator::issue(Kind kind, std::vector<Tensor> tensors, ReduceOp reduce, int root,
                                               std::chrono::milliseconds timeout) {
  auto work = std::make_shared<LocalWork>();
  Op op{kind, 0, reduce, root, timeout, std::move(tensors), work};
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    op.seq = ++issued_;
    work->set_name(kind_name(kind), op.seq, rank_, group_->size);
    RankStatus& status = group_->status[rank_];
    status.issued_kind.store(static_cast<int>(kind), std::memory_order_relaxed);
    status.issued.store(op.seq, std::memory_order_release);
    if (group_->size > 1) {
      queue_.push_back(std::move(op));
      pending_.fetch_add(1, std::memory_order_release);
      wake = worker_sleeping_;
    }
  }
  if (group_->size == 1) {
    run_alone(op);
  } else if (wake) {
    cv_.notify_one();
  }
  return work;
}

// A group of one: nothing to wait for; all_gather copies, the others leave the tensors as they are.
void LocalCommunicator::run_alone(Op& op) {
  std::exception_ptr error;
  try {
    Descriptor d;
    describe(op, d);
    if (!d.local_error.empty()) STRATA_THROW(InvalidArgument, op_name(op) << " (local group of 1): " << d.local_error);
    if ((op.kind == Kind::kAllGather || op.kind == Kind::kReduceScatter) && d.bucket.segments() == 2 &&
        d.bucket.segment<char>(0) != d.bucket.segment<char>(1)) {
      std::memcpy(d.bucket.segment<char>(1), d.bucket.segment<char>(0), op.tensors[0].nbytes());
    }
  } catch (...) {
    error = std::current_exception();
  }
  op.work->finish(error);
}

void LocalCommunicator::worker_loop() {
  RankStatus& status = group_->status[rank_];
  while (true) {
    // Collectives often come back to back (one bucket after another): look for the next one for a few
    // microseconds before sleeping, so issuing it needs no wake-up.
    for (int i = 0; i < 256 && pending_.load(std::memory_order_acquire) == 0; ++i) detail::spin_pause();
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
    }
    status.running_kind.store(static_cast<int>(op.kind), std::memory_order_relaxed);
    status.running.store(op.seq, std::memory_order_release);
    std::exception_ptr error;
    try {
      execute(op);
    } catch (...) {
      error = std::current_exception();
    }
    status.running.store(0, std::memory_order_release);
    op.tensors.clear();
    op.work->finish(error);
  }
}

void LocalCommunicator::describe(Op& op, Descriptor& d) const {
  d.kind = op.kind;
  d.op = op.reduce;
  d.root = op.root;
  d.shapes.clear();
  d.bucket.clear();
  d.local_error.clear();
  auto fail = [&](const std::string& message) {
    if (d.local_error.empty()) d.local_error = message;
  };
  d.dtype = DType::kFloat32;
  const bool pair = op.kind == Kind::kAllGather || op.kind == Kind::kReduceScatter;
  for (size_t i = 0; i < op.tensors.size(); ++i) {
    Tensor& t = op.tensors[i];
    const std::string what = pair ? (i == 0 ? "input" : "output") : "tensor " + std::to_string(i);
    d.shapes.push_back(t.defined() ? t.shape() : Shape{});
    if (t.defined() && i == 0) d.dtype = t.dtype();
    if (!t.defined()) {
      fail(what + " is undefined");
    } else if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kBFloat16 && t.dtype() != DType::kInt64) {
      fail(what + " is " + dtype_name(t.dtype()) + ", wants float32, bfloat16 or int64");
    } else if (t.dtype() != d.dtype) {
      fail(what + " is " + dtype_name(t.dtype()) + " but " + (pair ? "input" : "tensor 0") + " is " +
           dtype_name(d.dtype) + " (one dtype per call)");
    } else if (!t.device().is_cpu()) {
      fail(what + " is on " + t.device().str() + ", wants host memory");
    } else {
      d.bucket.add(t.raw_data(), t.numel());
    }
  }
  const int size = group_->size;
  if (op.kind == Kind::kBroadcast && (op.root < 0 || op.root >= size)) {
    fail("root " + std::to_string(op.root) + " is not a rank of a group of " + std::to_string(size));
  }
  if (op.kind == Kind::kAllGather && d.local_error.empty()) {
    const Shape& in = d.shapes[0];
    Shape want = in.empty() ? Shape{static_cast<int64_t>(size)} : in;
    if (!in.empty()) want[0] *= size;
    if (d.shapes[1] != want) {
      fail("output is " + shape_str(d.shapes[1]) + ", wants " + shape_str(want) + " (" + std::to_string(size) +
           " x input " + shape_str(in) + ")");
    }
  }
  if (op.kind == Kind::kReduceScatter && d.local_error.empty()) {
    const Shape& out = d.shapes[1];
    Shape want = out.empty() ? Shape{static_cast<int64_t>(size)} : out;
    if (!out.empty()) want[0] *= size;
    if (d.shapes[0] != want) {
      fail("input is " + shape_str(d.shapes[0]) + ", wants " + shape_str(want) + " (" + std::to_string(size) +
           " x output " + shape_str(out) + ")");
    } else {
      // The output may be this rank's own chunk of the input (the others never read it), nothing else of it.
      const char* in = d.bucket.segment<char>(0);
      const char* outp = d.bucket.segment<char>(1);
      const size_t chunk = op.tensors[1].nbytes();
      const bool overlap = chunk > 0 && outp < in + chunk * size && in < outp + chunk;
      if (overlap && outp != in + chunk * rank_) {
        fail("output overlaps the input other than as this rank's chunk (rows of rank " + std::to_string(rank_) + ")");
      }
    }
  }
}

void LocalCommunicator::validate(const Op& op) const {
  const int size = group_->size;
  const std::string where = op_name(op) + " (local group of " + std::to_string(size) + ")";
  std::ostringstream problems;
  for (int q = 0; q < size; ++q) {
    if (!slot(q, op).local_error.empty())
      problems << (problems.tellp() > 0 ? "; " : "") << "rank " << q << ": " << slot(q, op).local_error;
  }
  if (problems.tellp() > 0) STRATA_THROW(InvalidArgument, where << ": " << problems.str());

  auto list = [&](auto&& describe_rank) {
    std::ostringstream out;
    for (int q = 0; q < size; ++q) out << (q ? "; " : "") << "rank " << q << ": " << describe_rank(slot(q, op));
    return out.str();
  };
  const Descriptor& first = slot(0, op);
  for (int q = 1; q < size; ++q) {
    if (slot(q, op).kind != first.kind) {
      STRATA_THROW(InvalidArgument, "collective #" << op.seq << " (local group of " << size
                                                   << "): the ranks called different collectives: "
                                                   << list([](const Descriptor& d) { return kind_name(d.kind); }));
    }
  }
  for (int q = 1; q < size; ++q) {
    const Descriptor& d = slot(q, op);
    if ((op.kind == Kind::kAllReduce || op.kind == Kind::kReduceScatter) && d.op != first.op) {
      STRATA_THROW(InvalidArgument, where << ": the ranks reduce with different ops: "
                                          << list([](const Descriptor& e) { return to_string(e.op); }));
    }
    if (op.kind == Kind::kBroadcast && d.root != first.root) {
      STRATA_THROW(InvalidArgument, where << ": the ranks name different roots: "
                                          << list([](const Descriptor& e) { return std::to_string(e.root); }));
    }
    if (d.dtype != first.dtype && !d.shapes.empty()) {
      STRATA_THROW(InvalidArgument, where << ": the ranks passed different dtypes: "
                                          << list([](const Descriptor& e) { return dtype_name(e.dtype); }));
    }
    if (d.shapes != first.shapes) {
      STRATA_THROW(InvalidArgument, where << ": the ranks passed different tensors: " << list(describe_tensors));
    }
  }
}

std::string LocalCommunicator::missing_ranks(const Op& op, uint64_t step) const {
  std::vector<int> missing;
  for (int q = 0; q < group_->size; ++q) {
    if (group_->status[q].steps.load(std::memory_order_acquire) < step) missing.push_back(q);
  }
  std::ostringstream out;
  out << (missing.size() == 1 ? "rank" : "ranks");
  for (size_t i = 0; i < missing.size(); ++i) out << (i ? ", " : " ") << missing[i];
  out << " had not arrived";
  for (int q : missing) {
    const RankStatus& s = group_->status[q];
    const int64_t issued = s.issued.load(std::memory_order_acquire);
    const int64_t running = s.running.load(std::memory_order_acquire);
    out << "; rank " << q;
    if (issued < op.seq) {
      if (issued == 0) {
        out << " has issued no collective";
      } else {
        out << " has issued only " << issued
            << " (the last: " << kind_name(static_cast<Kind>(s.issued_kind.load(std::memory_order_relaxed))) << " #"
            << issued << ")";
      }
    } else if (running == op.seq) {
      out << " is in " << op_name(op) << " but had not reached this step";
    } else if (running != 0) {
      out << " is still in " << kind_name(static_cast<Kind>(s.running_kind.load(std::memory_order_relaxed))) << " #"
          << running;
    } else {
      out << " has issued it but not started it";
    }
  }
  return out.str();
}

std::string LocalCommunicator::timeout_message(const Op& op, const std::string& what, uint64_t step) const {
  std::ostringstream out;
  out << "local group of " << group_->size << ": " << op_name(op) << " on rank " << rank_ << " timed out after "
      << op.timeout.count() << " ms at step '" << what << "': " << missing_ranks(op, step);
  return strata::detail::with_location(out.str(), __FILE__, __LINE__);
}

void LocalCommunicator::step(const Op& op, const std::string& what) {
  const uint64_t step = group_->status[rank_].steps.fetch_add(1, std::memory_order_relaxed) + 1;
  const auto deadline = Clock::now() + op.timeout;
  const auto result = group_->barrier.arrive_and_wait(deadline, [&] { return timeout_message(op, what, step); });
  switch (result) {
    case GroupBarrier::Result::kPassed:
      return;
    case GroupBarrier::Result::kTimedOut:
      throw Timeout(group_->barrier.abort_reason());
    case GroupBarrier::Result::kAborted:
      STRATA_THROW(Timeout, "local group of " << group_->size << ": " << op_name(op) << " on rank " << rank_
                                              << " gave up at step '" << what << "' (" << missing_ranks(op, step)
                                              << ") because the group was aborted: " << group_->barrier.abort_reason());
  }
}

void LocalCommunicator::execute(Op& op) {
  if (group_->barrier.aborted()) {
    STRATA_THROW(Timeout, "local group of "
                              << group_->size << ": " << op_name(op) << " on rank " << rank_
                              << " was not run: the group was aborted: " << group_->barrier.abort_reason());
  }
  describe(op, group_->slots[rank_][op.seq & 1]);
  step(op, "arrive");
  validate(op);

  const Bucket& mine = view(rank_, op);
  switch (op.kind) {
    case Kind::kAllReduce:
      run_all_reduce(op);
      return;
    case Kind::kBroadcast:
      if (mine.numel() == 0) return;
      if (rank_ != op.root) copy_from(op, op.root, 0, mine.numel());
      step(op, "copy from root");
      return;
    case Kind::kAllGather: {
      const size_t n = static_cast<size_t>(shape_numel(slot(rank_, op).shapes[0])) * dtype_size(slot(rank_, op).dtype);
      if (n == 0) return;
      for (int q = 0; q < group_->size; ++q) {
        const char* src = view(q, op).segment<char>(0);
        char* dst = mine.segment<char>(1) + q * n;
        if (src != dst) std::memcpy(dst, src, n);
      }
      step(op, "copy inputs");
      return;
    }
    case Kind::kReduceScatter:
      run_reduce_scatter(op);
      return;
    case Kind::kBarrier:
    case Kind::kNone:
      return;
  }
}

// Rank r reduces chunk r of every rank's input (rank order 0..N-1) into its output; nobody writes an input.
void LocalCommunicator::run_reduce_scatter(const Op& op) {
  const int size = group_->size;
  const Descriptor& mine = slot(rank_, op);
  const int64_t n = shape_numel(mine.shapes[1]);
  if (n == 0) return;
  const float divisor = op.reduce == ReduceOp::kMean ? static_cast<float>(size) : 0.0f;
  auto reduce = [&](auto* out) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(out)>>;
    inputs_.resize(size);
    for (int q = 0; q < size; ++q) inputs_[q] = view(q, op).template segment<T>(0) + n * rank_;
    detail::reduce_piece(out, reinterpret_cast<const T* const*>(inputs_.data()), size, n, op.reduce, divisor);
  };
  switch (mine.dtype) {
    case DType::kBFloat16:
      reduce(mine.bucket.segment<BFloat16>(1));
      break;
    case DType::kInt64:
      reduce(mine.bucket.segment<int64_t>(1));
      break;
    default:
      reduce(mine.bucket.segment<float>(1));
      break;
  }
  step(op, "reduce-scatter");
}

void LocalCommunicator::run_all_reduce(const Op& op) {
  const int size = group_->size;
  const int64_t numel = view(rank_, op).numel();
  if (numel == 0) return;
  const float divisor = op.reduce == ReduceOp::kMean ? static_cast<float>(size) : 0.0f;
  std::vector<int> everyone(size);
  for (int q = 0; q < size; ++q) everyone[q] = q;

  const DType dtype = slot(rank_, op).dtype;
  const int64_t align = 64 / static_cast<int64_t>(dtype_size(dtype));  // chunks of whole cache lines
  // bfloat16 is combined in rank order and rounded once, so the pairwise tree runs as the ring.
  const AllReduceAlgorithm algorithm =
      dtype == DType::kBFloat16 && group_->options.algorithm == AllReduceAlgorithm::kTree ? AllReduceAlgorithm::kRing
                                                                                         : group_->options.algorithm;
  switch (algorithm) {
    case AllReduceAlgorithm::kRing: {
      // Reduce-scatter: this rank owns chunk `rank_` and reduces it over every rank, in rank order.
      const auto [begin, end] = detail::chunk_range(numel, size, rank_, align);
      reduce_into_mine(op, begin, end, everyone, divisor);
      step(op, "reduce-scatter");
      // All-gather: copy every other chunk from its owner (who no longer writes it).
      for (int q = 0; q < size; ++q) {
        if (q == rank_) continue;
        const auto [b, e] = detail::chunk_range(numel, size, q, align);
        copy_from(op, q, b, e);
      }
      step(op, "all-gather");
      return;
    }
    case AllReduceAlgorithm::kReduceToOne:
      if (rank_ == 0) reduce_into_mine(op, 0, numel, everyone, divisor);
      step(op, "reduce to rank 0");
      if (rank_ != 0) copy_from(op, 0, 0, numel);
      step(op, "copy from rank 0");
      return;
    case AllReduceAlgorithm::kTree:
      // Step s: rank r (a multiple of 2s) adds rank r+s into itself; rank r+s is idle from then on.
      for (int s = 1; s < size; s *= 2) {
        if (rank_ % (2 * s) == 0 && rank_ + s < size) {
          const bool last = rank_ == 0 && 2 * s >= size;
          reduce_into_mine(op, 0, numel, {rank_, rank_ + s}, last ? divisor : 0.0f);
        }
        step(op, "tree distance " + std::to_string(s));
      }
      if (rank_ != 0) copy_from(op, 0, 0, numel);
      step(op, "copy from rank 0");
      return;
  }
}

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_local_group(int size, LocalGroupOptions options) {
  STRATA_CHECK(size >= 1, InvalidArgument, "make_local_group: size must be at least 1, got " << size);
  STRATA_CHECK(options.timeout.count() > 0, InvalidArgument,
               "make_local_group: timeout must be positive, got " << options.timeout.count() << " ms");
  auto group = std::make_shared<LocalGroup>(size, options);
  std::vector<std::shared_ptr<Communicator>> ranks;
  ranks.reserve(size);
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_shared<LocalCommunicator>(group, r));
  return ranks;
}

std::string to_string(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kReduceToOne:
      return "reduction_to_one_device";
    case AllReduceAlgorithm::kRing:
      return "ring";
    case AllReduceAlgorithm::kTree:
      return "tree";
  }
  return "?";
}

AllReduceAlgorithm all_reduce_algorithm_from_string(const std::string& name) {
  for (auto a : {AllReduceAlgorithm::kReduceToOne, AllReduceAlgorithm::kRing, AllReduceAlgorithm::kTree}) {
    if (to_string(a) == name) return a;
  }
  STRATA_THROW(InvalidArgument,
               "unknown all-reduce algorithm '" << name << "'; choices: reduction_to_one_device, ring, tree");
}

}  // namespace strata::comm
