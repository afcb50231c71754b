// cuda::Event (cuda_event.h). Thread-safety: see there; the CUDA calls themselves are thread-safe.
#include "core/cuda/cuda_event.h"

#include <utility>

#include "core/cuda/cuda_context.h"
#include "strata/error.h"

namespace strata::detail::cuda {

Event::Event(int device, bool timing) : device_(device) {
  set_device(device);
  check(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming),
        "cudaEventCreateWithFlags");
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);  // releases once the recorded work is done; never throws
}

Event::Event(Event&& other) noexcept : device_(other.device_), event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    device_ = other.device_;
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record() { record(stream(device_)); }

void Event::record(cudaStream_t s) {
  STRATA_CHECK(event_ != nullptr, InvalidArgument, "cuda::Event::record: the event was moved from");
  set_device(device_);
  check(cudaEventRecord(event_, s), "cudaEventRecord");
}

void Event::synchronize() const {
  STRATA_CHECK(event_ != nullptr, InvalidArgument, "cuda::Event::synchronize: the event was moved from");
  check(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

bool Event::done() const {
  STRATA_CHECK(event_ != nullptr, InvalidArgument, "cuda::Event::done: the event was moved from");
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it
    return false;
  }
  check(status, "cudaEventQuery");
  return true;
}

void Event::wait_on(cudaStream_t s) const {
  STRATA_CHECK(event_ != nullptr, InvalidArgument, "cuda::Event::wait_on: the event was moved from");
  check(cudaStreamWaitEvent(s, event_, 0), "cudaStreamWaitEvent");
}

float Event::elapsed_ms(const Event& later) const {
  STRATA_CHECK(event_ != nullptr && later.event_ != nullptr, InvalidArgument,
               "cuda::Event::elapsed_ms: an event was moved from");
  later.synchronize();
  float ms = 0;
  check(cudaEventElapsedTime(&ms, event_, later.event_), "cudaEventElapsedTime");
  return ms;
}

}  // namespace strata::detail::cuda
