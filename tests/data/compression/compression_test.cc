// Compressed TFRecord files on both read paths: inflated whole by libdeflate (files up to
// whole_file_limit()) and streamed through zlib (larger files, pipes; forced here by setting the limit
// to 0). Both give the same records, the same errors for truncated and corrupted files (a file
// libdeflate rejects is read again through zlib, which names the file and the offset, after the
// records before the damage), the same skipped records, and resume at a saved offset, also through a
// dataset iterator's saved state.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "data/compression/byte_streams.h"
#include "data/dataset_test_util.h"
#include "strata/data/tfrecord.h"
#include "strata/data/tfrecord_dataset.h"
#include "test_util.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using detail::ByteReader;
using test::file_bytes;
using test::put_bytes;
using test::WholeFileLimit;

class CompressionTest : public test::ScratchDirTest {
 protected:
  CompressionTest() : ScratchDirTest("strata_compression_") {}
};

// Records of many sizes, some larger than the streaming reader's buffer, that compress unevenly.
std::vector<std::string> sample_records(int n = 200) {
  return test::uneven_records(n, 7, 5,
                              [](int i) { return i % 37 == 0 ? size_t{70000} : static_cast<size_t>(i * 13 % 900); });
}

void write_records(const std::string& path, Compression c, const std::vector<std::string>& records) {
  TFRecordWriter w(path, c);
  for (const auto& r : records) w.write(r);
  w.close();
}

std::vector<std::string> read_all(const std::string& path, TFRecordReaderOptions options) {
  TFRecordReader reader(path, options);
  std::vector<std::string> out;
  std::string record;
  while (reader.read(&record)) out.push_back(record);
  return out;
}

bool inflated_whole(const std::string& path, Compression c) { return ByteReader(path, c).inflated_whole(); }

// What reading `path` to its end gives: the records before the first error and the error's message.
struct Outcome {
  std::vector<std::string> records;
  std::string error;
};
Outcome read_until_error(const std::string& path, Compression c) {
  Outcome out;
  try {
    TFRecordReader reader(path, {.compression = c, .buffer_size = 4096});
    std::string record;
    while (reader.read(&record)) out.records.push_back(record);
  } catch (const DataCorrupt& e) {
    out.error = e.what();
  }
  return out;
}

TEST_F(CompressionTest, WholeAndStreamingPathsReadTheSameRecords) {
  const auto records = sample_records();
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(compression_name(c));
    const std::string p = path(std::string("f.") + compression_name(c));
    write_records(p, c, records);
    EXPECT_TRUE(inflated_whole(p, c));
    EXPECT_EQ(read_all(p, {.compression = c}), records);
    WholeFileLimit stream(0);
    EXPECT_FALSE(inflated_whole(p, c));
    EXPECT_EQ(read_all(p, {.compression = c}), records);
    EXPECT_EQ(read_all(p, {.compression = c, .buffer_size = 4096}), records);
  }
  // Uncompressed files are never inflated whole.
  write_records(path("plain"), Compression::kNone, records);
  EXPECT_FALSE(inflated_whole(path("plain"), Compression::kNone));
  EXPECT_EQ(read_all(path("plain"), {}), records);
}

TEST_F(CompressionTest, TheLimitIsTheCompressedSize) {
  const auto records = sample_records(20);
  write_records(path("f.gz"), Compression::kGzip, records);
  const uint64_t size = fs::file_size(path("f.gz"));
  {
    WholeFileLimit exact(size);
    EXPECT_TRUE(inflated_whole(path("f.gz"), Compression::kGzip));
  }
  WholeFileLimit below(size - 1);
  EXPECT_FALSE(inflated_whole(path("f.gz"), Compression::kGzip));
  EXPECT_EQ(read_all(path("f.gz"), {.compression = Compression::kGzip}), records);
}

TEST_F(CompressionTest, EmptyCompressedFilesHoldNoRecords) {
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    write_records(path("written"), c, {});  // a valid stream of no bytes
    put_bytes(path("zero"), "");            // no stream at all
    for (const char* name : {"written", "zero"}) {
      SCOPED_TRACE(std::string(compression_name(c)) + " " + name);
      EXPECT_TRUE(read_all(path(name), {.compression = c}).empty());
      WholeFileLimit stream(0);
      EXPECT_TRUE(read_all(path(name), {.compression = c}).empty());
    }
  }
}

