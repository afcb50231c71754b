// Element, string tensors, the state encoding shared by every iterator, and DatasetNode's defaults.
#include "strata/data/element.h"

#include <cstring>
#include <sstream>

#include "strata/data/dataset_node.h"

namespace strata::data {

namespace {
const std::vector<std::string>& no_names() {
  static const std::vector<std::string> empty;
  return empty;
}

// ---- a tiny binary-safe writer/reader: integers as decimal text ended by ':', blobs length-prefixed.
void put_num(std::string& out, int64_t v) {
  out += std::to_string(v);
  out += ':';
}
void put_blob(std::string& out, std::string_view s) {
  put_num(out, static_cast<int64_t>(s.size()));
  out.append(s.data(), s.size());
}

struct Cursor {
  std::string_view s;
  size_t pos = 0;
  const char* what;

  int64_t num() {
    const size_t colon = s.find(':', pos);
    STRATA_CHECK(colon != std::string_view::npos && colon > pos, InvalidArgument,
                 what << ": malformed iterator state (expected a number at byte " << pos << ")");
    int64_t v = 0;
    bool neg = false;
    size_t i = pos;
    if (s[i] == '-') {
      neg = true;
      ++i;
    }
    for (; i < colon; ++i) {
      STRATA_CHECK(s[i] >= '0' && s[i] <= '9', InvalidArgument,
                   what << ": malformed iterator state (bad digit at byte " << i << ")");
      v = v * 10 + (s[i] - '0');
    }
    pos = colon + 1;
    return neg ? -v : v;
  }
  std::string_view blob() {
    const int64_t n = num();
    STRATA_CHECK(n >= 0 && pos + static_cast<size_t>(n) <= s.size(), InvalidArgument,
                 what << ": malformed iterator state (a field of " << n << " bytes runs past the end)");
    std::string_view out = s.substr(pos, static_cast<size_t>(n));
    pos += static_cast<size_t>(n);
    return out;
  }
  bool done() const { return pos >= s.size(); }
};
}  // namespace

// ---- Element
Element::Element(std::vector<Tensor> components, std::vector<std::string> names)
    : components_(std::move(components)) {
  if (names.empty()) return;
  STRATA_CHECK(names.size() == components_.size(), InvalidArgument,
               "Element: " << names.size() << " names for " << components_.size() << " components");
  bool any = false;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) continue;
    any = true;
    for (size_t j = 0; j < i; ++j)
      STRATA_CHECK(names[j] != names[i], InvalidArgument, "Element: the name '" << names[i] << "' appears twice");
  }
  if (any) names_ = std::make_shared<const std::vector<std::string>>(std::move(names));
}

Element::Element(std::vector<Tensor> components, std::shared_ptr<const std::vector<std::string>> names)
    : components_(std::move(components)), names_(std::move(names)) {
  if (names_ && names_->empty()) names_.reset();
  STRATA_CHECK(!names_ || names_->size() == components_.size(), InvalidArgument,
               "Element: " << names_->size() << " names for " << components_.size() << " components");
}

const Tensor& Element::operator[](size_t i) const {
  STRATA_CHECK(i < components_.size(), InvalidArgument,
               "Element: index " << i << " is out of range for an element of " << components_.size()
                                 << " components " << str());
  return components_[i];
}

int64_t Element::index_of(const std::string& name) const {
  if (!names_) return -1;
  for (size_t i = 0; i < names_->size(); ++i)
    if ((*names_)[i] == name) return static_cast<int64_t>(i);
  return -1;
}

const Tensor& Element::operator[](const std::string& name) const {
  const int64_t i = index_of(name);
  if (i < 0) {
    std::string known;
    for (const auto& n : names()) {
      if (n.empty()) continue;
      if (!known.empty()) known += ", ";
      known += "'" + n + "'";
    }
    STRATA_THROW(InvalidArgument, "Element: no component named '"
                                      << name << "'; known keys: " << (known.empty() ? "none (a tuple)" : known));
  }
  return components_[static_cast<size_t>(i)];
}

const std::vector<std::string>& Element::names() const { return names_ ? *names_ : no_names(); }

std::string Element::str() const {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < components_.size(); ++i) {
    if (i) os << ", ";
    if (names_ && !(*names_)[i].empty()) os << (*names_)[i] << ": ";
    const Tensor& t = components_[i];
    if (t.defined())
      os << dtype_name(t.dtype()) << " " << t.shape_str();
    else
      os << "undefined";
  }
  os << ")";
  return os.str();
}

Tensor string_tensor(std::string_view s) {
  Tensor t = Tensor::empty({static_cast<int64_t>(s.size())}, DType::kUInt8);
  if (!s.empty()) std::memcpy(t.raw_data(), s.data(), s.size());
  return t;
}

