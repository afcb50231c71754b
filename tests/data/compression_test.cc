// Compressed TFRecord files on both read paths: inflated whole by libdeflate (files up to
// whole_file_limit()) and streamed through zlib (larger files, pipes; forced here by setting the limit
// to 0). Both give the same records, the same errors for truncated and corrupted files (read whole, a
// gzip member's CRC-32 is checked as its records are read; the record an error names is the one each
// path was reading), the same skipped records, and resume at a saved offset, also through a dataset
// iterator's saved state.
#include "data/compression.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "data/recycled_buffer.h"
#include "dataset_test_util.h"
#include "strata/data/tfrecord.h"
#include "strata/data/tfrecord_dataset.h"
#include "test_util.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;
using test::file_bytes;
using test::WholeFileLimit;
using test::put_bytes;
using detail::ByteReader;

class CompressionTest : public test::ScratchDirTest {
 protected:
  CompressionTest() : ScratchDirTest("strata_compression_") {}
};

// Records of many sizes, some larger than the streaming reader's buffer, that compress unevenly.
std::vector<std::string> sample_records(int n = 200) {
  std::vector<std::string> records = {"", "a"};
  uint32_t x = 7;
  for (int i = 0; i < n; ++i) {
    std::string r = "record-" + std::to_string(i) + ":";
    const size_t len = (i % 37 == 0) ? 70000 : static_cast<size_t>(i * 13 % 900);
    for (size_t k = 0; k < len; ++k)
      r.push_back(static_cast<char>(k % 3 == 0 ? (x = x * 1103515245u + 12345u) >> 24 : 'a' + k % 5));
    records.push_back(std::move(r));
  }
  return records;
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

// A stream error without the record the reader was reading ("while reading record N (...) at
// uncompressed byte offset M"): for a damaged trailer CRC the two paths stop at different records.
std::string without_record(const std::string& error) {
  const size_t at = error.find(" while reading record ");
  if (at == std::string::npos) return error;
  return error.substr(0, at) + error.substr(error.rfind(" ["));
}

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

// Found by fuzz/tfrecord_fuzzer: a damaged gzip file's last bytes are no size, and the whole-file reader took them for
// the inflated size (the ISIZE of a plain gzip file, or of a size-tagged member): a 300-byte file made it allocate up
// to 1 GB (kWholeFileMaxInflated) before failing. A size is believed only up to deflate's best ratio (1032:1) of the
// compressed bytes. Seen through the buffer cache: emptied first, it then holds the reader's buffer only if that was
// a large one.
TEST_F(CompressionTest, ADamagedGzipSizeIsNotAnAllocation) {
  for (size_t member_bytes : {size_t{0}, size_t{4096}}) {  // one zlib-written member; size-tagged members
    SCOPED_TRACE("gzip_member_bytes " + std::to_string(member_bytes));
    TFRecordWriter w(path("full"), {.compression = Compression::kGzip, .gzip_member_bytes = member_bytes});
    w.write("abc");
    w.write(std::string(300, 'x'));
    w.close();
    std::string bytes = file_bytes(path("full"));
    bytes.resize(bytes.size() - 8);
    bytes += std::string("\x00\x00\x00\x00\x00\x00\x00\x06", 8);  // CRC 0, "inflated size" 96 MiB
    put_bytes(path("damaged.tfrecord"), bytes);
    std::vector<detail::RecycledBuffer> drained;
    while (detail::recycled_bytes_kept() > 0) drained.emplace_back(size_t{2} << 20);
    const Outcome whole = read_until_error(path("damaged.tfrecord"), Compression::kGzip);
    EXPECT_NE(whole.error.find("damaged.tfrecord"), std::string::npos) << whole.error;
    EXPECT_LT(detail::recycled_bytes_kept(), size_t{16} << 20);
  }
}

TEST_F(CompressionTest, CorruptedFilesAreCorruptOnBothPaths) {
  const auto records = sample_records();
  for (Compression c : {Compression::kGzip, Compression::kZlib}) {
    write_records(path("good"), c, records);
    const std::string bytes = file_bytes(path("good"));
    // A byte in the middle of the deflate data, and (GZIP) a byte of the trailer's CRC32.
    std::vector<size_t> spots = {bytes.size() / 2};
    if (c == Compression::kGzip) spots.push_back(bytes.size() - 6);
    for (size_t at : spots) {
      SCOPED_TRACE(std::string(compression_name(c)) + " damaged at " + std::to_string(at));
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ 0x5a);
      put_bytes(path("bad.tfrecord"), bad);
      const Outcome whole = read_until_error(path("bad.tfrecord"), c);
      EXPECT_NE(whole.error.find("bad.tfrecord"), std::string::npos) << whole.error;
      WholeFileLimit stream(0);
      const Outcome streamed = read_until_error(path("bad.tfrecord"), c);
      // The error names the record being read (the stream's or the record's damage): the first one not returned.
      EXPECT_NE(streamed.error.find(" record " + std::to_string(streamed.records.size()) + " (0-based index in the file)"),
                std::string::npos)
          << streamed.error;
      if (at + 6 != bytes.size()) {
        EXPECT_EQ(whole.error, streamed.error);
        EXPECT_EQ(whole.records, streamed.records);
        continue;
      }
      EXPECT_EQ(without_record(whole.error), without_record(streamed.error));
      // A damaged trailer CRC: read whole, the CRC-32 is summed as records are read, so every record
      // (each checked by its own CRC32C) comes before the error; zlib stops at the chunk that ends the
      // stream, so it gives a prefix of them.
      EXPECT_NE(whole.error.find("incorrect data check"), std::string::npos) << whole.error;
      EXPECT_EQ(whole.records, records);
      ASSERT_LE(streamed.records.size(), whole.records.size());
      EXPECT_TRUE(std::equal(streamed.records.begin(), streamed.records.end(), whole.records.begin()));
    }
  }
}

