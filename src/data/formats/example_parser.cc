// ExampleParser: reads serialized tensorflow.Example bytes straight into tensors, without building
// protobuf objects. Only the wire format is involved:
//   Example  { 1: Features }           Features { 1: repeated entry { 1: key, 2: Feature } }
//   Feature  { 1: BytesList | 2: FloatList | 3: Int64List }, each list { 1: repeated value }
// with packed (length-delimited) or unpacked repeated numbers, unknown fields skipped, and the last
// occurrence of a key winning, as protobuf's map parsing does. Thread-safety: parse() is const.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "strata/data/example.h"
#include "strata/error.h"

namespace strata::data {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

// A cursor over protobuf wire bytes; every read returns false on malformed input.
struct Wire {
  const uint8_t* p;
  const uint8_t* end;
  explicit Wire(std::string_view s)
      : p(reinterpret_cast<const uint8_t*>(s.data())), end(reinterpret_cast<const uint8_t*>(s.data()) + s.size()) {}
  bool done() const { return p >= end; }

  bool varint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
      const uint8_t b = *p++;
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *v = result;
        return true;
      }
    }
    return false;
  }
  bool tag(uint32_t* field, uint32_t* wire) {
    uint64_t t;
    if (!varint(&t) || (t >> 3) == 0 || (t >> 3) > 0x1fffffff) return false;
    *field = static_cast<uint32_t>(t >> 3);
    *wire = static_cast<uint32_t>(t & 7);
    return true;
  }
  bool bytes(std::string_view* out) {
    uint64_t n;
    if (!varint(&n) || n > static_cast<uint64_t>(end - p)) return false;
    *out = std::string_view(reinterpret_cast<const char*>(p), n);
    p += n;
    return true;
  }
  bool skip(uint32_t wire) {
    uint64_t v;
    std::string_view s;
    switch (wire) {
      case kVarint:
        return varint(&v);
      case kFixed64:
        if (end - p < 8) return false;
        p += 8;
        return true;
      case kLen:
        return bytes(&s);
      case kFixed32:
        if (end - p < 4) return false;
        p += 4;
        return true;
      default:
        return false;  // groups are not used by example.proto
    }
  }
};

// A feature found in the record: its kind (0 = none set) and the bytes of its XList message.
struct Found {
  int kind = -1;  // -1 = absent
  std::string_view list;
};

[[noreturn]] void malformed(const RecordLocation& where, const char* what) {
  STRATA_THROW(DataCorrupt, "cannot parse a tensorflow.Example from " << describe(where) << ": malformed " << what);
}

// Parses a Feature message; kind 1/2/3 = bytes/float/int64 (last one set wins), 0 = none.
Found parse_feature(std::string_view msg, const RecordLocation& where) {
  Found f{0, {}};
  Wire w(msg);
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    if (!w.tag(&field, &wire)) malformed(where, "Feature");
    if (field >= 1 && field <= 3 && wire == kLen) {
      if (!w.bytes(&f.list)) malformed(where, "Feature");
      f.kind = static_cast<int>(field);
    } else if (!w.skip(wire)) {
      malformed(where, "Feature");
    }
  }
  return f;
}

FeatureType kind_type(int kind) {
  return kind == 1 ? FeatureType::kBytes : kind == 2 ? FeatureType::kFloat : FeatureType::kInt64;
}

// Counts the values of a list message of `type`.
int64_t count_values(FeatureType type, std::string_view list, const RecordLocation& where) {
  int64_t n = 0;
  Wire w(list);
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    if (!w.tag(&field, &wire)) malformed(where, feature_type_name(type));
    if (field != 1) {
      if (!w.skip(wire)) malformed(where, feature_type_name(type));
      continue;
    }
    std::string_view packed;
    if (type == FeatureType::kBytes || wire != kLen) {
      if (!w.skip(wire)) malformed(where, feature_type_name(type));
      ++n;
    } else if (!w.bytes(&packed)) {
      malformed(where, feature_type_name(type));
    } else if (type == FeatureType::kFloat) {
      if (packed.size() % 4) malformed(where, "packed float_list");
      n += static_cast<int64_t>(packed.size() / 4);
    } else {
      for (const char c : packed) n += (static_cast<uint8_t>(c) & 0x80) == 0;
    }
  }
  return n;
}

