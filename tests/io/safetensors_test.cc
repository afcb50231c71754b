// safetensors: round trips of every dtype, the exact bytes of a tiny file, every kind of corrupt file,
// per-tensor CRC-32C checksums (flipped bits are caught, files without checksums load), check_matches messages and
// atomic writes that leave the old file when they fail.
#include "strata/io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"
#include "test_util.h"

namespace strata::io {
namespace {

using strata::test::message_of;
using strata::test::read_bytes;
using strata::test::ScratchDir;
using strata::test::write_bytes;
using testing::HasSubstr;

// Element-wise equality of two host tensors, bytes included (so NaN payloads and -0 count).
void expect_same(const Tensor& a, const Tensor& b, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.nbytes(), b.nbytes());
  if (a.nbytes() > 0) {
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
  }
}

NamedTensors every_dtype() {
  Tensor bf = Tensor::from_vector<float>({1.5f, -0.25f, 3.0e10f, 0.0f}, {2, 2}).to(DType::kBFloat16);
  return {
      {"dense/kernel", test::random_tensor({3, 4}, 7)},
      {"ints", Tensor::from_vector<int32_t>({-2147483647 - 1, -1, 0, 2147483647}, {4})},
      {"longs", Tensor::from_vector<int64_t>({int64_t{1} << 62, -5, 9}, {3, 1})},
      {"bytes", Tensor::from_vector<uint8_t>({0, 1, 128, 255, 7}, {5})},
      {"half", bf},
      {"scalar", Tensor::scalar(-3.25f)},
      {"empty", Tensor::empty({0}, DType::kInt64)},
      {"empty_3d", Tensor::empty({2, 0, 3})},
      {"odd/u8", Tensor::from_vector<uint8_t>({9, 8, 7}, {3})},  // leaves the next tensor unaligned
      {"after_odd", Tensor::from_vector<float>({1.0f, 2.0f}, {1, 2})},
  };
}

TEST(SafetensorsTest, RoundTripsEveryDtypeKeepingOrderAndMetadata) {
  ScratchDir dir;
  const NamedTensors tensors = every_dtype();
  const std::map<std::string, std::string> meta = {{"format", "strata"}, {"step", "42"}, {"note", "ünïcode ok"}};
  save_safetensors(dir / "w.safetensors", tensors, meta);
  std::map<std::string, std::string> loaded_meta;
  const NamedTensors loaded = load_safetensors(dir / "w.safetensors", &loaded_meta);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(loaded[i].first, tensors[i].first);
    expect_same(loaded[i].second, tensors[i].second, tensors[i].first);
  }
  EXPECT_EQ(loaded_meta, meta);
  EXPECT_EQ(loaded[5].second.rank(), 0);
  EXPECT_EQ(loaded[5].second.item<float>(), -3.25f);
  EXPECT_NO_THROW(check_matches(tensors, loaded, "w.safetensors"));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.safetensors"});  // no temporary file left
}

TEST(SafetensorsTest, EmptyListAndNoMetadataRoundTrip) {
  ScratchDir dir;
  save_safetensors(dir / "none.safetensors", {});
  std::map<std::string, std::string> meta = {{"stale", "x"}};
  EXPECT_TRUE(load_safetensors(dir / "none.safetensors", &meta).empty());
  EXPECT_TRUE(meta.empty());
  EXPECT_EQ(read_bytes(dir / "none.safetensors"), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
}

TEST(SafetensorsTest, TinyFileMatchesTheFormatByteForByte) {
  ScratchDir dir;
  save_safetensors(
      dir / "t.safetensors",
      {{"a", Tensor::from_vector<float>({1.0f, -2.0f}, {2})}, {"b", Tensor::from_vector<uint8_t>({1, 2, 3}, {3, 1})}},
      {{"k", "v"}});
  const std::string bytes = read_bytes(dir / "t.safetensors");
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u) << "the data must start 8-byte aligned";
  ASSERT_EQ(bytes.size(), 8 + n + 11);
  const std::string header = bytes.substr(8, n);
  // The caller's metadata, then each tensor's CRC-32C (Castagnoli) of its data bytes as 8 hex digits;
  // the values were computed by a bitwise reference (polynomial 0x82F63B78; "123456789" -> e3069283).
  const std::string json = R"({"__metadata__":{"k":"v","crc32c:a":"aa36f2c9","crc32c:b":"f130f21e"},)"
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"U8","shape":[3,1],"data_offsets":[8,11]}})";
  EXPECT_EQ(header.substr(0, json.size()), json);
  EXPECT_EQ(header.substr(json.size()), std::string(n - json.size(), ' '));
  EXPECT_LT(n - json.size(), 8u);
  // 1.0f and -2.0f little-endian, then the three bytes.
  EXPECT_EQ(bytes.substr(8 + n), std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x01\x02\x03", 11));
}

