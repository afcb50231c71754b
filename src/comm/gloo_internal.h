// Internals of the gloo backend (strata/comm/gloo.h), shared by gloo.cc (the group: bootstrap, queue, worker,
// failures) and gloo_collectives.cc (what one collective does to the buffers).
// Thread-safety: GlooWork may be waited on from any thread; GlooCollectives belongs to one worker thread.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/completion.h"
#include "strata/comm/communicator.h"
#include "strata/error.h"

namespace strata::comm::gloo_detail {

using Clock = std::chrono::steady_clock;

using Kind = detail::OpKind;
using detail::kind_name;

// How many `pause`s a waiter spins before it sleeps (a few microseconds). Longer spins cost more than they save:
// measured with comm_bench on 2 loaded cores, 2000 spins (~100 us) added 75-300 us to every small collective,
// because the spinning threads kept Gloo's own I/O threads off the CPU.
inline constexpr int kSpins = 64;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

using detail::Failure;

class GlooWork;

// Who runs a communicator's queued operations: its worker, or a thread waiting on one of them (see GlooWork::wait).
// `mu` serialises running them, so they run one at a time in issue order whoever runs them; `owner` is the
// communicator, null once it is gone.
struct Executor {
  virtual ~Executor() = default;
  // REQUIRES: state->mu held. Runs queued operations in order until `target` is complete or none is left.
  virtual void run_queued_until(const GlooWork* target) = 0;
};
struct ExecState {
  std::mutex mu;
  Executor* owner = nullptr;  // guarded by mu
};

class GlooWork final : public detail::BackendWork {
 public:
  GlooWork(Kind kind, int64_t seq, int rank, std::shared_ptr<ExecState> exec)
      : BackendWork("gloo", kind, seq, rank), exec_(std::move(exec)) {}
  using BackendWork::wait;

  // A caller that waits runs the queue itself up to this operation instead of handing it to the worker thread and
  // sleeping: measured, a Gloo all-reduce run on another thread than the waiting one took 2-4x as long on 2 cores.
  void wait() override {
    for (int i = 0; i < kSpins && !is_completed(); ++i) cpu_relax();
    if (!is_completed() && exec_) {
      std::lock_guard<std::mutex> lock(exec_->mu);
      if (exec_->owner && !is_completed()) exec_->owner->run_queued_until(this);
    }
    BackendWork::wait();
  }

 private:
  const std::shared_ptr<ExecState> exec_;
};

// Ranks called different collectives at the same point of their sequence (a mismatched program or job).
class SignatureMismatch : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

struct Op {
  Kind kind = Kind::kBarrier;
  int64_t seq = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;                          // broadcast's root; send's destination; recv's source
  int tag = 0;                           // send/recv
  std::chrono::milliseconds timeout{0};  // this collective's bound (the group's unless the call set one)
  std::vector<Tensor> tensors;           // all_gather: {input, output}
  std::shared_ptr<GlooWork> work;
  Clock::time_point issued;              // when the caller issued it (the worker holds a lone one back a while)
  Compression compression = Compression::kNone;  // all_reduce
};

// Runs collectives on one Gloo context; owns the scratch buffers they need.
class GlooCollectives {
 public:
  explicit GlooCollectives(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}
  // A problem with this rank's own arguments, or "". (Gloo cannot compare arguments across ranks without a
  // round trip; mismatched shapes across ranks end in a Gloo error or the timeout.)
  std::string check_arguments(const Op& op) const;
  // Runs `op` (its arguments checked; not send); Gloo's exceptions pass through. A collective first exchanges its
  // signature (kind, dtype, bytes, root, reduction) with every rank, one small all-gather: ranks that called
  // different collectives get SignatureMismatch naming both sides ("rank 1 called all_gather (4 KiB) where rank 0
  // called all_reduce (1.4 MiB)") before any of their data moves, where Gloo would abort the process or wait out the
  // timeout.
  void execute(Op& op);

  // A send posted to Gloo: the buffer (and the bucket's copy it may point into) must live until waitSend returns.
  struct PostedSend {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;  // null: nothing to send (0 bytes)
    std::vector<unsigned char> copy;
  };
  // Posts `op` (a send) without waiting: Gloo sends once the peer has posted the matching recv.
  PostedSend post_send(Op& op);
  // Bytes of all-reduce payload handed to Gloo so far (Communicator::all_reduce_wire_bytes); any thread.
  int64_t wire_bytes() const { return wire_bytes_.load(std::memory_order_relaxed); }

 private:
  int rank() const { return context_->rank; }
  int size() const { return context_->size; }
  void* gather_bucket(std::vector<Tensor>& tensors, size_t nbytes, bool copy_in);
  void scatter_bucket(std::vector<Tensor>& tensors);
  void run_all_reduce(Op& op, size_t numel);
  void run_bf16_all_reduce(Op& op);
  void check_signature(const Op& op, size_t nbytes);

  const std::shared_ptr<gloo::Context> context_;
  std::vector<unsigned char> flat_;  // a bucket of several tensors
  std::vector<float> wide_;          // a bfloat16 bucket widened to float32
  std::vector<BFloat16> narrow_;     // a float32 bucket rounded to bfloat16 (Compression::kBFloat16)
  std::atomic<int64_t> wire_bytes_{0};
};

}  // namespace strata::comm::gloo_detail
