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
  std::vector<size_t> bytes, offsets;  // per component; offsets within a row (bytes back to back)
  size_t row_bytes = 0;

  size_t size() const { return dtypes.size(); }
  void add(DType dtype, Shape shape) {
    const size_t n = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    dtypes.push_back(dtype);
    shapes.push_back(std::move(shape));
    bytes.push_back(n);
    offsets.push_back(row_bytes);
    row_bytes += n;
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
