// RowLayout (see rows.h). Thread-safety: a value type; versions come from an atomic counter.
#include "data/pipeline/rows.h"

#include <atomic>
#include <cstring>

namespace strata::data::detail {

namespace {
bool same_names(const std::shared_ptr<const std::vector<std::string>>& a,
                const std::shared_ptr<const std::vector<std::string>>& b) {
  const bool a_empty = !a || a->empty(), b_empty = !b || b->empty();
  if (a_empty || b_empty) return a_empty == b_empty;
  return a == b || *a == *b;
}
bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}
}  // namespace

uint64_t RowLayout::next_version() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

bool RowLayout::assign(const Element& e) {
  *this = RowLayout();
  names = e.shared_names();
  for (const Tensor& t : e.components()) {
    if (!t.defined() || !t.device().is_cpu()) return false;
    add(t.dtype(), t.shape());
  }
  return true;
}

bool RowLayout::matches(const Element& e) const {
  if (e.size() != dtypes.size() || !same_names(e.shared_names(), names)) return false;
  const auto& comps = e.components();
  for (size_t c = 0; c < comps.size(); ++c) {
    const Tensor& t = comps[c];
    if (!t.defined() || t.dtype() != dtypes[c] || !same_shape(t.shape(), shapes[c]) || !t.device().is_cpu())
      return false;
  }
  return true;
}

bool RowLayout::same(const RowLayout& o) const {
  if (o.dtypes != dtypes || !same_names(o.names, names)) return false;
  for (size_t c = 0; c < shapes.size(); ++c)
    if (!same_shape(shapes[c], o.shapes[c])) return false;
  return true;
}

Element RowLayout::read(const char* src) const {
  std::vector<Tensor> comps;
  comps.reserve(dtypes.size());
  for (size_t c = 0; c < dtypes.size(); ++c) {
    comps.push_back(Tensor::empty(shapes[c], dtypes[c]));
    if (bytes[c]) std::memcpy(comps.back().raw_data(), src + offsets[c], bytes[c]);
  }
  return Element(std::move(comps), names);
}

void RowLayout::write(const Element& e, char* dst) const {
  const auto& comps = e.components();
  for (size_t c = 0; c < comps.size(); ++c)
    if (bytes[c]) std::memcpy(dst + offsets[c], comps[c].raw_data(), bytes[c]);
}

}  // namespace strata::data::detail
