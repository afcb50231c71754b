// Buffered, optionally compressed file streams, read and written, the written ones optionally
// published by rename once complete (see byte_streams.h). Thread-safety: per object; the whole-file
// bound is an atomic.
#include "data/compression/byte_streams.h"

#include <isa-l/crc.h>
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

// One libdeflate call on the gzip member or zlib stream at in[0, n), inflated into out[0, out_room).
// GZIP: libdeflate inflates the raw deflate data between the member's header and trailer, and the
// trailer's CRC-32 (by ISA-L, about five times libdeflate's own CRC-32 here) and ISIZE are checked
// here; *used_in then counts the whole member. ZLIB: libdeflate checks the stream's Adler-32 itself.
libdeflate_result inflate_one(libdeflate_decompressor* d, Compression compression, const unsigned char* in, size_t n,
                              char* out, size_t out_room, size_t* used_in, size_t* used_out) {
  if (compression != Compression::kGzip)
    return libdeflate_zlib_decompress_ex(d, in, n, out, out_room, used_in, used_out);
  const size_t header = gzip_header_size(in, n);
  if (header == 0) return LIBDEFLATE_BAD_DATA;
  const libdeflate_result rc =
      libdeflate_deflate_decompress_ex(d, in + header, n - header, out, out_room, used_in, used_out);
  if (rc != LIBDEFLATE_SUCCESS) return rc;
  const size_t trailer = header + *used_in;
  if (n - trailer < 8 || load_le32(in + trailer + 4) != static_cast<uint32_t>(*used_out) ||
      load_le32(in + trailer) != crc32_gzip_refl(0, reinterpret_cast<unsigned char*>(out), *used_out))
    return LIBDEFLATE_BAD_DATA;
  *used_in = trailer + 8;
  return LIBDEFLATE_SUCCESS;
}

// An uninitialised buffer of `bytes` (never zeroed: every byte handed out is written first). Nothing
// when memory runs out.
std::unique_ptr<char[]> try_allocate(size_t bytes) {
  try {
    return std::make_unique_for_overwrite<char[]>(std::max<size_t>(bytes, 1));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

// Inflates the concatenated GZIP members or ZLIB streams of in[0, n), one member or stream per
// inflate_one (which checks each one's CRC-32 and ISIZE, or Adler-32), into
// `out`, made `hint` bytes at first and grown (doubling, up to kWholeFileMaxInflated) while libdeflate
// asks for more. Returns the inflated size, or nothing when the data is damaged, inflates to more than
// the bound, or memory runs out.
std::optional<size_t> inflate_all(Compression compression, const unsigned char* in, size_t n, size_t hint,
                                  std::unique_ptr<char[]>* out) {
  std::unique_ptr<libdeflate_decompressor, DecompressorDeleter> d(libdeflate_alloc_decompressor());
  if (!d) return std::nullopt;
  size_t capacity = std::clamp<size_t>(hint, 4096, kWholeFileMaxInflated);
  *out = try_allocate(capacity);
  if (!*out) return std::nullopt;
  size_t in_pos = 0, out_pos = 0;
  while (in_pos < n) {
    size_t used_in = 0, used_out = 0;
    char* dst = out->get() + out_pos;
    const libdeflate_result rc =
        inflate_one(d.get(), compression, in + in_pos, n - in_pos, dst, capacity - out_pos, &used_in, &used_out);
    if (rc == LIBDEFLATE_INSUFFICIENT_SPACE && capacity < kWholeFileMaxInflated) {
      // Inflate this member again into more room, keeping the members before it.
      const size_t larger = std::min<size_t>(2 * capacity, kWholeFileMaxInflated);
      std::unique_ptr<char[]> grown = try_allocate(larger);
      if (!grown) return std::nullopt;
      std::memcpy(grown.get(), out->get(), out_pos);
      *out = std::move(grown);
      capacity = larger;
      continue;
    }
    if (rc != LIBDEFLATE_SUCCESS || used_in == 0) return std::nullopt;
    in_pos += used_in;
    out_pos += used_out;
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
  whole_buf_.reset();
  whole_ = false;
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
  std::unique_ptr<char[]> in = try_allocate(size);
  if (!in) return false;  // stream it instead
  const size_t got = read_file(in.get(), size);
  char extra;
  if (got != size || read_file(&extra, 1) != 0) {  // the file changed size under us: stream it
    std::rewind(file_);
    return false;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(in.get());
  // A gzip member's last 4 bytes are its uncompressed size mod 2^32: exact for one member of < 4 GiB.
  size_t hint = 4 * size;
  if (compression_ == Compression::kGzip && size >= 18) {
    // A damaged or cut file's last bytes are no size: no more than deflate can expand to is believed.
    hint = std::clamp<size_t>(load_le32(bytes + size - 4), 1, kMaxDeflateRatio * size);
  }
  std::unique_ptr<char[]> out;
  const std::optional<size_t> out_size = inflate_all(compression_, bytes, size, hint, &out);
  if (!out_size) {
    // Damaged (zlib will say where), too large or out of memory: read it again as a stream from now on.
    stream_ = true;
    std::rewind(file_);
    return false;
  }
  whole_buf_ = std::move(out);
  base_ = whole_buf_.get();
  begin_ = 0;
  end_ = *out_size;
  whole_ = true;
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

size_t ByteReader::ensure(size_t n) {
  if (end_ - begin_ >= n) return end_ - begin_;
  if (whole_) {
    if (begin_ == end_ && whole_buf_) {  // read to the end: release the file's bytes
      whole_buf_.reset();
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
    // zlib writes the gzip wrapper (one member, as TensorFlow's writer does) or the zlib one.
    const int window = compression_ == Compression::kGzip ? 16 + MAX_WBITS : MAX_WBITS;
    STRATA_CHECK(
        deflateInit2(&deflater_->z, deflate.level, Z_DEFLATED, window, deflate.mem_level, deflate.strategy) == Z_OK,
        InvalidArgument, "zlib deflateInit2 failed for " << path_ << " (level " << deflate.level << ")");
    out_.resize(256 << 10);
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

void ByteWriter::write(const void* data, size_t n) {
  STRATA_CHECK(file_, InvalidArgument, "write to closed file " << path_);
  const char* p = static_cast<const char*>(data);
  if (in_.size() + n > in_.capacity()) {
    if (deflater_) {
      deflate_some(Z_NO_FLUSH);
    } else {
      write_file(in_.data(), in_.size());
      in_.clear();
    }
    if (n >= in_.capacity()) {  // a large write skips the buffer
      if (deflater_) {
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
  if (deflater_) {
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
    if (deflater_) {
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

}  // namespace strata::data::detail
