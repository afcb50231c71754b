// The GZIP files strata writes are plain gzip, as TensorFlow writes them: one member through zlib's gzip
// wrapper (no optional header fields), which zlib's inflate and gzread and GNU `zcat` read to the same
// bytes as the uncompressed file, for every zlib setting; flush() leaves every record so far in the
// file; an empty file is one empty member.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "data/compression/byte_streams.h"
#include "data/dataset_test_util.h"
#include "strata/data/tfrecord.h"

namespace strata::data {
namespace {

using test::file_bytes;
using test::WholeFileLimit;

class GzipFilesTest : public test::ScratchDirTest {
 protected:
  GzipFilesTest() : ScratchDirTest("strata_gzip_files_") {}
};

// Records of many sizes that compress unevenly, one larger than the writer's input buffer.
std::vector<std::string> sample_records(int n = 150) {
  return test::uneven_records(n, 11, 7, [](int i) {
    return i == 77 ? size_t{600000} : i % 29 == 0 ? size_t{30000} : static_cast<size_t>(i * 17 % 1300);
  });
}

// Writes `records` with `options`; returns the file's bytes.
std::string write_records(const std::string& path, const TFRecordWriterOptions& options,
                          const std::vector<std::string>& records) {
  TFRecordWriter w(path, options);
  for (const auto& r : records) w.write(r);
  w.close();
  return file_bytes(path);
}

std::vector<std::string> read_all(const std::string& path) {
  TFRecordReader reader(path, {.compression = Compression::kGzip});
  std::vector<std::string> out;
  std::string record;
  while (reader.read(&record)) out.push_back(record);
  return out;
}

// Inflates `gz` with zlib as TensorFlow's ZlibInputStream does (inflateReset at each Z_STREAM_END while
// input remains), counting the members that end. `complete`: the input must end where a member ends (a
// damaged or cut-short member fails the test); else the bytes inflated before the input runs out.
std::string zlib_inflate(const std::string& gz, size_t* members = nullptr, bool complete = true) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 16 + MAX_WBITS), Z_OK);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  std::string out;
  std::vector<char> buf(64 << 10);
  size_t ended = 0;
  for (;;) {
    z.next_out = reinterpret_cast<Bytef*>(buf.data());
    z.avail_out = static_cast<uInt>(buf.size());
    const int rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf.data(), buf.size() - z.avail_out);
    if (rc == Z_STREAM_END) {
      ++ended;
      if (z.avail_in == 0) break;
      EXPECT_EQ(inflateReset(&z), Z_OK);
    } else if (rc == Z_BUF_ERROR && !complete && z.avail_in == 0) {
      break;  // every byte so far is inflated; the stream goes on
    } else if (rc != Z_OK) {
      ADD_FAILURE() << "zlib inflate: " << rc << " after " << out.size() << " bytes";
      break;
    }
  }
  inflateEnd(&z);
  if (members) *members = ended;
  return out;
}

// zlib's gzread (a different reader of the same format).
std::string gzread_all(const std::string& path) {
  gzFile gz = gzopen(path.c_str(), "rb");
  EXPECT_NE(gz, nullptr);
  if (!gz) return {};
  std::string out;
  char buf[1 << 15];
  int n;
  while ((n = gzread(gz, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  EXPECT_EQ(n, 0) << "gzread error";
  gzclose(gz);
  return out;
}

// GNU gzip's `zcat` of the file (its stdout), or nothing when zcat fails.
std::string zcat(const std::string& path) {
  std::FILE* p = ::popen(("zcat '" + path + "'").c_str(), "r");
  EXPECT_NE(p, nullptr);
  if (!p) return {};
  std::string out;
  char buf[1 << 15];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << "zcat " << path << " failed";
  return out;
}

TEST_F(GzipFilesTest, FilesAreOnePlainGzipMemberThatEveryReaderReads) {
  const auto records = sample_records();
  const std::string plain = write_records(path("plain"), {}, records);
  struct Case {
    int level;
    CompressionStrategy strategy;
  };
  for (const Case c : {Case{-1, CompressionStrategy::kDefault}, Case{9, CompressionStrategy::kFiltered},
                       Case{1, CompressionStrategy::kDefault}, Case{0, CompressionStrategy::kDefault},
                       Case{6, CompressionStrategy::kHuffmanOnly}, Case{6, CompressionStrategy::kRle},
                       Case{6, CompressionStrategy::kFixed}}) {
    SCOPED_TRACE(testing::Message() << "level " << c.level << " strategy " << compression_strategy_name(c.strategy));
    const std::string p = path("f.gz");
    const std::string gz = write_records(
        p, {.compression = Compression::kGzip, .compression_level = c.level, .compression_strategy = c.strategy},
        records);
    EXPECT_EQ(gz.substr(0, 4), (std::string{'\x1f', '\x8b', '\x08', '\x00'}));  // deflate, FLG 0: no optional fields
    EXPECT_EQ(detect_compression(p), Compression::kGzip);
    size_t members = 0;
    EXPECT_EQ(zlib_inflate(gz, &members), plain);
    EXPECT_EQ(members, 1u);
    EXPECT_EQ(gzread_all(p), plain);
    EXPECT_EQ(zcat(p), plain);
    EXPECT_TRUE(detail::ByteReader(p, Compression::kGzip).inflated_whole());
    EXPECT_EQ(read_all(p), records);
    WholeFileLimit stream(0);
    EXPECT_FALSE(detail::ByteReader(p, Compression::kGzip).inflated_whole());
    EXPECT_EQ(read_all(p), records);
  }
}

TEST_F(GzipFilesTest, FlushLeavesEveryRecordSoFarInTheFile) {
  const auto records = sample_records(60);
  const std::string p = path("flushed.gz");
  TFRecordWriter plain_writer(path("plain"), {});
  TFRecordWriter w(p, {.compression = Compression::kGzip});
  size_t flushes = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    w.write(records[i]);
    plain_writer.write(records[i]);
    if (i % 7 != 3) continue;
    w.flush();
    plain_writer.flush();
    ++flushes;
    // The file on disk, read while the writer is still open, inflates to every record so far.
    SCOPED_TRACE("after record " + std::to_string(i));
    EXPECT_EQ(zlib_inflate(file_bytes(p), nullptr, /*complete=*/false), file_bytes(path("plain")));
  }
  w.close();
  plain_writer.close();
  ASSERT_GE(flushes, 8u);
  size_t members = 0;
  EXPECT_EQ(zlib_inflate(file_bytes(p), &members), file_bytes(path("plain")));
  EXPECT_EQ(members, 1u);
  EXPECT_EQ(read_all(p), records);
  WholeFileLimit stream(0);
  EXPECT_EQ(read_all(p), records);
}

TEST_F(GzipFilesTest, AnEmptyFileIsOneEmptyMember) {
  const std::string p = path("empty.gz");
  const std::string gz = write_records(p, {.compression = Compression::kGzip}, {});
  size_t members = 0;
  EXPECT_EQ(zlib_inflate(gz, &members), "");
  EXPECT_EQ(members, 1u);
  EXPECT_EQ(gzread_all(p), "");
  EXPECT_EQ(zcat(p), "");
  EXPECT_EQ(detect_compression(p), Compression::kGzip);
  EXPECT_TRUE(read_all(p).empty());
  WholeFileLimit stream(0);
  EXPECT_TRUE(read_all(p).empty());
}

}  // namespace
}  // namespace strata::data
