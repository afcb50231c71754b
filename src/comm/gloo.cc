// The "gloo" backend (strata/comm/gloo.h): collectives over Gloo's TCP transport.
//
// make_gloo_communicator claims the rank's slot under the group's store prefix ("joined/rank-<r>", a counter, so a
// reused prefix is caught), creates a TCP device bound to the given hostname (127.0.0.1 by default) and connects
// the full mesh through GlooStore (comm/gloo_store.h) under that prefix. Collectives are queued and run in issue
// order, one at a time (ExecState::mu), by the communicator's worker thread or by a thread that waits on one of
// them (it runs the queue up to its operation itself: a Gloo call made on another thread than the waiting one was
// measured 2-4x slower on 2 cores), with Gloo's options-style functions only (gloo::allreduce, broadcast,
// allgather, barrier; mixing them with the older algorithm classes stalled 10-20x on Debian 12's Gloo), each with its
// timeout (per call, or the group's) and a tag of its sequence number. A bucket of several tensors is copied into
// one flat buffer (Gloo's several-input all-reduce reduces copies of one buffer, not a list of different ones); one
// tensor is reduced in place. All-reduce uses Gloo's ring: every element is reduced along one path and then copied
// to every rank, so all ranks end with the same bits; kMean divides that sum by the size on every rank (same bits
// again). float32 and int64 are reduced as they are, bfloat16 in float32 (rounded once); broadcast and all_gather
// move bytes (gloo_collectives.cc: what one collective does to the buffers). reduce_scatter is an all-reduce of a
// copy (Gloo has no options-style reduce-scatter); new_group connects a new Gloo group under a sub-prefix. send is
// posted by the worker and waited for by a sender thread (so sends never hold up the queue); recv runs on the
// worker. Collectives and messages are numbered apart: only collectives must line up across every rank.
//
// On a Gloo IoException (a timeout, or a peer that closed its connections) Gloo has closed every pair of the
// context: the collective fails with Timeout and the communicator is broken — every later collective fails at once
// with Timeout quoting that first failure. A flight recorder (comm/flight_recorder.h) keeps this rank's last
// collectives (seq, kind, bytes, training step, state), which the message lists. To name the ranks that never
// entered a failed collective and say where each stood, a reporter thread publishes "progress/rank-<r>" = this
// rank's newest collective once it has stood still for a quarter of its timeout: waited in that long, or issued
// that long ago with nothing after it (a rank stuck outside the collectives, in an endless loop, stands still there).
// abort(reason) records the reason in the store (so that peers quote it), fails the queued collectives and closes
// the connections, which makes the peers' collectives fail at once; a collective this rank is running ends by its
// own timeout at the latest (Gloo cannot interrupt a local wait).
// Thread-safety: one thread per rank issues collectives (mu_ guards the queue); the worker owns the Gloo context
// and the scratch buffers; the sender owns the posted sends (send_mu_); the reporter reads only the recorder (its
// own lock) and the store.
#include "strata/comm/gloo.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "comm/flight_recorder.h"
#include "comm/gloo_internal.h"
#include "comm/gloo_store.h"
#include "strata/error.h"
#include "strata/trace.h"

namespace strata::comm {
namespace {

using gloo_detail::Clock;
using gloo_detail::cpu_relax;
using gloo_detail::Failure;
using gloo_detail::GlooCollectives;
using gloo_detail::GlooWork;
using gloo_detail::Kind;
using gloo_detail::kind_name;
using gloo_detail::kSpins;
using gloo_detail::Op;
using Recorder = detail::FlightRecorder;

// Gloo writes to its sockets with write(2), so a peer that died mid-collective would kill this process with
// SIGPIPE instead of failing the collective with an error naming it (seen in the multi-worker kill test). Like
// Python (and so PyTorch), ignore SIGPIPE, unless the program installed a handler of its own.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  });
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank" : "ranks");
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : " ") << ranks[i];
  return out.str();
}

