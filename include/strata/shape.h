// Shapes: a list of dimension sizes, with the helpers every op needs (element count, printing,
// axis normalisation, NumPy broadcasting).
// Thread-safety: pure functions on values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

using Shape = std::vector<int64_t>;

// Number of elements; 1 for a scalar (rank 0).
int64_t shape_numel(const Shape& shape);
// "[64, 28, 28, 1]".
std::string shape_str(const Shape& shape);
// Row-major strides in elements.
std::vector<int64_t> contiguous_strides(const Shape& shape);
// Maps a possibly negative axis into [0, rank); throws InvalidArgument naming `op` when out of range.
int normalize_axis(int axis, int rank, const char* op);
// The NumPy broadcast of two shapes; throws ShapeError naming `op` and both shapes when they do not fit.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace strata
