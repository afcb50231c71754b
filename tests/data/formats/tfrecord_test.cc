// TFRecord: CRC-32C (ISA-L) known answers and against a bitwise CRC, the exact bytes of a record, round trips with and
// without compression, corrupt and truncated files (raised or skipped and counted; errors name the file, the record's
// 0-based index and its offset, also in a damaged GZIP stream), and resuming at an offset.
#include "strata/data/tfrecord.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/compression/byte_streams.h"
#include "data/formats/masked_crc32c.h"
#include "data/dataset_test_util.h"
#include "test_util.h"

namespace strata::data {
namespace {

using detail::crc32c;
using detail::mask_crc;
using detail::unmask_crc;
using test::crc_bitwise;
using test::file_bytes;
using test::kCastagnoliReflected;
using test::put_bytes;

class TFRecordTest : public test::ScratchDirTest {
 protected:
  TFRecordTest() : ScratchDirTest("strata_tfrecord_") {}
};

// Records of many sizes: empty, tiny, and larger than the reader's buffer.
std::vector<std::string> sample_records() {
  std::vector<std::string> records = {"", "a", "hello", std::string(1000, 'x')};
  std::string big(300000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 7919) >> 3);
  records.push_back(big);
  for (int i = 0; i < 50; ++i) records.push_back("record-" + std::to_string(i));
  return records;
}

std::vector<std::string> read_all(const std::string& path, TFRecordReaderOptions options = {}) {
  TFRecordReader reader(path, options);
  std::vector<std::string> out;
  std::string record;
  while (reader.read(&record)) out.push_back(record);
  return out;
}

TEST(Crc32cTest, KnownAnswers) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(crc32c("", 0), 0u);
  // Extending in pieces gives the CRC of the whole, on every alignment.
  const std::string text = "The quick brown fox jumps over the lazy dog, twice over the lazy dog";
  for (size_t cut = 0; cut <= text.size(); ++cut)
    EXPECT_EQ(detail::crc32c_extend(crc32c(text.data(), cut), text.data() + cut, text.size() - cut),
              crc32c(text.data(), text.size()));
  // Against a bitwise CRC at every length up to 1.1 KB and a few longer, from unaligned starts, extending
  // a CRC of some prefix (ISA-L takes a different path for short and long inputs).
  std::string noise(9000, '\0');
  uint32_t x = 12345;
  for (char& c : noise) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  std::vector<size_t> lengths;
  for (size_t len = 0; len <= 1100; len += (len < 300 ? 1 : 7)) lengths.push_back(len);
  for (size_t len : {4096, 4097, 8191, 8960}) lengths.push_back(len);
  for (size_t len : lengths) {
    for (size_t start : {0, 1, 5}) {
      const char* d = noise.data() + start;
      for (uint32_t init : {0u, 0xdeadbeefu})
        ASSERT_EQ(detail::crc32c_extend(init, d, len), crc_bitwise(kCastagnoliReflected, init, d, len))
            << "length " << len << " from " << start << " after " << init;
    }
  }
  EXPECT_EQ(unmask_crc(mask_crc(0xE3069283u)), 0xE3069283u);
  EXPECT_NE(mask_crc(0xE3069283u), 0xE3069283u);
}

TEST_F(TFRecordTest, BytesOfOneRecordMatchTheFormat) {
  {
    TFRecordWriter w(path("one.tfrecord"));
    w.write("hello");
    w.close();
  }
  // Computed by hand (bitwise CRC32C, masked): length 5 | masked crc | "hello" | masked crc.
  const unsigned char expected[] = {0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xea, 0xb2, 0x04,
                                    0x3e, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0xbb, 0x1f, 0x1c, 0x19};
  EXPECT_EQ(file_bytes(path("one.tfrecord")), std::string(reinterpret_cast<const char*>(expected), sizeof expected));
}

