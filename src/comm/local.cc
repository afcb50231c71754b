// The "local" backend (strata/comm/local.h): ranks are threads of one process and collectives work directly
// on each other's tensors in shared memory. This file issues operations, runs each rank's worker, checks the
// ranks' arguments against each other and words the timeouts; the algorithms are in local_collectives.cc,
// send/recv in local_p2p.cc, new_group in local_group.cc (shared declarations: local_internal.h).
//
// Issuing queues the operation on the rank's worker thread and returns a LocalWork. The worker runs the
// queue in order. For collective #s a rank publishes a Descriptor (its tensors as a flat Bucket, dtype, shapes,
// op, root, any local problem) in its slot s % 2, then every step of the collective ends at the group barrier:
//   arrive  -> every rank checks every descriptor (the same verdict everywhere: run, or InvalidArgument)
//   work    -> each rank writes only its own tensors, reading the others' (see local_collectives.cc)
//   depart  -> no rank returns (letting its caller reuse the tensors) while another still reads them.
// Two slots suffice: a rank writes slot s % 2 again only for #s+2, after every rank arrived at #s+1, that is
// after every rank is done reading #s. Sends and recvs are numbered apart from collectives (they need not
// line up across ranks) and never touch the slots or the barrier.
// Thread-safety: one thread per rank issues operations (guarded by mu_); the worker owns everything else.
#include "strata/comm/local.h"

#include <sstream>

#include "comm/local_internal.h"

namespace strata::comm {
namespace local_detail {

std::string op_name(const Op& op) { return std::string(kind_name(op.kind)) + " #" + std::to_string(op.seq); }

std::string p2p_status(const RankStatus& s, int64_t seq) {
  const auto kind = static_cast<Kind>(s.p2p_kind.load(std::memory_order_relaxed));
  return std::string(kind_name(kind)) + " #" + std::to_string(seq) + (kind == Kind::kSend ? " to" : " from") +
         " rank " + std::to_string(s.p2p_peer.load(std::memory_order_relaxed)) + " (tag " +
         std::to_string(s.p2p_tag.load(std::memory_order_relaxed)) + ")";
}

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

std::shared_ptr<Work> LocalCommunicator::issue(Kind kind, std::vector<Tensor> tensors, ReduceOp reduce, int root,
                                               std::chrono::milliseconds timeout, int tag) {
  auto work = std::make_shared<LocalWork>();
  Op op{kind, 0, reduce, root, tag, timeout, std::move(tensors), work};
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RankStatus& status = group_->status[rank_];
    if (is_p2p(kind)) {  // numbered apart: the ranks' collectives must line up, their sends and recvs need not
      op.seq = ++p2p_issued_;
      if (kind == Kind::kSend) status.sends_issued.fetch_add(1, std::memory_order_release);
    } else {
      op.seq = ++issued_;
      status.issued_kind.store(static_cast<int>(kind), std::memory_order_relaxed);
      status.issued.store(op.seq, std::memory_order_release);
    }
    work->set_name(kind_name(kind), op.seq, rank_, group_->size);
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
    if (!d.local_error.empty())
      STRATA_THROW(InvalidArgument, op_name(op) << " (" << group_->name << "): " << d.local_error);
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
    const bool p2p = is_p2p(op.kind);
    if (p2p) {
      status.p2p_kind.store(static_cast<int>(op.kind), std::memory_order_relaxed);
      status.p2p_peer.store(op.root, std::memory_order_relaxed);
      status.p2p_tag.store(op.tag, std::memory_order_relaxed);
      status.p2p_running.store(op.seq, std::memory_order_release);
    } else {
      status.running_kind.store(static_cast<int>(op.kind), std::memory_order_relaxed);
      status.running.store(op.seq, std::memory_order_release);
    }
    std::exception_ptr error;
    try {
      execute(op);
    } catch (...) {
      error = std::current_exception();
    }
    (p2p ? status.p2p_running : status.running).store(0, std::memory_order_release);
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
  const std::string where = op_name(op) + " (" + group_->name + ")";
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
      STRATA_THROW(InvalidArgument, "collective #" << op.seq << " (" << group_->name
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
      if (const int64_t p2p = s.p2p_running.load(std::memory_order_acquire); p2p != 0) {
        out << " and is in " << p2p_status(s, p2p);
      }
    } else if (running == op.seq) {
      out << " is in " << op_name(op) << " but had not reached this step";
    } else if (running != 0) {
      out << " is still in " << kind_name(static_cast<Kind>(s.running_kind.load(std::memory_order_relaxed))) << " #"
          << running;
    } else if (const int64_t p2p = s.p2p_running.load(std::memory_order_acquire); p2p != 0) {
      out << " is in " << p2p_status(s, p2p);
    } else {
      out << " has issued it but not started it";
    }
  }
  return out.str();
}

void LocalCommunicator::abort(const std::string& reason) {
  group_->barrier.abort(reason);
  for (Inbox& box : group_->inboxes) {  // wake the ranks blocked in recv
    std::lock_guard<std::mutex> lock(box.mu);
    box.cv.notify_all();
  }
}

std::string LocalCommunicator::timeout_message(const Op& op, const std::string& what, uint64_t step) const {
  std::ostringstream out;
  out << group_->name << ": " << op_name(op) << " on rank " << rank_ << " timed out after " << op.timeout.count()
      << " ms at step '" << what << "': " << missing_ranks(op, step);
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
      STRATA_THROW(Timeout, group_->name << ": " << op_name(op) << " on rank " << rank_ << " gave up at step '" << what
                                         << "' (" << missing_ranks(op, step)
                                         << ") because the group was aborted: " << group_->barrier.abort_reason());
  }
}

}  // namespace local_detail

using local_detail::LocalCommunicator;
using local_detail::LocalGroup;

std::vector<std::shared_ptr<Communicator>> make_local_group(int size, LocalGroupOptions options) {
  STRATA_CHECK(size >= 1, InvalidArgument, "make_local_group: size must be at least 1, got " << size);
  STRATA_CHECK(options.timeout.count() > 0, InvalidArgument,
               "make_local_group: timeout must be positive, got " << options.timeout.count() << " ms");
  auto group = std::make_shared<LocalGroup>(size, options, "local group of " + std::to_string(size));
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