TEST_F(CompressionTest, ConcatenatedMembersReadAsOneFile) {
  // Members of falling size: the last gzip member's ISIZE (the first guess at the output size) is far
  // too small for the whole, so the whole-file buffer has to grow.
  const auto records = sample_records(120);
  const std::vector<std::vector<std::string>> parts = {
      {records.begin(), records.begin() + 100}, {records.begin() + 100, records.begin() + 118}, {records[118]}};
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(compression_name(c));
    std::string joined;
    for (size_t m = 0; m < parts.size(); ++m) {
      write_records(path("part"), c, parts[m]);
      joined += file_bytes(path("part"));
    }
    put_bytes(path("joined"), joined);
    const std::vector<std::string> want(records.begin(), records.begin() + 119);
    EXPECT_TRUE(inflated_whole(path("joined"), c));
    EXPECT_EQ(read_all(path("joined"), {.compression = c}), want);
    WholeFileLimit stream(0);
    EXPECT_EQ(read_all(path("joined"), {.compression = c}), want);
  }
}

TEST_F(CompressionTest, TruncatedFilesAreCorruptOnBothPaths) {
  const auto records = sample_records();
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    write_records(path("full"), c, records);
    const std::string bytes = file_bytes(path("full"));
    for (size_t keep : {bytes.size() / 3, bytes.size() - 5, bytes.size() - 1}) {
      SCOPED_TRACE(std::string(compression_name(c)) + " keeping " + std::to_string(keep));
      put_bytes(path("cut.tfrecord"), bytes.substr(0, keep));
      const Outcome whole = read_until_error(path("cut.tfrecord"), c);
      EXPECT_NE(whole.error.find("cut.tfrecord"), std::string::npos) << whole.error;
      WholeFileLimit stream(0);
      const Outcome streamed = read_until_error(path("cut.tfrecord"), c);
      EXPECT_EQ(whole.error, streamed.error);
      EXPECT_EQ(whole.records, streamed.records);
      EXPECT_LT(whole.records.size(), records.size());
    }
  }
}

TEST_F(CompressionTest, CorruptedFilesAreCorruptOnBothPaths) {
  const auto records = sample_records();
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    write_records(path("good"), c, records);
    const std::string bytes = file_bytes(path("good"));
    // A byte in the middle of the deflate data, and (GZIP) a byte of the trailer's CRC-32 and of its ISIZE
    // (zlib's "incorrect data check" and "incorrect length check").
    std::vector<size_t> spots = {bytes.size() / 2};
    if (c == Compression::kGzip) spots.insert(spots.end(), {bytes.size() - 6, bytes.size() - 3});
    for (size_t at : spots) {
      SCOPED_TRACE(std::string(compression_name(c)) + " damaged at " + std::to_string(at));
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ 0x5a);
      put_bytes(path("bad.tfrecord"), bad);
      EXPECT_FALSE(inflated_whole(path("bad.tfrecord"), c));  // libdeflate rejects it: zlib says where
      const Outcome whole = read_until_error(path("bad.tfrecord"), c);
      // (Damaged deflate data may still decode, to bytes whose record CRC is wrong: either error names the file.)
      EXPECT_EQ(whole.error.rfind(path("bad.tfrecord") + ": ", 0), 0u) << whole.error;
      // The error names the record being read: the first one not returned.
      EXPECT_NE(whole.error.find(" record " + std::to_string(whole.records.size()) + " (0-based index in the file)"),
                std::string::npos)
          << whole.error;
      // The records before the damage are read, and exactly.
      ASSERT_LT(whole.records.size(), records.size());
      EXPECT_TRUE(std::equal(whole.records.begin(), whole.records.end(), records.begin()));
      if (at == bytes.size() / 2) {
        EXPECT_GT(whole.records.size(), 10u);
      } else {
        const char* words = at == bytes.size() - 6 ? "incorrect data check" : "incorrect length check";
        EXPECT_NE(whole.error.find(words), std::string::npos) << whole.error;
      }
      WholeFileLimit stream(0);
      const Outcome streamed = read_until_error(path("bad.tfrecord"), c);
      EXPECT_EQ(whole.error, streamed.error);
      EXPECT_EQ(whole.records, streamed.records);
    }
  }
}