TEST(SafetensorsTest, ReadsFilesWhoseHeaderOrderDiffersFromTheDataOrder) {
  // Other writers (the reference one sorts keys) may list tensors in any order; we return data order.
  ScratchDir dir;
  const std::string header = R"({"z":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                             R"("a":{"dtype":"I32","shape":[],"data_offsets":[4,8]}})";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  file += header;
  file += std::string("\x05\0\0\0\x06\0\0\0", 8);
  write_bytes(dir / "f.safetensors", file);
  const NamedTensors t = load_safetensors(dir / "f.safetensors");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].first, "z");
  EXPECT_EQ(t[0].second.to_vector<int32_t>(), std::vector<int32_t>{5});
  EXPECT_EQ(t[1].first, "a");
  EXPECT_EQ(t[1].second.item<int32_t>(), 6);
}

// A file of `header` (no padding) and `data` with a correct length prefix unless `length` is given.
std::string raw_file(const std::string& header, const std::string& data, int64_t length = -1) {
  const uint64_t n = length < 0 ? header.size() : static_cast<uint64_t>(length);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

TEST(SafetensorsTest, CorruptFilesRaiseDataCorruptNamingTheFileAndTheProblem) {
  ScratchDir dir;
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  const std::string eight(8, '\x01');
  struct Case {
    const char* what;
    std::string bytes;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"short file", std::string("\x02\0\0", 3), "too short"},
      {"header length beyond file", raw_file("{}", "", 4096), "runs past the end of the file"},
      {"huge header length", raw_file("{}", "", int64_t{1} << 40), "larger than"},
      {"bad JSON", raw_file(R"({"a": {"dtype": )", ""), "not valid JSON"},
      {"header not an object", raw_file("[1, 2]", ""), "not an object"},
      {"entry not an object", raw_file(R"({"a": 3})", ""), "tensor 'a' is described by a JSON number"},
      {"missing offsets", raw_file(R"({"a":{)" + f32x2 + "}}", eight), "has no \"data_offsets\""},
      {"unknown dtype", raw_file(R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", eight), "dtype \"F16\""},
      {"negative dimension", raw_file(R"({"a":{"dtype":"U8","shape":[-8],"data_offsets":[0,8]}})", eight),
       "non-negative integers"},
      {"shape/offset mismatch", raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "needs 12 bytes but data_offsets [0, 8] hold 8 bytes"},
      {"offsets reversed", raw_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[8,0]}})", eight), "end before"},
      {"offsets out of range", raw_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[4,12]}})", eight),
       "run past the end of the data (8 bytes after the header)"},
      {"overlapping offsets",
       raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],)"
                R"("data_offsets":[4,8]}})",
                eight),
       "overlaps tensor"},
      {"gap", raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight), "belong to no tensor"},
      {"trailing bytes", raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       "the last 4 bytes of the data belong to no tensor"},
      {"metadata not strings", raw_file(R"({"__metadata__":{"step":3}})", ""), "not a string"},
      {"checksum of no tensor",
       raw_file(R"({"__metadata__":{"crc32c:b":"00000000"},"a":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", eight),
       "holds checksum 'crc32c:b' for tensor 'b', which the file does not have"},
      {"checksum not hex",
       raw_file(R"({"__metadata__":{"crc32c:a":"0x123456"},"a":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", eight),
       "checksum 'crc32c:a' is \"0x123456\", not 8 hex digits"},
      {"offsets not a pair", raw_file(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0]}})", eight), "not [begin, end]"},
      {"shape overflow",
       raw_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight),
       "more bytes than fit in 64 bits"},
      // Seen while fuzzing (fuzz/safetensors_fuzzer): a shape nested 100000 deep overflowed the stack when its error
      // message printed it; the header's nesting is capped (core/json_depth.h) before it is parsed.
      {"nesting too deep",
       raw_file(R"({"a":{"dtype":"F32","shape":)" + std::string(100000, '[') + std::string(100000, ']') +
                    R"(,"data_offsets":[0,8]}})",
                eight),
       "nests arrays or objects deeper than 100 levels"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir / "bad.safetensors";
    write_bytes(path, c.bytes);
    const std::string msg = message_of<DataCorrupt>([&] { load_safetensors(path); });
    EXPECT_THAT(msg, HasSubstr(path));
    EXPECT_THAT(msg, HasSubstr(c.expect));
  }
}

