// Buffered, optionally compressed file streams, read and written, the written ones optionally
// published by rename once complete (see compression.h). Thread-safety: per object; the whole-file
// bound is an atomic.
#include "data/compression.h"

#include <libdeflate.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>

#include "data/crc32c.h"
#include "data/crc_fold.h"
#include "data/inflate_streams.h"
#include "io/atomic_file.h"
#include "strata/error.h"

namespace strata::data::detail {

// ---- reading

namespace {

// The most deflate expands its input (a 258-byte match per 2 bits, as zlib's docs round it): a size that a damaged
// file claims beyond this many times its compressed bytes is not believed, so it allocates nothing.
constexpr size_t kMaxDeflateRatio = 1032;

std::atomic<uint64_t> g_whole_file_limit{kWholeFileMaxCompressed};

struct DecompressorDeleter {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

// The length of the gzip member header (RFC 1952) at in[0, n), or 0 when it is not one this reader
// takes whole (a bad magic or method, reserved flags, a header CRC, or one cut short): zlib reads those.
size_t gzip_header_size(const unsigned char* in, size_t n) {
  constexpr unsigned kHeaderCrc = 2, kExtra = 4, kName = 8, kComment = 16, kReserved = 0xe0;
  if (n < 10 || in[0] != 0x1f || in[1] != 0x8b || in[2] != 8) return 0;
  const unsigned flags = in[3];
  if (flags & (kReserved | kHeaderCrc)) return 0;
  size_t at = 10;
  if (flags & kExtra) {
    if (n - at < 2) return 0;
    const size_t extra = in[at] | (size_t{in[at + 1]} << 8);
    if (n - at - 2 < extra) return 0;
    at += 2 + extra;
  }
  for (const unsigned text : {kName, kComment}) {
    if (!(flags & text)) continue;
    const void* nul = std::memchr(in + at, 0, n - at);
    if (!nul) return 0;
    at = static_cast<size_t>(static_cast<const unsigned char*>(nul) - in) + 1;
  }
  return at;
}

uint32_t load_le32(const unsigned char* p) {
  return p[0] | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

// One libdeflate call on the member or stream at in[0, n): raw deflate between a gzip member's header
// and trailer (whose CRC-32 goes to `member`, checked later, and whose ISIZE is checked here), or a
// whole ZLIB stream.
libdeflate_result inflate_one(libdeflate_decompressor* d, Compression compression, const unsigned char* in, size_t n,
                              char* out, size_t out_room, size_t* used_in, size_t* used_out, GzipMember* member) {
  if (compression != Compression::kGzip)
    return libdeflate_zlib_decompress_ex(d, in, n, out, out_room, used_in, used_out);
  const size_t header = gzip_header_size(in, n);
  if (header == 0) return LIBDEFLATE_BAD_DATA;
  const libdeflate_result rc =
      libdeflate_deflate_decompress_ex(d, in + header, n - header, out, out_room, used_in, used_out);
  if (rc != LIBDEFLATE_SUCCESS) return rc;
  const size_t trailer = header + *used_in;
  if (n - trailer < 8 || load_le32(in + trailer + 4) != static_cast<uint32_t>(*used_out)) return LIBDEFLATE_BAD_DATA;
  member->crc = load_le32(in + trailer);
  *used_in = trailer + 8;
  return LIBDEFLATE_SUCCESS;
}

// A size-tagged member's header (see kMemberHeaderBytes) is these 4 bytes, MTIME, XFL and OS, then
// these 6 (XLEN 8 and the 'SZ' subfield's id and length), then the member's size. Writer and reader
// share them.
constexpr unsigned char kMemberMagicFlags[4] = {0x1f, 0x8b, 8, 4};
constexpr unsigned char kMemberSizeField[6] = {8, 0, kMemberSizeSi1, kMemberSizeSi2, 4, 0};
static_assert(10 + sizeof kMemberSizeField + 4 == kMemberHeaderBytes);

// Where a member of a ByteWriter gzip chain lies: its deflate body in the file, its bytes in the
// inflated stream, and its stored CRC-32.
struct SizedMember {
  size_t body = 0, body_size = 0;
  size_t out_offset = 0, out_size = 0;
  uint32_t crc = 0;
};

// The members of in[0, n) when it is a chain of size-tagged members as ByteWriter writes them (each
// header's 'SZ' subfield holding the member's size), found without inflating; false otherwise. Sizes
// are only claims here: inflating checks each body against its ISIZE.
bool find_sized_members(const unsigned char* in, size_t n, std::vector<SizedMember>* found, size_t* inflated) {
  found->clear();
  size_t total = 0;
  for (size_t at = 0; at < n;) {
    const unsigned char* h = in + at;
    if (n - at < kMemberHeaderBytes + 8 || std::memcmp(h, kMemberMagicFlags, 4) != 0 ||
        std::memcmp(h + 10, kMemberSizeField, 6) != 0)
      return false;
    const size_t size = load_le32(h + 16);
    if (size < kMemberHeaderBytes + 8 || size > n - at) return false;
    const size_t out_size = load_le32(h + size - 4);
    if (out_size > kWholeFileMaxInflated - total || out_size > kMaxDeflateRatio * size) return false;
    const uint32_t crc = load_le32(h + size - 8);
    found->push_back({at + kMemberHeaderBytes, size - kMemberHeaderBytes - 8, total, out_size, crc});
    total += out_size;
    at += size;
  }
  *inflated = total;
  return !found->empty();
}

// Inflates the size-tagged member chain `found` (of `inflated` bytes in all) into `out`, two members at
// once (inflate_streams). Nothing when a member does not inflate to its size, or memory runs out.
std::optional<size_t> inflate_sized_members(const unsigned char* in, const std::vector<SizedMember>& found,
                                            size_t inflated, RecycledBuffer* out, std::vector<GzipMember>* members) {
  try {
    *out = RecycledBuffer(std::max<size_t>(inflated, 1));
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
  std::vector<InflateJob> jobs;
  jobs.reserve(found.size());
  auto* inflated_bytes = reinterpret_cast<unsigned char*>(out->data());
  for (const SizedMember& m : found)
    jobs.push_back({in + m.body, m.body_size, inflated_bytes + m.out_offset, m.out_size});
  if (!inflate_streams(jobs)) return std::nullopt;
  members->clear();
  for (const SizedMember& m : found) members->push_back({m.out_offset + m.out_size, m.crc});
  return inflated;
}

// Inflates the concatenated GZIP members or ZLIB streams of in[0, n) into `out`: a size-tagged member
// chain two members at a time (`*in_pairs` true), anything else with libdeflate into a buffer made at
// least `hint` bytes and grown (doubling, up to kWholeFileMaxInflated) while libdeflate asks for more.
// Returns the inflated size, or nothing when the data is damaged, inflates to more than the bound, or
// memory runs out. GZIP: each member's end and stored CRC-32 go to `members`; the CRCs are not checked here.
std::optional<size_t> inflate_all(Compression compression, const unsigned char* in, size_t n, size_t hint,
                                  RecycledBuffer* out, std::vector<GzipMember>* members, bool* in_pairs) {
  *in_pairs = false;
  if (compression == Compression::kGzip) {
    std::vector<SizedMember> found;
    size_t inflated = 0;
    if (find_sized_members(in, n, &found, &inflated)) {
      if (const std::optional<size_t> done = inflate_sized_members(in, found, inflated, out, members)) {
        *in_pairs = true;
        return done;
      }
      hint = std::max<size_t>(inflated, 1);  // damaged: libdeflate, member by member, finds where
    }
  }
  std::unique_ptr<libdeflate_decompressor, DecompressorDeleter> d(libdeflate_alloc_decompressor());
  if (!d) return std::nullopt;
  try {
    *out = RecycledBuffer(std::clamp<size_t>(hint, 4096, kWholeFileMaxInflated));
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
  size_t in_pos = 0, out_pos = 0;
  while (in_pos < n) {
    const size_t cap = std::min<size_t>(out->capacity(), kWholeFileMaxInflated);
    char* buf = out->data();
    size_t used_in = 0, used_out = 0;
    GzipMember member;
    const libdeflate_result rc = inflate_one(d.get(), compression, in + in_pos, n - in_pos, buf + out_pos,
                                             cap - out_pos, &used_in, &used_out, &member);
    if (rc == LIBDEFLATE_INSUFFICIENT_SPACE && cap < kWholeFileMaxInflated) {
      // Inflate this member again into more room, keeping the members before it.
      try {
        out->grow(std::min<size_t>(2 * cap, kWholeFileMaxInflated), out_pos);
      } catch (const std::bad_alloc&) {
        return std::nullopt;
      }
      continue;
    }
    if (rc != LIBDEFLATE_SUCCESS || used_in == 0) return std::nullopt;
    in_pos += used_in;
    out_pos += used_out;
    if (compression == Compression::kGzip) {
      member.end = out_pos;
      members->push_back(member);
    }
  }
  return out_pos;
}

}  // namespace

uint64_t whole_file_limit() { return g_whole_file_limit.load(std::memory_order_relaxed); }
uint64_t set_whole_file_limit(uint64_t max_compressed_bytes) {
  return g_whole_file_limit.exchange(max_compressed_bytes, std::memory_order_relaxed);
}

struct ByteReader::Inflater {
  z_stream z{};
  std::vector<char> in;
  bool finished = false;  // the last member ended and the file has no more bytes
  explicit Inflater(size_t buffer_size) : in(buffer_size) {}
  ~Inflater() { inflateEnd(&z); }
};

ByteReader::ByteReader(std::string path, Compression compression, size_t buffer_size)
    : path_(std::move(path)), compression_(compression), buffer_size_(std::max<size_t>(buffer_size, 4096)) {
  open();
}

ByteReader::~ByteReader() {
  if (file_) std::fclose(file_);
}

void ByteReader::open() {
  if (file_) std::fclose(file_);
  file_ = std::fopen(path_.c_str(), "rb");
  STRATA_CHECK(file_, IoError, "cannot open " << path_ << ": " << std::strerror(errno));
  std::setvbuf(file_, nullptr, _IONBF, 0);  // we buffer ourselves
  begin_ = end_ = 0;
  position_ = 0;
  inflater_.reset();
  whole_buf_.release();
  whole_ = false;
  pairs_ = false;
  crc_due_ = SIZE_MAX;  // (until a gzip file is inflated whole)
  if (compression_ != Compression::kNone && !stream_ && inflate_whole()) return;
  if (buf_.size() < buffer_size_) buf_.resize(buffer_size_);
  base_ = buf_.data();
  if (compression_ != Compression::kNone) {
    inflater_ = std::make_unique<Inflater>(buffer_size_);
    const int window = compression_ == Compression::kGzip ? 16 + MAX_WBITS : MAX_WBITS;
    STRATA_CHECK(inflateInit2(&inflater_->z, window) == Z_OK, Error, "zlib inflateInit2 failed for " << path_);
  }
}

bool ByteReader::inflate_whole() {
  struct stat st;
  if (fstat(fileno(file_), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > whole_file_limit()) return false;
  RecycledBuffer in;
  try {
    in = RecycledBuffer(size);
  } catch (const std::bad_alloc&) {
    return false;  // stream it instead
  }
  const size_t got = read_file(in.data(), size);
  char extra;
  if (got != size || read_file(&extra, 1) != 0) {  // the file changed size under us: stream it
    std::rewind(file_);
    return false;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(in.data());
  // A gzip member's last 4 bytes are its uncompressed size mod 2^32: exact for one member of < 4 GiB.
  size_t hint = 4 * size;
  if (compression_ == Compression::kGzip && size >= 18) {
    uint32_t isize;
    std::memcpy(&isize, bytes + size - 4, 4);  // little-endian hosts only, like the TFRecord header
    // A damaged or cut file's last bytes are no size: no more than deflate can expand to is believed.
    hint = std::clamp<size_t>(isize, 1, kMaxDeflateRatio * size);
  }
  RecycledBuffer out;
  gzip_members_.clear();
  const std::optional<size_t> out_size = inflate_all(compression_, bytes, size, hint, &out, &gzip_members_, &pairs_);
  if (!out_size) {
    // Damaged (zlib will say where), too large or out of memory: read it again as a stream from now on.
    stream_ = true;
    std::rewind(file_);
    return false;
  }
  whole_buf_ = std::move(out);
  base_ = whole_buf_.data();
  begin_ = 0;
  end_ = *out_size;
  whole_ = true;
  crc_pos_ = 0;
  crc_member_ = 0;
  crc_ = 0;
  crc_due_ = 0;
  std::fclose(file_);  // every byte is in memory
  file_ = nullptr;
  return true;
}

size_t ByteReader::read_file(char* dst, size_t n) {
  const size_t got = std::fread(dst, 1, n, file_);
  STRATA_CHECK(got == n || !std::ferror(file_), IoError, "read error in " << path_ << ": " << std::strerror(errno));
  return got;
}

size_t ByteReader::fill(size_t want) {
  char* dst = buf_.data() + end_;
  if (!inflater_) {
    const size_t got = read_file(dst, want);
    end_ += got;
    return got;
  }
  Inflater& f = *inflater_;
  z_stream& z = f.z;
  z.next_out = reinterpret_cast<Bytef*>(dst);
  z.avail_out = static_cast<uInt>(want);
  while (z.avail_out > 0 && !f.finished) {
    if (z.avail_in == 0) {
      const size_t got = read_file(f.in.data(), f.in.size());
      if (got == 0) {
        // A file that ends inside a compressed stream is truncated.
        if (z.total_in != 0 || z.total_out != 0)
          stream_error(std::string(compression_name(compression_)) + " stream is truncated at uncompressed offset " +
                           std::to_string(position_ + (end_ - begin_) + (want - z.avail_out)),
                       __LINE__);
        f.finished = true;
        break;
      }
      z.next_in = reinterpret_cast<Bytef*>(f.in.data());
      z.avail_in = static_cast<uInt>(got);
    }
    const int rc = inflate(&z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow; reset and continue if any input remains.
      inflateReset(&z);
      z.total_in = z.total_out = 0;
      if (z.avail_in == 0) {
        const size_t got = read_file(f.in.data(), f.in.size());
        if (got == 0) {
          f.finished = true;
          break;
        }
        z.next_in = reinterpret_cast<Bytef*>(f.in.data());
        z.avail_in = static_cast<uInt>(got);
      }
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      corrupt_stream(position_ + (end_ - begin_) + (want - z.avail_out),
                     z.msg ? z.msg : "zlib error " + std::to_string(rc));
  }
  const size_t got = want - z.avail_out;
  end_ += got;
  return got;
}

void ByteReader::corrupt_stream(uint64_t offset, const std::string& why) const {
  stream_error(std::string(compression_name(compression_)) + " stream is corrupt near uncompressed offset " +
                   std::to_string(offset) + " (" + why + ")",
               __LINE__);
}

void ByteReader::stream_error(const std::string& detail, int line) const {
  throw StreamCorrupt(::strata::detail::with_location(path_ + ": " + detail, __FILE__, line), detail);
}

void ByteReader::check_gzip_crcs(size_t upto) {
  for (;;) {
    if (crc_member_ < gzip_members_.size() && crc_pos_ == gzip_members_[crc_member_].end) {
      const GzipMember& m = gzip_members_[crc_member_];
      if (crc_ != m.crc) corrupt_stream(m.end, "incorrect data check");  // zlib's words for it
      crc_ = 0;
      ++crc_member_;
      continue;
    }
    if (crc_pos_ >= upto || crc_member_ == gzip_members_.size()) break;
    const size_t stop = std::min(upto, gzip_members_[crc_member_].end);
    crc_ = crc32_gzip(crc_, base_ + crc_pos_, stop - crc_pos_);
    crc_pos_ = stop;
  }
  crc_due_ = crc_member_ == gzip_members_.size() ? SIZE_MAX
                                                 : std::min(crc_pos_ + kGzipCrcStep, gzip_members_[crc_member_].end);
}

size_t ByteReader::ensure(size_t n) {
  // The bytes consumed since the CRC-32 last caught up (records just read, still in the cache) join it
  // every kGzipCrcStep bytes, and before any byte past a member's end is handed out.
  if (begin_ >= crc_due_) check_gzip_crcs(begin_);
  if (end_ - begin_ >= n) return end_ - begin_;
  if (whole_) {
    if (begin_ == end_ && whole_buf_) {  // read to the end: release the file's bytes
      check_gzip_crcs(end_);              // (an empty last member ends here too)
      whole_buf_.release();
      base_ = nullptr;
      begin_ = end_ = 0;
    }
    return end_ - begin_;
  }
  // Move the unread tail to the front and make room for n bytes (at least one full chunk).
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  while (end_ < n) {
    // Grow by doubling as bytes arrive (never straight to n: a damaged length must not allocate
    // more than the stream holds), then read as much as fits, so small records cost one big read.
    if (end_ == buf_.size()) buf_.resize(std::min(std::max(n, buffer_size_), 2 * buf_.size()));
    base_ = buf_.data();
    if (fill(buf_.size() - end_) == 0) break;
  }
  return end_ - begin_;
}

void ByteReader::seek(uint64_t offset) {
  if (offset == position_) return;
  if (whole_ && !whole_buf_) open();  // read to its end and freed: inflate it again
  if (whole_) {
    STRATA_CHECK(offset <= end_, DataCorrupt,
                 path_ << ": cannot seek to offset " << offset << ", the stream ends at " << end_);
    if (offset < crc_pos_) {  // back: sum again from the start
      crc_pos_ = 0;
      crc_member_ = 0;
      crc_due_ = 0;
      crc_ = 0;
    }
    check_gzip_crcs(static_cast<size_t>(offset));  // the bytes skipped are checked all the same
    begin_ = static_cast<size_t>(offset);
    position_ = offset;
    return;
  }
  if (!inflater_) {
    STRATA_CHECK(std::fseek(file_, static_cast<long>(offset), SEEK_SET) == 0, IoError,
                 "cannot seek to " << offset << " in " << path_);
    begin_ = end_ = 0;
    position_ = offset;
    return;
  }
  if (offset < position_) open();
  if (whole_) {  // (re-opening can find the file inflatable whole again)
    seek(offset);
    return;
  }
  while (position_ < offset) {
    const size_t have = ensure(1);
    STRATA_CHECK(have > 0, DataCorrupt,
                 path_ << ": cannot seek to offset " << offset << ", the stream ends at " << position_);
    consume(std::min<uint64_t>(have, offset - position_));
  }
}

// ---- writing

static_assert(Z_DEFAULT_STRATEGY == static_cast<int>(CompressionStrategy::kDefault) &&
                  Z_FILTERED == static_cast<int>(CompressionStrategy::kFiltered) &&
                  Z_HUFFMAN_ONLY == static_cast<int>(CompressionStrategy::kHuffmanOnly) &&
                  Z_RLE == static_cast<int>(CompressionStrategy::kRle) &&
                  Z_FIXED == static_cast<int>(CompressionStrategy::kFixed),
              "CompressionStrategy follows zlib's numbering (TensorFlow passes it to zlib as is)");

struct ByteWriter::Deflater {
  z_stream z{};
  ~Deflater() { deflateEnd(&z); }
};

ByteWriter::ByteWriter(std::string path, Compression compression, DeflateSettings deflate, bool atomic)
    : path_(std::move(path)), compression_(compression) {
  if (compression_ == Compression::kGzip) {
    const size_t m = deflate.gzip_member_bytes;
    STRATA_CHECK(m == 0 || (m >= kMinGzipMemberBytes && m <= kMaxGzipMemberBytes), InvalidArgument,
                 "gzip_member_bytes " << m << " for " << path_ << " is out of range " << kMinGzipMemberBytes << ".."
                                      << kMaxGzipMemberBytes << " (0: the whole file as one gzip member)");
    member_bytes_ = m;
  }
  if (compression_ != Compression::kNone) {
    STRATA_CHECK(deflate.level >= -1 && deflate.level <= 9, InvalidArgument,
                 "compression level " << deflate.level << " for " << path_ << " is out of zlib's range -1..9");
    STRATA_CHECK(deflate.mem_level >= 1 && deflate.mem_level <= 9, InvalidArgument,
                 "mem_level " << deflate.mem_level << " for " << path_ << " is out of zlib's range 1..9");
    STRATA_CHECK(deflate.strategy >= Z_DEFAULT_STRATEGY && deflate.strategy <= Z_FIXED, InvalidArgument,
                 "compression strategy " << deflate.strategy << " for " << path_ << " is not one of zlib's 0..4");
  }
  in_.reserve(256 << 10);
  if (compression_ != Compression::kNone) {
    deflater_ = std::make_unique<Deflater>();
    // Members are raw deflate streams framed here; otherwise zlib writes the gzip or zlib wrapper.
    const int window = member_bytes_ ? -MAX_WBITS : compression_ == Compression::kGzip ? 16 + MAX_WBITS : MAX_WBITS;
    STRATA_CHECK(deflateInit2(&deflater_->z, deflate.level, Z_DEFLATED, window, deflate.mem_level, deflate.strategy) ==
                     Z_OK,
                 InvalidArgument, "zlib deflateInit2 failed for " << path_ << " (level " << deflate.level << ")");
    if (member_bytes_) {
      // XFL as zlib's gzip wrapper writes it (deflateInit2 takes level -1 as 6).
      const int level = deflate.level == -1 ? 6 : deflate.level;
      xfl_ = level == 9 ? 2 : (deflate.strategy >= Z_HUFFMAN_ONLY || level < 2) ? 4 : 0;
      member_.resize(kMemberHeaderBytes + std::min(member_bytes_, size_t{64} << 10));
      member_used_ = kMemberHeaderBytes;
    } else {
      out_.resize(256 << 10);
    }
  }
  // The file is made last, so no exception above leaves one behind. "x": a temporary file is new.
  if (atomic) {
    temp_ = io::detail::temp_name_for(path_);
    file_ = std::fopen(temp_.c_str(), "wbx");
    STRATA_CHECK(
        file_, IoError,
        "cannot create " << path_ << ": cannot create temporary file " << temp_ << ": " << std::strerror(errno));
  } else {
    file_ = std::fopen(path_.c_str(), "wb");
    STRATA_CHECK(file_, IoError, "cannot create " << path_ << ": " << std::strerror(errno));
  }
}

ByteWriter::~ByteWriter() {
  if (!temp_.empty()) {
    discard();  // never closed: an atomic file is not published unfinished
    return;
  }
  try {
    close();
  } catch (...) {
  }
}

void ByteWriter::discard() {
  if (!file_) return;  // closed already (close() removes the temporary file when it fails)
  std::fclose(file_);
  file_ = nullptr;
  if (!temp_.empty()) std::remove(temp_.c_str());
}

void ByteWriter::write_file(const void* data, size_t n) {
  STRATA_CHECK(std::fwrite(data, 1, n, file_) == n, IoError,
               "write error in " << path_ << ": " << std::strerror(errno));
}

void ByteWriter::deflate_some(int flush) {
  z_stream& z = deflater_->z;
  z.next_in = reinterpret_cast<Bytef*>(in_.data());
  z.avail_in = static_cast<uInt>(in_.size());
  for (;;) {
    z.next_out = reinterpret_cast<Bytef*>(out_.data());
    z.avail_out = static_cast<uInt>(out_.size());
    const int rc = deflate(&z, flush);
    STRATA_CHECK(rc != Z_STREAM_ERROR, Error, "zlib deflate failed for " << path_);
    write_file(out_.data(), out_.size() - z.avail_out);
    if (flush == Z_FINISH ? rc == Z_STREAM_END : (z.avail_in == 0 && z.avail_out != 0)) break;
  }
  in_.clear();
}

void ByteWriter::deflate_into_member(const char* data, size_t n, int flush) {
  z_stream& z = deflater_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  z.avail_in = static_cast<uInt>(n);  // n <= member_bytes_ <= kMaxGzipMemberBytes
  constexpr size_t kRoom = size_t{64} << 10;
  for (;;) {
    if (member_.size() - member_used_ < kRoom) member_.resize(std::max(2 * member_.size(), member_used_ + kRoom));
    const size_t room = std::min<size_t>(member_.size() - member_used_, UINT32_MAX);
    z.next_out = reinterpret_cast<Bytef*>(member_.data() + member_used_);
    z.avail_out = static_cast<uInt>(room);
    const int rc = deflate(&z, flush);
    STRATA_CHECK(rc != Z_STREAM_ERROR, Error, "zlib deflate failed for " << path_);
    member_used_ += room - z.avail_out;
    if (flush == Z_FINISH ? rc == Z_STREAM_END : (z.avail_in == 0 && z.avail_out != 0)) break;
  }
}

void ByteWriter::deflate_members(const char* data, size_t n) {
  while (n > 0) {
    const size_t take = std::min(n, member_bytes_ - member_in_);
    member_crc_ = crc32_gzip(member_crc_, data, take);
    deflate_into_member(data, take, Z_NO_FLUSH);
    member_in_ += take;
    data += take;
    n -= take;
    if (member_in_ == member_bytes_) end_member();
  }
}

void ByteWriter::end_member() {
  deflate_into_member(nullptr, 0, Z_FINISH);
  const size_t total = member_used_ + 8;
  STRATA_CHECK(total <= UINT32_MAX, Error, "gzip member of " << total << " bytes in " << path_ << " exceeds 4 GiB");
  auto put_le32 = [](char* at, uint32_t v) {
    for (int i = 0; i < 4; ++i) at[i] = static_cast<char>(v >> (8 * i));
  };
  char* header = member_.data();
  std::memcpy(header, kMemberMagicFlags, 4);
  put_le32(header + 4, 0);  // MTIME
  header[8] = static_cast<char>(xfl_);
  header[9] = 3;  // OS: Unix
  std::memcpy(header + 10, kMemberSizeField, 6);
  put_le32(header + 16, static_cast<uint32_t>(total));
  if (member_.size() < total) member_.resize(total);
  put_le32(member_.data() + member_used_, member_crc_);
  put_le32(member_.data() + member_used_ + 4, static_cast<uint32_t>(member_in_));
  write_file(member_.data(), total);
  STRATA_CHECK(deflateReset(&deflater_->z) == Z_OK, Error, "zlib deflateReset failed for " << path_);
  member_used_ = kMemberHeaderBytes;
  member_crc_ = 0;
  member_in_ = 0;
  ++members_;
}

void ByteWriter::write(const void* data, size_t n) {
  STRATA_CHECK(file_, InvalidArgument, "write to closed file " << path_);
  const char* p = static_cast<const char*>(data);
  if (in_.size() + n > in_.capacity()) {
    if (member_bytes_) {
      deflate_members(in_.data(), in_.size());
      in_.clear();
    } else if (deflater_) {
      deflate_some(Z_NO_FLUSH);
    } else {
      write_file(in_.data(), in_.size());
      in_.clear();
    }
    if (n >= in_.capacity()) {  // a large write skips the buffer
      if (member_bytes_) {
        deflate_members(p, n);
      } else if (deflater_) {
        in_.assign(p, p + n);
        deflate_some(Z_NO_FLUSH);
      } else {
        write_file(p, n);
      }
      return;
    }
  }
  in_.insert(in_.end(), p, p + n);
}

void ByteWriter::flush() {
  if (!file_) return;
  if (member_bytes_) {
    deflate_members(in_.data(), in_.size());
    in_.clear();
    if (member_in_ > 0) end_member();
  } else if (deflater_) {
    deflate_some(Z_FULL_FLUSH);
  } else {
    write_file(in_.data(), in_.size());
    in_.clear();
  }
  STRATA_CHECK(std::fflush(file_) == 0, IoError, "flush failed for " << path_ << ": " << std::strerror(errno));
}

void ByteWriter::close() {
  if (!file_) return;
  try {
    if (member_bytes_) {
      deflate_members(in_.data(), in_.size());
      in_.clear();
      if (member_in_ > 0 || members_ == 0) end_member();  // an empty file still gets one (empty) member
    } else if (deflater_) {
      deflate_some(Z_FINISH);
    } else {
      write_file(in_.data(), in_.size());
      in_.clear();
    }
    if (!temp_.empty()) {  // every byte on the disk before the name says the file is there
      STRATA_CHECK(std::fflush(file_) == 0, IoError,
                   "write error in " << path_ << " (" << temp_ << "): " << std::strerror(errno));
      STRATA_CHECK(::fsync(fileno(file_)) == 0, IoError,
                   "fsync failed for " << path_ << " (" << temp_ << "): " << std::strerror(errno));
    }
  } catch (...) {
    discard();
    throw;
  }
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0) {
    const int err = errno;
    if (!temp_.empty()) std::remove(temp_.c_str());
    STRATA_THROW(IoError, "close failed for " << path_ << ": " << std::strerror(err));
  }
  if (!temp_.empty()) io::detail::publish_temp_file(temp_, path_);
}

// ---- sniffing

Compression sniff_compression(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  STRATA_CHECK(f, IoError, "cannot open " << path << ": " << std::strerror(errno));
  unsigned char head[12] = {};
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  if (n == 12) {
    uint32_t stored;
    std::memcpy(&stored, head + 8, 4);
    if (mask_crc(crc32c(head, 8)) == stored) return Compression::kNone;
  }
  if (n >= 2 && head[0] == 0x1f && head[1] == 0x8b) return Compression::kGzip;
  if (n >= 2 && (head[0] & 0x0f) == 8 && (head[0] >> 4) <= 7 && ((head[0] << 8) | head[1]) % 31 == 0)
    return Compression::kZlib;
  return Compression::kNone;
}

}  // namespace strata::data::detail
