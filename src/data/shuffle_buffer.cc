// ShuffleBuffer (see shuffle_buffer.h). Thread-safety: one object per thread; the kept slab is
// guarded by its mutex.
#include "data/shuffle_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>

namespace strata::data::detail {

namespace {
// Elements up to this size go in rows; larger ones gain nothing from it (their bytes dominate).
constexpr size_t kMaxRowBytes = size_t{1} << 16;
// A slab of `bytes`; one of 2 MiB or more is asked for in huge pages, since rows are read at random
// and with 4 KiB pages nearly every one would miss the TLB.
constexpr size_t kHuge = size_t{2} << 20;
size_t huge_rounded(size_t bytes) { return (bytes + kHuge - 1) / kHuge * kHuge; }

// The last large slab freed, kept for the next shuffle of the same size: every epoch of a pipeline
// makes a new shuffle iterator, and the kernel zeroing a fresh 8 MB slab's pages as the shuffle
// filled it was 1.6% of the Fashion-MNIST pipeline at 2 threads. At most kMaxKept bytes stay allocated.
constexpr size_t kMaxKept = size_t{64} << 20;
struct KeptSlab {
  std::mutex mu;
  char* p = nullptr;
  size_t bytes = 0;  // huge_rounded size
  ~KeptSlab() { std::free(p); }
};
KeptSlab& kept() {
  static KeptSlab k;
  return k;
}

char* allocate_slab(size_t bytes) {
  if (bytes < kHuge) return static_cast<char*>(::operator new(bytes));
  const size_t rounded = huge_rounded(bytes);
  {
    KeptSlab& k = kept();
    std::lock_guard<std::mutex> lock(k.mu);
    if (k.p && k.bytes == rounded) return std::exchange(k.p, nullptr);
  }
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  ::madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without it the slab still works
#endif
  return static_cast<char*>(p);
}
}  // namespace

void SlabFree::operator()(char* p) const {
  if (bytes < kHuge) {
    ::operator delete(p);
    return;
  }
  const size_t rounded = huge_rounded(bytes);
  if (rounded <= kMaxKept) {
    KeptSlab& k = kept();
    std::lock_guard<std::mutex> lock(k.mu);
    std::free(k.p);
    k.p = p;
    k.bytes = rounded;
    return;
  }
  std::free(p);
}

void ShuffleBuffer::clear() {
  mode_ = Mode::kUnset;
  elements_.clear();
  slab_.reset();
  rows_ = row_capacity_ = 0;
}

void ShuffleBuffer::start_rows(const Element& e) {
  mode_ = Mode::kElements;
  if (e.empty() || !layout_.assign(e) || layout_.row_bytes == 0 || layout_.row_bytes > kMaxRowBytes) return;
  mode_ = Mode::kRows;
}

void ShuffleBuffer::push_back(Element&& e) {
  if (mode_ == Mode::kUnset) start_rows(e);
  if (mode_ == Mode::kRows && !layout_.matches(e)) to_elements();
  if (mode_ == Mode::kElements) {
    elements_.push_back(std::move(e));
    return;
  }
  append_row();
  layout_.write(e, row(rows_ - 1));
}

void ShuffleBuffer::replace(size_t i, Element&& e) {
  if (mode_ == Mode::kRows && !layout_.matches(e)) to_elements();
  if (mode_ == Mode::kElements) {
    elements_[i] = std::move(e);
    return;
  }
  layout_.write(e, row(i));
}

void ShuffleBuffer::remove(size_t i) {
  if (mode_ == Mode::kElements) {
    elements_[i] = std::move(elements_.back());
    elements_.pop_back();
    return;
  }
  --rows_;
  if (i != rows_) std::memcpy(row(i), row(rows_), layout_.row_bytes);
}

const std::vector<char*>& ShuffleBuffer::row_pointers(size_t i) {
  pointers_.resize(layout_.size());
  for (size_t c = 0; c < layout_.size(); ++c) pointers_[c] = row(i) + layout_.offsets[c];
  return pointers_;
}

void ShuffleBuffer::grow() {
  // The first allocation holds the whole buffer when that is modest, else grows by doubling.
  const size_t rb = layout_.row_bytes;
  size_t want =
      row_capacity_ == 0 ? std::min(capacity_, std::max<size_t>(1, (size_t{64} << 20) / rb)) : 2 * row_capacity_;
  want = std::max<size_t>(want, rows_ + 1);
  std::unique_ptr<char, SlabFree> slab(allocate_slab(want * rb), SlabFree{want * rb});
  if (rows_) std::memcpy(slab.get(), slab_.get(), rows_ * rb);
  slab_ = std::move(slab);
  row_capacity_ = want;
}

void ShuffleBuffer::to_elements() {
  std::vector<Element> elements;
  elements.reserve(std::max(rows_, std::min<size_t>(capacity_, 1 << 16)));
  for (size_t i = 0; i < rows_; ++i) elements.push_back(layout_.read(row(i)));
  elements_ = std::move(elements);
  slab_.reset();
  rows_ = row_capacity_ = 0;
  mode_ = Mode::kElements;
}

void ShuffleBuffer::prefetch(size_t i, bool deep) const {
  if (mode_ == Mode::kRows) {
    const char* p = row(i);
    const size_t n = std::min<size_t>(layout_.row_bytes, 4096);
    for (size_t off = 0; off < n; off += 64) __builtin_prefetch(p + off);
    return;
  }
  if (mode_ != Mode::kElements) return;
  const Element& e = elements_[i];
  if (!deep) {
    for (size_t off = 0; off < e.size() * sizeof(Tensor); off += 64)
      __builtin_prefetch(reinterpret_cast<const char*>(e.components().data()) + off);
    return;
  }
  for (const Tensor& t : e.components()) {
    if (!t.defined() || !t.device().is_cpu()) continue;
    const char* p = static_cast<const char*>(t.raw_data());
    const size_t n = std::min<size_t>(t.nbytes(), 4096);
    for (size_t off = 0; off < n; off += 64) __builtin_prefetch(p + off);
  }
}

}  // namespace strata::data::detail