// Writes the values of a numeric list into dst (which holds exactly count_values() elements).
template <class T>
void read_numbers(std::string_view list, T* dst, const RecordLocation& where) {
  Wire w(list);
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    w.tag(&field, &wire);  // validated by count_values
    if (field != 1) {
      w.skip(wire);
      continue;
    }
    if (wire == kLen) {
      std::string_view packed;
      w.bytes(&packed);
      if constexpr (std::is_same_v<T, float>) {
        std::memcpy(dst, packed.data(), packed.size());
        dst += packed.size() / 4;
      } else {
        Wire pw(packed);
        uint64_t v;
        while (!pw.done()) {
          if (!pw.varint(&v)) malformed(where, "packed int64_list");
          *dst++ = static_cast<T>(v);
        }
      }
    } else if constexpr (std::is_same_v<T, float>) {
      if (wire != kFixed32) malformed(where, "float_list value");
      std::memcpy(dst++, w.p, 4);
      w.p += 4;
    } else {
      uint64_t v;
      if (wire != kVarint || !w.varint(&v)) malformed(where, "int64_list value");
      *dst++ = static_cast<T>(v);
    }
  }
}

void read_bytes(std::string_view list, std::vector<std::string>* out) {
  Wire w(list);
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    w.tag(&field, &wire);
    std::string_view s;
    if (field == 1 && wire == kLen) {
      w.bytes(&s);
      out->emplace_back(s);
    } else {
      w.skip(wire);
    }
  }
}

// The single bytes value of a BytesList, for decode_raw without a copy.
bool single_bytes(std::string_view list, std::string_view* value) {
  Wire w(list);
  int n = 0;
  while (!w.done()) {
    uint32_t field = 0, wire = 0;
    w.tag(&field, &wire);
    if (field == 1 && wire == kLen) {
      w.bytes(value);
      ++n;
    } else {
      w.skip(wire);
    }
  }
  return n == 1;
}

Tensor feature_tensor(const Feature& f, const Shape& shape) {
  switch (f.type) {
    case FeatureType::kFloat:
      return Tensor::from_vector(f.floats, shape);
    case FeatureType::kInt64:
      return Tensor::from_vector(f.int64s, shape);
    case FeatureType::kBytes:
      break;
  }
  return Tensor();
}

}  // namespace

FeatureSpec FixedLenFeature(FeatureType type, Shape shape, std::optional<Feature> default_value) {
  FeatureSpec s;
  s.kind = FeatureSpec::Kind::kFixedLen;
  s.type = type;
  s.shape = std::move(shape);
  s.default_value = std::move(default_value);
  return s;
}

FeatureSpec VarLenFeature(FeatureType type) {
  FeatureSpec s;
  s.kind = FeatureSpec::Kind::kVarLen;
  s.type = type;
  return s;
}

FeatureSpec RawBytesFeature(DType dtype, Shape shape) {
  FeatureSpec s = FixedLenFeature(FeatureType::kBytes, std::move(shape));
  s.decode_raw = dtype;
  return s;
}

Tensor decode_raw(std::string_view bytes, DType dtype, const Shape& shape) {
  const auto size = static_cast<int64_t>(dtype_size(dtype));
  STRATA_CHECK(static_cast<int64_t>(bytes.size()) % size == 0, InvalidArgument,
               "decode_raw: " << bytes.size() << " bytes is not a whole number of " << dtype_name(dtype) << " (" << size
                              << " bytes each)");
  const int64_t n = static_cast<int64_t>(bytes.size()) / size;
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      STRATA_CHECK(infer < 0, InvalidArgument, "decode_raw: shape " << shape_str(shape) << " has two -1 dimensions");
      infer = static_cast<int>(i);
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0 && known > 0 && n % known == 0) out[infer] = n / known;
  STRATA_CHECK(shape_numel(out) == n && (infer < 0 || known > 0), InvalidArgument,
               "decode_raw: " << n << " " << dtype_name(dtype) << " elements do not fit shape " << shape_str(shape));
  Tensor t = Tensor::empty(out, dtype);
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

