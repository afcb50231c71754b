// ShuffleBuffer: the slots of shuffle's buffer. While every element has the structure of the first
// (the same name list, component count, dtypes and shapes, all host tensors) the elements live as
// rows of one byte slab, a row holding each component's bytes back to back; the first element that
// differs turns the slab back into Elements for good. Why: a shuffle holds thousands of small elements
// for a long time and hands them out in random order, so as Elements each one is several heap blocks
// (tensor array, storage, bytes, shape) scattered over the heap: handing one out chased a chain of
// cache misses and freeing it hit cold allocator chunks. As rows, an element is one contiguous run of
// bytes, copied in when it arrives (its short-lived tensors go straight back to the allocator's hot
// lists) and copied into fresh tensors when it leaves.
// Thread-safety: one object per thread.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "strata/data/element.h"

namespace strata::data::detail {

class ShuffleBuffer {
 public:
  // `capacity` is the most slots the buffer will hold (a hint for the first allocation).
  explicit ShuffleBuffer(size_t capacity) : capacity_(capacity) {}

  size_t size() const { return mode_ == Mode::kElements ? elements_.size() : rows_; }
  bool empty() const { return size() == 0; }
  void clear() {
    mode_ = Mode::kUnset;
    elements_.clear();
    slab_.reset();
    rows_ = row_capacity_ = 0;
  }
  void push_back(Element&& e) {
    if (mode_ == Mode::kUnset) start_rows(e);
    if (mode_ == Mode::kRows && !fits(e)) to_elements();
    if (mode_ == Mode::kElements) {
      elements_.push_back(std::move(e));
      return;
    }
    if (rows_ == row_capacity_) grow();
    write_row(rows_++, e);
  }
  // Slot i's element; the slot must then be refilled by replace(i) or remove(i).
  Element take(size_t i) { return mode_ == Mode::kElements ? std::move(elements_[i]) : read_row(i); }
  void replace(size_t i, Element&& e) {
    if (mode_ == Mode::kRows && !fits(e)) to_elements();
    if (mode_ == Mode::kElements) {
      elements_[i] = std::move(e);
      return;
    }
    write_row(i, e);
  }
  // Moves the last slot into slot i and drops the last.
  void remove(size_t i) {
    if (mode_ == Mode::kElements) {
      elements_[i] = std::move(elements_.back());
      elements_.pop_back();
      return;
    }
    --rows_;
    if (i != rows_) std::memcpy(row(i), row(rows_), row_bytes_);
  }
  // A copy of slot i's element (for save_state).
  Element at(size_t i) const { return mode_ == Mode::kElements ? elements_[i] : read_row(i); }
  // Starts loading slot i's bytes into the cache; `deep` also follows an Element's pointers to its
  // tensors' bytes (which needs the tensor array loaded already, so prefetch it shallow a call before).
  void prefetch(size_t i, bool deep) const;

 private:
  enum class Mode { kUnset, kRows, kElements };

  char* row(size_t i) const { return slab_.get() + i * row_bytes_; }
  bool fits(const Element& e) const;
  void start_rows(const Element& e);
  void grow();
  void write_row(size_t i, const Element& e) {
    char* dst = row(i);
    const auto& comps = e.components();
    for (size_t c = 0; c < comps.size(); ++c) std::memcpy(dst + offsets_[c], comps[c].raw_data(), bytes_[c]);
  }
  Element read_row(size_t i) const;
  void to_elements();

  size_t capacity_;
  Mode mode_ = Mode::kUnset;
  std::vector<Element> elements_;  // kElements
  // kRows: the structure every row has, and the slab.
  std::shared_ptr<const std::vector<std::string>> names_;
  std::vector<Shape> shapes_;
  std::vector<DType> dtypes_;
  std::vector<size_t> bytes_, offsets_;
  size_t row_bytes_ = 0;
  std::unique_ptr<char[]> slab_;
  size_t rows_ = 0, row_capacity_ = 0;
};

}  // namespace strata::data::detail