TEST_F(TFRecordTest, RoundTripEveryCompression) {
  const auto records = sample_records();
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(compression_name(c));
    const std::string p = path(std::string("rt_") + compression_name(c));
    TFRecordWriter w(p, c);
    for (const auto& r : records) w.write(r);
    w.close();
    EXPECT_EQ(w.records_written(), static_cast<int64_t>(records.size()));
    EXPECT_EQ(read_all(p, {.compression = c}), records);
    // Small buffers exercise records split across refills.
    EXPECT_EQ(read_all(p, {.compression = c, .buffer_size = 4096}), records);
    EXPECT_EQ(detect_compression(p), c);
  }
}

TEST_F(TFRecordTest, WriterOptionsEveryStrategyLevelAndMemLevelRoundTrip) {
  const auto records = sample_records();
  for (Compression c : {Compression::kGzip, Compression::kZlib})
    for (int strategy = 0; strategy <= 4; ++strategy)
      for (int level : {-1, 0, 1, 9})
        for (int mem_level : {1, 9}) {
          const TFRecordWriterOptions o{.compression = c,
                                        .compression_level = level,
                                        .mem_level = mem_level,
                                        .compression_strategy = static_cast<CompressionStrategy>(strategy)};
          SCOPED_TRACE(std::string(compression_name(c)) + " " + compression_strategy_name(o.compression_strategy) +
                       " level " + std::to_string(level) + " mem_level " + std::to_string(mem_level));
          const std::string p = path("opts");
          TFRecordWriter w(p, o);
          for (const auto& r : records) w.write(r);
          w.close();
          ASSERT_EQ(read_all(p, {.compression = c}), records);
        }
}

TEST_F(TFRecordTest, WriterOptionsChangeTheCompressedBytes) {
  // Image-like rows: runs of zeros with short repeats, what the strategies treat differently.
  std::string rows;
  for (int i = 0; i < 20000; ++i) rows.push_back(static_cast<char>(i % 28 < 10 ? 0 : (i * 37 / 11) % 7));
  auto size_with = [&](TFRecordWriterOptions o) {
    o.compression = Compression::kGzip;
    TFRecordWriter w(path("size"), o);
    w.write(rows);
    w.close();
    EXPECT_EQ(read_all(path("size"), {.compression = Compression::kGzip}), std::vector<std::string>{rows});
    return file_bytes(path("size"));
  };
  const std::string by_default = size_with({});
  EXPECT_GT(size_with({.compression_level = 0}).size(), rows.size());  // stored blocks
  EXPECT_GT(size_with({.compression_strategy = CompressionStrategy::kHuffmanOnly}).size(), by_default.size());
  EXPECT_NE(size_with({.compression_strategy = CompressionStrategy::kFiltered}), by_default);
  EXPECT_NE(size_with({.compression_strategy = CompressionStrategy::kRle}), by_default);
  EXPECT_NE(size_with({.compression_strategy = CompressionStrategy::kFixed}), by_default);
  // The level given to the old constructor still reaches zlib.
  TFRecordWriter stored(path("stored"), Compression::kGzip, 0);
  stored.write(rows);
  stored.close();
  EXPECT_GT(file_bytes(path("stored")).size(), rows.size());
}