// The header (as JSON) and the data of a safetensors file's bytes, and the reverse (padding the header).
std::pair<nlohmann::ordered_json, std::string> split_file(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return {nlohmann::ordered_json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}
std::string join_file(const nlohmann::ordered_json& header, const std::string& data) {
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  return raw_file(h, data);
}

// Flips `mask` in byte `byte` of tensor `name`'s data in the file at `path`; returns the recorded CRC.
std::string flip_bits(const std::string& path, const std::string& name, uint64_t byte, uint8_t mask) {
  const auto [header, data] = split_file(read_bytes(path));
  std::string bytes = read_bytes(path);
  const uint64_t data_start = bytes.size() - data.size();
  const uint64_t at = data_start + header[name]["data_offsets"][0].get<uint64_t>() + byte;
  EXPECT_LT(at, data_start + header[name]["data_offsets"][1].get<uint64_t>());
  bytes[at] = static_cast<char>(static_cast<uint8_t>(bytes[at]) ^ mask);
  write_bytes(path, bytes);
  return header["__metadata__"]["crc32c:" + name].get<std::string>();
}

TEST(SafetensorsTest, FlippedBitInTensorDataIsDataCorruptNamingTheFileAndTheTensor) {
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  for (const auto& [name, byte] : std::vector<std::pair<std::string, uint64_t>>{
           {"dense/kernel", 0}, {"longs", 23}, {"bytes", 2}, {"after_odd", 7}, {"scalar", 1}}) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}}) {
      SCOPED_TRACE(name + " byte " + std::to_string(byte) + " mask " + std::to_string(mask));
      save_safetensors(path, every_dtype());
      const std::string recorded = flip_bits(path, name, byte, mask);
      const std::string msg = message_of<DataCorrupt>([&] { load_safetensors(path); });
      EXPECT_THAT(msg, HasSubstr(path + ": tensor '" + name + "' is damaged"));
      EXPECT_THAT(msg, testing::ContainsRegex("has CRC-32C [0-9a-f]{8} but the file records " + recorded));
      EXPECT_THAT(msg, testing::Not(HasSubstr("CRC-32C " + recorded + " ")));  // the two CRCs differ
    }
  }
}

TEST(SafetensorsTest, FlippedExponentBitsAreDataCorrupt) {
  // A flipped exponent bit turns a weight into a huge, tiny or non-finite value that trains on as garbage.
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  const NamedTensors tensors = {{"dense/kernel", test::random_tensor({16, 8}, 3)},
                                {"half", Tensor::from_vector<float>({1.5f, -0.25f, 2.0f}, {3}).to(DType::kBFloat16)}};
  // F32 element 5: exponent bits 30..23 are bits 6..0 of byte 3 and bit 7 of byte 2. BF16 element 1 likewise.
  const struct {
    const char* name;
    uint64_t byte;
    uint8_t mask;
  } flips[] = {{"dense/kernel", 5 * 4 + 3, 0x40},
               {"dense/kernel", 5 * 4 + 3, 0x7f},
               {"dense/kernel", 5 * 4 + 2, 0x80},
               {"half", 1 * 2 + 1, 0x40},
               {"half", 1 * 2 + 1, 0x01}};
  for (const auto& f : flips) {
    SCOPED_TRACE(std::string(f.name) + " byte " + std::to_string(f.byte) + " mask " + std::to_string(f.mask));
    save_safetensors(path, tensors);
    flip_bits(path, f.name, f.byte, f.mask);
    EXPECT_THAT(message_of<DataCorrupt>([&] { load_safetensors(path); }),
                HasSubstr(path + ": tensor '" + f.name + "' is damaged"));
  }
}

