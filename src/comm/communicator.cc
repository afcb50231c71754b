// The abstract Work and Communicator (strata/comm/communicator.h): out-of-line destructors, names, and the
// default bodies of the operations a backend may lack (c10d's "backend X does not support Y").
// Thread-safety: the defaults add no state; Work's defaults are as safe as the backend's is_completed/wait.
#include "strata/comm/communicator.h"

#include <algorithm>
#include <thread>

#include "strata/error.h"

namespace strata::comm {

Work::~Work() = default;
Communicator::~Communicator() = default;

void Work::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(50);
  while (!is_completed()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      STRATA_THROW(Timeout, "Work::wait: the operation did not complete within " << timeout.count()
                                                                                 << " ms (it goes on running)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
  wait();
}

std::exception_ptr Work::exception() const {
  if (!is_completed()) return nullptr;
  try {
    const_cast<Work*>(this)->wait();  // completed: returns at once or rethrows the stored error
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void Communicator::unsupported(const std::string& what) const {
  STRATA_THROW(Unavailable, "backend " << backend() << " does not support " << what);
}

std::shared_ptr<Work> Communicator::all_reduce(std::vector<Tensor> tensors, const AllReduceOptions& options) {
  if (options.timeout != kDefaultTimeout) unsupported("all_reduce with a per-call timeout");
  return all_reduce(std::move(tensors), options.op);
}

std::shared_ptr<Work> Communicator::broadcast(std::vector<Tensor> tensors, const BroadcastOptions& options) {
  if (options.timeout != kDefaultTimeout) unsupported("broadcast with a per-call timeout");
  return broadcast(std::move(tensors), options.root);
}

std::shared_ptr<Work> Communicator::all_gather(Tensor input, Tensor output, const AllGatherOptions& options) {
  if (options.timeout != kDefaultTimeout) unsupported("all_gather with a per-call timeout");
  return all_gather(std::move(input), std::move(output));
}

void Communicator::barrier(const BarrierOptions& options) {
  if (options.timeout != kDefaultTimeout) unsupported("barrier with a per-call timeout");
  barrier();
}

std::shared_ptr<Work> Communicator::reduce_scatter(Tensor, Tensor, const ReduceScatterOptions&) {
  unsupported("reduce_scatter");
}

std::shared_ptr<Work> Communicator::send(std::vector<Tensor>, int, const SendOptions&) { unsupported("send"); }

std::shared_ptr<Work> Communicator::recv(std::vector<Tensor>, int, const RecvOptions&) { unsupported("recv"); }

std::shared_ptr<Communicator> Communicator::new_group(std::vector<int>) { unsupported("new_group"); }

void Communicator::set_step(int64_t) {}

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

std::string to_string(Compression compression) { return compression == Compression::kBFloat16 ? "bf16" : "none"; }

}  // namespace strata::comm
