// Shape helpers: element counts, printing, axis normalisation and NumPy broadcasting.
#include "strata/shape.h"

#include "strata/error.h"

namespace strata {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

int normalize_axis(int axis, int rank, const char* op) {
  const int a = axis < 0 ? axis + rank : axis;
  STRATA_CHECK(a >= 0 && a < rank, InvalidArgument,
               op << ": axis " << axis << " is out of range for rank " << rank);
  return a;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    STRATA_CHECK(da == db || da == 1 || db == 1, ShapeError,
                 op << ": shapes " << shape_str(a) << " and " << shape_str(b) << " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace strata