class GlooCommunicator final : public Communicator, public gloo_detail::Executor {
 public:
  GlooCommunicator(std::shared_ptr<Store> root_store, std::shared_ptr<Store> group_store,
                   std::shared_ptr<gloo::rendezvous::Context> context, GlooOptions options)
      : root_store_(std::move(root_store)),
        store_(std::move(group_store)),
        context_(std::move(context)),
        options_(std::move(options)),
        name_("gloo group of " + std::to_string(context_->size) + " (prefix '" + options_.prefix + "')"),
        collectives_(context_) {
    exec_->owner = this;
    worker_ = std::thread([this] { worker_loop(); });
    if (context_->size > 1) reporter_ = std::thread([this] { reporter_loop(); });
    if (context_->size > 1) sender_ = std::thread([this] { sender_loop(); });
  }

  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    worker_.join();  // runs what is queued first
    {
      std::lock_guard<std::mutex> lock(exec_->mu);  // a waiter running the queue finishes first
      exec_->owner = nullptr;
    }
    {
      std::lock_guard<std::mutex> lock(send_mu_);
      send_stop_ = true;
    }
    send_cv_.notify_one();
    if (sender_.joinable()) sender_.join();  // waits for the posted sends (each within its timeout)
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
  using Communicator::recv;
  using Communicator::send;

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string backend() const override { return "gloo"; }
  void set_step(int64_t step) override { recorder_.set_step(step); }

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
    return issue(Kind::kAllReduce, std::move(tensors), options.op, 0, options.timeout, 0, options.compression);
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
  // Point to point (Gloo's unbound buffers on their own slots). A send is posted to Gloo on the worker and waited
  // for by the sender thread, so it never holds up the queue; a recv waits on the worker, in issue order.
  std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst, const SendOptions& options) override {
    return issue(Kind::kSend, std::move(tensors), ReduceOp::kSum, dst, options.timeout, options.tag);
  }
  std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src, const RecvOptions& options) override {
    return issue(Kind::kRecv, std::move(tensors), ReduceOp::kSum, src, options.timeout, options.tag);
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

  int64_t all_reduce_wire_bytes() const override { return collectives_.wire_bytes(); }

  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.empty()) return;
      broken_ = "it was aborted on rank " + std::to_string(rank()) + ": " + reason;
      for (Op& op : queue_) fail_unrun(op);
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
  static bool is_p2p(Kind kind) { return kind == Kind::kSend || kind == Kind::kRecv; }
  // "all_reduce #3"; "send #2 to rank 1 (tag 5)". Collectives and point-to-point messages are numbered apart:
  // collectives must match across all ranks (the number is their Gloo tag), messages only between two.
  static std::string op_name(const Op& op) {
    std::string name = std::string(kind_name(op.kind)) + " #" + std::to_string(op.seq);
    if (op.kind == Kind::kSend) name += " to rank " + std::to_string(op.root) + " (tag " + std::to_string(op.tag) + ")";
    if (op.kind == Kind::kRecv) name += " from rank " + std::to_string(op.root) + " (tag " + std::to_string(op.tag) + ")";
    return name;
  }

  // REQUIRES: mu_ held. Fails a queued operation of a broken communicator.
  void fail_unrun(Op& op) {
    if (!is_p2p(op.kind)) recorder_.ended(op.seq, false);
    op.work->finish(not_run(op));
  }

  // REQUIRES: mu_ held (reads broken_).
  Failure not_run(const Op& op) const {
    return {ErrorCode::kDeadlineExceeded,
            strata::detail::with_location(name_ + ": " + op_name(op) + " on rank " + std::to_string(rank()) +
                                              " was not run: the communicator is unusable since " + broken_ +
                                              "; rebuild the group under a fresh store prefix",
                                          __FILE__, __LINE__)};
  }

  std::shared_ptr<Work> issue(Kind kind, std::vector<Tensor> tensors, ReduceOp reduce, int root,
                              std::chrono::milliseconds timeout, int tag = 0,
                              Compression compression = Compression::kNone) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t seq = is_p2p(kind) ? ++(kind == Kind::kSend ? sends_issued_ : recvs_issued_) : ++issued_;
    auto work = std::make_shared<GlooWork>(kind, seq, rank(), exec_);
    Op op{kind,        seq, reduce, root, tag, timeout == kDefaultTimeout ? options_.timeout : timeout,
          std::move(tensors), work, Clock::now(), compression};
    if (!broken_.empty()) {
      op.work->finish(not_run(op));
      return work;
    }
    if (!is_p2p(kind)) recorder_.issued(seq, kind, op.tensors, op.timeout, op.issued);
    queue_.push_back(std::move(op));
    pending_.fetch_add(1, std::memory_order_release);
    // Notified under mu_: cheap, since the worker only sleeps on cv_ after checking the queue under mu_. A lone
    // operation does not wake a polling or holding worker (see worker_loop); a second one does.
    if (worker_state_ == WorkerState::kDeepSleep || queue_.size() > 1) cv_.notify_one();
    return work;
  }

  // The worker runs what nobody waits for, but holds a lone operation back for kHoldBack after it was issued: an
  // operation issued and then waited for (a barrier, a loss, the last gradient bucket) is run by the waiting thread
  // itself (GlooWork::wait), with no hand-over between threads, which measured 130-250 us per small all-reduce on
  // 2 cores (the worker woken to start it, the waiter woken when it ends). A second operation issued meanwhile
  // (buckets during backward) wakes the worker at once, so overlapped work starts as soon as there is a queue. So
  // that issuing a lone operation needs no wake-up either, an idle worker polls every kPoll, and only after
  // kDeepSleepAfter without work sleeps until notified: a lone operation nobody waits for starts within kPoll +
  // kHoldBack. (Polling every 2 ms instead of 20 left 30-130 us of the hand-over cost per small all-reduce: the
  // wake-ups alone take CPU from the collective's threads on 2 cores.)
  void worker_loop() {
    trace::name_thread(name_ + " worker");
    Clock::time_point idle_since = Clock::now();
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        while (!stop_) {
          const Clock::time_point now = Clock::now();
          if (queue_.empty()) {
            if (now - idle_since >= kDeepSleepAfter) {
              worker_state_ = WorkerState::kDeepSleep;
              cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
              idle_since = Clock::now();
            } else {
              worker_state_ = WorkerState::kPolling;
              cv_.wait_for(lock, kPoll, [&] { return stop_ || queue_.size() > 1; });
            }
            continue;
          }
          if (queue_.size() == 1 && now < queue_.front().issued + kHoldBack) {
            worker_state_ = WorkerState::kHoldingBack;
            const Clock::time_point until = queue_.front().issued + kHoldBack;
            cv_.wait_until(lock, until, [&] { return stop_ || queue_.size() != 1; });
            continue;
          }
          break;
        }
        worker_state_ = WorkerState::kRunning;
        if (stop_ && queue_.empty()) return;
      }
      std::lock_guard<std::mutex> exec(exec_->mu);
      run_queued_until(nullptr);
      idle_since = Clock::now();
    }
  }

  void run_queued_until(const GlooWork* target) override {
    while (target == nullptr || !target->is_completed()) {
      Op op;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
        pending_.fetch_sub(1, std::memory_order_relaxed);
        if (!broken_.empty()) {
          fail_unrun(op);
          continue;
        }
      }
      run_one(op);
    }
  }

  // REQUIRES: exec_->mu held.
  void run_one(Op& op) {
    // The recorder (and so the reporter) keeps collectives only: their numbers match across ranks.
    if (!is_p2p(op.kind)) recorder_.started(op.seq);
    GlooCollectives::PostedSend posted;
    Failure failure = run(op, &posted);
    if (!is_p2p(op.kind)) recorder_.ended(op.seq, !failure.failed());
    if (posted.buffer && !failure.failed()) {
      {
        std::lock_guard<std::mutex> lock(send_mu_);
        sends_.push_back({std::move(op), std::move(posted)});
      }
      send_cv_.notify_one();
      return;
    }
    op.tensors.clear();
    op.work->finish(std::move(failure));
  }

  // How long this rank's newest collective (of `timeout`) stands still before the reporter publishes it: a quarter
  // of the timeout, within [5 ms, 1 s].
  static std::chrono::milliseconds report_after(std::chrono::milliseconds timeout) {
    return std::clamp(timeout / 4, std::chrono::milliseconds(5), std::chrono::milliseconds(1000));
  }
  static constexpr std::chrono::milliseconds kReporterPeriod{20};

  // Publishes "progress/rank-<r>" = this rank's newest collective (flight_recorder.h's encode: seq, kind, state,
  // step, bytes) once it has stood still for a report interval, so that a rank whose collective times out can say
  // where each peer stands. A rank that keeps moving publishes nothing (no store traffic on the fast path); one
  // that computes between steps for longer than the interval, one entry per step.
  void reporter_loop() {
    int64_t posted_seq = 0;
    Recorder::State posted_state = Recorder::State::kIssued;
    std::unique_lock<std::mutex> lock(reporter_mu_);
    while (!reporter_cv_.wait_for(lock, kReporterPeriod, [&] { return reporter_stop_; })) {
      const std::optional<Recorder::Entry> newest = recorder_.newest();
      if (!newest || (newest->seq == posted_seq && newest->state == posted_state)) continue;
      if (Clock::now() - newest->changed() < report_after(newest->timeout)) continue;
      try {
        store_->set("progress/rank-" + std::to_string(rank()), detail::encode(*newest));
      } catch (const Error&) {
        // The store is gone too; the timeout message will say the rank was not seen.
      }
      posted_seq = newest->seq;
      posted_state = newest->state;
    }
  }

  // After `op` failed: the ranks that had not reported being in it, each with the newest collective it reported.
  std::string absent_ranks(const Op& op) {
    // A peer that entered the collective reports within about one interval; wait that long before judging.
    std::this_thread::sleep_for(std::min(report_after(op.timeout), std::chrono::milliseconds(100)) + kReporterPeriod);
    std::vector<int> absent;
    std::ostringstream where;
    for (int q = 0; q < size(); ++q) {
      if (q == rank()) continue;
      const std::string key = "progress/rank-" + std::to_string(q);
      std::optional<Recorder::Entry> seen;
      try {
        if (store_->check({key})) seen = detail::decode(store_->get(key));
      } catch (const Error&) {
      }
      if (seen && (seen->seq > op.seq || (seen->seq == op.seq && seen->state != Recorder::State::kIssued))) continue;
      absent.push_back(q);
      where << "; rank " << q
            << (seen ? " was last seen with " + detail::describe(*seen)
                     : std::string(" had not reported where it stands"));
    }
    if (absent.empty()) return "every rank had entered it";
    return rank_list(absent) + " had not entered it" + where.str();
  }

  // Waits for the posted sends in the order they were posted; finishes their Work.
  void sender_loop() {
    while (true) {
      PendingSend pending;
      {
        std::unique_lock<std::mutex> lock(send_mu_);
        send_cv_.wait(lock, [&] { return send_stop_ || !sends_.empty(); });
        if (sends_.empty()) return;
        pending = std::move(sends_.front());
        sends_.pop_front();
      }
      Failure failure;
      const auto start = Clock::now();
      try {
        if (!pending.posted.buffer->waitSend(pending.op.timeout)) throw gloo::IoException("the send was aborted");
      } catch (const gloo::IoException& e) {
        failure = broken(pending.op, start, "Timeout", e.what());
      } catch (const std::exception& e) {
        failure = broken(pending.op, start, "Error", e.what());
      }
      if (failure.failed()) {
        // Gloo may still hold the buffer: keep it (and the tensors it points into) until the context is gone.
        std::lock_guard<std::mutex> lock(send_mu_);
        graveyard_.push_back(std::move(pending));
        graveyard_.back().op.work->finish(std::move(failure));
        continue;
      }
      pending.op.tensors.clear();
      pending.op.work->finish(std::move(failure));
    }
  }

  // Runs one collective on the worker (a send is only posted, into *posted); a Gloo failure breaks the
  // communicator.
  Failure run(Op& op, GlooCollectives::PostedSend* posted) {
    const auto start = Clock::now();
    try {
      const std::string problem = collectives_.check_arguments(op);
      if (!problem.empty()) {
        return {ErrorCode::kInvalidArgument,
                strata::detail::with_location(name_ + ": " + op_name(op) + " on rank " + std::to_string(rank()) + ": " +
                                                  problem,
                                              __FILE__, __LINE__)};
      }
      if (op.kind == Kind::kSend) {
        *posted = collectives_.post_send(op);
      } else {
        collectives_.execute(op);
      }
      return {};
    } catch (const gloo_detail::SignatureMismatch& e) {
      // The ranks are out of step: every later collective would mismatch too.
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (broken_.empty()) broken_ = op_name(op) + ": " + e.what();
      }
      if (!is_p2p(op.kind)) recorder_.ended(op.seq, false);
      return {ErrorCode::kInvalidArgument,
              strata::detail::with_location(name_ + ": " + op_name(op) + " on rank " + std::to_string(rank()) + ": " +
                                                e.what(),
                                            __FILE__, __LINE__)};
    } catch (const gloo::IoException& e) {
      return broken(op, start, "Timeout", e.what());
    } catch (const std::exception& e) {
      return broken(op, start, "Error", e.what());
    }
  }

  Failure broken(const Op& op, Clock::time_point start, const char* what, const std::string& gloo_message) {
    if (!is_p2p(op.kind)) recorder_.ended(op.seq, false);
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
    } else if (is_p2p(op.kind)) {
      out << "rank " << op.root << " had not posted the matching " << (op.kind == Kind::kSend ? "recv" : "send")
          << "; ";
    } else if (size() > 1) {
      out << absent_ranks(op) << "; ";
    }
    const std::string recent = detail::describe_recent(recorder_, rank(), kRecent);
    if (!recent.empty()) out << recent << "; ";
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
    return {std::string(what) == "Timeout" ? ErrorCode::kDeadlineExceeded : ErrorCode::kUnknown, message};
  }

  struct PendingSend {
    Op op;
    GlooCollectives::PostedSend posted;
  };
  // Failed sends whose buffers Gloo may still point at: destroyed after the context (declared before it).
  std::vector<PendingSend> graveyard_;  // guarded by send_mu_
  const std::shared_ptr<Store> root_store_;  // the store the group was made from (sub-groups use it too)
  const std::shared_ptr<Store> store_;       // the group's prefix store
  std::map<std::vector<int>, int> new_group_calls_;  // the issuing thread's: calls per set of ranks
  std::shared_ptr<gloo::rendezvous::Context> context_;
  const GlooOptions options_;
  const std::string name_;
  GlooCollectives collectives_;  // the worker's

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;             // guarded by mu_
  std::atomic<int64_t> pending_{0};  // queue_.size(), readable without mu_
  enum class WorkerState { kRunning, kPolling, kHoldingBack, kDeepSleep };
  WorkerState worker_state_ = WorkerState::kRunning;  // guarded by mu_
  static constexpr std::chrono::microseconds kHoldBack{1000};
  static constexpr std::chrono::milliseconds kPoll{20};
  static constexpr std::chrono::milliseconds kDeepSleepAfter{200};
  bool stop_ = false;                // guarded by mu_
  int64_t issued_ = 0;               // guarded by mu_: collectives issued (their numbers and Gloo tags)
  int64_t sends_issued_ = 0;         // guarded by mu_
  int64_t recvs_issued_ = 0;         // guarded by mu_
  std::string broken_;               // guarded by mu_: why the communicator is unusable, or ""
  // This rank's last collectives, for failure messages and the reporter thread.
  Recorder recorder_;
  static constexpr size_t kRecent = 4;  // how many of them a failure lists
  std::mutex reporter_mu_;
  std::condition_variable reporter_cv_;
  bool reporter_stop_ = false;  // guarded by reporter_mu_
  // Serialises running the queue (the worker, or a waiter that runs it itself); shared with every GlooWork.
  const std::shared_ptr<gloo_detail::ExecState> exec_ = std::make_shared<gloo_detail::ExecState>();
  std::thread reporter_;
  std::mutex send_mu_;
  std::condition_variable send_cv_;
  std::deque<PendingSend> sends_;  // guarded by send_mu_: posted, not yet complete
  bool send_stop_ = false;         // guarded by send_mu_
  std::thread sender_;
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
  ignore_sigpipe();

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
  const std::chrono::milliseconds connect_timeout =
      options.connect_timeout.count() > 0 ? options.connect_timeout : options.timeout;
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(connect_timeout);  // collectives pass their own timeout to every operation
  detail::GlooStore rendezvous(group_store, connect_timeout);
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
    STRATA_THROW(Timeout, name << ": rank " << rank << " could not connect within " << connect_timeout.count()
                               << " ms: "
                               << (missing.empty() ? std::string("every rank joined but the mesh did not form")
                                                   : rank_list(missing) + " never joined")
                               << " (" << e.what() << ")");
  } catch (const std::exception& e) {
    const auto missing = missing_ranks();
    STRATA_THROW(Timeout, name << ": rank " << rank << " could not connect within " << connect_timeout.count()
                               << " ms" << (missing.empty() ? std::string() : ": " + rank_list(missing) + " never joined")
                               << " (gloo: " << e.what() << ")");
  }
  return std::make_shared<GlooCommunicator>(std::move(store), std::move(group_store), std::move(context),
                                            std::move(options));
}

}  // namespace strata::comm
