// GZIP files written as a chain of size-tagged gzip members (TFRecordWriterOptions::gzip_member_bytes):
// the records read back on both read paths and through zlib's own readers; the size fields alone walk
// the file member by member, each member a complete gzip member of at most gzip_member_bytes with the
// right CRC-32 and ISIZE; flush() ends a member; 0 keeps one member through zlib's gzip wrapper; an
// empty file is one empty member; out-of-range values are errors before the file is made.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/compression.h"
#include "dataset_test_util.h"
#include "strata/data/tfrecord.h"
#include "strata/error.h"

namespace strata::data {
namespace {

using test::file_bytes;
using test::WholeFileLimit;

class GzipMembersTest : public test::ScratchDirTest {
 protected:
  GzipMembersTest() : ScratchDirTest("strata_gzip_members_") {}
};

// Records of many sizes that compress unevenly: some span several 4 KiB members, and one is larger than
// the writer's input buffer (a write that skips it).
std::vector<std::string> sample_records(int n = 150) {
  std::vector<std::string> records = {"", "a"};
  uint32_t x = 11;
  for (int i = 0; i < n; ++i) {
    std::string r = "record-" + std::to_string(i) + ":";
    const size_t len = i == 77 ? 600000 : (i % 29 == 0) ? 30000 : static_cast<size_t>(i * 17 % 1300);
    for (size_t k = 0; k < len; ++k)
      r.push_back(static_cast<char>(k % 3 == 0 ? (x = x * 1103515245u + 12345u) >> 24 : 'a' + k % 7));
    records.push_back(std::move(r));
  }
  return records;
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

// Inflates a chain of gzip members with zlib as TensorFlow's ZlibInputStream does (inflateReset at each
// Z_STREAM_END while input remains); counts the members. A damaged or cut-short member fails the test.
std::string zlib_inflate(const std::string& gz, size_t* members = nullptr) {
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
    } else if (rc != Z_OK) {
      ADD_FAILURE() << "zlib inflate: " << rc << " after " << out.size() << " bytes";
      break;
    }
  }
  inflateEnd(&z);
  if (members) *members = ended;
  return out;
}

// zlib's gzread (a different reader of concatenated members).
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

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Raw-inflates one member's body; it must end exactly where the trailer starts.
std::string inflate_body(const std::string& body) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, -MAX_WBITS), Z_OK);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  z.avail_in = static_cast<uInt>(body.size());
  std::string out;
  std::vector<char> buf(64 << 10);
  int rc;
  do {
    z.next_out = reinterpret_cast<Bytef*>(buf.data());
    z.avail_out = static_cast<uInt>(buf.size());
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf.data(), buf.size() - z.avail_out);
  } while (rc == Z_OK);
  EXPECT_EQ(rc, Z_STREAM_END) << "the body is not one complete deflate stream";
  EXPECT_EQ(z.avail_in, 0u) << "the body has bytes after its deflate stream";
  inflateEnd(&z);
  return out;
}

struct Member {
  size_t at, size, isize;
};

// Walks `gz` by the members' size fields alone, checking each member's header, that its body inflates
// to its ISIZE bytes of `plain` (in order) and that its trailer CRC-32 is theirs; returns the members.
std::vector<Member> walk_members(const std::string& gz, const std::string& plain, unsigned char xfl) {
  std::vector<Member> members;
  size_t at = 0, plain_at = 0;
  while (at < gz.size()) {
    SCOPED_TRACE("member " + std::to_string(members.size()) + " at " + std::to_string(at));
    if (gz.size() - at < detail::kMemberHeaderBytes + 8) {
      ADD_FAILURE() << "a member cut short";
      break;
    }
    const std::string header = gz.substr(at, 16);
    const std::string want{'\x1f',
                           '\x8b',
                           '\x08',
                           '\x04',
                           0,
                           0,
                           0,
                           0,
                           static_cast<char>(xfl),
                           '\x03',
                           '\x08',
                           0,
                           static_cast<char>(detail::kMemberSizeSi1),
                           static_cast<char>(detail::kMemberSizeSi2),
                           '\x04',
                           0};
    EXPECT_EQ(header, want);
    const size_t size = le32(gz, at + 16);
    if (size < detail::kMemberHeaderBytes + 8 || size > gz.size() - at) {
      ADD_FAILURE() << "size field " << size << " runs past the file's " << gz.size() << " bytes";
      break;
    }
    const std::string bytes = inflate_body(gz.substr(at + detail::kMemberHeaderBytes, size - 28));
    const size_t isize = le32(gz, at + size - 4);
    EXPECT_EQ(isize, bytes.size());
    EXPECT_EQ(plain.compare(plain_at, bytes.size(), bytes), 0) << "the member's bytes differ";
    EXPECT_EQ(le32(gz, at + size - 8), test::crc_bitwise(test::kGzipReflected, 0, bytes.data(), bytes.size()));
    members.push_back({at, size, isize});
    plain_at += bytes.size();
    at += size;
  }
  EXPECT_EQ(at, gz.size()) << "the last size field does not land on the file's end";
  EXPECT_EQ(plain_at, plain.size());
  return members;
}