ExampleParser::ExampleParser(ExampleSpec spec) {
  for (auto& [name, s] : spec) {
    STRATA_CHECK(!s.decode_raw || s.type == FeatureType::kBytes, InvalidArgument,
                 "feature '" << name << "': decode_raw needs a bytes feature, not " << feature_type_name(s.type));
    STRATA_CHECK(!s.decode_raw || s.kind == FeatureSpec::Kind::kFixedLen, InvalidArgument,
                 "feature '" << name << "': decode_raw needs a FixedLenFeature");
    int64_t numel = -1;
    if (s.kind == FeatureSpec::Kind::kFixedLen && !s.decode_raw) {
      for (int64_t d : s.shape)
        STRATA_CHECK(
            d >= 0, InvalidArgument,
            "feature '" << name << "': FixedLenFeature shape " << shape_str(s.shape) << " must be fully known");
      numel = shape_numel(s.shape);
    }
    if (s.default_value) {
      STRATA_CHECK(s.kind == FeatureSpec::Kind::kFixedLen, InvalidArgument,
                   "feature '" << name << "': only a FixedLenFeature has a default");
      STRATA_CHECK(s.default_value->type == s.type, InvalidArgument,
                   "feature '" << name << "': default is a " << feature_type_name(s.default_value->type)
                               << " but the feature is a " << feature_type_name(s.type));
      STRATA_CHECK(s.decode_raw ? s.default_value->size() == 1 : static_cast<int64_t>(s.default_value->size()) == numel,
                   InvalidArgument,
                   "feature '" << name << "': default has " << s.default_value->size() << " values, shape "
                               << shape_str(s.shape) << " wants " << (s.decode_raw ? 1 : numel));
    }
    names_.push_back(name);
    specs_.push_back(std::move(s));
    numel_.push_back(numel);
  }
}

namespace {
// Finds each of `names` in the serialized Example (found[k].kind stays -1 for a missing one).
void find_features(const std::vector<std::string>& names, std::string_view record, const RecordLocation& where,
                   Found* found) {
  const size_t n = names.size();
  uint32_t field = 0, wire = 0;
  Wire ex(record);
  while (!ex.done()) {
    if (!ex.tag(&field, &wire)) malformed(where, "Example");
    if (field != 1 || wire != kLen) {
      if (!ex.skip(wire)) malformed(where, "Example");
      continue;
    }
    std::string_view features;
    if (!ex.bytes(&features)) malformed(where, "Example");
    Wire fw(features);
    while (!fw.done()) {
      if (!fw.tag(&field, &wire)) malformed(where, "Features");
      if (field != 1 || wire != kLen) {
        if (!fw.skip(wire)) malformed(where, "Features");
        continue;
      }
      std::string_view entry;
      if (!fw.bytes(&entry)) malformed(where, "Features");
      std::string_view key, value;
      bool has_value = false;
      Wire e(entry);
      while (!e.done()) {
        if (!e.tag(&field, &wire)) malformed(where, "Features map entry");
        if (field == 1 && wire == kLen) {
          if (!e.bytes(&key)) malformed(where, "Features map entry");
        } else if (field == 2 && wire == kLen) {
          if (!e.bytes(&value)) malformed(where, "Features map entry");
          has_value = true;
        } else if (!e.skip(wire)) {
          malformed(where, "Features map entry");
        }
      }
      for (size_t k = 0; k < n; ++k) {
        if (names[k] == key) {
          found[k] = has_value ? parse_feature(value, where) : Found{0, {}};
          break;
        }
      }
    }
  }
}

// Each of `names` found in one record: on the stack for small specs (the usual case), else on the heap.
class FoundFeatures {
 public:
  FoundFeatures(const std::vector<std::string>& names, std::string_view record, const RecordLocation& where)
      : heap_(names.size() > kStack ? names.size() : 0), found_(names.size() > kStack ? heap_.data() : stack_) {
    find_features(names, record, where, found_);
  }
  FoundFeatures(const FoundFeatures&) = delete;  // found_ may point into this object
  FoundFeatures& operator=(const FoundFeatures&) = delete;
  const Found& operator[](size_t k) const { return found_[k]; }