TEST_F(TFRecordTest, WriterOptionsOutOfRangeAreClearErrorsBeforeTheFileIsMade) {
  const std::string p = path("never");
  auto message = [&](TFRecordWriterOptions o) {
    o.compression = Compression::kGzip;
    return test::message_of<InvalidArgument>([&] { TFRecordWriter w(p, o); });
  };
  EXPECT_NE(message({.compression_level = 10}).find("compression level 10"), std::string::npos);
  EXPECT_NE(message({.compression_level = -2}).find("compression level -2"), std::string::npos);
  EXPECT_NE(message({.mem_level = 0}).find("mem_level 0"), std::string::npos);
  EXPECT_NE(message({.mem_level = 10}).find("mem_level 10"), std::string::npos);
  EXPECT_NE(message({.compression_strategy = static_cast<CompressionStrategy>(5)}).find("compression strategy 5"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(p));
  // Without compression the zlib settings are not used, so they are not checked either.
  TFRecordWriter plain(p, TFRecordWriterOptions{.compression_level = 42});
  plain.close();

  EXPECT_EQ(parse_compression_strategy("FILTERED"), CompressionStrategy::kFiltered);
  for (int s = 0; s <= 4; ++s) {
    const auto strategy = static_cast<CompressionStrategy>(s);
    EXPECT_EQ(parse_compression_strategy(compression_strategy_name(strategy)), strategy);
  }
  EXPECT_NE(test::message_of<InvalidArgument>([] { parse_compression_strategy("lz4"); }).find("'lz4'"),
            std::string::npos);
}

TEST_F(TFRecordTest, GzipIsAStandardGzipStream) {
  TFRecordWriter w(path("a.gz"), Compression::kGzip);
  w.write("hello");
  w.close();
  // zlib's own gzip reader must give back the uncompressed TFRecord bytes.
  gzFile gz = gzopen(path("a.gz").c_str(), "rb");
  ASSERT_NE(gz, nullptr);
  char buf[64];
  const int n = gzread(gz, buf, sizeof buf);
  gzclose(gz);
  ASSERT_EQ(n, 21);
  EXPECT_EQ(std::string(buf + 12, 5), "hello");
  const std::string raw = file_bytes(path("a.gz"));
  EXPECT_EQ(static_cast<unsigned char>(raw[0]), 0x1f);
  EXPECT_EQ(static_cast<unsigned char>(raw[1]), 0x8b);
}

TEST_F(TFRecordTest, ConcatenatedGzipMembersReadAsOneFile) {
  TFRecordWriter a(path("a.gz"), Compression::kGzip), b(path("b.gz"), Compression::kGzip);
  a.write("first");
  b.write("second");
  a.close();
  b.close();
  put_bytes(path("ab.gz"), file_bytes(path("a.gz")) + file_bytes(path("b.gz")));
  EXPECT_EQ(read_all(path("ab.gz"), {.compression = Compression::kGzip}),
            (std::vector<std::string>{"first", "second"}));
}

TEST_F(TFRecordTest, BadDataCrcNamesFileAndOffset) {
  TFRecordWriter w(path("bad"));
  w.write("first");   // offset 0, 21 bytes
  w.write("second");  // offset 21
  w.write("third");
  w.close();
  std::string bytes = file_bytes(path("bad"));
  bytes[21 + 12 + 2] ^= 0x20;  // a byte of "second"
  put_bytes(path("bad"), bytes);

  const std::string msg = test::message_of<DataCorrupt>([&] { read_all(path("bad")); });
  EXPECT_NE(msg.find(path("bad")), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 21"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data CRC"), std::string::npos) << msg;

  TFRecordReader reader(path("bad"), {.skip_corrupt = true});
  std::vector<std::string> got;
  std::string r;
  while (reader.read(&r)) got.push_back(r);
  EXPECT_EQ(got, (std::vector<std::string>{"first", "third"}));
  EXPECT_EQ(reader.corrupt_records(), 1);
  EXPECT_NE(reader.first_corruption().find("byte offset 21"), std::string::npos);
}

TEST_F(TFRecordTest, BadLengthCrcResynchronisesWhenSkipping) {
  TFRecordWriter w(path("bad"));
  for (int i = 0; i < 4; ++i) w.write("record" + std::to_string(i));  // 7 bytes each: 23 per record
  w.close();
  std::string bytes = file_bytes(path("bad"));
  bytes[23 + 3] = 0x40;  // record 1's length: a huge value its CRC does not match
  put_bytes(path("bad"), bytes);

  const std::string msg = test::message_of<DataCorrupt>([&] { read_all(path("bad")); });
  EXPECT_NE(msg.find("byte offset 23"), std::string::npos) << msg;
  EXPECT_NE(msg.find("length CRC"), std::string::npos) << msg;

  TFRecordReader reader(path("bad"), {.skip_corrupt = true});
  std::vector<std::string> got;
  std::string r;
  while (reader.read(&r)) got.push_back(r);
  EXPECT_EQ(got, (std::vector<std::string>{"record0", "record2", "record3"}));
  EXPECT_EQ(reader.corrupt_records(), 1);
}

