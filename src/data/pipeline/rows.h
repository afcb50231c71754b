// Internal fast path for elements of one fixed structure: a RowLayout names the structure (names,
// dtypes, shapes) and a RowIterator can write its next element's bytes straight into caller memory
// (a shuffle slab row, a batch tensor's row) instead of making an Element of fresh tensors. Sources
// that parse records (make_example_dataset) write them this way, shuffle moves them as rows and batch
// asks for rows, so a record of a fixed-size Example costs no allocation between the file and the
// batch. A stage that cannot (or whose next element has another structure) says so and the caller
// uses next() as usual: the elements and their order are the same either way.
// Thread-safety: a RowLayout is a value (versions come from an atomic counter); a RowIterator and a
// SameLayout are used like any IteratorImpl (one thread at a time).
#pragma once

#include <cstddef>
#include <cstdint>
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
  // Changes with every add() (and so assign()): a stage that checked a layout once can tell it is
  // unchanged (see SameLayout). Copies share it. Change a layout only through add() and assign().
  uint64_t version() const { return version_; }
  void add(DType dtype, Shape shape) {
    version_ = next_version();
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
  static uint64_t next_version();

  size_t end_ = 0;  // the end of the last component
  uint64_t version_ = 0;
};

// RowLayout::same for a stage asked for rows again and again: the layouts are compared once and then
// only while either one is another object or has changed since.
class SameLayout {
 public:
  bool operator()(const RowLayout& asked, const RowLayout& mine) {
    if (&asked == asked_ && &mine == mine_ && asked.version() == asked_version_ && mine.version() == mine_version_)
      return true;
    if (!asked.same(mine)) return false;
    asked_ = &asked;
    mine_ = &mine;
    asked_version_ = asked.version();
    mine_version_ = mine.version();
    return true;
  }

 private:
  const RowLayout* asked_ = nullptr;
  const RowLayout* mine_ = nullptr;
  uint64_t asked_version_ = 0, mine_version_ = 0;
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
