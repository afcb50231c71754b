// Internal fast path for elements of one fixed structure: a RowLayout names the structure (names,
// dtypes, shapes) and a RowIterator can write its next element's bytes straight into caller memory
// (a shuffle slab row, a batch tensor's row) instead of making an Element of fresh tensors. Sources
// that parse records (make_example_dataset) write them this way, shuffle moves them as rows and batch
// asks for rows, so a record of a fixed-size Example costs no allocation between the file and the
// batch. A stage that cannot (or whose next element has another structure) says so and the caller
// uses next() as usual: the elements and their order are the same either way.
// Thread-safety: a RowLayout is a value; a RowIterator is used like any IteratorImpl.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "strata/data/element.h"

namespace strata::data::detail {

struct RowLayout {
  std::shared_ptr<const std::vector<std::string>> names;  // null for a tuple
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  // Per component: its size and its offset within a row. Components follow each other, each at a
  // multiple of its element size, and row_bytes is a multiple of 8, so in rows that start 8-aligned
  // every value is aligned (the parser stores int64s in place).
  std::vector<size_t> bytes, offsets;
  size_t row_bytes = 0;

  size_t size() const { return dtypes.size(); }
  void add(DType dtype, Shape shape) {
    const size_t align = dtype_size(dtype);
    const size_t n = static_cast<size_t>(shape_numel(shape)) * align;
    const size_t at = (end_ + align - 1) / align * align;
    dtypes.push_back(dtype);
    shapes.push_back(std::move(shape));
    bytes.push_back(n);
    offsets.push_back(at);
    end_ = at + n;
    row_bytes = (end_ + 7) / 8 * 8;
  }
  // The structure of `e`; false (and a partial layout) when a component is undefined or not on the host.
  bool assign(const Element& e);
  // Whether `e` has this structure (names compared by value).
  bool matches(const Element& e) const;
  bool same(const RowLayout& o) const;
  // A fresh Element holding the row at `src`.
  Element read(const char* src) const;
  // Copies `e`'s bytes into the row at `dst`. REQUIRES: matches(e).
  void write(const Element& e, char* dst) const;

 private:
  size_t end_ = 0;  // the end of the last component
};

class RowIterator {
 public:
  enum class Result { kRow, kEnd, kElement };
  virtual ~RowIterator() = default;
  // If the next element has `layout`'s structure, writes component c's bytes to dst[c], moves past it
  // and returns kRow. kEnd: no elements are left (as next() returning nullopt). kElement: the next
  // element has another structure, or this iterator cannot tell; nothing was consumed, call next().
  virtual Result next_row(const RowLayout& layout, char* const* dst) = 0;
};

}  // namespace strata::data::detail