TEST_F(TFRecordTest, TruncatedLengthAndDataAreCorrupt) {
  TFRecordWriter w(path("full"));
  w.write("first");
  w.write("second");
  w.close();
  const std::string bytes = file_bytes(path("full"));
  // Cut inside the second header (5 of its 12 bytes), then inside its data.
  for (const size_t cut : {size_t{21 + 5}, size_t{21 + 12 + 3}, bytes.size() - 1}) {
    SCOPED_TRACE(cut);
    put_bytes(path("cut"), bytes.substr(0, cut));
    const std::string msg = test::message_of<DataCorrupt>([&] { read_all(path("cut")); });
    EXPECT_NE(msg.find("byte offset 21"), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

    TFRecordReader reader(path("cut"), {.skip_corrupt = true});
    std::string r;
    ASSERT_TRUE(reader.read(&r));
    EXPECT_EQ(r, "first");
    EXPECT_FALSE(reader.read(&r));
    EXPECT_EQ(reader.corrupt_records(), 1);
    EXPECT_FALSE(reader.read(&r));  // and stays at the end
  }
}

TEST_F(TFRecordTest, TruncatedGzipStreamIsCorrupt) {
  TFRecordWriter w(path("t.gz"), Compression::kGzip);
  for (const auto& r : sample_records()) w.write(r);
  w.close();
  const std::string bytes = file_bytes(path("t.gz"));
  put_bytes(path("cut.gz"), bytes.substr(0, bytes.size() / 2));
  const std::string msg =
      test::message_of<DataCorrupt>([&] { read_all(path("cut.gz"), {.compression = Compression::kGzip}); });
  EXPECT_NE(msg.find("cut.gz"), std::string::npos) << msg;
  // Reading a GZIP file as uncompressed fails on the first header's CRC.
  EXPECT_THROW(read_all(path("t.gz")), DataCorrupt);
}

TEST_F(TFRecordTest, CorruptRecordErrorsNameTheRecordNumber) {
  TFRecordWriter w(path("bad"));
  for (int i = 0; i < 4; ++i) w.write("record" + std::to_string(i));  // 7 bytes each: 23 per record
  w.close();
  std::string bytes = file_bytes(path("bad"));
  bytes[2 * 23 + 12 + 1] ^= 0x20;  // a byte of record 2's data
  put_bytes(path("bad"), bytes);
  const std::string want = path("bad") + ": corrupt record 2 (0-based index in the file) at byte offset 46: data CRC";
  std::string msg = test::message_of<DataCorrupt>([&] { read_all(path("bad")); });
  EXPECT_EQ(msg.rfind(want, 0), 0u) << msg;

  // Skipping: the first corruption is numbered the same, and records after a skipped one keep counting.
  bytes[3 * 23 + 12 + 1] ^= 0x20;
  put_bytes(path("bad"), bytes);
  TFRecordReader skip(path("bad"), {.skip_corrupt = true});
  std::string r;
  while (skip.read(&r)) {
  }
  EXPECT_EQ(skip.corrupt_records(), 2);
  EXPECT_EQ(skip.first_corruption().rfind(want, 0), 0u) << skip.first_corruption();

  // A reader moved by seek(offset, index) numbers from there; seek(offset) alone cannot.
  TFRecordReader told(path("bad"));
  told.seek(23, 1);
  ASSERT_TRUE(told.read(&r));
  msg = test::message_of<DataCorrupt>([&] { told.read(&r); });
  EXPECT_EQ(msg.rfind(want, 0), 0u) << msg;
  TFRecordReader untold(path("bad"));
  untold.seek(23);
  ASSERT_TRUE(untold.read(&r));
  msg = test::message_of<DataCorrupt>([&] { untold.read(&r); });
  EXPECT_NE(msg.find("number unknown"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 46"), std::string::npos) << msg;

  // A truncated record is numbered too.
  put_bytes(path("cut"), file_bytes(path("bad")).substr(0, 23 + 5));
  msg = test::message_of<DataCorrupt>([&] { read_all(path("cut")); });
  EXPECT_NE(msg.find("corrupt record 1 (0-based index in the file) at byte offset 23: truncated"), std::string::npos)
      << msg;
}

TEST_F(TFRecordTest, DamagedGzipStreamErrorsNameFileRecordAndOffset) {
  const auto records = sample_records();
  TFRecordWriter w(path("t.gz"), Compression::kGzip);
  for (const auto& r : records) w.write(r);
  w.close();
  std::string bytes = file_bytes(path("t.gz"));
  bytes[bytes.size() / 2] ^= 0x5a;  // inside the deflate data
  put_bytes(path("bad.gz"), bytes);
  for (const uint64_t whole_limit : {detail::kWholeFileMaxCompressed, uint64_t{0}}) {
    SCOPED_TRACE(whole_limit ? "read whole" : "streamed");
    test::WholeFileLimit limit(whole_limit);
    TFRecordReader reader(path("bad.gz"), {.compression = Compression::kGzip, .buffer_size = 4096});
    std::string r;
    size_t n = 0;
    uint64_t offset = 0;  // of the record after the last one read
    std::string msg;
    try {
      while (reader.read(&r)) offset += 16 + records[n++].size();
    } catch (const DataCorrupt& e) {
      msg = e.what();
    }
    ASSERT_LT(n, records.size());
    EXPECT_EQ(msg.rfind(path("bad.gz") + ": GZIP stream is corrupt near uncompressed offset ", 0), 0u) << msg;
    EXPECT_NE(msg.find(" while reading record " + std::to_string(n) +
                       " (0-based index in the file) at uncompressed byte offset " + std::to_string(offset)),
              std::string::npos)
        << msg;
  }
  // A stream cut short says so, with the record too.
  put_bytes(path("cut.gz"), file_bytes(path("t.gz")).substr(0, bytes.size() / 2));
  const std::string msg =
      test::message_of<DataCorrupt>([&] { read_all(path("cut.gz"), {.compression = Compression::kGzip}); });
  EXPECT_NE(msg.find("GZIP stream is truncated at uncompressed offset"), std::string::npos) << msg;
  EXPECT_NE(msg.find(" while reading record "), std::string::npos) << msg;
}

TEST_F(TFRecordTest, SeekResumesAtASavedOffset) {
  const auto records = sample_records();
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(compression_name(c));
    const std::string p = path(std::string("seek_") + compression_name(c));
    TFRecordWriter w(p, c);
    for (const auto& r : records) w.write(r);
    w.close();

    TFRecordReader first(p, {.compression = c, .buffer_size = 4096});
    std::string r;
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(first.read(&r));
    const uint64_t saved = first.offset();
    TFRecordReader second(p, {.compression = c});
    second.seek(saved);
    for (size_t i = 7; i < records.size(); ++i) {
      ASSERT_TRUE(second.read(&r));
      EXPECT_EQ(r, records[i]);
    }
    EXPECT_FALSE(second.read(&r));
    second.seek(0);  // backwards works too
    ASSERT_TRUE(second.read(&r));
    EXPECT_EQ(r, records[0]);
  }
}

TEST_F(TFRecordTest, ErrorsNameTheFile) {
  const std::string msg = test::message_of<IoError>([&] { TFRecordReader r(path("missing")); });
  EXPECT_NE(msg.find("missing"), std::string::npos);
  EXPECT_THROW(parse_compression("bz2"), InvalidArgument);
  EXPECT_EQ(parse_compression("GZIP"), Compression::kGzip);
  EXPECT_EQ(parse_compression(""), Compression::kNone);
  put_bytes(path("empty"), "");
  EXPECT_TRUE(read_all(path("empty")).empty());
  EXPECT_EQ(detect_compression(path("empty")), Compression::kNone);
}

}  // namespace
}  // namespace strata::data