 private:
  static constexpr size_t kStack = 16;
  Found stack_[kStack];
  std::vector<Found> heap_;
  Found* found_;
};
}  // namespace

namespace {
// The checks parse() and parse_into() share, with one wording for each error.

// The feature's list type, which must be the spec's (a feature with no list set reads as the spec's type).
FeatureType checked_type(const std::string& name, const FeatureSpec& s, const Found& f, const RecordLocation& where) {
  const FeatureType got = f.kind == 0 ? s.type : kind_type(f.kind);
  STRATA_CHECK(got == s.type, InvalidArgument,
               "feature '" << name << "' is a " << feature_type_name(got) << " but the spec wants a "
                           << feature_type_name(s.type) << " in " << describe(where));
  return got;
}

// The one bytes value a decode_raw feature must hold.
std::string_view raw_bytes(const std::string& name, const Found& f, FeatureType got, const RecordLocation& where) {
  std::string_view raw;
  STRATA_CHECK(f.kind != 0 && single_bytes(f.list, &raw), InvalidArgument,
               "feature '" << name << "' must hold exactly one bytes value to decode, has "
                           << (f.kind == 0 ? 0 : count_values(got, f.list, where)) << " in " << describe(where));
  return raw;
}

// decode_raw, its error naming the feature and the record.
Tensor decode_feature(const std::string& name, std::string_view raw, const FeatureSpec& s, const RecordLocation& where) {
  try {
    return decode_raw(raw, *s.decode_raw, s.shape);
  } catch (const InvalidArgument& e) {
    STRATA_THROW(InvalidArgument, "feature '" << name << "' in " << describe(where) << ": " << e.what());
  }
}

// A fixed-length feature's value count, which must be its shape's.
void check_count(const std::string& name, int64_t count, const FeatureSpec& s, int64_t numel,
                 const RecordLocation& where) {
  STRATA_CHECK(count == numel, InvalidArgument,
               "feature '" << name << "' has " << count << " values but shape " << shape_str(s.shape) << " wants "
                           << numel << " in " << describe(where));
}
}  // namespace

