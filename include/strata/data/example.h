// tf.train.Example: building, serializing and parsing records, wire-compatible with TensorFlow's
// example.proto / feature.proto (TFRecord files of Examples written by either side read on the other).
//
//   data::Example ex;
//   ex.set_bytes("image", raw_pixels).set_int64s("label", {7});
//   writer.write(ex.serialize());
//
//   data::ExampleParser parser({{"image", data::RawBytesFeature(DType::kUInt8, {28, 28, 1})},
//                               {"label", data::FixedLenFeature(data::FeatureType::kInt64)}});
//   std::vector<data::ParsedFeature> out;
//   parser.parse(record, {.file = path, .index = i}, &out);   // out[k] follows parser.names()
//
// Example::parse / serialize go through protobuf (the general path). ExampleParser reads the wire
// format directly into tensors (no protobuf objects, no copies of the record) and accepts packed and
// unpacked repeated fields like protobuf does. A missing, mistyped or wrongly sized feature throws
// InvalidArgument naming the feature and the record; bytes that are not an Example throw DataCorrupt.
// Thread-safety: Example is a value; an ExampleParser may be shared by threads (parse is const).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/tensor.h"

namespace strata::data {

enum class FeatureType { kBytes, kFloat, kInt64 };
// "bytes_list", "float_list", "int64_list" (the proto's field names).
const char* feature_type_name(FeatureType t);
// "bytes" / "string", "float" / "float32", "int64" -> FeatureType; InvalidArgument otherwise.
FeatureType parse_feature_type(std::string_view name);

// One tf.train.Feature: a list of byte strings, floats or int64s (only the list of `type` is used).
struct Feature {
  FeatureType type = FeatureType::kInt64;
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> int64s;

  static Feature of_bytes(std::vector<std::string> v);
  static Feature of_floats(std::vector<float> v);
  static Feature of_int64s(std::vector<int64_t> v);
  size_t size() const;
  bool operator==(const Feature&) const = default;
};

class Example {
 public:
  Example& set(const std::string& name, Feature feature);
  Example& set_bytes(const std::string& name, std::string_view value) {
    return set(name, Feature::of_bytes({std::string(value)}));
  }
  Example& set_floats(const std::string& name, std::vector<float> v) {
    return set(name, Feature::of_floats(std::move(v)));
  }
  Example& set_int64s(const std::string& name, std::vector<int64_t> v) {
    return set(name, Feature::of_int64s(std::move(v)));
  }

  // nullptr when absent.
  const Feature* find(const std::string& name) const;
  const std::map<std::string, Feature>& features() const { return features_; }

  // The serialized tensorflow.Example (map entries in key order, so equal Examples give equal bytes).
  std::string serialize() const;
  // Parses a serialized tensorflow.Example; DataCorrupt naming `what` when the bytes are not one.
  static Example parse(std::string_view serialized, std::string_view what = "record");

  bool operator==(const Example&) const = default;

