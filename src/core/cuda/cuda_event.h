// A CUDA event that owns itself (RAII): record it on a device's stream, wait for it, or time the work between two
// (benches, the step timer). Built only with STRATA_WITH_CUDA.
//
//   cuda::Event start(0), stop(0);
//   start.record();  ... queue kernels on cuda:0 ...  stop.record();
//   float ms = start.elapsed_ms(stop);  // waits for `stop`
//
// Thread-safety: one Event is used by one thread at a time; distinct events from any threads.
#pragma once

#include <cuda_runtime_api.h>

namespace strata::detail::cuda {

class Event {
 public:
  // An event of CUDA device `device`; `timing` false makes a cheaper event that elapsed_ms cannot use.
  explicit Event(int device, bool timing = true);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the point the device's stream (core/cuda/cuda_context.h) has reached in its queue, or `stream`'s
  // (a stream of the same device).
  void record();
  void record(cudaStream_t stream);
  // Blocks the calling thread until the work before the recorded point has run.
  void synchronize() const;
  // Whether it has (true for an event never recorded).
  bool done() const;
  // Makes `stream` wait, without blocking the host, for the recorded point (a stream of any device).
  void wait_on(cudaStream_t stream) const;
  // Milliseconds from this event's point to `later`'s, once `later` is done (waits for it). Both must be timing
  // events of one device, recorded; Unavailable otherwise, naming CUDA's reason.
  float elapsed_ms(const Event& later) const;

  int device() const { return device_; }
  cudaEvent_t get() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace strata::detail::cuda
