// DevicePrefetcher (device_prefetch.h): staging blocks reused only once their copies ran, batches handed out in order.
// Thread-safety: see device_prefetch.h.
#include "distribute/device_prefetch.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "strata/error.h"

namespace strata::distribute {

namespace {
constexpr size_t kAlign = 256;  // each component's bytes start on a boundary a copy engine likes
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

DevicePrefetcher::DevicePrefetcher(std::unique_ptr<detail::CopyQueue> queue, int blocks)
    : queue_(std::move(queue)), max_blocks_(static_cast<size_t>(std::max(1, blocks))) {
  STRATA_CHECK(queue_ != nullptr, InvalidArgument, "DevicePrefetcher: no copy queue");
  blocks_.reserve(max_blocks_);
}

DevicePrefetcher::~DevicePrefetcher() {
  for (Staged& s : staged_)
    if (s.ticket) queue_->release(*s.ticket);
  for (Block& b : blocks_) {
    bool ran = true;
    if (b.ticket) {
      try {
        queue_->wait(*b.ticket);
      } catch (...) {
        ran = false;  // the device failed under the copy: keep the block rather than free memory it may still read
      }
      queue_->release(*b.ticket);
    }
    if (ran) queue_->free_host(b.data);
  }
}

bool DevicePrefetcher::idle(Block& b) {
  if (!b.ticket) return true;
  if (!queue_->done(*b.ticket)) return false;
  queue_->release(*b.ticket);
  b.ticket.reset();
  b.hold.clear();
  in_flight_.erase(std::remove(in_flight_.begin(), in_flight_.end(), static_cast<size_t>(&b - blocks_.data())),
                   in_flight_.end());
  return true;
}

DevicePrefetcher::Block& DevicePrefetcher::free_block(size_t nbytes) {
  Block* pick = nullptr;
  for (Block& b : blocks_) {  // an idle block that holds the batch, else any idle one
    if (!idle(b)) continue;
    if (b.size >= nbytes) return b;
    if (pick == nullptr) pick = &b;
  }
  if (pick == nullptr && blocks_.size() < max_blocks_) {
    blocks_.emplace_back();
    pick = &blocks_.back();
  }
  if (pick == nullptr) {  // every block is in flight: wait for the oldest copies
    Block& oldest = blocks_[in_flight_.front()];
    queue_->wait(*oldest.ticket);
    idle(oldest);
    pick = &oldest;
  }
  if (pick->size < nbytes) {
    void* grown = queue_->alloc_host(nbytes);
    queue_->free_host(pick->data);
    pick->data = grown;
    pick->size = nbytes;
  }
  return *pick;
}

void DevicePrefetcher::stage(const data::Element& batch) {
  const Device device = queue_->device();
  // Host components are copied (those with bytes through the block); the others must be on the device already.
  std::vector<size_t> offsets(batch.size(), 0);
  size_t total = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Tensor& t = batch[i];
    if (!t.defined()) continue;
    STRATA_CHECK(t.device().is_cpu() || t.device() == device, InvalidArgument,
                 "DevicePrefetcher: component " << i << " is on " << t.device().str() << ", not on the host or "
                                                << device.str());
    if (!t.device().is_cpu() || t.nbytes() == 0) continue;
    offsets[i] = total;
    total += aligned(t.nbytes());
  }
  std::vector<Tensor> placed;
  placed.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const Tensor& t = batch[i];
    placed.push_back(t.defined() && t.device().is_cpu() ? queue_->device_tensor(t.shape(), t.dtype()) : t);
  }
  if (total == 0) {  // no bytes to copy: no block, no ticket
    staged_.push_back(Staged{data::Element(std::move(placed), batch.shared_names()), std::nullopt});
    return;
  }
  Block& block = free_block(total);
  const size_t index = static_cast<size_t>(&block - blocks_.data());
  auto* staging = static_cast<char*>(block.data);
  const auto copied = [&](size_t i) {
    return batch[i].defined() && batch[i].device().is_cpu() && batch[i].nbytes() > 0;
  };
  for (size_t i = 0; i < batch.size(); ++i)
    if (copied(i)) std::memcpy(staging + offsets[i], batch[i].raw_data(), batch[i].nbytes());
  // Every destination is allocated: the copies wait for the compute work that may still read that memory.
  bool queued = false;
  try {
    queue_->after_compute();
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!copied(i)) continue;
      queue_->queue_copy(placed[i].raw_data(), staging + offsets[i], batch[i].nbytes());
      queued = true;
    }
  } catch (...) {
    if (queued) {  // the copies that were queued still read the block: keep it from reuse until they ran
      try {
        block.ticket = queue_->record();
        block.hold = std::move(placed);  // nor may their destinations go back to the device's allocator
        in_flight_.push_back(index);
      } catch (...) {
        block.data = nullptr;  // no way to know when they ran: never write to or free the block again
        block.size = 0;
      }
    }
    throw;
  }
  block.ticket = queue_->record();
  // The destinations stay allocated until the copies ran, even when the step that takes this batch drops it first
  // (an error unwinding it): the device's allocator may not hand memory a queued copy still writes to another tensor.
  block.hold = placed;
  in_flight_.push_back(index);
  const detail::CopyQueue::Ticket mine = queue_->record();
  staged_.push_back(Staged{data::Element(std::move(placed), batch.shared_names()), mine});
}

data::Element DevicePrefetcher::take() {
  STRATA_CHECK(!staged_.empty(), InvalidArgument, "DevicePrefetcher: take() with no batch staged");
  Staged s = std::move(staged_.front());
  staged_.pop_front();
  if (s.ticket) {
    try {
      queue_->compute_waits(*s.ticket);
    } catch (...) {
      queue_->release(*s.ticket);
      throw;
    }
    queue_->release(*s.ticket);
  }
  return std::move(s.batch);
}

void run_prefetched(DevicePrefetcher& prefetch, size_t count, const std::function<const data::Element&(size_t)>& batch,
                    const std::function<void(size_t, const data::Element&)>& step) {
  if (count > 0) prefetch.stage(batch(0));
  for (size_t k = 0; k < count; ++k) {
    const data::Element on_device = prefetch.take();
    if (k + 1 < count) prefetch.stage(batch(k + 1));
    step(k, on_device);
  }
}

}  // namespace strata::distribute
