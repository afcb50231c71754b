// Host-to-device copies on a queue of their own, that the device's compute stream waits for without the host
// waiting (PyTorch's pin_memory + non_blocking copy on a side stream; tf.data's prefetch_to_device): the device side
// of distribute/device_prefetch.h. CopyQueue is the seam: make_device_copy_queue gives CUDA's (pinned host blocks, a
// copy stream per GPU, events), a test gives a fake whose copies run when it says so.
// Thread-safety: a CopyQueue is used by one thread at a time; queues of one device on several threads share its copy
// stream safely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "strata/device.h"
#include "strata/tensor.h"

namespace strata::detail {

class CopyQueue {
 public:
  // A point in the queue's copies (an event): the copies queued before it.
  using Ticket = uint64_t;

  virtual ~CopyQueue() = default;
  // The device the copies go to.
  virtual Device device() const = 0;
  // An uninitialised tensor on the device: a copy's destination.
  virtual Tensor device_tensor(const Shape& shape, DType dtype) = 0;
  // Host memory copies may be queued from (pinned on a GPU), at least `nbytes`, 64-byte aligned; give it back with
  // free_host once no copy from it is still to run.
  virtual void* alloc_host(size_t nbytes) = 0;
  virtual void free_host(void* block) noexcept = 0;
  // Orders the copies queued after this call behind the device's compute work queued so far (destination buffers
  // just allocated may be memory that work still reads).
  virtual void after_compute() = 0;
  // Queues a copy of `nbytes` from host memory `src` (inside a block of alloc_host) to device memory `dst`; returns
  // without waiting.
  virtual void queue_copy(void* dst, const void* src, size_t nbytes) = 0;
  // The point the copies queued so far reach.
  virtual Ticket record() = 0;
  // Whether the copies before `ticket` have run (a failed copy counts as run; wait says how it failed).
  virtual bool done(Ticket ticket) = 0;
  // Blocks until they have; throws the device's error when one failed.
  virtual void wait(Ticket ticket) = 0;
  // Makes the device's compute stream wait for them, without blocking the host.
  virtual void compute_waits(Ticket ticket) = 0;
  // The ticket is no longer needed (its event goes back).
  virtual void release(Ticket ticket) noexcept = 0;
};

// CUDA's queue for GPU `device` (a copy stream, pinned blocks, events). Unavailable without CUDA in the build;
// InvalidArgument for the host.
std::unique_ptr<CopyQueue> make_device_copy_queue(Device device);

}  // namespace strata::detail
