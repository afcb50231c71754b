// ShuffleBuffer (see shuffle_buffer.h). Thread-safety: one object per thread.
#include "data/shuffle_buffer.h"

#include <algorithm>

namespace strata::data::detail {

namespace {
// Elements up to this size go in rows; larger ones gain nothing from it (their bytes dominate).
constexpr size_t kMaxRowBytes = size_t{1} << 16;

bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}
}  // namespace

void ShuffleBuffer::start_rows(const Element& e) {
  mode_ = Mode::kElements;
  if (e.empty()) return;
  size_t total = 0;
  for (const Tensor& t : e.components()) {
    if (!t.defined() || !t.device().is_cpu()) return;
    total += t.nbytes();
  }
  if (total == 0 || total > kMaxRowBytes) return;
  names_ = e.shared_names();
  shapes_.clear();
  dtypes_.clear();
  bytes_.clear();
  offsets_.clear();
  row_bytes_ = 0;
  for (const Tensor& t : e.components()) {
    shapes_.push_back(t.shape());
    dtypes_.push_back(t.dtype());
    bytes_.push_back(t.nbytes());
    offsets_.push_back(row_bytes_);
    row_bytes_ += t.nbytes();
  }
  mode_ = Mode::kRows;
}

bool ShuffleBuffer::fits(const Element& e) const {
  if (e.size() != shapes_.size()) return false;
  const auto& names = e.shared_names();
  if (names != names_ && (!names || !names_ || *names != *names_)) return false;
  const auto& comps = e.components();
  for (size_t c = 0; c < comps.size(); ++c) {
    const Tensor& t = comps[c];
    if (!t.defined() || t.dtype() != dtypes_[c] || !same_shape(t.shape(), shapes_[c]) || !t.device().is_cpu())
      return false;
  }
  return true;
}

void ShuffleBuffer::grow() {
  // The first allocation holds the whole buffer when that is modest, else grows by doubling.
  size_t want = row_capacity_ == 0 ? std::min(capacity_, std::max<size_t>(1, (size_t{64} << 20) / row_bytes_))
                                   : 2 * row_capacity_;
  want = std::max<size_t>(want, rows_ + 1);
  std::unique_ptr<char[]> slab(new char[want * row_bytes_]);
  if (rows_) std::memcpy(slab.get(), slab_.get(), rows_ * row_bytes_);
  slab_ = std::move(slab);
  row_capacity_ = want;
}

Element ShuffleBuffer::read_row(size_t i) const {
  const char* src = row(i);
  std::vector<Tensor> comps;
  comps.reserve(shapes_.size());
  for (size_t c = 0; c < shapes_.size(); ++c) {
    comps.push_back(Tensor::empty(shapes_[c], dtypes_[c]));
    std::memcpy(comps.back().raw_data(), src + offsets_[c], bytes_[c]);
  }
  return Element(std::move(comps), names_);
}

void ShuffleBuffer::to_elements() {
  std::vector<Element> elements;
  elements.reserve(std::max(rows_, std::min<size_t>(capacity_, 1 << 16)));
  for (size_t i = 0; i < rows_; ++i) elements.push_back(read_row(i));
  elements_ = std::move(elements);
  slab_.reset();
  rows_ = row_capacity_ = 0;
  mode_ = Mode::kElements;
}

void ShuffleBuffer::prefetch(size_t i, bool deep) const {
  if (mode_ == Mode::kRows) {
    const char* p = row(i);
    const size_t n = std::min<size_t>(row_bytes_, 4096);
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
