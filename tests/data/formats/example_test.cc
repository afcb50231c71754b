// tf.train.Example: protobuf round trips, wire bytes known from the proto's field numbers, the
// fast parser against protobuf (packed and unpacked lists), FixedLen/VarLen/defaults/decode_raw, and
// errors that name the feature and the record; parse_into's template for records laid out alike.
#include "strata/data/example.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"

namespace strata::data {
namespace {

using test::message_of;

Example sample() {
  Example ex;
  ex.set_bytes("image", std::string("\x01\x02\x03\xff", 4))
      .set_int64s("label", {7})
      .set_floats("weights", {0.5f, -1.25f, 3.0f})
      .set("tags", Feature::of_bytes({"a", "bc"}))
      .set_int64s("ids", {-1, 0, 300, int64_t{1} << 40});
  return ex;
}

TEST(ExampleTest, ProtobufRoundTrip) {
  const Example ex = sample();
  const std::string bytes = ex.serialize();
  EXPECT_EQ(Example::parse(bytes), ex);
  EXPECT_EQ(ex.serialize(), bytes);  // deterministic
  EXPECT_EQ(Example().serialize(), std::string("\x0a\x00", 2));
}

TEST(ExampleTest, WireBytesFollowTensorFlowFieldNumbers) {
  Example ex;
  ex.set_int64s("a", {1});
  // Example.features = 1 { Features.feature = 1 { key = 1 "a", value = 2 { Feature.int64_list = 3
  //   { Int64List.value = 1 packed [1] } } } }
  const std::string want(
      "\x0a\x0c\x0a\x0a\x0a\x01"
      "a"
      "\x12\x05\x1a\x03\x0a\x01\x01",
      14);
  EXPECT_EQ(ex.serialize(), want);
  Example fb;
  fb.set_floats("f", {1.0f}).set_bytes("b", "xy");
  // bytes_list = 1 and float_list = 2 (packed fixed32); map entries sorted by key: "b" then "f".
  const std::string want2(
      "\x0a\x1c"
      "\x0a\x0b\x0a\x01"
      "b"
      "\x12\x06\x0a\x04\x0a\x02"
      "xy"
      "\x0a\x0d\x0a\x01"
      "f"
      "\x12\x08\x12\x06\x0a\x04\x00\x00\x80\x3f",
      30);
  EXPECT_EQ(fb.serialize(), want2);
}

TEST(ExampleTest, ParserAgreesWithProtobuf) {
  const std::string bytes = sample().serialize();
  ExampleParser parser({{"image", FixedLenFeature(FeatureType::kBytes)},
                        {"label", FixedLenFeature(FeatureType::kInt64)},
                        {"weights", FixedLenFeature(FeatureType::kFloat, {3})},
                        {"tags", VarLenFeature(FeatureType::kBytes)},
                        {"ids", VarLenFeature(FeatureType::kInt64)}});
  auto out = parser.parse(bytes);
  EXPECT_EQ(out["image"].bytes, (std::vector<std::string>{std::string("\x01\x02\x03\xff", 4)}));
  EXPECT_EQ(out["label"].values.shape(), Shape{});
  EXPECT_EQ(out["label"].values.item<int64_t>(), 7);
  EXPECT_EQ(out["weights"].values.to_vector<float>(), (std::vector<float>{0.5f, -1.25f, 3.0f}));
  EXPECT_EQ(out["tags"].bytes, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(out["ids"].values.dtype(), DType::kInt64);
  EXPECT_EQ(out["ids"].values.to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 300, int64_t{1} << 40}));
  EXPECT_EQ(parser.names(), (std::vector<std::string>{"ids", "image", "label", "tags", "weights"}));
}

TEST(ExampleTest, UnpackedListsAndRepeatedKeysParseLikeProtobuf) {
  // int64_list with two unpacked values (tag 0x08) and float_list with one unpacked fixed32 (tag 0x0d);
  // the key "n" appears twice: the last entry wins, as in a protobuf map.
  const std::string n1(
      "\x0a\x09\x0a\x01"
      "n"
      "\x12\x04\x1a\x02\x08\x05",
      11);
  const std::string n2(
      "\x0a\x0b\x0a\x01"
      "n"
      "\x12\x06\x1a\x04\x08\x02\x08\x03",
      13);
  const std::string f(
      "\x0a\x0c\x0a\x01"
      "f"
      "\x12\x07\x12\x05\x0d\x00\x00\x20\x40",
      14);
  const std::string features = n1 + n2 + f;
  const std::string record = std::string("\x0a", 1) + static_cast<char>(features.size()) + features;

  const Example ex = Example::parse(record);
  EXPECT_EQ(ex.find("n")->int64s, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ex.find("f")->floats, (std::vector<float>{2.5f}));

  ExampleParser parser({{"n", VarLenFeature(FeatureType::kInt64)}, {"f", FixedLenFeature(FeatureType::kFloat)}});
  auto out = parser.parse(record);
  EXPECT_EQ(out["n"].values.to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out["f"].values.item<float>(), 2.5f);
}

TEST(ExampleTest, DecodeRawImage) {
  std::string pixels(28 * 28, '\0');
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>(i % 251);
  Example ex;
  ex.set_bytes("image", pixels).set_int64s("label", {3});
  ExampleParser parser(
      {{"image", RawBytesFeature(DType::kUInt8, {28, 28, 1})}, {"label", FixedLenFeature(FeatureType::kInt64)}});
  std::vector<ParsedFeature> out;
  parser.parse(ex.serialize(), {}, &out);
  ASSERT_EQ(out.size(), 2u);
  const Tensor& image = out[0].values;
  EXPECT_EQ(image.dtype(), DType::kUInt8);
  EXPECT_EQ(image.shape(), (Shape{28, 28, 1}));
  EXPECT_EQ(image.data<uint8_t>()[0], 0);
  EXPECT_EQ(image.data<uint8_t>()[300], 300 % 251);
  EXPECT_EQ(image.data<uint8_t>()[783], 783 % 251);

  // decode_raw on its own: little-endian elements, one inferred dimension.
  const std::string two_floats("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  EXPECT_EQ(decode_raw(two_floats, DType::kFloat32).to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(decode_raw(two_floats, DType::kUInt8, {2, -1}).shape(), (Shape{2, 4}));
  EXPECT_NE(message_of<InvalidArgument>([&] { decode_raw(two_floats, DType::kInt64, {2}); }).find("do not fit"),
            std::string::npos);
  EXPECT_THROW(decode_raw("abc", DType::kFloat32), InvalidArgument);
}

TEST(ExampleTest, DefaultsFillMissingFeatures) {
  Example ex;
  ex.set_int64s("label", {1});
  ExampleParser parser({{"label", FixedLenFeature(FeatureType::kInt64)},
                        {"score", FixedLenFeature(FeatureType::kFloat, {2}, Feature::of_floats({0.5f, 1.5f}))},
                        {"name", FixedLenFeature(FeatureType::kBytes, {}, Feature::of_bytes({"none"}))},
                        {"extra", VarLenFeature(FeatureType::kFloat)}});
  auto out = parser.parse(ex.serialize());
  EXPECT_EQ(out["score"].values.to_vector<float>(), (std::vector<float>{0.5f, 1.5f}));
  EXPECT_EQ(out["score"].values.shape(), (Shape{2}));
  EXPECT_EQ(out["name"].bytes, (std::vector<std::string>{"none"}));
  EXPECT_EQ(out["extra"].values.shape(), (Shape{0}));
}

// parse_into with an ExampleTemplate: records laid out like the last one parsed in full are read by
// the template (hits() counts them) and give exactly what the full parse gives; anything else (another
// size, other structure bytes, a value run that does not decode) takes the full path, with its errors.
struct ParsedRow {
  uint8_t image[4];
  int64_t label[2];
  float weights[3];
};

ExampleParser row_parser() {
  return ExampleParser({{"image", RawBytesFeature(DType::kUInt8, {4})},
                        {"label", FixedLenFeature(FeatureType::kInt64, {2})},
                        {"weights", FixedLenFeature(FeatureType::kFloat, {3})}});
}

std::string row_record(std::string image, std::vector<int64_t> label, std::vector<float> weights) {
  Example ex;
  ex.set_bytes("image", image).set_int64s("label", std::move(label)).set_floats("weights", std::move(weights));
  return ex.serialize();
}

ParsedRow parse_row(const ExampleParser& parser, const std::string& record, ExampleTemplate* learned) {
  ParsedRow row{};
  void* dst[] = {row.image, row.label, row.weights};
  parser.parse_into(record, {.index = 5}, dst, learned);
  return row;
}

void expect_same_row(const ParsedRow& a, const ParsedRow& b) {
  EXPECT_EQ(std::memcmp(a.image, b.image, sizeof a.image), 0);
  EXPECT_EQ(a.label[0], b.label[0]);
  EXPECT_EQ(a.label[1], b.label[1]);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.weights[i], b.weights[i]);
}

TEST(ExampleTest, ParseIntoReadsRecordsLaidOutLikeTheLastByItsTemplate) {
  const ExampleParser parser = row_parser();
  ExampleTemplate learned;
  EXPECT_FALSE(learned.learned());

  const std::string first = row_record("abcd", {1, 2}, {0.5f, 1.5f, 2.5f});
  const std::string second = row_record(std::string("\x00\xff\x10\x7f", 4), {120, 0}, {-1.0f, 3.0f, 1e30f});
  ASSERT_EQ(first.size(), second.size());
  expect_same_row(parse_row(parser, first, &learned), parse_row(parser, first, nullptr));
  EXPECT_TRUE(learned.learned());
  EXPECT_EQ(learned.hits(), 0);
  const ParsedRow by_template = parse_row(parser, second, &learned);
  EXPECT_EQ(learned.hits(), 1);
  expect_same_row(by_template, parse_row(parser, second, nullptr));
  EXPECT_EQ(by_template.label[0], 120);
  EXPECT_EQ(by_template.weights[2], 1e30f);

  // A label of two varint bytes changes the record's size: parsed in full, then learned.
  const std::string wider = row_record("wxyz", {300, 7}, {0.0f, 0.0f, 0.0f});
  ASSERT_NE(wider.size(), first.size());
  const ParsedRow full = parse_row(parser, wider, &learned);
  EXPECT_EQ(learned.hits(), 1);
  EXPECT_EQ(full.label[0], 300);
  EXPECT_EQ(full.label[1], 7);
  parse_row(parser, row_record("wxyz", {7, 300}, {1.0f, 1.0f, 1.0f}), &learned);
  EXPECT_EQ(learned.hits(), 2);

  // The same size and values, but the map entries in another order: the structure bytes differ.
  auto entry = [](const Example& one) { return one.serialize().substr(2); };  // drop Example's tag and length
  Example image, label, weights;
  image.set_bytes("image", "abcd");
  label.set_int64s("label", {1, 2});
  weights.set_floats("weights", {0.5f, 1.5f, 2.5f});
  const std::string features = entry(weights) + entry(image) + entry(label);
  const std::string reordered = std::string("\x0a", 1) + static_cast<char>(features.size()) + features;
  ASSERT_EQ(reordered.size(), first.size());
  parse_row(parser, first, &learned);
  const int64_t hits = learned.hits();
  expect_same_row(parse_row(parser, reordered, &learned), parse_row(parser, first, nullptr));
  EXPECT_EQ(learned.hits(), hits);
}

TEST(ExampleTest, ParseIntoTemplateKeepsTheFullParsesErrors) {
  const ExampleParser parser = row_parser();
  ExampleTemplate learned;
  const std::string good = row_record("abcd", {1, 2}, {0.5f, 1.5f, 2.5f});
  parse_row(parser, good, &learned);
  ASSERT_TRUE(learned.learned());
  const size_t run = good.find(std::string("\x01\x02", 2));
  ASSERT_NE(run, std::string::npos);

  // The label run holds one two-byte varint instead of two values: the size and structure bytes match
  // the template, but the values do not decode to the shape, so the full parse reports it.
  std::string one_value = good;
  one_value[run] = '\x81';
  const std::string msg = message_of<InvalidArgument>([&] { parse_row(parser, one_value, &learned); });
  EXPECT_EQ(msg, message_of<InvalidArgument>([&] { parse_row(parser, one_value, nullptr); }));
  EXPECT_NE(msg.find("'label' has 1 values but shape [2] wants 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("record 5"), std::string::npos) << msg;

  // The failed record left the template as it was.
  EXPECT_EQ(learned.hits(), 0);
  parse_row(parser, row_record("dcba", {9, 8}, {1.0f, 2.0f, 3.0f}), &learned);
  EXPECT_EQ(learned.hits(), 1);

  // Two values and then a varint cut off at the run's end: malformed, as in the full parse.
  const std::string wide = row_record("abcd", {1, 200}, {0.5f, 1.5f, 2.5f});  // run 01 c8 01
  parse_row(parser, wide, &learned);
  const size_t wide_run = wide.find(std::string("\x01\xc8\x01", 3));
  ASSERT_NE(wide_run, std::string::npos);
  std::string cut = wide;
  cut[wide_run + 1] = '\x01';
  cut[wide_run + 2] = '\x81';
  EXPECT_EQ(message_of<DataCorrupt>([&] { parse_row(parser, cut, &learned); }),
            message_of<DataCorrupt>([&] { parse_row(parser, cut, nullptr); }));
  EXPECT_EQ(learned.hits(), 1);
}

TEST(ExampleTest, ParseIntoLearnsOnlyRecordsWhoseFeaturesAreRuns) {
  // Unpacked numbers are one value per tag, not one run.
  const std::string unpacked(
      "\x0a\x0b\x0a\x09\x0a\x01"
      "n"
      "\x12\x04\x1a\x02\x08\x05",
      13);
  ExampleParser numbers({{"n", FixedLenFeature(FeatureType::kInt64)}});
  ExampleTemplate learned;
  int64_t n = 0;
  void* dst[] = {&n};
  numbers.parse_into(unpacked, {}, dst, &learned);
  EXPECT_EQ(n, 5);
  EXPECT_FALSE(learned.learned());

  // A default standing in for a missing feature is not in the record.
  ExampleParser with_default({{"n", FixedLenFeature(FeatureType::kInt64)},
                              {"m", FixedLenFeature(FeatureType::kInt64, {}, Feature::of_int64s({4}))}});
  Example ex;
  ex.set_int64s("n", {6});
  int64_t values[2] = {};
  void* two[] = {&values[1], &values[0]};  // names(): "m", "n"
  with_default.parse_into(ex.serialize(), {}, two, &learned);
  EXPECT_EQ(values[0], 6);
  EXPECT_EQ(values[1], 4);
  EXPECT_FALSE(learned.learned());
}

TEST(ExampleTest, ErrorsNameTheFeatureAndRecord) {
  Example ex;
  ex.set_floats("label", {1.0f}).set_int64s("pair", {1, 2, 3});
  const std::string bytes = ex.serialize();
  const RecordLocation where{.file = "shard-00001.tfrecord", .index = 12, .offset = 3456};

  ExampleParser missing({{"image", FixedLenFeature(FeatureType::kBytes)}});
  std::string msg = message_of<InvalidArgument>([&] { missing.parse(bytes, where); });
  EXPECT_NE(msg.find("'image'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("record 12 (byte offset 3456) of shard-00001.tfrecord"), std::string::npos) << msg;

  ExampleParser mistyped({{"label", FixedLenFeature(FeatureType::kInt64)}});
  msg = message_of<InvalidArgument>([&] { mistyped.parse(bytes, where); });
  EXPECT_NE(msg.find("'label' is a float_list but the spec wants a int64_list"), std::string::npos) << msg;
  EXPECT_NE(msg.find("record 12"), std::string::npos) << msg;

  ExampleParser wrong_size({{"pair", FixedLenFeature(FeatureType::kInt64, {2})}});
  msg = message_of<InvalidArgument>([&] { wrong_size.parse(bytes, where); });
  EXPECT_NE(msg.find("'pair' has 3 values but shape [2] wants 2"), std::string::npos) << msg;

  ExampleParser raw({{"pair", RawBytesFeature(DType::kUInt8, {4})}});
  EXPECT_THROW(raw.parse(bytes, where), InvalidArgument);

  // Bytes that are not an Example at all.
  const std::string junk("\x0a\x7f\x01", 3);
  msg = message_of<DataCorrupt>([&] { mistyped.parse(junk, where); });
  EXPECT_NE(msg.find("record 12"), std::string::npos) << msg;
  EXPECT_THROW(Example::parse(junk, "record 3"), DataCorrupt);

  // Bad specs are caught when the parser is made.
  EXPECT_THROW(ExampleParser({{"x", FixedLenFeature(FeatureType::kInt64, {2}, Feature::of_int64s({1}))}}),
               InvalidArgument);
  EXPECT_THROW(ExampleParser({{"x", FixedLenFeature(FeatureType::kInt64, {}, Feature::of_floats({1.0f}))}}),
               InvalidArgument);
  FeatureSpec bad = FixedLenFeature(FeatureType::kFloat);
  bad.decode_raw = DType::kUInt8;
  EXPECT_THROW(ExampleParser({{"x", bad}}), InvalidArgument);
}

}  // namespace
}  // namespace strata::data