// `gz` (one member with a plain 10-byte header) with the optional header fields of RFC 1952 added.
std::string with_header_fields(const std::string& gz, bool extra, bool name, bool comment, bool header_crc) {
  std::string header = gz.substr(0, 10);
  header[3] = static_cast<char>((header_crc ? 2 : 0) | (extra ? 4 : 0) | (name ? 8 : 0) | (comment ? 16 : 0));
  if (extra) header += std::string{'\x05', '\x00', 'S', 't', '\x01', '\x00', 'x'};
  if (name) header += std::string("shard.tfrecord") + '\0';
  if (comment) header += std::string("written by a test") + '\0';
  if (header_crc) {
    const uint32_t crc = test::crc_bitwise(test::kGzipReflected, 0, header.data(), header.size());
    header += std::string{static_cast<char>(crc & 0xff), static_cast<char>((crc >> 8) & 0xff)};
  }
  return header + gz.substr(10);
}

TEST_F(CompressionTest, GzipHeaderFieldsReadOnBothPaths) {
  const auto records = sample_records(40);
  {
    // One member through zlib's gzip wrapper, which writes no optional fields.
    TFRecordWriter w(path("plain.gz"), {.compression = Compression::kGzip});
    for (const auto& r : records) w.write(r);
    w.close();
  }
  const std::string gz = file_bytes(path("plain.gz"));
  ASSERT_EQ(gz[3], '\0');
  struct Fields {
    bool extra, name, comment, header_crc;
  };
  for (const Fields f :
       {Fields{true, false, false, false}, Fields{false, true, false, false}, Fields{false, false, true, false},
        Fields{true, true, true, false}, Fields{false, false, false, true}, Fields{true, true, true, true}}) {
    SCOPED_TRACE(testing::Message() << "extra " << f.extra << " name " << f.name << " comment " << f.comment
                                    << " header crc " << f.header_crc);
    put_bytes(path("fields.gz"), with_header_fields(gz, f.extra, f.name, f.comment, f.header_crc));
    // A header CRC is left to zlib, which checks it.
    EXPECT_EQ(inflated_whole(path("fields.gz"), Compression::kGzip), !f.header_crc);
    EXPECT_EQ(read_all(path("fields.gz"), {.compression = Compression::kGzip}), records);
    WholeFileLimit stream(0);
    EXPECT_EQ(read_all(path("fields.gz"), {.compression = Compression::kGzip}), records);
  }
}

TEST_F(CompressionTest, ADamagedMemberCrcEndsTheFileAfterTheRecordsBeforeIt) {
  const auto records = sample_records(60);
  const std::vector<std::string> first(records.begin(), records.begin() + 40),
      second(records.begin() + 40, records.end());
  write_records(path("one.gz"), Compression::kGzip, first);
  write_records(path("two.gz"), Compression::kGzip, second);
  std::string one = file_bytes(path("one.gz"));
  one[one.size() - 7] = static_cast<char>(one[one.size() - 7] ^ 0x10);  // the first member's CRC-32
  put_bytes(path("joined.gz"), one + file_bytes(path("two.gz")));
  EXPECT_FALSE(inflated_whole(path("joined.gz"), Compression::kGzip));
  const Outcome whole = read_until_error(path("joined.gz"), Compression::kGzip);
  EXPECT_NE(whole.error.find("joined.gz: GZIP stream is corrupt near uncompressed offset "), std::string::npos)
      << whole.error;
  EXPECT_NE(whole.error.find("incorrect data check"), std::string::npos) << whole.error;
  ASSERT_LE(whole.records.size(), first.size());  // the second member is never reached
  EXPECT_TRUE(std::equal(whole.records.begin(), whole.records.end(), first.begin()));
  WholeFileLimit stream(0);
  const Outcome streamed = read_until_error(path("joined.gz"), Compression::kGzip);
  EXPECT_EQ(whole.error, streamed.error);
  EXPECT_EQ(whole.records, streamed.records);

  // An empty stream's CRC-32 is checked too.
  write_records(path("empty.gz"), Compression::kGzip, {});
  std::string empty = file_bytes(path("empty.gz"));
  empty[empty.size() - 8] = '\x01';
  put_bytes(path("empty.gz"), empty);
  {
    WholeFileLimit whole_again(detail::kWholeFileMaxCompressed);
    EXPECT_FALSE(inflated_whole(path("empty.gz"), Compression::kGzip));
    EXPECT_NE(read_until_error(path("empty.gz"), Compression::kGzip).error.find("incorrect data check"),
              std::string::npos);
  }
  EXPECT_NE(read_until_error(path("empty.gz"), Compression::kGzip).error.find("incorrect data check"),
            std::string::npos);
}

