// ShuffleBuffer (see shuffle_buffer.h). Thread-safety: one object per thread.
#include "data/pipeline/shuffle_buffer.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

namespace strata::data::detail {

namespace {
// Elements up to this size go in rows; larger ones gain nothing from it (their bytes dominate).
constexpr size_t kMaxRowBytes = size_t{1} << 16;
}  // namespace

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
  auto grown = std::make_unique_for_overwrite<char[]>(want * rb);  // not zeroed: every row is written first
  if (rows_ > 0) std::memcpy(grown.get(), slab_.get(), rows_ * rb);
  slab_ = std::move(grown);
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
    if (deep) return;  // a row has no pointers to follow: the shallow call, a call earlier, loaded it
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