// What zlib's gzip wrapper writes as XFL for these settings.
unsigned char zlib_xfl(const std::string& path, TFRecordWriterOptions o) {
  o.gzip_member_bytes = 0;
  const std::string gz = write_records(path, o, {"x"});
  return static_cast<unsigned char>(gz[8]);
}

TEST_F(GzipMembersTest, RecordsReadBackOnBothPathsAndThroughZlib) {
  const auto records = sample_records();
  const std::string plain = write_records(path("plain"), {}, records);
  for (size_t member_bytes :
       {size_t{4096}, size_t{5000}, size_t{65536}, detail::kDefaultGzipMemberBytes, size_t{1} << 30, size_t{0}}) {
    SCOPED_TRACE("gzip_member_bytes " + std::to_string(member_bytes));
    const std::string p = path("m.gz");
    const std::string gz =
        write_records(p, {.compression = Compression::kGzip, .gzip_member_bytes = member_bytes}, records);
    EXPECT_EQ(detect_compression(p), Compression::kGzip);
    EXPECT_TRUE(detail::ByteReader(p, Compression::kGzip).inflated_whole());
    EXPECT_EQ(read_all(p), records);
    {
      WholeFileLimit stream(0);
      EXPECT_FALSE(detail::ByteReader(p, Compression::kGzip).inflated_whole());
      EXPECT_EQ(read_all(p), records);
    }
    size_t members = 0;
    EXPECT_EQ(zlib_inflate(gz, &members), plain);
    const size_t per = member_bytes ? member_bytes : plain.size();
    EXPECT_EQ(members, (plain.size() + per - 1) / per);
    EXPECT_EQ(gzread_all(p), plain);
  }
}

TEST_F(GzipMembersTest, SizeFieldsWalkTheFileMemberByMember) {
  const auto records = sample_records();
  const std::string plain = write_records(path("plain"), {}, records);
  struct Case {
    size_t member_bytes;
    int level;
    CompressionStrategy strategy;
  };
  for (const Case c : {Case{4096, -1, CompressionStrategy::kDefault}, Case{4096, 9, CompressionStrategy::kFiltered},
                       Case{10000, 1, CompressionStrategy::kDefault}, Case{4096, 0, CompressionStrategy::kDefault},
                       Case{65536, 6, CompressionStrategy::kHuffmanOnly},
                       Case{detail::kDefaultGzipMemberBytes, 9, CompressionStrategy::kFiltered}}) {
    SCOPED_TRACE(testing::Message() << "gzip_member_bytes " << c.member_bytes << " level " << c.level << " strategy "
                                    << compression_strategy_name(c.strategy));
    const TFRecordWriterOptions o{.compression = Compression::kGzip,
                                  .compression_level = c.level,
                                  .compression_strategy = c.strategy,
                                  .gzip_member_bytes = c.member_bytes};
    const unsigned char xfl = zlib_xfl(path("xfl.gz"), o);
    // zlib's rule (level -1 is its 6): 2 at level 9, 4 at levels 0..1 or Huffman-only and later strategies.
    const bool fast = c.level == 0 || c.level == 1 || c.strategy == CompressionStrategy::kHuffmanOnly;
    EXPECT_EQ(xfl, c.level == 9 ? 2 : fast ? 4 : 0);
    const std::string gz = write_records(path("m.gz"), o, records);
    const auto members = walk_members(gz, plain, xfl);
    ASSERT_EQ(members.size(), (plain.size() + c.member_bytes - 1) / c.member_bytes);
    for (size_t i = 0; i + 1 < members.size(); ++i) EXPECT_EQ(members[i].isize, c.member_bytes) << "member " << i;
    EXPECT_GT(members.back().isize, 0u);
    EXPECT_LE(members.back().isize, c.member_bytes);
  }
}