void ExampleParser::parse(std::string_view record, const RecordLocation& where, std::vector<ParsedFeature>* out) const {
  const size_t n = names_.size();
  const FoundFeatures found(names_, record, where);  // linear name lookup: cheaper than hashing a few keys

  out->resize(n);
  for (size_t k = 0; k < n; ++k) {
    const FeatureSpec& s = specs_[k];
    const std::string& name = names_[k];
    ParsedFeature& dst = (*out)[k];
    dst.bytes.clear();
    const Found& f = found[k];
    if (f.kind < 0 || (f.kind == 0 && s.kind == FeatureSpec::Kind::kFixedLen && s.default_value)) {
      if (s.kind == FeatureSpec::Kind::kVarLen) {
        dst.values = s.type == FeatureType::kBytes
                         ? Tensor()
                         : Tensor::empty({0}, s.type == FeatureType::kFloat ? DType::kFloat32 : DType::kInt64);
        continue;
      }
      STRATA_CHECK(s.default_value, InvalidArgument,
                   "feature '" << name << "' (" << feature_type_name(s.type) << ") is required but missing in "
                               << describe(where));
      if (s.decode_raw) {
        dst.values = decode_raw(s.default_value->bytes[0], *s.decode_raw, s.shape);
      } else if (s.type == FeatureType::kBytes) {
        dst.values = Tensor();
        dst.bytes = s.default_value->bytes;
      } else {
        dst.values = feature_tensor(*s.default_value, s.shape);
      }
      continue;
    }
    // kind 0 (no list set) reads as an empty list of the wanted type.
    const FeatureType got = checked_type(name, s, f, where);
    if (s.decode_raw) {
      dst.values = decode_feature(name, raw_bytes(name, f, got, where), s, where);
      continue;
    }
    const int64_t count = f.kind == 0 ? 0 : count_values(got, f.list, where);
    if (s.kind == FeatureSpec::Kind::kFixedLen) check_count(name, count, s, numel_[k], where);
    const Shape shape = s.kind == FeatureSpec::Kind::kFixedLen ? s.shape : Shape{count};
    switch (s.type) {
      case FeatureType::kBytes:
        dst.values = Tensor();
        if (f.kind != 0) read_bytes(f.list, &dst.bytes);
        break;
      case FeatureType::kFloat:
        dst.values = Tensor::empty(shape, DType::kFloat32);
        if (count) read_numbers(f.list, dst.values.data<float>(), where);
        break;
      case FeatureType::kInt64:
        dst.values = Tensor::empty(shape, DType::kInt64);
        if (count) read_numbers(f.list, dst.values.data<int64_t>(), where);
        break;
    }
  }
}

bool ExampleParser::fixed_size() const {
  for (const FeatureSpec& s : specs_) {
    if (s.kind != FeatureSpec::Kind::kFixedLen || (!s.decode_raw && s.type == FeatureType::kBytes)) return false;
    for (int64_t d : s.shape)
      if (d < 0) return false;
  }
  return true;
}

DType ExampleParser::output_dtype(size_t k) const {
  const FeatureSpec& s = specs_[k];
  if (s.decode_raw) return *s.decode_raw;
  return s.type == FeatureType::kFloat ? DType::kFloat32 : DType::kInt64;
}

namespace {
// The values of a numeric list that is exactly one packed run (its tag, its length, the run), or false.
bool only_packed_run(std::string_view list, std::string_view* run) {
  Wire w(list);
  uint32_t field = 0, wire = 0;
  return w.tag(&field, &wire) && field == 1 && wire == kLen && w.bytes(run) && w.done();
}

// Decodes `run` as exactly n varints into dst; false when it holds another count or a bad varint.
bool read_varint_run(std::string_view run, int64_t n, int64_t* dst) {
  Wire w(run);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t v;
    if (!w.varint(&v)) return false;
    dst[i] = static_cast<int64_t>(v);
  }
  return w.done();
}
}  // namespace

bool ExampleParser::parse_as_learned(std::string_view record, ExampleTemplate& t, void* const* dst) const {
  if (t.parser_ != this || record.size() != t.record_size_) return false;
  const char* r = record.data();
  const char* fixed = t.fixed_.data();
  size_t at = 0;
  for (const ExampleTemplate::Run& run : t.runs_) {
    const size_t gap = run.offset - at;
    if (gap && std::memcmp(r + at, fixed, gap) != 0) return false;
    fixed += gap;
    at = run.offset + run.length;
  }
  if (at < record.size() && std::memcmp(r + at, fixed, record.size() - at) != 0) return false;
  for (const ExampleTemplate::Run& run : t.runs_) {
    if (!run.varints) {
      if (run.length) std::memcpy(dst[run.feature], r + run.offset, run.length);
    } else if (!read_varint_run(record.substr(run.offset, run.length), numel_[run.feature],
                                static_cast<int64_t*>(dst[run.feature]))) {
      return false;
    }
  }
  ++t.hits_;
  return true;
}