TEST_F(CompressionTest, SeekingChecksTheBytesItSkips) {
  const auto records = sample_records();
  write_records(path("good.gz"), Compression::kGzip, records);
  uint64_t last = 0;
  {
    TFRecordReader reader(path("good.gz"), {.compression = Compression::kGzip});
    std::string r;
    while (reader.read(&r)) last = reader.last_record_offset();
  }
  // An intact file read after seeks back and forth: no false alarm, every record.
  {
    TFRecordReader reader(path("good.gz"), {.compression = Compression::kGzip});
    std::string r;
    for (int i = 0; i < 77; ++i) ASSERT_TRUE(reader.read(&r));
    reader.seek(0);
    size_t n = 0;
    while (reader.read(&r)) ++n;
    EXPECT_EQ(n, records.size());
    reader.seek(last);
    ASSERT_TRUE(reader.read(&r));
    EXPECT_EQ(r, records.back());
    EXPECT_FALSE(reader.read(&r));
  }
  // A damaged trailer CRC is still found after a seek past every record but the last.
  std::string bad = file_bytes(path("good.gz"));
  bad[bad.size() - 6] = static_cast<char>(bad[bad.size() - 6] ^ 0x5a);
  put_bytes(path("bad.gz"), bad);
  const std::string msg = test::message_of<DataCorrupt>([&] {
    TFRecordReader reader(path("bad.gz"), {.compression = Compression::kGzip});
    reader.seek(last);
    std::string r;
    while (reader.read(&r)) EXPECT_EQ(r, records.back());
  });
  EXPECT_NE(msg.find("incorrect data check"), std::string::npos) << msg;
}

TEST_F(CompressionTest, SkippedCorruptRecordsAreTheSameOnBothPaths) {
  // A damaged record inside an intact GZIP stream: skip_corrupt skips it on either path.
  const auto records = sample_records(30);
  write_records(path("plain"), Compression::kNone, records);
  std::string bytes = file_bytes(path("plain"));
  bytes[bytes.size() / 2] ^= 0x01;
  detail::ByteWriter w(path("damaged.gz"), Compression::kGzip);
  w.write(bytes.data(), bytes.size());
  w.close();
  const auto skip = [&] {
    TFRecordReader reader(path("damaged.gz"), {.compression = Compression::kGzip, .skip_corrupt = true});
    std::vector<std::string> out;
    std::string r;
    while (reader.read(&r)) out.push_back(r);
    return std::make_pair(out, reader.corrupt_records());
  };
  const auto whole = skip();
  EXPECT_EQ(whole.second, 1);
  EXPECT_EQ(whole.first.size(), records.size() - 1);
  WholeFileLimit stream(0);
  EXPECT_EQ(skip(), whole);
}

