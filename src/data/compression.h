// Buffered byte streams over files, with optional GZIP / ZLIB (de)compression.
//
// A compressed regular file of at most whole_file_limit() bytes is read whole and inflated in one go
// into one buffer that lives until the file is read to its end (then goes back to the RecycledBuffer
// cache for the next file): a chain of size-tagged gzip members (what ByteWriter writes) two members
// at a time by inflate_streams, anything else by libdeflate (about twice zlib's speed); larger files,
// pipes and other non-regular files stream through zlib in chunks. Data they reject is read again
// through zlib, so a damaged file gives the records before the damage and the same StreamCorrupt (file
// and offset) either way. Read whole, a gzip member's CRC-32 is summed as its bytes are read (while they are in the
// cache) and checked where the member ends, as zlib checks it: a damaged trailer CRC is reported after
// the member's last record (zlib may stop up to a chunk earlier).
//
// ByteReader hands out views into its own buffer (no copy per record): ensure(n) makes n bytes
// available at data(), consume(n) moves past them. Positions count bytes of the *uncompressed* stream,
// which is how TFRecord offsets are named and how iterator state is saved. A concatenation of gzip
// members reads as one stream (like `zcat`).
//
// ByteWriter writes a file, compressing it when asked; with `atomic` it writes a temporary file beside
// the target and renames it into place only when close() has finished and fsync'ed it (io/atomic_file.h's temporary names and publish_temp_file).
// Thread-safety: one object per thread; distinct objects are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/recycled_buffer.h"
#include "strata/data/tfrecord.h"  // Compression
#include "strata/error.h"

namespace strata::data::detail {

// DataCorrupt from a damaged compressed stream (bad deflate data, a CRC-32 or size that does not match,
// a stream cut short). what() is the whole message ("<file>: <detail> [source:line]"); detail() is the
// part after the file's name, for a reader that adds which record it was reading (TFRecordReader).
class StreamCorrupt : public DataCorrupt {
 public:
  StreamCorrupt(const std::string& what, std::string detail) : DataCorrupt(what), detail_(std::move(detail)) {}
  const std::string& detail() const { return detail_; }

 private:
  std::string detail_;
};

// Compressed files up to this many bytes are inflated whole (when their contents fit in
// kWholeFileMaxInflated); the default of whole_file_limit().
inline constexpr uint64_t kWholeFileMaxCompressed = uint64_t{256} << 20;
// A file that inflates to more than this streams instead (it bounds each reader's buffer).
inline constexpr uint64_t kWholeFileMaxInflated = uint64_t{1} << 30;
// The compressed-size bound in force for readers opened from now on; set_whole_file_limit(0) sends
// every file through the zlib stream (tests cover both paths so). Returns the previous bound.
uint64_t whole_file_limit();
uint64_t set_whole_file_limit(uint64_t max_compressed_bytes);

// Read whole, the CRC-32 catches up with the bytes read in steps of this many (still in the cache;
// long enough to run at the fold's full speed).
inline constexpr size_t kGzipCrcStep = size_t{16} << 10;

// A gzip member inflated whole: where its bytes end in the inflated stream and its stored CRC-32.
struct GzipMember {
  size_t end = 0;
  uint32_t crc = 0;
};

class ByteReader {
 public:
  // Opens `path`; throws IoError naming the file when it cannot. `buffer_size` is the size of each
  // read from the file (and of the inflate output chunks).
  ByteReader(std::string path, Compression compression, size_t buffer_size = 256 << 10);
  ~ByteReader();
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  // Makes at least `n` bytes available at data() unless the stream ends first; returns how many are
  // available (less than n only at the end). Throws StreamCorrupt on a damaged compressed stream.
  size_t ensure(size_t n);
  const char* data() const { return base_ + begin_; }
  size_t available() const { return end_ - begin_; }
  // Moves past `n` available bytes. REQUIRES: n <= available().
  void consume(size_t n) {
    begin_ += n;
    position_ += n;
  }
  // Uncompressed offset of data()[0].
  uint64_t position() const { return position_; }
  // Moves to uncompressed offset `offset` (seek for plain files; re-inflate from the start otherwise).
  // Throws DataCorrupt when the stream is shorter than `offset`.
  void seek(uint64_t offset);
  const std::string& path() const { return path_; }
  // Whether the file was inflated whole (by inflate_streams or libdeflate) rather than streamed through zlib.
  bool inflated_whole() const { return whole_; }
  // Whether it was inflated whole as a chain of size-tagged members, two at a time (inflate_streams).
  bool inflated_in_pairs() const { return pairs_; }

 private:
  void open();
  // Reads and inflates the whole file with libdeflate when it qualifies; false: stream instead.
  bool inflate_whole();
  // Appends up to `want` bytes to buf_[end_...]; returns how many (0 at the end).
  size_t fill(size_t want);
  size_t read_file(char* dst, size_t n);
  // Throws StreamCorrupt: the compressed stream is damaged near uncompressed `offset` (both paths' words).
  [[noreturn]] void corrupt_stream(uint64_t offset, const std::string& why) const;
  // Throws StreamCorrupt naming the file, with `detail` after its name.
  [[noreturn]] void stream_error(const std::string& detail, int line) const;
  // Adds bytes [crc_pos_, upto) to the running CRC-32 and checks each gzip member that ends by then
  // (StreamCorrupt on a mismatch, in zlib's words).
  void check_gzip_crcs(size_t upto);

