// The "mpi" backend (strata/comm/mpi.h): collectives over OpenMPI for processes started by mpirun.
//
// MPI is initialised once per process (MPI_Init_thread asking for MPI_THREAD_MULTIPLE; MPI_THREAD_SERIALIZED is
// enough, because every MPI call strata makes holds g_mpi_mutex when MULTIPLE was not provided) and finalised by an
// atexit handler — skipped when a communicator timed out, since MPI_Finalize would wait on the collective that never
// finished (mpirun then reports the process and ends the job). Each communicator owns a duplicate of its MPI
// communicator (MPI_Comm_dup of MPI_COMM_WORLD, or MPI_Comm_create_group for new_group) with MPI_ERRORS_RETURN, and a
// worker thread that runs its operations in issue order: each is posted as a non-blocking MPI call (MPI_Iallreduce,
// whose algorithms give every rank the same bits — with Compression::kBFloat16 on 16-bit elements and a user
// MPI_Op that sums in float32 and rounds back, comm/bf16_wire.h; MPI_Ibcast; MPI_Iallgather;
// MPI_Ireduce_scatter_block; MPI_Ibarrier; MPI_Irecv) and polled with MPI_Test until done or past its deadline.
// Sends (MPI_Isend) are posted and then polled by the worker between operations, so a send never holds up the queue.
// A rank that has waited in a collective for a quarter of its timeout tells its peers so on a private duplicate
// communicator, so that a timeout names the ranks never heard from. A deadline passed: the operation fails with
// Timeout, its buffers are kept alive for ever (MPI may still write them) and the communicator is broken — later
// operations fail at once quoting the first failure; its message lists this rank's last collectives (seq, kind,
// bytes, training step, state) from a flight recorder (comm/flight_recorder.h). abort() breaks it the same way on
// this rank only.
// Thread-safety: one thread per rank issues operations (mu_ guards the queue); the worker alone makes this
// communicator's MPI calls (under g_mpi_mutex when MPI is not MPI_THREAD_MULTIPLE); an MpiWork may be waited on from
// any thread; the recorder has its own lock.
#include "strata/comm/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/bf16_wire.h"
#include "comm/completion.h"
#include "comm/flight_recorder.h"
#include "strata/error.h"
#include "strata/trace.h"