std::string tensor_string(const Tensor& t) {
  STRATA_CHECK(t.defined() && t.dtype() == DType::kUInt8, InvalidArgument,
               "tensor_string: a string travels as a uint8 tensor, got "
                   << (t.defined() ? dtype_name(t.dtype()) : "an undefined tensor"));
  return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

// ---- element encoding
std::string encode_element(const Element& element) {
  std::string out;
  size_t bytes = 16;
  for (const Tensor& t : element.components()) bytes += t.nbytes() + 32;
  out.reserve(bytes);
  put_num(out, static_cast<int64_t>(element.size()));
  put_num(out, element.names().empty() ? 0 : 1);
  for (size_t i = 0; i < element.size(); ++i) {
    const Tensor& t = element.components()[i];
    STRATA_CHECK(t.defined() && t.device().is_cpu(), InvalidArgument,
                 "encode_element: component " << i << " is not a defined host tensor");
    if (!element.names().empty()) put_blob(out, element.names()[i]);
    put_num(out, static_cast<int64_t>(t.dtype()));
    put_num(out, t.rank());
    for (int64_t d : t.shape()) put_num(out, d);
    put_blob(out, std::string_view(static_cast<const char*>(t.raw_data()), t.nbytes()));
  }
  return out;
}

Element decode_element(std::string_view bytes) {
  Cursor c{bytes, 0, "decode_element"};
  const int64_t n = c.num();
  const bool named = c.num() != 0;
  STRATA_CHECK(n >= 0 && n < (1 << 20), InvalidArgument, "decode_element: bad component count " << n);
  std::vector<Tensor> comps;
  std::vector<std::string> names;
  for (int64_t i = 0; i < n; ++i) {
    if (named) names.emplace_back(c.blob());
    const int64_t dt = c.num();
    STRATA_CHECK(dt >= 0 && dt <= static_cast<int64_t>(DType::kBFloat16), InvalidArgument,
                 "decode_element: bad dtype " << dt);
    const int64_t rank = c.num();
    STRATA_CHECK(rank >= 0 && rank < 64, InvalidArgument, "decode_element: bad rank " << rank);
    Shape shape(static_cast<size_t>(rank));
    for (auto& d : shape) d = c.num();
    const std::string_view data = c.blob();
    Tensor t = Tensor::empty(shape, static_cast<DType>(dt));
    STRATA_CHECK(t.nbytes() == data.size(), InvalidArgument,
                 "decode_element: component " << i << " " << t.shape_str() << " wants " << t.nbytes()
                                              << " bytes, the state holds " << data.size());
    if (!data.empty()) std::memcpy(t.raw_data(), data.data(), data.size());
    comps.push_back(std::move(t));
  }
  return Element(std::move(comps), std::move(names));
}

// ---- state writer / reader
StateWriter::StateWriter(std::string_view kind) { put("kind", kind); }

StateWriter& StateWriter::put(std::string_view key, std::string_view value) {
  put_blob(out_, key);
  put_blob(out_, value);
  return *this;
}
StateWriter& StateWriter::put_int(std::string_view key, int64_t value) { return put(key, std::to_string(value)); }
StateWriter& StateWriter::put_uint(std::string_view key, uint64_t value) { return put(key, std::to_string(value)); }
StateWriter& StateWriter::put_element(std::string_view key, const Element& element) {
  return put(key, encode_element(element));
}

StateReader::StateReader(const std::string& state, std::string_view kind) : kind_(kind) {
  Cursor c{state, 0, "restore_state"};
  while (!c.done()) {
    std::string key(c.blob());
    fields_[key] = std::string(c.blob());
  }
  auto it = fields_.find("kind");
  STRATA_CHECK(it != fields_.end() && it->second == kind_, InvalidArgument,
               "restore_state: the state belongs to a '" << (it == fields_.end() ? "?" : it->second)
                                                         << "' stage but is restored into a '" << kind_
                                                         << "' stage (a different dataset?)");
}

const std::string& StateReader::get(const std::string& key) const {
  auto it = fields_.find(key);
  STRATA_CHECK(it != fields_.end(), InvalidArgument,
               "restore_state: the state of the '" << kind_ << "' stage has no field '" << key << "'");
  return it->second;
}

int64_t StateReader::get_int(const std::string& key) const {
  const std::string& v = get(key);
  try {
    size_t used = 0;
    const int64_t out = std::stoll(v, &used);
    if (used == v.size()) return out;
  } catch (const std::exception&) {
  }
  STRATA_THROW(InvalidArgument, "restore_state: field '" << key << "' of the '" << kind_ << "' stage is not an integer");
}

uint64_t StateReader::get_uint(const std::string& key) const {
  const std::string& v = get(key);
  try {
    size_t used = 0;
    const uint64_t out = std::stoull(v, &used);
    if (used == v.size()) return out;
  } catch (const std::exception&) {
  }
  STRATA_THROW(InvalidArgument, "restore_state: field '" << key << "' of the '" << kind_ << "' stage is not an integer");
}

Element StateReader::get_element(const std::string& key) const { return decode_element(get(key)); }

// ---- DatasetNode defaults
std::shared_ptr<const DatasetNode> DatasetNode::with_inputs(std::vector<std::shared_ptr<const DatasetNode>>) const {
  STRATA_THROW(InvalidArgument, name() << ": this stage cannot be rebuilt on new inputs (with_inputs not implemented)");
}

std::shared_ptr<const DatasetNode> DatasetNode::with_files(std::vector<std::string>) const {
  STRATA_THROW(InvalidArgument, name() << ": this source cannot be restricted to a subset of its files");
}

std::shared_ptr<const DatasetNode> DatasetNode::with_batch_size(int64_t) const {
  STRATA_THROW(InvalidArgument, name() << ": this stage does not batch (with_batch_size not implemented)");
}

}  // namespace strata::data
