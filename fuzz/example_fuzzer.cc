// Fuzzes tf.train.Example parsing (src/data/example.cc, example_parser.cc) on untrusted record bytes: the protobuf
// path (Example::parse), ExampleParser::parse with fixed-length, var-length and decode_raw features, and
// parse_into with a template, fed the same record twice (the second is read by the template it learned).
#include <vector>

#include "fuzz_util.h"
#include "strata/data/example.h"

using namespace strata;

namespace {

const data::ExampleParser& mixed_parser() {
  static const data::ExampleParser parser({
      {"image", data::RawBytesFeature(DType::kUInt8, {-1, 2})},
      {"label", data::FixedLenFeature(data::FeatureType::kInt64, {}, data::Feature::of_int64s({0}))},
      {"floats", data::VarLenFeature(data::FeatureType::kFloat)},
      {"ids", data::VarLenFeature(data::FeatureType::kInt64)},
      {"names", data::VarLenFeature(data::FeatureType::kBytes)},
  });
  return parser;
}

// Every feature a fixed size, so parse_into applies (Fashion-MNIST's layout, smaller).
const data::ExampleParser& fixed_parser() {
  static const data::ExampleParser parser({
      {"image", data::RawBytesFeature(DType::kUInt8, {2, 2, 1})},
      {"label", data::FixedLenFeature(data::FeatureType::kInt64)},
      {"weights", data::FixedLenFeature(data::FeatureType::kFloat, {3})},
  });
  return parser;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view record = fuzz::as_view(data, size);
  const data::RecordLocation where{.file = "fuzz.tfrecord", .index = 3, .offset = 120};
  try {
    const data::Example ex = data::Example::parse(record, "fuzz record");
    (void)ex.serialize();
  } catch (const Error&) {
  }
  try {
    std::vector<data::ParsedFeature> out;
    mixed_parser().parse(record, where, &out);
  } catch (const Error&) {
  }
  const data::ExampleParser& fixed = fixed_parser();
  uint8_t image[4];
  int64_t label;
  float weights[3];
  void* dst[] = {image, &label, weights};
  data::ExampleTemplate learned;
  for (int pass = 0; pass < 2; ++pass) {
    try {
      fixed.parse_into(record, where, dst, &learned);
    } catch (const Error&) {
    }
  }
  return 0;
}
