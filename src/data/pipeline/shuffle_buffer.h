// ShuffleBuffer: the slots of shuffle's buffer. While every element has the structure of the first
// (a RowLayout: the same names, dtypes and shapes, all host tensors) the elements live as rows of one
// byte slab; the first element that differs turns the slab back into Elements for good. Why: a
// shuffle holds thousands of small elements for a long time and hands them out in random order, so as
// Elements each one is several heap blocks (tensor array, storage, bytes, shape) scattered over the
// heap: handing one out chased a chain of cache misses and freeing it hit cold allocator chunks. As
// rows, an element is one contiguous run of bytes, written by the input straight into its slot (see
// rows.h) or copied in, and copied out into a batch row or fresh tensors when it leaves.
// Thread-safety: one object per thread.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "data/pipeline/rows.h"
#include "strata/data/element.h"

namespace strata::data::detail {

class ShuffleBuffer {
 public:
  // `capacity` is the most slots the buffer will hold (a hint for the first allocation).
  explicit ShuffleBuffer(size_t capacity) : capacity_(capacity) {}

  size_t size() const { return mode_ == Mode::kElements ? elements_.size() : rows_; }
  bool empty() const { return size() == 0; }
  void clear();
  // The structure of every slot while the buffer holds rows, else null.
  const RowLayout* layout() const { return mode_ == Mode::kRows ? &layout_ : nullptr; }

  void push_back(Element&& e);
  // Slot i's element; the slot must then be refilled by replace(i) or remove(i).
  Element take(size_t i) { return mode_ == Mode::kElements ? std::move(elements_[i]) : layout_.read(row(i)); }
  void replace(size_t i, Element&& e);
  // Moves the last slot into slot i and drops the last.
  void remove(size_t i);
  // A copy of slot i's element (for save_state).
  Element at(size_t i) const { return mode_ == Mode::kElements ? elements_[i] : layout_.read(row(i)); }

  // ---- rows. REQUIRES: layout() != null.
  // Where component c of slot i lives (dst[c] for a RowIterator writing into slot i).
  const std::vector<char*>& row_pointers(size_t i);
  // Copies slot i's components to dst[c] (a RowIterator's next_row output).
  void copy_row(size_t i, char* const* dst) const {
    const char* src = row(i);
    for (size_t c = 0; c < layout_.size(); ++c) std::memcpy(dst[c], src + layout_.offsets[c], layout_.bytes[c]);
  }
  // Adds an uninitialised slot at the end (to be written through row_pointers) / drops it again.
  void append_row() {
    if (rows_ == row_capacity_) grow();
    ++rows_;
  }
  void pop_row() { --rows_; }

  // Starts loading slot i's bytes into the cache; `deep` also follows an Element's pointers to its
  // tensors' bytes (which needs the tensor array loaded already, so prefetch it shallow a call before).
  // A row is loaded whole by the shallow call; the deep one does nothing more.
  void prefetch(size_t i, bool deep) const;

 private:
  enum class Mode { kUnset, kRows, kElements };

  char* row(size_t i) const { return slab_.get() + i * layout_.row_bytes; }
  void start_rows(const Element& e);
  void grow();
  void to_elements();

  size_t capacity_;
  Mode mode_ = Mode::kUnset;
  std::vector<Element> elements_;  // kElements
  RowLayout layout_;               // kRows
  std::unique_ptr<char[]> slab_;   // rows_ rows of layout_.row_bytes, room for row_capacity_
  size_t rows_ = 0, row_capacity_ = 0;
  std::vector<char*> pointers_;  // row_pointers' result
};

}  // namespace strata::data::detail