void ExampleParser::parse_into(std::string_view record, const RecordLocation& where, void* const* dst,
                               ExampleTemplate* learned) const {
  if (learned && parse_as_learned(record, *learned, dst)) return;
  const size_t n = names_.size();
  const FoundFeatures found(names_, record, where);
  // The same checks and messages as parse(); values go to dst[k] instead of a new tensor.
  for (size_t k = 0; k < n; ++k) {
    const FeatureSpec& s = specs_[k];
    const std::string& name = names_[k];
    const Found& f = found[k];
    const size_t nbytes = static_cast<size_t>(shape_numel(s.shape)) * dtype_size(output_dtype(k));
    if (f.kind < 0 || (f.kind == 0 && s.default_value)) {
      STRATA_CHECK(s.default_value, InvalidArgument,
                   "feature '" << name << "' (" << feature_type_name(s.type) << ") is required but missing in "
                               << describe(where));
      if (s.decode_raw) {
        const std::string& raw = s.default_value->bytes[0];
        if (raw.size() != nbytes) decode_raw(raw, *s.decode_raw, s.shape);  // throws the size mismatch
        if (nbytes) std::memcpy(dst[k], raw.data(), nbytes);
      } else if (s.type == FeatureType::kFloat) {
        if (nbytes) std::memcpy(dst[k], s.default_value->floats.data(), nbytes);
      } else {
        if (nbytes) std::memcpy(dst[k], s.default_value->int64s.data(), nbytes);
      }
      continue;
    }
    const FeatureType got = checked_type(name, s, f, where);
    if (s.decode_raw) {
      const std::string_view raw = raw_bytes(name, f, got, where);
      if (raw.size() != nbytes) decode_feature(name, raw, s, where);  // throws the size mismatch
      if (nbytes) std::memcpy(dst[k], raw.data(), nbytes);
      continue;
    }
    const int64_t count = f.kind == 0 ? 0 : count_values(got, f.list, where);
    check_count(name, count, s, numel_[k], where);
    if (!count) continue;
    if (s.type == FeatureType::kFloat)
      read_numbers(f.list, static_cast<float*>(dst[k]), where);
    else
      read_numbers(f.list, static_cast<int64_t*>(dst[k]), where);
  }
  if (!learned) return;
  // Learn this record's layout: each feature must be one run of values inside the record.
  ExampleTemplate& t = *learned;
  t.parser_ = nullptr;
  t.runs_.clear();
  for (size_t k = 0; k < n; ++k) {
    const Found& f = found[k];
    std::string_view run;
    if (f.kind <= 0) return;  // a default stands in: not a run of this record
    if (specs_[k].decode_raw ? !single_bytes(f.list, &run) : !only_packed_run(f.list, &run)) return;
    t.runs_.push_back({.offset = static_cast<size_t>(run.data() - record.data()),
                       .length = run.size(),
                       .feature = k,
                       .varints = !specs_[k].decode_raw && specs_[k].type == FeatureType::kInt64});
  }
  std::sort(t.runs_.begin(), t.runs_.end(), [](const ExampleTemplate::Run& a, const ExampleTemplate::Run& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.length < b.length;
  });
  t.fixed_.clear();
  size_t at = 0;
  for (const ExampleTemplate::Run& run : t.runs_) {
    if (run.offset < at) return;  // overlapping runs cannot happen in a well-formed record; stay unlearned
    t.fixed_.append(record.substr(at, run.offset - at));
    at = run.offset + run.length;
  }
  t.fixed_.append(record.substr(at));
  t.record_size_ = record.size();
  t.parser_ = this;
}

std::map<std::string, ParsedFeature> ExampleParser::parse(std::string_view record, const RecordLocation& where) const {
  std::vector<ParsedFeature> out;
  parse(record, where, &out);
  std::map<std::string, ParsedFeature> result;
  for (size_t k = 0; k < names_.size(); ++k) result.emplace(names_[k], std::move(out[k]));
  return result;
}

}  // namespace strata::data