 private:
  std::map<std::string, Feature> features_;
};

// How one feature of a record becomes a tensor (tf.io.FixedLenFeature / VarLenFeature, plus decode_raw).
struct FeatureSpec {
  enum class Kind { kFixedLen, kVarLen };
  Kind kind = Kind::kFixedLen;
  FeatureType type = FeatureType::kInt64;
  // FixedLen: the output shape; the record must hold exactly numel(shape) values.
  // With decode_raw: the shape of the decoded tensor (one -1 allowed).
  Shape shape;
  // FixedLen: used when the record lacks the feature (must hold numel(shape) values of `type`).
  std::optional<Feature> default_value;
  // Bytes only: reinterpret the single bytes value as little-endian elements of this dtype
  // (tf.io.decode_raw), reshaped to `shape`.
  std::optional<DType> decode_raw;
};

FeatureSpec FixedLenFeature(FeatureType type, Shape shape = {}, std::optional<Feature> default_value = std::nullopt);
FeatureSpec VarLenFeature(FeatureType type);
// A bytes feature holding one raw array, decoded to `dtype` with `shape` (e.g. uint8 [28, 28, 1]).
FeatureSpec RawBytesFeature(DType dtype, Shape shape);

using ExampleSpec = std::map<std::string, FeatureSpec>;

// One parsed feature. float -> float32 tensor, int64 -> int64 tensor, decode_raw -> a tensor of that
// dtype; FixedLen has the spec's shape, VarLen is 1-D with the record's values. Bytes features that are
// not decoded leave `values` undefined and fill `bytes`.
struct ParsedFeature {
  Tensor values;
  std::vector<std::string> bytes;
};

// Where a record came from, for error messages (formatted only when an error is raised).
struct RecordLocation {
  std::string_view file;
  int64_t index = -1;   // record number in the file, -1 if unknown
  int64_t offset = -1;  // byte offset in the (uncompressed) file, -1 if unknown
};
std::string describe(const RecordLocation& where);

class ExampleParser;

// What ExampleParser::parse_into learned from the last record it parsed in full: where each feature's
// values lie in that record, and the record's other bytes (tags, lengths, keys). A record of the same
// size whose other bytes are all equal has the same structure, only other values, so parse_into copies
// its values from the same offsets instead of walking the protobuf fields (for Fashion-MNIST's
// schema: comparing 37 bytes instead of decoding some 20 tags and lengths). Learned only when every
// feature is one run of bytes: a decode_raw value, or a packed float or int64 list.
// Thread-safety: one per reader; not shared between threads.
class ExampleTemplate {
 public:
  // Whether a record has been learned.
  bool learned() const { return parser_ != nullptr; }
  // How many records were parsed by their template rather than in full.
  int64_t hits() const { return hits_; }

 private:
  friend class ExampleParser;
  struct Run {
    size_t offset = 0, length = 0;  // of the values in the record
    size_t feature = 0;             // the parser's names() index
    bool varints = false;           // a packed int64 list (decoded); else bytes copied as they are
  };
  const ExampleParser* parser_ = nullptr;  // the parser that learned it (null: nothing learned)
  size_t record_size_ = 0;
  std::vector<Run> runs_;  // by offset
  std::string fixed_;      // the record's bytes outside runs_, in order
  int64_t hits_ = 0;
};

class ExampleParser {
 public:
  // Validates the spec (e.g. decode_raw only on bytes, defaults of the right type and size).
  explicit ExampleParser(ExampleSpec spec);

  // Feature names in output order (the spec's key order).
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<FeatureSpec>& specs() const { return specs_; }

  // Parses one serialized Example into out[k] for names()[k] (out is resized; its tensors are replaced).
  void parse(std::string_view record, const RecordLocation& where, std::vector<ParsedFeature>* out) const;
  // Whether every feature parses to one fixed dtype and shape: a FixedLenFeature of floats or int64s,
  // or decode_raw to a shape with no -1. Then parse_into can write a record straight into memory.
  bool fixed_size() const;
  // The dtype feature k parses to (float32, int64, or its decode_raw dtype).
  DType output_dtype(size_t k) const;
  // Like parse() (the same values, checks and errors), writing feature k's values to dst[k]:
  // specs()[k].shape elements of output_dtype(k). REQUIRES: fixed_size().
  void parse_into(std::string_view record, const RecordLocation& where, void* const* dst) const {
    parse_into(record, where, dst, nullptr);
  }
  // The same, reading a record laid out like the last one `learned` holds by its template (the same
  // values, checks and errors) and learning each record it parses in full. `learned` may be null.
  void parse_into(std::string_view record, const RecordLocation& where, void* const* dst,
                  ExampleTemplate* learned) const;
  // The same as a map from feature name.
  std::map<std::string, ParsedFeature> parse(std::string_view record, const RecordLocation& where = {}) const;

 private:
  std::vector<std::string> names_;
  std::vector<FeatureSpec> specs_;
  std::vector<int64_t> numel_;  // FixedLen value count (-1: VarLen or decode with an inferred dim)

  // parse_into through `t`: false (dst partly written) when the record is not laid out like t's.
  bool parse_as_learned(std::string_view record, ExampleTemplate& t, void* const* dst) const;
};

// tf.io.decode_raw: `bytes` as little-endian elements of `dtype`, reshaped to `shape` ({-1} = 1-D).
// InvalidArgument when the size does not fit.
Tensor decode_raw(std::string_view bytes, DType dtype, const Shape& shape = {-1});

}  // namespace strata::data
