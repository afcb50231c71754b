// tf.train.Example building and (de)serialization through the generated protobuf classes, and the
// small helpers of strata/data/example.h. Thread-safety: pure functions and values.
#include "strata/data/example.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <sstream>

#include "data/proto/example.pb.h"
#include "strata/error.h"

namespace strata::data {

const char* feature_type_name(FeatureType t) {
  switch (t) {
    case FeatureType::kBytes:
      return "bytes_list";
    case FeatureType::kFloat:
      return "float_list";
    case FeatureType::kInt64:
      return "int64_list";
  }
  return "?";
}

FeatureType parse_feature_type(std::string_view name) {
  if (name == "bytes" || name == "string" || name == "bytes_list") return FeatureType::kBytes;
  if (name == "float" || name == "float32" || name == "float_list") return FeatureType::kFloat;
  if (name == "int64" || name == "int" || name == "int64_list") return FeatureType::kInt64;
  STRATA_THROW(InvalidArgument, "unknown feature type '" << name << "' (want bytes, float or int64)");
}

Feature Feature::of_bytes(std::vector<std::string> v) {
  Feature f;
  f.type = FeatureType::kBytes;
  f.bytes = std::move(v);
  return f;
}
Feature Feature::of_floats(std::vector<float> v) {
  Feature f;
  f.type = FeatureType::kFloat;
  f.floats = std::move(v);
  return f;
}
Feature Feature::of_int64s(std::vector<int64_t> v) {
  Feature f;
  f.type = FeatureType::kInt64;
  f.int64s = std::move(v);
  return f;
}
size_t Feature::size() const {
  switch (type) {
    case FeatureType::kBytes:
      return bytes.size();
    case FeatureType::kFloat:
      return floats.size();
    case FeatureType::kInt64:
      return int64s.size();
  }
  return 0;
}

Example& Example::set(const std::string& name, Feature feature) {
  features_[name] = std::move(feature);
  return *this;
}

const Feature* Example::find(const std::string& name) const {
  auto it = features_.find(name);
  return it == features_.end() ? nullptr : &it->second;
}

std::string Example::serialize() const {
  tensorflow::Example proto;
  auto& map = *proto.mutable_features()->mutable_feature();
  for (const auto& [name, f] : features_) {
    tensorflow::Feature& pf = map[name];
    switch (f.type) {
      case FeatureType::kBytes: {
        auto* list = pf.mutable_bytes_list();
        for (const auto& b : f.bytes) list->add_value(b);
        break;
      }
      case FeatureType::kFloat:
        pf.mutable_float_list()->mutable_value()->Add(f.floats.begin(), f.floats.end());
        break;
      case FeatureType::kInt64:
        pf.mutable_int64_list()->mutable_value()->Add(f.int64s.begin(), f.int64s.end());
        break;
    }
  }
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);  // map entries sorted by key
  proto.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

Example Example::parse(std::string_view serialized, std::string_view what) {
  tensorflow::Example proto;
  STRATA_CHECK(proto.ParseFromArray(serialized.data(), static_cast<int>(serialized.size())), DataCorrupt,
               "cannot parse a tensorflow.Example from " << what << " (" << serialized.size() << " bytes)");
  Example ex;
  for (const auto& [name, pf] : proto.features().feature()) {
    switch (pf.kind_case()) {
      case tensorflow::Feature::kBytesList:
        ex.set(name, Feature::of_bytes({pf.bytes_list().value().begin(), pf.bytes_list().value().end()}));
        break;
      case tensorflow::Feature::kFloatList:
        ex.set(name, Feature::of_floats({pf.float_list().value().begin(), pf.float_list().value().end()}));
        break;
      case tensorflow::Feature::kInt64List:
        ex.set(name, Feature::of_int64s({pf.int64_list().value().begin(), pf.int64_list().value().end()}));
        break;
      case tensorflow::Feature::KIND_NOT_SET:
        ex.set(name, Feature::of_int64s({}));  // an empty list of unknown type
        break;
    }
  }
  return ex;
}

std::string describe(const RecordLocation& where) {
  std::ostringstream s;
  s << "record";
  if (where.index >= 0) s << " " << where.index;
  if (where.offset >= 0) s << " (byte offset " << where.offset << ")";
  if (!where.file.empty()) s << " of " << where.file;
  return s.str();
}

}  // namespace strata::data