TEST_F(GzipMembersTest, FlushEndsAMember) {
  const auto records = sample_records(60);
  const TFRecordWriterOptions o{.compression = Compression::kGzip, .gzip_member_bytes = 4096};
  const std::string p = path("flushed.gz");
  TFRecordWriter plain_writer(path("plain"), {});
  TFRecordWriter w(p, o);
  size_t flushes = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    w.write(records[i]);
    plain_writer.write(records[i]);
    if (i % 7 != 3 && i + 1 != records.size()) continue;
    w.flush();
    plain_writer.flush();
    ++flushes;
    // The file on disk, read while the writer is still open, is a complete gzip file of every record so far.
    SCOPED_TRACE("after record " + std::to_string(i));
    const std::string plain = file_bytes(path("plain"));
    const std::string gz = file_bytes(p);
    EXPECT_EQ(zlib_inflate(gz), plain);
    const std::vector<std::string> so_far(records.begin(), records.begin() + static_cast<ptrdiff_t>(i) + 1);
    EXPECT_EQ(read_all(p), so_far);
    const auto members = walk_members(gz, plain, 0);
    for (const Member& m : members) EXPECT_LE(m.isize, 4096u);
    // A flush with nothing new to write adds no member.
    w.flush();
    EXPECT_EQ(file_bytes(p), gz);
  }
  w.close();
  plain_writer.close();
  ASSERT_GE(flushes, 8u);
  const std::string plain = file_bytes(path("plain"));
  const std::string gz = file_bytes(p);
  const auto members = walk_members(gz, plain, 0);
  EXPECT_GT(members.size(), (plain.size() + 4095) / 4096);  // flushes ended members early
  EXPECT_EQ(read_all(p), records);
  WholeFileLimit stream(0);
  EXPECT_EQ(read_all(p), records);
}

TEST_F(GzipMembersTest, ZeroWritesOneMemberThroughZlibsWrapper) {
  const auto records = sample_records();
  const std::string plain = write_records(path("plain"), {}, records);
  const std::string gz =
      write_records(path("one.gz"), {.compression = Compression::kGzip, .gzip_member_bytes = 0}, records);
  ASSERT_GT(plain.size(), detail::kDefaultGzipMemberBytes);
  EXPECT_EQ(gz.substr(0, 4), (std::string{'\x1f', '\x8b', '\x08', '\x00'}));  // FLG 0: no FEXTRA
  size_t members = 0;
  EXPECT_EQ(zlib_inflate(gz, &members), plain);
  EXPECT_EQ(members, 1u);
  EXPECT_EQ(read_all(path("one.gz")), records);
  // ZLIB files ignore the setting (and do not check it).
  const std::string zz =
      write_records(path("a.zz"), {.compression = Compression::kZlib, .gzip_member_bytes = 1}, records);
  EXPECT_EQ(zz, write_records(path("b.zz"), {.compression = Compression::kZlib}, records));
}

TEST_F(GzipMembersTest, AnEmptyFileIsOneEmptyMember) {
  for (size_t member_bytes : {size_t{4096}, detail::kDefaultGzipMemberBytes}) {
    SCOPED_TRACE("gzip_member_bytes " + std::to_string(member_bytes));
    const std::string p = path("empty.gz");
    const std::string gz = write_records(p, {.compression = Compression::kGzip, .gzip_member_bytes = member_bytes}, {});
    const auto members = walk_members(gz, "", 0);
    ASSERT_EQ(members.size(), 1u);
    EXPECT_EQ(members[0].isize, 0u);
    EXPECT_EQ(le32(gz, gz.size() - 8), 0u);  // the CRC-32 of no bytes
    EXPECT_EQ(zlib_inflate(gz), "");
    EXPECT_EQ(gzread_all(p), "");
    EXPECT_EQ(detect_compression(p), Compression::kGzip);
    EXPECT_TRUE(read_all(p).empty());
    WholeFileLimit stream(0);
    EXPECT_TRUE(read_all(p).empty());
  }
}

TEST_F(GzipMembersTest, OutOfRangeValuesAreErrorsBeforeTheFileIsMade) {
  const std::string p = path("never.gz");
  for (size_t bad : {size_t{1}, detail::kMinGzipMemberBytes - 1, detail::kMaxGzipMemberBytes + 1, SIZE_MAX}) {
    const std::string msg = test::message_of<InvalidArgument>(
        [&] { TFRecordWriter w(p, {.compression = Compression::kGzip, .gzip_member_bytes = bad}); });
    EXPECT_NE(msg.find("gzip_member_bytes " + std::to_string(bad)), std::string::npos) << msg;
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_FALSE(std::filesystem::exists(p));
    // ByteWriter checks it, whoever constructs one.
    EXPECT_THROW(detail::ByteWriter(p, Compression::kGzip, {.gzip_member_bytes = bad}), InvalidArgument);
    EXPECT_FALSE(std::filesystem::exists(p));
  }
  // The bounds themselves are accepted; uncompressed files ignore the setting.
  for (size_t ok : {detail::kMinGzipMemberBytes, detail::kMaxGzipMemberBytes}) {
    TFRecordWriter w(p, {.compression = Compression::kGzip, .gzip_member_bytes = ok});
    w.write("x");
    w.close();
    EXPECT_EQ(read_all(p), std::vector<std::string>{"x"});
  }
  TFRecordWriter plain(path("plain"), {.gzip_member_bytes = 1});
  plain.close();
}

}  // namespace
}  // namespace strata::data