namespace strata::comm {
namespace {

using Clock = std::chrono::steady_clock;

// How long a wait polls MPI_Test back to back before it rests between tests (see MpiCommunicator::poll).
constexpr std::chrono::milliseconds kBusyPoll{50};

// ---- process-wide MPI state
std::mutex g_init_mutex;
bool g_initialized_here = false;
bool g_multiple = false;            // MPI_THREAD_MULTIPLE provided: no global lock needed
std::mutex g_mpi_mutex;             // serialises MPI calls when only MPI_THREAD_SERIALIZED is provided
std::atomic<bool> g_broken_any{false};  // a collective timed out: MPI_Finalize would hang

std::unique_lock<std::mutex> mpi_lock() {
  return g_multiple ? std::unique_lock<std::mutex>() : std::unique_lock<std::mutex>(g_mpi_mutex);
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || g_broken_any.load()) return;
  MPI_Finalize();
}

void ensure_initialized() {
  std::lock_guard<std::mutex> guard(g_init_mutex);
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (!initialized) {
    STRATA_CHECK(started_by_mpirun(), Unavailable,
                 "mpi: this process was not started by mpirun (OMPI_COMM_WORLD_RANK/SIZE are not set); start it "
                 "with `mpirun -np N ...` or use the gloo backend");
    // STRATA_MPI_THREAD_LEVEL=serialized asks for MPI_THREAD_SERIALIZED only (the path taken where MPI lacks
    // MPI_THREAD_MULTIPLE; the tests run it on an OpenMPI that has it).
    const char* level = std::getenv("STRATA_MPI_THREAD_LEVEL");
    const int required = level && std::string(level) == "serialized" ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE;
    const int rc = MPI_Init_thread(nullptr, nullptr, required, &provided);
    STRATA_CHECK(rc == MPI_SUCCESS, Unavailable, "mpi: MPI_Init_thread failed: " << mpi_error(rc));
    g_initialized_here = true;
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  STRATA_CHECK(provided >= MPI_THREAD_SERIALIZED, Unavailable,
               "mpi: MPI provides thread level " << provided << ", strata needs MPI_THREAD_SERIALIZED or more");
  g_multiple = provided >= MPI_THREAD_MULTIPLE;
}

// The user MPI_Op of Compression::kBFloat16 on MPI_UINT16_T (bfloat16 bits): inout = bf16(in + inout), in float32.
void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* acc = static_cast<BFloat16*>(inout);
  detail::sum_bf16(acc, static_cast<const BFloat16*>(in), acc, static_cast<size_t>(*len));
}

// That MPI_Op, made once per process (after MPI_Init; MPI_Finalize frees it).
MPI_Op bf16_sum_op() {
  static std::once_flag once;
  static MPI_Op op = MPI_OP_NULL;
  std::call_once(once, [] {
    auto lock = mpi_lock();
    const int rc = MPI_Op_create(&sum_bf16, /*commute=*/1, &op);
    STRATA_CHECK(rc == MPI_SUCCESS, Error, "mpi: MPI_Op_create (bfloat16 sum) failed: " << mpi_error(rc));
  });
  return op;
}

using Kind = detail::OpKind;
using detail::Failure;
using detail::kind_name;

// The Work of one MPI operation, finished by the communicator's worker thread.
class MpiWork final : public detail::BackendWork {
 public:
  MpiWork(Kind kind, int64_t seq, int rank) : BackendWork("mpi", kind, seq, rank) {}
};

struct Op {
  Kind kind = Kind::kBarrier;
  int64_t seq = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;  // broadcast's root; send's destination; recv's source
  int tag = 0;
  std::chrono::milliseconds timeout{0};
  std::vector<Tensor> tensors;  // all_gather / reduce_scatter: {input, output}
  std::vector<int> ranks;       // new_group
  std::shared_ptr<MpiWork> work;
  MPI_Comm* new_comm = nullptr;  // new_group: where the worker puts the new communicator
  Compression compression = Compression::kNone;  // all_reduce
};

// What a timed-out operation leaves behind: MPI may still read or write these, so they are never freed.
struct Leftover {
  std::vector<Tensor> tensors;
  std::vector<unsigned char> buffer;
  std::vector<BFloat16> wire;  // Compression::kBFloat16's buffer
};
std::mutex g_leftover_mutex;
std::vector<Leftover*> g_leftovers;

// A send posted to MPI, polled by the worker between operations.
struct PostedSend {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<unsigned char> buffer;  // the bucket's bytes
  Op op;
  Clock::time_point deadline;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, MpiOptions options, std::string name) : comm_(comm), options_(options) {
    auto lock = mpi_lock();
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    void* tag_ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    tag_ub_ = flag ? *static_cast<int*>(tag_ub) : 32767;
    MPI_Comm_dup(comm_, &progress_comm_);  // collective over the group, as the constructor is
    MPI_Comm_set_errhandler(progress_comm_, MPI_ERRORS_RETURN);
    waiting_in_.assign(static_cast<size_t>(size_), 0);
    name_ = "mpi " + name + " of " + std::to_string(size_);
    worker_ = std::thread([this] { worker_loop(); });
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    worker_.join();  // runs what is queued, waits for posted sends
    if (broken_.empty()) {
      drain_progress();
      auto lock = mpi_lock();
      MPI_Comm_free(&progress_comm_);
      MPI_Comm_free(&comm_);
    }
  }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::barrier;
  using Communicator::broadcast;
  using Communicator::recv;
  using Communicator::send;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  int64_t all_reduce_wire_bytes() const override { return wire_bytes_.load(std::memory_order_relaxed); }
  void set_step(int64_t step) override { recorder_.set_step(step); }

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

  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors, const AllReduceOptions& o) override {
    Op op = make_op(Kind::kAllReduce, std::move(tensors), o.timeout, o.op);
    op.compression = o.compression;
    return issue(std::move(op));
  }
  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors, const BroadcastOptions& o) override {
    return issue(make_op(Kind::kBroadcast, std::move(tensors), o.timeout, ReduceOp::kSum, o.root));
  }
  std::shared_ptr<Work> all_gather(Tensor input, Tensor output, const AllGatherOptions& o) override {
    return issue(make_op(Kind::kAllGather, {std::move(input), std::move(output)}, o.timeout));
  }
  void barrier(const BarrierOptions& o) override { issue(make_op(Kind::kBarrier, {}, o.timeout))->wait(); }
  std::shared_ptr<Work> reduce_scatter(Tensor input, Tensor output, const ReduceScatterOptions& o) override {
    return issue(make_op(Kind::kReduceScatter, {std::move(input), std::move(output)}, o.timeout, o.op));
  }
  std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst, const SendOptions& o) override {
    return issue(make_op(Kind::kSend, std::move(tensors), o.timeout, ReduceOp::kSum, dst, o.tag));
  }
  std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src, const RecvOptions& o) override {
    return issue(make_op(Kind::kRecv, std::move(tensors), o.timeout, ReduceOp::kSum, src, o.tag));
  }

  // MPI_Comm_create_group over the members only (non-members take no part and get nullptr), run by the worker in
  // issue order; the tag tells apart the members' k-th calls for the same ranks. It blocks without a timeout (MPI has
  // no non-blocking form of it).
  std::shared_ptr<Communicator> new_group(std::vector<int> ranks) override {
    std::sort(ranks.begin(), ranks.end());
    std::ostringstream list;
    for (size_t i = 0; i < ranks.size(); ++i) list << (i ? "-" : "") << ranks[i];
    STRATA_CHECK(!ranks.empty(), InvalidArgument, "new_group on rank " << rank_ << " of " << name_ << ": no ranks given");
    STRATA_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), InvalidArgument,
                 "new_group on rank " << rank_ << " of " << name_ << ": ranks " << list.str() << " name a rank twice");
    STRATA_CHECK(ranks.front() >= 0 && ranks.back() < size_, InvalidArgument,
                 "new_group on rank " << rank_ << " of " << name_ << ": ranks " << list.str()
                                      << " are not all ranks of the group");
    if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) return nullptr;
    const int k = ++new_group_calls_[ranks];
    MPI_Comm sub = MPI_COMM_NULL;
    Op op = make_op(Kind::kNewGroup, {}, kDefaultTimeout, ReduceOp::kSum, 0, k);
    op.ranks = ranks;
    op.new_comm = &sub;
    issue(std::move(op))->wait();
    return std::make_shared<MpiCommunicator>(sub, options_, "sub-group " + list.str());
  }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.empty()) return;
    broken_ = "it was aborted on rank " + std::to_string(rank_) + ": " + reason;
    for (Op& op : queue_) fail_unrun(op);
    queue_.clear();
  }

 private:
  static bool is_p2p(Kind kind) { return kind == Kind::kSend || kind == Kind::kRecv; }

  // REQUIRES: mu_ held, broken_ set. Fails an operation that will not run.
  void fail_unrun(Op& op) {
    if (!is_p2p(op.kind)) recorder_.ended(op.seq, false);
    op.work->finish(not_run(op));
  }

  Failure not_run(const Op& op) const {  // REQUIRES: mu_ held, broken_ set
    std::ostringstream message;
    message << "mpi: " << kind_name(op.kind) << " #" << op.seq << " on rank " << rank_ << " of " << name_
            << " was not run: " << broken_;
    return {ErrorCode::kDeadlineExceeded, message.str()};
  }

  static Op make_op(Kind kind, std::vector<Tensor> tensors, std::chrono::milliseconds timeout,
                    ReduceOp reduce = ReduceOp::kSum, int root = 0, int tag = 0) {
    Op op;
    op.kind = kind;
    op.tensors = std::move(tensors);
    op.timeout = timeout;
    op.reduce = reduce;
    op.root = root;
    op.tag = tag;
    return op;
  }

  std::shared_ptr<Work> issue(Op op) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool p2p = is_p2p(op.kind);
    op.seq = p2p ? ++messages_ : ++collectives_;
    if (op.timeout == kDefaultTimeout) op.timeout = options_.timeout;
    op.work = std::make_shared<MpiWork>(op.kind, op.seq, rank_);
    auto work = op.work;
    if (!broken_.empty()) {
      work->finish(not_run(op));
      return work;
    }
    const std::string problem = check_arguments(op);
    if (!problem.empty()) {
      work->finish({ErrorCode::kInvalidArgument,
                    std::string("mpi: ") + kind_name(op.kind) + " on rank " + std::to_string(rank_) + " of " + name_ +
                        ": " + problem});
      return work;
    }
    if (!p2p) recorder_.issued(op.seq, op.kind, op.tensors, op.timeout, Clock::now());
    queue_.push_back(std::move(op));
    cv_.notify_one();
    return work;
  }

  std::string check_arguments(const Op& op) const {
    if (op.kind == Kind::kNewGroup) return "";
    if (op.timeout.count() <= 0) return "timeout must be positive, got " + std::to_string(op.timeout.count()) + " ms";
    const bool pair = op.kind == Kind::kAllGather || op.kind == Kind::kReduceScatter;
    size_t nbytes = 0;
    for (size_t i = 0; i < op.tensors.size(); ++i) {
      const Tensor& t = op.tensors[i];
      const std::string what = pair ? (i == 0 ? "input" : "output") : "tensor " + std::to_string(i);
      if (!t.defined()) return what + " is undefined";
      if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kBFloat16 && t.dtype() != DType::kInt64) {
        return what + " is " + dtype_name(t.dtype()) + ", wants float32, bfloat16 or int64";
      }
      if (i > 0 && t.dtype() != op.tensors[0].dtype()) {
        return what + " is " + dtype_name(t.dtype()) + " but " + (pair ? "input" : "tensor 0") + " is " +
               dtype_name(op.tensors[0].dtype()) + " (one dtype per call)";
      }
      if (!t.device().is_cpu()) return what + " is on " + t.device().str() + ", wants host memory";
      nbytes += t.nbytes();
    }
    if (nbytes > static_cast<size_t>(INT_MAX) / 4) return "more than 512 MiB in one call (MPI counts are int)";
    if (op.kind == Kind::kAllReduce && !op.tensors.empty()) {
      const std::string problem = detail::check_compression(op.compression, op.reduce, op.tensors[0].dtype());
      if (!problem.empty()) return problem;
    }
    if (op.kind == Kind::kSend || op.kind == Kind::kRecv) {
      if (op.root < 0 || op.root >= size_ || op.root == rank_) {
        return std::string(op.kind == Kind::kSend ? "destination" : "source") + " rank " + std::to_string(op.root) +
               (op.root == rank_ ? " is this rank" : " is not a rank of a group of " + std::to_string(size_));
      }
      if (op.tag < 0 || op.tag > tag_ub_) {
        return "tag " + std::to_string(op.tag) + " is outside [0, " + std::to_string(tag_ub_) + "] (MPI_TAG_UB)";
      }
    }
    if (op.kind == Kind::kBroadcast && (op.root < 0 || op.root >= size_)) {
      return "root " + std::to_string(op.root) + " is not a rank of a group of " + std::to_string(size_);
    }
    if (op.kind == Kind::kReduceScatter) {
      const Shape& in = op.tensors[0].shape();
      if (in.empty() || in[0] % size_ != 0) {
        return "input is " + shape_str(in) + ", wants a first dimension divisible by the group size " +
               std::to_string(size_);
      }
      Shape want = in;
      want[0] /= size_;
      if (op.tensors[1].shape() != want) {
        return "output is " + shape_str(op.tensors[1].shape()) + ", wants " + shape_str(want);
      }
    }
    if (op.kind == Kind::kAllGather) {
      const Shape& in = op.tensors[0].shape();
      Shape want = in.empty() ? Shape{static_cast<int64_t>(size_)} : in;
      if (!in.empty()) want[0] *= size_;
      if (op.tensors[1].shape() != want) {
        return "output is " + shape_str(op.tensors[1].shape()) + ", wants " + shape_str(want);
      }
    }
    return "";
  }

  // ---- the worker
  void worker_loop() {
    trace::name_thread("mpi worker");
    for (;;) {
      Op op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
          if (!queue_.empty()) break;
          if (stop_ && sends_.empty()) return;
          if (sends_.empty()) {
            cv_.wait(lock);
          } else {
            cv_.wait_for(lock, std::chrono::microseconds(200));
            lock.unlock();
            poll_sends();
            lock.lock();
          }
        }
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      run(op);
    }
  }

  void run(Op& op) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.empty()) {
        fail_unrun(op);
        return;
      }
    }
    deadline_ = Clock::now() + op.timeout;
    const bool recorded = !is_p2p(op.kind);
    if (recorded) recorder_.started(op.seq);
    try {
      execute(op);
      if (recorded) recorder_.ended(op.seq, true);
      op.work->finish({});
    } catch (const PostedMarker&) {
      // a send: poll_sends finishes its Work
    } catch (...) {  // a Timeout, or any other error: each waiter throws its class and message
      if (recorded) recorder_.ended(op.seq, false);
      op.work->finish(Failure::of(std::current_exception()));
    }
  }

  // Marks the communicator unusable after `op` passed its deadline with `request` outstanding; throws Timeout.
  [[noreturn]] void timed_out(Op& op, std::vector<unsigned char>* buffer) {
    if (!is_p2p(op.kind)) recorder_.ended(op.seq, false);
    const std::string recent = detail::describe_recent(recorder_, rank_, kRecent);
    std::ostringstream message;
    message << "mpi: " << kind_name(op.kind) << " #" << op.seq << " on rank " << rank_ << " of " << name_
            << " did not complete within " << op.timeout.count() << " ms" << missing_ranks(op)
            << (recent.empty() ? "" : "; " + recent)
            << " (MPI cannot cancel it, so this communicator is unusable and the process should exit)";
    auto* left = new Leftover{op.tensors, {}, {}};
    if (buffer) left->buffer = std::move(*buffer);
    {
      std::lock_guard<std::mutex> lock(g_leftover_mutex);
      g_leftovers.push_back(left);
    }
    g_broken_any.store(true);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.empty()) broken_ = message.str();
      for (Op& q : queue_) fail_unrun(q);
      queue_.clear();
    }
    throw Timeout(message.str());
  }

  void check(int rc, const char* call) {
    if (rc != MPI_SUCCESS) STRATA_THROW(Error, "mpi: " << call << " on rank " << rank_ << " of " << name_ << ": " << mpi_error(rc));
  }

  // Polls `request` until it completes (false) or the deadline passes (true). Sends are polled too.
  bool poll(MPI_Request& request, const Op& op) {
    const bool collective = op.kind != Kind::kSend && op.kind != Kind::kRecv && op.kind != Kind::kNewGroup;
    const Clock::time_point report_at = deadline_ - op.timeout + op.timeout / 4;
    bool reported = false;
    const Clock::time_point started = Clock::now();
    for (int spins = 0;; ++spins) {
      int done = 0;
      {
        auto lock = mpi_lock();
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      }
      if (done) return false;
      if (!sends_.empty() && spins % 16 == 0) poll_sends();
      if (collective && spins % 16 == 0 && Clock::now() > report_at) {
        if (!reported) report_waiting(op.seq);
        reported = true;
        drain_progress();
      }
      if (Clock::now() > deadline_) return true;
      // Open MPI moves a non-blocking collective on only inside MPI_Test, one step per call: sleeping between
      // tests made a 4 MB float all_reduce (Ireduce + Ibcast, 2 ranks) take 85 ms instead of 4 ms. So poll
      // back to back (yielding the core to anyone else) for kBusyPoll, as a blocking MPI call would, and
      // only then rest between tests, for a peer that is simply late.
      if (Clock::now() - started < kBusyPoll) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  void wait_request(Op& op, MPI_Request& request, std::vector<unsigned char>* buffer) {
    if (poll(request, op)) timed_out(op, buffer);
  }

  // ---- naming the ranks that never joined a collective. A rank that has waited in collective #k for a quarter of
  // its timeout tells every other rank so (one int64 on progress_comm_, eager); on a timeout, the ranks that never
  // said so are named. (A rank that arrived within the last three quarters of the timeout is named too.)
  void report_waiting(int64_t seq) {
    progress_out_.push_back(seq);  // MPI reads it until the send completes: a deque keeps it in place
    const int64_t* value = &progress_out_.back();
    auto lock = mpi_lock();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request request = MPI_REQUEST_NULL;
      if (MPI_Isend(value, 1, MPI_INT64_T, r, 1, progress_comm_, &request) == MPI_SUCCESS) {
        MPI_Request_free(&request);
      }
    }
  }
  void drain_progress() {
    auto lock = mpi_lock();
    for (;;) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, 1, progress_comm_, &flag, &status) != MPI_SUCCESS || !flag) return;
      int64_t seq = 0;
      if (MPI_Recv(&seq, 1, MPI_INT64_T, status.MPI_SOURCE, 1, progress_comm_, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
      auto& seen = waiting_in_[static_cast<size_t>(status.MPI_SOURCE)];
      seen = std::max(seen, seq);
    }
  }
  std::string missing_ranks(const Op& op) {
    if (op.kind == Kind::kSend || op.kind == Kind::kRecv || op.kind == Kind::kNewGroup) return "";
    drain_progress();
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && waiting_in_[static_cast<size_t>(r)] < op.seq) missing.push_back(r);
    }
    if (missing.empty()) return "; every rank reported waiting in it";
    std::ostringstream out;
    out << "; never joined (no word from " << (missing.size() == 1 ? "it" : "them") << " while waiting): "
        << (missing.size() == 1 ? "rank" : "ranks");
    for (size_t i = 0; i < missing.size(); ++i) out << (i ? ", " : " ") << missing[i];
    return out.str();
  }

  void poll_sends() {
    std::vector<PostedSend*> finished;
    for (auto it = sends_.begin(); it != sends_.end();) {
      PostedSend& s = **it;
      int done = 0;
      int rc;
      {
        auto lock = mpi_lock();
        rc = MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
      }
      if (rc != MPI_SUCCESS) {
        s.op.work->finish({ErrorCode::kUnknown, "mpi: send #" + std::to_string(s.op.seq) + ": " + mpi_error(rc)});
        it = sends_.erase(it);
      } else if (done) {
        s.op.work->finish({});
        it = sends_.erase(it);
      } else if (Clock::now() > s.deadline) {
        std::ostringstream message;
        message << "mpi: send #" << s.op.seq << " on rank " << rank_ << " of " << name_ << " to rank " << s.op.root
                << " (tag " << s.op.tag << ") was not received within " << s.op.timeout.count()
                << " ms (MPI cannot cancel it, so this communicator is unusable and the process should exit)";
        {
          std::lock_guard<std::mutex> lock(g_leftover_mutex);
          g_leftovers.push_back(new Leftover{s.op.tensors, std::move(s.buffer), {}});
        }
        g_broken_any.store(true);
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (broken_.empty()) broken_ = message.str();
        }
        s.op.work->finish({ErrorCode::kDeadlineExceeded, message.str()});
        it->release();  // the request stays outstanding: keep its memory
        it = sends_.erase(it);
      } else {
        ++it;
      }
    }
  }

  static size_t total_bytes(const std::vector<Tensor>& tensors) {
    size_t n = 0;
    for (const Tensor& t : tensors) n += t.nbytes();
    return n;
  }
  // The bucket's elements as one array: widened to float32 for bfloat16.
  static std::vector<unsigned char> pack(const std::vector<Tensor>& tensors, bool widen) {
    std::vector<unsigned char> out;
    if (widen) {
      size_t numel = 0;
      for (const Tensor& t : tensors) numel += static_cast<size_t>(t.numel());
      out.resize(numel * sizeof(float));
      auto* p = reinterpret_cast<float*>(out.data());
      for (const Tensor& t : tensors) {
        const auto* q = t.data<BFloat16>();
        for (int64_t i = 0; i < t.numel(); ++i) *p++ = static_cast<float>(q[i]);
      }
    } else {
      out.resize(total_bytes(tensors));
      size_t offset = 0;
      for (const Tensor& t : tensors) {
        std::memcpy(out.data() + offset, t.raw_data(), t.nbytes());
        offset += t.nbytes();
      }
    }
    return out;
  }
  static void unpack(std::vector<Tensor>& tensors, const unsigned char* data, bool narrow) {
    if (narrow) {
      const auto* p = reinterpret_cast<const float*>(data);
      for (Tensor& t : tensors) {
        auto* q = t.data<BFloat16>();
        for (int64_t i = 0; i < t.numel(); ++i) q[i] = BFloat16(*p++);
      }
    } else {
      for (Tensor& t : tensors) {
        std::memcpy(t.raw_data(), data, t.nbytes());
        data += t.nbytes();
      }
    }
  }

  static MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
      case ReduceOp::kMax: return MPI_MAX;
      case ReduceOp::kMin: return MPI_MIN;
      default: return MPI_SUM;
    }
  }

  // kMean: the sum divided by the size, the same bits on every rank (float32) or rounded toward zero (int64).
  void divide(unsigned char* data, size_t numel, bool ints) const {
    if (ints) {
      auto* p = reinterpret_cast<int64_t*>(data);
      for (size_t i = 0; i < numel; ++i) p[i] /= size_;
    } else {
      auto* p = reinterpret_cast<float*>(data);
      const float d = static_cast<float>(size_);
      for (size_t i = 0; i < numel; ++i) p[i] /= d;
    }
  }

  // Compression::kBFloat16 (float32, sum or mean): the bucket rounded into narrow_ (kept between calls), all-reduced
  // as MPI_UINT16_T with bf16_sum_op(), widened back into the tensors (kMean divides after).
  void run_bf16_all_reduce(Op& op) {
    detail::narrow_to_bf16(op.tensors, narrow_);
    if (narrow_.empty()) return;
    wire_bytes_.fetch_add(static_cast<int64_t>(narrow_.size() * sizeof(BFloat16)), std::memory_order_relaxed);
    const MPI_Op sum = bf16_sum_op();
    MPI_Request request = MPI_REQUEST_NULL;
    {
      auto lock = mpi_lock();
      check(MPI_Iallreduce(MPI_IN_PLACE, narrow_.data(), static_cast<int>(narrow_.size()), MPI_UINT16_T, sum, comm_,
                           &request),
            "MPI_Iallreduce");
    }
    if (poll(request, op)) {  // MPI may still write narrow_: it goes with the leftovers
      {
        std::lock_guard<std::mutex> lock(g_leftover_mutex);
        g_leftovers.push_back(new Leftover{{}, {}, std::move(narrow_)});
      }
      timed_out(op, nullptr);
    }
    const float divisor = op.reduce == ReduceOp::kMean ? static_cast<float>(size_) : 1.0f;
    detail::widen_from_bf16(narrow_.data(), op.tensors, divisor);
  }

  void execute(Op& op) {
    MPI_Request request = MPI_REQUEST_NULL;
    const DType dtype = op.tensors.empty() ? DType::kFloat32 : op.tensors[0].dtype();
    const bool bf16 = dtype == DType::kBFloat16, ints = dtype == DType::kInt64;
    const MPI_Datatype type = ints ? MPI_INT64_T : MPI_FLOAT;
    const size_t elem = ints ? 8 : 4;
    switch (op.kind) {
      case Kind::kAllReduce: {
        if (op.compression == Compression::kBFloat16) return run_bf16_all_reduce(op);
        // One tensor of MPI's own type is reduced where it lies; a bucket of several (or bfloat16, widened) in a copy.
        const bool in_place = op.tensors.size() == 1 && !bf16;
        std::vector<unsigned char> buf = in_place ? std::vector<unsigned char>() : pack(op.tensors, bf16);
        unsigned char* data = in_place ? static_cast<unsigned char*>(op.tensors[0].raw_data()) : buf.data();
        const int count = static_cast<int>((in_place ? op.tensors[0].nbytes() : buf.size()) / elem);
        if (count == 0) return;
        wire_bytes_.fetch_add(static_cast<int64_t>(count) * static_cast<int64_t>(elem), std::memory_order_relaxed);
        // One MPI_Iallreduce for every dtype. Open MPI's non-blocking all-reduce algorithms (binomial reduce + bcast,
        // ring, recursive doubling, reduce-scatter + all-gather) leave every rank with the same bits for a commutative
        // op, which the tests check for inexact float sums; measured, it is 2.5-3x faster at 1 MB and above than the
        // MPI_Ireduce + MPI_Ibcast that used to make sure of it.
        {
          auto lock = mpi_lock();
          check(MPI_Iallreduce(MPI_IN_PLACE, data, count, type, mpi_op(op.reduce), comm_, &request), "MPI_Iallreduce");
        }
        wait_request(op, request, &buf);
        if (op.reduce == ReduceOp::kMean) divide(data, static_cast<size_t>(count), ints);
        if (!in_place) unpack(op.tensors, buf.data(), bf16);
        return;
      }
      case Kind::kBroadcast: {  // bytes
        std::vector<unsigned char> buf;
        unsigned char* data = nullptr;
        const size_t n = total_bytes(op.tensors);
        if (n == 0) return;
        if (op.tensors.size() == 1) {
          data = static_cast<unsigned char*>(op.tensors[0].raw_data());
        } else {
          buf = rank_ == op.root ? pack(op.tensors, false) : std::vector<unsigned char>(n);
          data = buf.data();
        }
        {
          auto lock = mpi_lock();
          check(MPI_Ibcast(data, static_cast<int>(n), MPI_BYTE, op.root, comm_, &request), "MPI_Ibcast");
        }
        wait_request(op, request, &buf);
        if (op.tensors.size() > 1 && rank_ != op.root) unpack(op.tensors, buf.data(), false);
        return;
      }
      case Kind::kAllGather: {  // bytes
        const size_t n = op.tensors[0].nbytes();
        if (n == 0) return;
        {
          auto lock = mpi_lock();
          check(MPI_Iallgather(op.tensors[0].raw_data(), static_cast<int>(n), MPI_BYTE, op.tensors[1].raw_data(),
                               static_cast<int>(n), MPI_BYTE, comm_, &request),
                "MPI_Iallgather");
        }
        wait_request(op, request, nullptr);
        return;
      }
      case Kind::kReduceScatter: {
        std::vector<Tensor> in{op.tensors[0]}, out{op.tensors[1]};
        std::vector<unsigned char> buf = pack(in, bf16);
        const size_t out_numel = static_cast<size_t>(op.tensors[1].numel());
        if (out_numel == 0) return;
        std::vector<unsigned char> result(out_numel * elem);
        buf.resize(buf.size() + result.size());  // one allocation kept alive on a timeout: input then result
        unsigned char* res = buf.data() + buf.size() - result.size();
        {
          auto lock = mpi_lock();
          check(MPI_Ireduce_scatter_block(buf.data(), res, static_cast<int>(out_numel), type, mpi_op(op.reduce),
                                          comm_, &request),
                "MPI_Ireduce_scatter_block");
        }
        wait_request(op, request, &buf);
        if (op.reduce == ReduceOp::kMean) divide(res, out_numel, ints);
        unpack(out, res, bf16);
        return;
      }
      case Kind::kBarrier: {
        {
          auto lock = mpi_lock();
          check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
        }
        wait_request(op, request, nullptr);
        return;
      }
      case Kind::kRecv: {
        const size_t n = total_bytes(op.tensors);
        std::vector<unsigned char> buf(n);
        {
          auto lock = mpi_lock();
          check(MPI_Irecv(buf.data(), static_cast<int>(n), MPI_BYTE, op.root, op.tag, comm_, &request), "MPI_Irecv");
        }
        wait_request(op, request, &buf);
        unpack(op.tensors, buf.data(), false);
        return;
      }
      case Kind::kSend: {
        auto posted = std::make_unique<PostedSend>();
        posted->buffer = pack(op.tensors, false);
        posted->deadline = deadline_;
        {
          auto lock = mpi_lock();
          check(MPI_Isend(posted->buffer.data(), static_cast<int>(posted->buffer.size()), MPI_BYTE, op.root, op.tag,
                          comm_, &posted->request),
                "MPI_Isend");
        }
        posted->op = op;
        sends_.push_back(std::move(posted));
        throw PostedMarker{};
      }
      case Kind::kNewGroup: {
        MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
        auto lock = mpi_lock();
        check(MPI_Comm_group(comm_, &world_group), "MPI_Comm_group");
        check(MPI_Group_incl(world_group, static_cast<int>(op.ranks.size()), op.ranks.data(), &group),
              "MPI_Group_incl");
        // The tag: the members' k-th call for these ranks, folded with the ranks so different groups differ.
        uint32_t h = 2166136261u;
        for (int r : op.ranks) h = (h ^ static_cast<uint32_t>(r)) * 16777619u;
        const int tag = static_cast<int>((h ^ static_cast<uint32_t>(op.tag) * 2654435761u) % 30000u);
        const int rc = MPI_Comm_create_group(comm_, group, tag, op.new_comm);
        MPI_Group_free(&group);
        MPI_Group_free(&world_group);
        check(rc, "MPI_Comm_create_group");
        return;
      }
      case Kind::kNone:
        return;  // never queued
    }
  }

 public:
  struct PostedMarker {};  // thrown by execute for a send: its Work finishes when the send completes

 private:
  MPI_Comm comm_;
  MPI_Comm progress_comm_ = MPI_COMM_NULL;  // "I am waiting in collective #k" messages (worker only)
  const MpiOptions options_;
  int rank_ = 0, size_ = 1, tag_ub_ = 32767;
  std::string name_;
  std::map<std::vector<int>, int> new_group_calls_;  // issuing thread only

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;           // guarded by mu_
  bool stop_ = false;              // guarded by mu_
  std::string broken_;             // guarded by mu_ (read without it by the destructor after join)
  int64_t collectives_ = 0, messages_ = 0;  // guarded by mu_
  detail::FlightRecorder recorder_;         // this rank's last collectives (its own lock)
  static constexpr size_t kRecent = 4;      // how many of them a timeout lists

  std::atomic<int64_t> wire_bytes_{0};  // Communicator::all_reduce_wire_bytes (written by the worker)

  // worker only
  std::vector<BFloat16> narrow_;  // a float32 bucket rounded to bfloat16 (Compression::kBFloat16)
  Clock::time_point deadline_;
  std::vector<std::unique_ptr<PostedSend>> sends_;
  std::deque<int64_t> progress_out_;  // the values of the progress messages sent (never freed: small)
  std::vector<int64_t> waiting_in_;   // per rank: the highest collective it reported waiting in
  std::thread worker_;
};

}  // namespace

bool started_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_RANK") != nullptr && std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
}

std::shared_ptr<Communicator> make_mpi_communicator(MpiOptions options) {
  STRATA_CHECK(options.timeout.count() > 0, InvalidArgument,
               "make_mpi_communicator: timeout must be positive, got " << options.timeout.count() << " ms");
  ensure_initialized();
  MPI_Comm comm = MPI_COMM_NULL;
  {
    auto lock = mpi_lock();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    STRATA_CHECK(rc == MPI_SUCCESS, Error, "mpi: MPI_Comm_dup(MPI_COMM_WORLD) failed: " << mpi_error(rc));
  }
  return std::make_shared<MpiCommunicator>(comm, options, "world");
}

}  // namespace strata::comm