TEST(SafetensorsTest, FilesWithoutChecksumsLoad) {
  // Other writers (the reference implementation, PyTorch) record no checksums: such files load, and a
  // file that has checksums for only some tensors has those checked.
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  const NamedTensors tensors = every_dtype();
  save_safetensors(path, tensors, {{"format", "pt"}});
  auto [header, data] = split_file(read_bytes(path));
  ASSERT_TRUE(header["__metadata__"].contains("crc32c:dense/kernel"));
  auto without = header;
  without["__metadata__"] = {{"format", "pt"}};
  write_bytes(path, join_file(without, data));
  std::map<std::string, std::string> meta;
  const NamedTensors loaded = load_safetensors(path, &meta);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) expect_same(loaded[i].second, tensors[i].second, tensors[i].first);
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"format", "pt"}}));
  // No metadata at all.
  without.erase("__metadata__");
  write_bytes(path, join_file(without, data));
  EXPECT_EQ(load_safetensors(path).size(), tensors.size());
  // Only "ints" has its checksum: damage to "longs" goes unseen, damage to "ints" does not.
  auto some = without;
  some["__metadata__"] = {{"crc32c:ints", header["__metadata__"]["crc32c:ints"]}};
  write_bytes(path, join_file(some, data));
  std::string bytes = read_bytes(path);
  const uint64_t data_start = bytes.size() - data.size();
  bytes[data_start + some["longs"]["data_offsets"][0].get<uint64_t>()] ^= 0x10;
  write_bytes(path, bytes);
  EXPECT_EQ(load_safetensors(path)[2].second.to_vector<int64_t>()[0], (int64_t{1} << 62) ^ 0x10);
  bytes[data_start + some["ints"]["data_offsets"][0].get<uint64_t>()] ^= 0x10;
  write_bytes(path, bytes);
  EXPECT_THAT(message_of<DataCorrupt>([&] { load_safetensors(path); }), HasSubstr("tensor 'ints' is damaged"));
}

TEST(SafetensorsTest, TruncatedFileIsCorrupt) {
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  save_safetensors(path, every_dtype());
  const std::string bytes = read_bytes(path);
  for (size_t keep : {size_t{0}, size_t{5}, size_t{12}, bytes.size() - 1}) {
    SCOPED_TRACE(keep);
    write_bytes(path, bytes.substr(0, keep));
    EXPECT_THAT(message_of<DataCorrupt>([&] { load_safetensors(path); }), HasSubstr(path));
  }
}

TEST(SafetensorsTest, MissingFileIsAnIoErrorNamingIt) {
  ScratchDir dir;
  const std::string path = dir / "nope.safetensors";
  EXPECT_THAT(message_of<IoError>([&] { load_safetensors(path); }), HasSubstr(path));
  EXPECT_THAT(message_of<IoError>([&] { load_safetensors(dir.path()); }), HasSubstr("not a regular file"));
}

TEST(SafetensorsTest, SaveRejectsBadNamesAndUndefinedTensors) {
  ScratchDir dir;
  const std::string path = dir / "x.safetensors";
  const Tensor t = Tensor::zeros({2});
  EXPECT_THAT(message_of<InvalidArgument>([&] {
                save_safetensors(path, {{"w", t}, {"w", t}});
              }),
              HasSubstr("two tensors are named 'w'"));
  EXPECT_THAT(message_of<InvalidArgument>([&] {
                save_safetensors(path, {{"w", Tensor()}});
              }),
              HasSubstr("tensor 'w' is undefined"));
  EXPECT_THAT(message_of<InvalidArgument>([&] {
                save_safetensors(path, {{"__metadata__", t}});
              }),
              HasSubstr("reserved"));
  EXPECT_THAT(message_of<InvalidArgument>([&] { save_safetensors(path, {{"", t}}); }), HasSubstr("empty name"));
  EXPECT_THAT(message_of<InvalidArgument>([&] { save_safetensors(path, {{"bad\xff", t}}); }), HasSubstr("UTF-8"));
  EXPECT_THAT(message_of<InvalidArgument>([&] {
                save_safetensors(path, {{"w", t}}, {{"crc32c:w", "00000000"}});
              }),
              HasSubstr("metadata key 'crc32c:w' is reserved"));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SafetensorsTest, CheckMatchesNamesTheFirstDifference) {
  const NamedTensors expected = {{"w", Tensor::zeros({2, 3})}, {"b", Tensor::zeros({3})}};
  EXPECT_NO_THROW(check_matches(expected, {{"b", Tensor::ones({3})}, {"w", Tensor::ones({2, 3})}}, "f"));
  const auto msg = [&](const NamedTensors& loaded) {
    return message_of<InvalidArgument>([&] { check_matches(expected, loaded, "model.safetensors"); });
  };
  EXPECT_THAT(msg({{"w", Tensor::zeros({2, 3})}}), HasSubstr("model.safetensors: tensor 'b' ([3] float32) is missing"));
  EXPECT_THAT(msg({{"w", Tensor::zeros({3, 2})}, {"b", Tensor::zeros({3})}}),
              HasSubstr("tensor 'w' has shape [3, 2] but [2, 3] was expected"));
  EXPECT_THAT(msg({{"w", Tensor::zeros({2, 3}, DType::kBFloat16)}, {"b", Tensor::zeros({3})}}),
              HasSubstr("tensor 'w' has dtype bfloat16 but float32 was expected"));
  EXPECT_THAT(
      msg({{"w", Tensor::zeros({2, 3})}, {"b", Tensor::zeros({3})}, {"extra", Tensor::zeros({1}, DType::kInt64)}}),
      HasSubstr("unexpected tensor 'extra' ([1] int64)"));
  const std::string several = msg({{"b", Tensor::zeros({4})}, {"x", Tensor::zeros({1})}});
  EXPECT_THAT(several, HasSubstr("tensor 'w' ([2, 3] float32) is missing (the first of 3 differences)"));
}

