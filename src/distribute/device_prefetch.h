// A replica's batches staged on its GPU ahead of the steps that read them (tf.data's prefetch_to_device; PyTorch's
// pin_memory with a non_blocking copy on a side stream). stage() copies a batch's host components into a staging
// block (pinned memory on a GPU), queues their copies on the device's copy queue (core/copy_queue.h) behind the
// compute work queued so far, and returns; take() hands out the oldest staged batch, its tensors on the device, with
// the compute stream waiting for its copies, so the host never waits for a copy and the copy of the next batch runs
// beside the current step's kernels.
//
//   DevicePrefetcher prefetch(detail::make_device_copy_queue(device));
//   run_prefetched(prefetch, n, [&](size_t k) -> const data::Element& { return batches[k]; },
//                  [&](size_t k, const data::Element& on_device) { step(on_device); });
//
// A staging block is written again only once the copies queued from it have run (checked without waiting while
// another block is free; with `blocks` blocks all in flight, stage waits for the oldest). Components already on the
// device, and undefined ones, pass as they are. A copy that cannot be queued throws from stage, which then holds
// nothing of that batch; the block (and the destinations) of the copies it did queue stay out of use until they ran.
// The destructor waits for copies still in flight before it gives the blocks back (a block whose copies failed on
// the device is kept: CUDA's errors are sticky, the device is not used again). Batches come out in staging order.
//
// Thread-safety: one prefetcher per replica thread; not synchronised.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/copy_queue.h"
#include "strata/data/element.h"

namespace strata::distribute {

class DevicePrefetcher {
 public:
  explicit DevicePrefetcher(std::unique_ptr<detail::CopyQueue> queue, int blocks = 2);
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  void stage(const data::Element& batch);
  // The oldest staged batch on the device; InvalidArgument when none is staged.
  data::Element take();
  size_t staged() const { return staged_.size(); }
  Device device() const { return queue_->device(); }

 private:
  struct Block {
    void* data = nullptr;
    size_t size = 0;
    std::optional<detail::CopyQueue::Ticket> ticket;  // the copies queued from it, until seen done
    std::vector<Tensor> hold;  // destinations of the copies queued from it, kept until those ran
  };
  struct Staged {
    data::Element batch;
    std::optional<detail::CopyQueue::Ticket> ticket;  // none: nothing was copied
  };

  // A block of at least `nbytes` no queued copy still reads.
  Block& free_block(size_t nbytes);
  // Whether `b` has no copy in flight (forgetting a ticket that is done).
  bool idle(Block& b);

  std::unique_ptr<detail::CopyQueue> queue_;
  size_t max_blocks_;
  std::vector<Block> blocks_;
  std::deque<size_t> in_flight_;  // blocks by the order their copies were queued (the oldest first)
  std::deque<Staged> staged_;
};

// Runs step(k, batch k on the device) for k in [0, count), in order: batch 0 is staged first, and batch k + 1 is
// staged before step k runs (its copy beside step k's kernels); nothing is staged after the last. An error from a
// step or a stage ends the loop and propagates (the prefetcher keeps what it staged; its destructor waits).
void run_prefetched(DevicePrefetcher& prefetch, size_t count, const std::function<const data::Element&(size_t)>& batch,
                    const std::function<void(size_t, const data::Element&)>& step);

}  // namespace strata::distribute