// strata's own gzip files (chains of size-tagged members) are inflated two members at a time; damage in
// a member's body, its size field or its ISIZE sends the file to libdeflate, member by member, which
// gives the same records and error as the zlib stream; other gzip files never take the paired path.
TEST_F(CompressionTest, SizeTaggedMembersInflateInPairs) {
  const auto records = sample_records();
  TFRecordWriterOptions small{.compression = Compression::kGzip, .gzip_member_bytes = 4096};
  {
    TFRecordWriter w(path("pairs.gz"), small);
    for (const auto& r : records) w.write(r);
    w.close();
  }
  EXPECT_TRUE(ByteReader(path("pairs.gz"), Compression::kGzip).inflated_in_pairs());
  EXPECT_EQ(read_all(path("pairs.gz"), {.compression = Compression::kGzip}), records);
  {
    TFRecordWriter w(path("one.gz"), {.compression = Compression::kGzip, .gzip_member_bytes = 0});
    for (const auto& r : records) w.write(r);
    w.close();
  }
  ByteReader one(path("one.gz"), Compression::kGzip);
  EXPECT_TRUE(one.inflated_whole());
  EXPECT_FALSE(one.inflated_in_pairs());

  const std::string bytes = file_bytes(path("pairs.gz"));
  const uint32_t first_size = static_cast<unsigned char>(bytes[16]) | static_cast<unsigned char>(bytes[17]) << 8;
  // A wrong size field is no damage to the data (no CRC covers it, zlib skips it): libdeflate reads
  // every record.
  std::string wrong_size = bytes;
  wrong_size[first_size + 16] = static_cast<char>(wrong_size[first_size + 16] ^ 0x21);
  put_bytes(path("size.gz"), wrong_size);
  EXPECT_FALSE(ByteReader(path("size.gz"), Compression::kGzip).inflated_in_pairs());
  const Outcome resized = read_until_error(path("size.gz"), Compression::kGzip);
  EXPECT_EQ(resized.error, "");
  EXPECT_EQ(resized.records, records);
  // A byte in the middle of the file's deflate data, and the first member's ISIZE.
  for (const size_t at : {bytes.size() / 2, size_t{first_size} - 3}) {
    SCOPED_TRACE("damaged at " + std::to_string(at));
    std::string bad = bytes;
    bad[at] = static_cast<char>(bad[at] ^ 0x21);
    put_bytes(path("bad.gz"), bad);
    EXPECT_FALSE(ByteReader(path("bad.gz"), Compression::kGzip).inflated_in_pairs());
    const Outcome whole = read_until_error(path("bad.gz"), Compression::kGzip);
    EXPECT_NE(whole.error.find("bad.gz"), std::string::npos) << whole.error;
    WholeFileLimit stream(0);
    const Outcome streamed = read_until_error(path("bad.gz"), Compression::kGzip);
    EXPECT_EQ(whole.error, streamed.error);
    EXPECT_EQ(whole.records, streamed.records);
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
    // One member through zlib's gzip wrapper, which writes no optional fields (members carry FEXTRA).
    TFRecordWriter w(path("plain.gz"), {.compression = Compression::kGzip, .gzip_member_bytes = 0});
    for (const auto& r : records) w.write(r);
    w.close();
  }
  const std::string gz = file_bytes(path("plain.gz"));
  ASSERT_EQ(gz[3], '\0');
  struct Fields {
    bool extra, name, comment, header_crc;
  };
  for (const Fields f : {Fields{true, false, false, false}, Fields{false, true, false, false},
                         Fields{false, false, true, false}, Fields{true, true, true, false},
                         Fields{false, false, false, true}, Fields{true, true, true, true}}) {
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

TEST_F(CompressionTest, ADamagedMemberCrcIsFoundWhereTheMemberEnds) {
  const auto records = sample_records(60);
  const std::vector<std::string> first(records.begin(), records.begin() + 40), second(records.begin() + 40,
                                                                                        records.end());
  write_records(path("one.gz"), Compression::kGzip, first);
  write_records(path("two.gz"), Compression::kGzip, second);
  std::string one = file_bytes(path("one.gz"));
  one[one.size() - 7] = static_cast<char>(one[one.size() - 7] ^ 0x10);  // the first member's CRC-32
  put_bytes(path("joined.gz"), one + file_bytes(path("two.gz")));
  ASSERT_TRUE(inflated_whole(path("joined.gz"), Compression::kGzip));
  const Outcome whole = read_until_error(path("joined.gz"), Compression::kGzip);
  EXPECT_NE(whole.error.find("incorrect data check"), std::string::npos) << whole.error;
  EXPECT_EQ(whole.records, first);  // the second member is never reached
  EXPECT_NE(whole.error.find("while reading record 40 (0-based index in the file)"), std::string::npos)
      << whole.error;
  WholeFileLimit stream(0);
  const Outcome streamed = read_until_error(path("joined.gz"), Compression::kGzip);
  EXPECT_EQ(without_record(whole.error), without_record(streamed.error));
  ASSERT_LE(streamed.records.size(), first.size());
  EXPECT_TRUE(std::equal(streamed.records.begin(), streamed.records.end(), first.begin()));

  // An empty stream's CRC-32 is checked too.
  write_records(path("empty.gz"), Compression::kGzip, {});
  std::string empty = file_bytes(path("empty.gz"));
  empty[empty.size() - 8] = '\x01';
  put_bytes(path("empty.gz"), empty);
  {
    WholeFileLimit whole_again(detail::kWholeFileMaxCompressed);
    ASSERT_TRUE(inflated_whole(path("empty.gz"), Compression::kGzip));
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
  TFRecordReader reader(path("bad.gz"), {.compression = Compression::kGzip});
  reader.seek(last);
  std::string r;
  ASSERT_TRUE(reader.read(&r));
  EXPECT_EQ(r, records.back());
  const std::string msg = test::message_of<DataCorrupt>([&] { reader.read(&r); });
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
