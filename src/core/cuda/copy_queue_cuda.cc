// CUDA's CopyQueue (core/copy_queue.h): copies from pinned blocks (pinned_alloc's cache) on one copy stream per GPU,
// created on first use and kept for the process, so a batch's host-to-device copy overlaps the kernels of the step
// before it on the device's compute stream (core/cuda/cuda_context.h). A ticket is an event recorded on the copy
// stream; the compute stream waits for it with cudaStreamWaitEvent, the host only in wait().
// Thread-safety: a queue is used by one thread at a time; the copy streams are made under a mutex.
#include <cuda_runtime_api.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/copy_queue.h"
#include "core/cuda/cuda_context.h"
#include "core/device_memory.h"
#include "strata/error.h"

namespace strata::detail {

namespace {

// The copy stream of GPU `device` (non-blocking, like the compute stream). Makes `device` current.
cudaStream_t copy_stream(int device) {
  static std::mutex mu;
  static std::unordered_map<int, cudaStream_t>* streams = new std::unordered_map<int, cudaStream_t>;  // never freed
  cuda::set_device(device);
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams->find(device);
  if (it != streams->end()) return it->second;
  cudaStream_t s = nullptr;
  cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags (copy stream)");
  streams->emplace(device, s);
  return s;
}

class CudaCopyQueue final : public CopyQueue {
 public:
  explicit CudaCopyQueue(Device device)
      : device_(device), compute_(cuda::stream(device.index)), copies_(copy_stream(device.index)) {
    cuda::check(cudaEventCreateWithFlags(&compute_point_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  ~CudaCopyQueue() override {
    for (auto& [ticket, event] : events_) cudaEventDestroy(event);
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
    cudaEventDestroy(compute_point_);
    cudaGetLastError();
  }

  Device device() const override { return device_; }
  Tensor device_tensor(const Shape& shape, DType dtype) override { return Tensor::empty(shape, dtype, device_); }
  void* alloc_host(size_t nbytes) override { return pinned_alloc(nbytes); }
  void free_host(void* block) noexcept override { pinned_free(block); }

  void after_compute() override {
    cuda::set_device(device_.index);
    cuda::check(cudaEventRecord(compute_point_, compute_), "cudaEventRecord (compute stream)");
    cuda::check(cudaStreamWaitEvent(copies_, compute_point_, 0), "cudaStreamWaitEvent (copy stream)");
  }

  void queue_copy(void* dst, const void* src, size_t nbytes) override {
    if (nbytes == 0) return;
    cuda::check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, copies_), "cudaMemcpyAsync (copy stream)");
  }

  Ticket record() override {
    cudaEvent_t e = nullptr;
    if (!spare_.empty()) {
      e = spare_.back();
      spare_.pop_back();
    } else {
      cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    const cudaError_t status = cudaEventRecord(e, copies_);
    if (status != cudaSuccess) {
      spare_.push_back(e);
      cuda::check(status, "cudaEventRecord (copy stream)");
    }
    const Ticket t = next_++;
    events_.emplace(t, e);
    return t;
  }

  bool done(Ticket ticket) override {
    const cudaError_t status = cudaEventQuery(event(ticket));
    if (status == cudaErrorNotReady) return false;
    cudaGetLastError();  // a failed copy counts as run; wait() reports it
    return true;
  }

  void wait(Ticket ticket) override { cuda::check(cudaEventSynchronize(event(ticket)), "waiting for a batch's copy"); }

  void compute_waits(Ticket ticket) override {
    cuda::check(cudaStreamWaitEvent(compute_, event(ticket), 0), "cudaStreamWaitEvent (compute stream)");
  }

  void release(Ticket ticket) noexcept override {
    auto it = events_.find(ticket);
    if (it == events_.end()) return;
    spare_.push_back(it->second);
    events_.erase(it);
  }

 private:
  cudaEvent_t event(Ticket ticket) const {
    auto it = events_.find(ticket);
    STRATA_CHECK(it != events_.end(), InvalidArgument,
                 "copy queue of " << device_.str() << ": unknown ticket " << ticket);
    return it->second;
  }

  Device device_;
  cudaStream_t compute_;
  cudaStream_t copies_;
  cudaEvent_t compute_point_ = nullptr;
  std::unordered_map<Ticket, cudaEvent_t> events_;
  std::vector<cudaEvent_t> spare_;
  Ticket next_ = 1;
};

}  // namespace

std::unique_ptr<CopyQueue> make_device_copy_queue(Device device) {
  STRATA_CHECK(!device.is_cpu(), InvalidArgument, "a copy queue goes to a GPU, not to the host");
  return std::make_unique<CudaCopyQueue>(device);
}

}  // namespace strata::detail