TEST_F(CompressionTest, SeekResumesInTheMiddleOfAWholeFile) {
  const auto records = sample_records();
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(compression_name(c));
    const std::string p = path("seek");
    write_records(p, c, records);
    TFRecordReader first(p, {.compression = c});
    std::string r;
    for (int i = 0; i < 77; ++i) ASSERT_TRUE(first.read(&r));
    const uint64_t saved = first.offset();
    TFRecordReader second(p, {.compression = c});
    second.seek(saved);
    ASSERT_TRUE(second.read(&r));
    EXPECT_EQ(r, records[77]);
    EXPECT_EQ(second.last_record_offset(), saved);
    // Read to the end (which frees the inflated bytes), then back to the start and the saved offset.
    while (second.read(&r)) {
    }
    second.seek(0);
    ASSERT_TRUE(second.read(&r));
    EXPECT_EQ(r, records[0]);
    second.seek(saved);
    ASSERT_TRUE(second.read(&r));
    EXPECT_EQ(r, records[77]);
    // The streaming path lands on the same record from the same offset.
    {
      WholeFileLimit stream(0);
      TFRecordReader streamed(p, {.compression = c});
      streamed.seek(saved);
      ASSERT_TRUE(streamed.read(&r));
      EXPECT_EQ(r, records[77]);
    }
    // Past the end is corrupt, naming the file.
    const std::string msg = test::message_of<DataCorrupt>([&] { second.seek(uint64_t{1} << 40); });
    EXPECT_NE(msg.find("seek"), std::string::npos) << msg;
  }
}

TEST_F(CompressionTest, DatasetStateRestoresInTheMiddleOfAGzipFile) {
  // Two GZIP shards of Examples; every saved position resumes on the same record, on both paths,
  // with files read one after another and two at once.
  std::vector<std::string> files;
  for (int f = 0; f < 2; ++f) {
    files.push_back(path("shard-" + std::to_string(f) + ".gz"));
    TFRecordWriter w(files.back(), Compression::kGzip);
    for (int i = 0; i < 9; ++i) {
      Example ex;
      ex.set_int64s("id", {f * 100 + i});
      w.write(ex.serialize());
    }
    w.close();
  }
  const ExampleSpec spec = {{"id", FixedLenFeature(FeatureType::kInt64)}};
  for (uint64_t limit : {detail::kWholeFileMaxCompressed, uint64_t{0}}) {
    WholeFileLimit bound(limit);
    for (int64_t reads : {1, 2}) {
      SCOPED_TRACE("limit " + std::to_string(limit) + ", num_parallel_reads " + std::to_string(reads));
      const auto make = [&] {
        return make_example_dataset(files, spec, {.compression = Compression::kGzip, .num_parallel_reads = reads});
      };
      std::vector<int64_t> full;
      auto all = make().make_iterator();
      while (auto e = all.next()) full.push_back((*e)["id"].item<int64_t>());
      ASSERT_EQ(full.size(), 18u);
      for (size_t stop : {1, 4, 9, 13}) {
        auto it = make().make_iterator();
        for (size_t i = 0; i < stop; ++i) ASSERT_TRUE(it.next());
        auto resumed = make().make_iterator();
        resumed.restore_state(it.save_state());
        std::vector<int64_t> rest;
        while (auto e = resumed.next()) rest.push_back((*e)["id"].item<int64_t>());
        EXPECT_EQ(rest, std::vector<int64_t>(full.begin() + static_cast<long>(stop), full.end())) << "stop " << stop;
      }
    }
  }
}

TEST_F(CompressionTest, PipesStreamThroughZlib) {
  const auto records = sample_records(40);
  write_records(path("f.gz"), Compression::kGzip, records);
  const std::string bytes = file_bytes(path("f.gz"));
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0600), 0);
  // A pipe has no size to read whole: it streams.
  std::thread writer([&] { put_bytes(path("pipe"), bytes); });
  bool whole = true;
  {
    ByteReader probe(path("pipe"), Compression::kGzip);
    whole = probe.inflated_whole();
    while (probe.ensure(1 << 20) > 0) probe.consume(probe.available());
  }
  writer.join();
  EXPECT_FALSE(whole);
  std::thread writer2([&] { put_bytes(path("pipe"), bytes); });
  std::vector<std::string> got;
  {
    TFRecordReader reader(path("pipe"), {.compression = Compression::kGzip});
    std::string r;
    while (reader.read(&r)) got.push_back(r);
  }
  writer2.join();
  EXPECT_EQ(got, records);
}

}  // namespace
}  // namespace strata::data