  std::string path_;
  Compression compression_;
  size_t buffer_size_;
  std::FILE* file_ = nullptr;
  std::vector<char> buf_;       // streaming: uncompressed bytes [begin_, end_)
  const char* base_ = nullptr;  // buf_.data(), or whole_buf_ when the file was inflated whole
  size_t begin_ = 0, end_ = 0;
  bool whole_ = false;   // the file's uncompressed bytes are all in whole_buf_[0, end_)
  bool pairs_ = false;   // ... inflated by inflate_streams
  bool stream_ = false;  // the whole-file decoders rejected this file or it is too large: zlib from now on
  RecycledBuffer whole_buf_;  // released once the file is read to its end
  // GZIP inflated whole: the CRC-32 of each member is summed as its bytes are read (while they are
  // in the cache) and checked at its end, not in a pass of its own over the inflated buffer.
  std::vector<GzipMember> gzip_members_;
  size_t crc_member_ = 0;  // the member crc_pos_ lies in
  size_t crc_pos_ = 0;     // bytes [0, crc_pos_) are summed
  uint32_t crc_ = 0;       // the CRC-32 of member crc_member_'s bytes before crc_pos_
  size_t crc_due_ = SIZE_MAX;  // ensure() catches the CRC up once begin_ reaches this
  uint64_t position_ = 0;
  struct Inflater;
  std::unique_ptr<Inflater> inflater_;
};

// GZIP files are written as a chain of gzip members (RFC 1952; every gzip reader reads the chain as
// one stream). Each member's header is kMemberHeaderBytes long: 1f 8b 08 04 (FLG = FEXTRA), MTIME 0,
// XFL, OS 3, XLEN 8, and one extra subfield kMemberSizeSi1 kMemberSizeSi2 ('S' 'Z'), LEN 4, holding the
// member's total size in bytes (header, raw deflate body and 8-byte trailer) as a little-endian uint32,
// so a reader finds every member's start without inflating. A member holds kDefaultGzipMemberBytes
// uncompressed bytes unless a flush() or close() ends it sooner.
inline constexpr size_t kMemberHeaderBytes = 20;
inline constexpr unsigned char kMemberSizeSi1 = 'S', kMemberSizeSi2 = 'Z';
inline constexpr size_t kDefaultGzipMemberBytes = size_t{256} << 10;
// The range a non-zero gzip_member_bytes must lie in (1 GiB keeps a member's size within its uint32).
inline constexpr size_t kMinGzipMemberBytes = size_t{4} << 10;
inline constexpr size_t kMaxGzipMemberBytes = size_t{1} << 30;

// zlib's deflateInit2 parameters: level -1..9, mem_level 1..9, strategy Z_DEFAULT_STRATEGY..Z_FIXED
// (0..4, CompressionStrategy's order). gzip_member_bytes: uncompressed bytes per GZIP member, 0 for
// the whole file as one member through zlib's gzip wrapper (ignored for ZLIB and uncompressed files).
struct DeflateSettings {
  int level = -1;
  int mem_level = 9;
  int strategy = 0;
  size_t gzip_member_bytes = kDefaultGzipMemberBytes;
};

class ByteWriter {
 public:
  // Creates (truncates) `path`; throws IoError naming it when it cannot, InvalidArgument naming the
  // setting when one is out of zlib's range or gzip_member_bytes is neither 0 nor in
  // kMinGzipMemberBytes..kMaxGzipMemberBytes (before the file is created).
  // atomic: the bytes go to temp_name_for(path) instead (created anew, never an existing file), and
  // close() fsyncs it and renames it over `path`; until then `path` is untouched. A writer destroyed
  // without close(), or whose write() or close() failed, removes its temporary file.
  ByteWriter(std::string path, Compression compression, DeflateSettings deflate = {}, bool atomic = false);
  // Not atomic: closes, swallowing errors (call close() to see them). Atomic: discards the file.
  ~ByteWriter();
  ByteWriter(const ByteWriter&) = delete;
  ByteWriter& operator=(const ByteWriter&) = delete;

  void write(const void* data, size_t n);
  // Flushes buffered bytes to the OS: GZIP in members ends the current member (if it holds any bytes),
  // so the file is a complete gzip file of everything written so far; otherwise a full zlib flush
  // point when compressing.
  void flush();
  // Finishes the compressed stream and closes the file (atomic: fsyncs, closes and renames it into
  // place); throws IoError on failure. Idempotent.
  void close();
  const std::string& path() const { return path_; }

 private:
  void write_file(const void* data, size_t n);
  void deflate_some(int flush);
  // GZIP in members: deflates data[0, n) into the current member, ending it at each member_bytes_.
  void deflate_members(const char* data, size_t n);
  // Deflates data[0, n) into member_ (flush: Z_NO_FLUSH or Z_FINISH).
  void deflate_into_member(const char* data, size_t n, int flush);
  // Finishes the current member and writes it (header with its size, body, trailer).
  void end_member();

  // Closes file_ and removes the temporary file, if atomic (a file that is not to be published).
  void discard();

  std::string path_;
  std::string temp_;  // atomic: the file written until close() renames it to path_; else ""
  Compression compression_;
  std::FILE* file_ = nullptr;
  std::vector<char> in_;  // pending uncompressed bytes
  std::vector<char> out_;
  // GZIP in members (member_bytes_ > 0): the current member, header then deflate body so far, in
  // member_[0, member_used_); its CRC-32 and uncompressed byte count; the members written.
  size_t member_bytes_ = 0;
  int xfl_ = 0;
  std::vector<char> member_;
  size_t member_used_ = 0;
  uint32_t member_crc_ = 0;
  size_t member_in_ = 0;
  uint64_t members_ = 0;
  struct Deflater;
  std::unique_ptr<Deflater> deflater_;
};

// Compression of `path` from its first bytes: a valid TFRecord header means none, else gzip's magic
// 1f 8b means GZIP, else a valid zlib header means ZLIB, else none.
Compression sniff_compression(const std::string& path);

}  // namespace strata::data::detail