TEST(SafetensorsTest, LoadMatchingChecksAgainstTheExpectedTensors) {
  ScratchDir dir;
  const std::string path = dir / "m.safetensors";
  save_safetensors(path, {{"w", Tensor::ones({2, 2})}});
  EXPECT_EQ(load_safetensors_matching(path, {{"w", Tensor::zeros({2, 2})}}).size(), 1u);
  const std::string msg = message_of<InvalidArgument>([&] {
    load_safetensors_matching(path, {{"w", Tensor::zeros({4})}});
  });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("has shape [2, 2] but [4] was expected"));
}

TEST(SafetensorsTest, OverwriteReplacesTheFileAndLeavesNoTemporaries) {
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  save_safetensors(path, {{"v", Tensor::full({3}, 1.0)}});
  save_safetensors(path, {{"v", Tensor::full({3}, 2.0)}, {"u", Tensor::zeros({1})}});
  const NamedTensors t = load_safetensors(path);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].second.to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.safetensors"});
}

TEST(SafetensorsTest, FailedWriteLeavesTheOldFileIntactAndNoPartialFile) {
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  save_safetensors(path, {{"v", Tensor::full({4}, 1.0)}});
  const std::string before = read_bytes(path);
  {
    // The new file needs 8 + header + 4 MB; let writes fail with EFBIG past 64 KB.
    strata::test::FileSizeLimit limit(64 * 1024);
    const std::string msg = message_of<IoError>([&] { save_safetensors(path, {{"v", Tensor::zeros({1024 * 1024})}}); });
    EXPECT_THAT(msg, HasSubstr(path));
    EXPECT_THAT(msg, HasSubstr("unchanged"));
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.safetensors"});
}

TEST(SafetensorsTest, MissingDirectoryIsAnIoErrorNamingTheFile) {
  ScratchDir dir;
  const std::string missing = dir / "no/such/dir/w.safetensors";
  EXPECT_THAT(message_of<IoError>([&] { save_safetensors(missing, {{"v", Tensor::zeros({1})}}); }), HasSubstr(missing));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SafetensorsTest, FailedRenameRemovesTheTemporaryFile) {
  // The target is a non-empty directory, so the final rename fails (also for root).
  ScratchDir dir;
  const std::string path = dir / "w.safetensors";
  std::filesystem::create_directory(path);
  write_bytes(path + "/keep", "x");
  const std::string msg = message_of<IoError>([&] { save_safetensors(path, {{"v", Tensor::zeros({2})}}); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("rename"));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.safetensors"});
  EXPECT_EQ(read_bytes(path + "/keep"), "x");
}

TEST(SafetensorsTest, UnwritableDirectoryIsAnIoErrorAndKeepsTheOldFile) {
  ScratchDir dir;
  const std::string ro = dir / "ro";
  std::filesystem::create_directory(ro);
  save_safetensors(ro + "/w.safetensors", {{"v", Tensor::full({2}, 5.0)}});
  const std::string before = read_bytes(ro + "/w.safetensors");
  std::filesystem::permissions(ro, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  if (::access(ro.c_str(), W_OK) == 0) {
    std::filesystem::permissions(ro, std::filesystem::perms::owner_all);
    GTEST_SKIP() << "running as root: a read-only directory is still writable (the EFBIG and rename tests cover "
                    "failed writes)";
  }
  EXPECT_THAT(message_of<IoError>([&] {
                save_safetensors(ro + "/w.safetensors", {{"v", Tensor::zeros({2})}});
              }),
              HasSubstr(ro + "/w.safetensors"));
  std::filesystem::permissions(ro, std::filesystem::perms::owner_all);
  EXPECT_EQ(read_bytes(ro + "/w.safetensors"), before);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(ro), {}), 1);
}

}  // namespace
}  // namespace strata::io
