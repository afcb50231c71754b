// Buffered byte streams over files, with optional GZIP / ZLIB (de)compression, through libraries:
// libdeflate inflates whole files, zlib streams and deflates, ISA-L sums gzip's CRC-32.
//
// A compressed regular file of at most whole_file_limit() bytes is read whole and inflated by libdeflate,
// one gzip member or zlib stream per call, into one buffer that lives until the file is read to its end
// (libdeflate is about twice zlib's speed). Each gzip member's CRC-32 (ISA-L's crc32_gzip_refl, some five
// times libdeflate's own CRC-32 on this machine) and size, and each zlib stream's Adler-32 (libdeflate), are
// checked as it is inflated. Larger files, pipes and other non-regular files stream through zlib in chunks,
// and so does a file the whole-file path rejects (damaged, a gzip header CRC, or larger than
// kWholeFileMaxInflated once inflated): zlib then finds where it is damaged, so a damaged file gives the
// records before the damage and StreamCorrupt naming the file and the uncompressed offset, whichever path
// it took.
//
// ByteReader hands out views into its own buffer (no copy per record): ensure(n) makes n bytes
// available at data(), consume(n) moves past them. Positions count bytes of the *uncompressed* stream,
// which is how TFRecord offsets are named and how iterator state is saved. A concatenation of gzip
// members reads as one stream (like `zcat`).
//
// ByteWriter writes a file, compressing it when asked through zlib (a GZIP file is one plain gzip member,
// as TensorFlow's writer makes it). Why no chain of size-tagged members, which would let a reader find
// each member before inflating: no library here inflates several members of one file at once on one
// thread, the pipeline's threads already read whole files in parallel (num_parallel_reads), and one
// member is what every gzip reader expects. With `atomic` it writes a temporary file beside the target and
// renames it into place only when close() has finished and fsync'ed it (io/atomic_file.h's temporary
// names and publish_temp_file).
// Thread-safety: one object per thread; distinct objects are independent; the whole-file bound is an atomic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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
  // Whether the file was inflated whole by libdeflate rather than streamed through zlib.
  bool inflated_whole() const { return whole_; }

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

  std::string path_;
  Compression compression_;
  size_t buffer_size_;
  std::FILE* file_ = nullptr;
  std::vector<char> buf_;       // streaming: uncompressed bytes [begin_, end_)
  const char* base_ = nullptr;  // buf_.data(), or whole_buf_ when the file was inflated whole
  size_t begin_ = 0, end_ = 0;
  bool whole_ = false;                 // the file's uncompressed bytes are all in whole_buf_[0, end_)
  bool stream_ = false;                // libdeflate rejected this file or it is too large: zlib from now on
  std::unique_ptr<char[]> whole_buf_;  // released once the file is read to its end
  uint64_t position_ = 0;
  struct Inflater;
  std::unique_ptr<Inflater> inflater_;
};

// zlib's deflateInit2 parameters: level -1..9, mem_level 1..9, strategy Z_DEFAULT_STRATEGY..Z_FIXED
// (0..4, CompressionStrategy's order).
struct DeflateSettings {
  int level = -1;
  int mem_level = 9;
  int strategy = 0;
};

class ByteWriter {
 public:
  // Creates (truncates) `path`; throws IoError naming it when it cannot, InvalidArgument naming the
  // setting when one is out of zlib's range (before the file is created).
  // atomic: the bytes go to temp_name_for(path) instead (created anew, never an existing file), and
  // close() fsyncs it and renames it over `path`; until then `path` is untouched. A writer destroyed
  // without close(), or whose write() or close() failed, removes its temporary file.
  ByteWriter(std::string path, Compression compression, DeflateSettings deflate = {}, bool atomic = false);
  // Not atomic: closes, swallowing errors (call close() to see them). Atomic: discards the file.
  ~ByteWriter();
  ByteWriter(const ByteWriter&) = delete;
  ByteWriter& operator=(const ByteWriter&) = delete;

  void write(const void* data, size_t n);
  // Flushes buffered bytes to the OS, at a full zlib flush point when compressing (every byte written so
  // far can be inflated from the file; the stream's trailer comes with close()).
  void flush();
  // Finishes the compressed stream and closes the file (atomic: fsyncs, closes and renames it into
  // place); throws IoError on failure. Idempotent.
  void close();
  const std::string& path() const { return path_; }

 private:
  void write_file(const void* data, size_t n);
  void deflate_some(int flush);

  // Closes file_ and removes the temporary file, if atomic (a file that is not to be published).
  void discard();

  std::string path_;
  std::string temp_;  // atomic: the file written until close() renames it to path_; else ""
  Compression compression_;
  std::FILE* file_ = nullptr;
  std::vector<char> in_;  // pending uncompressed bytes
  std::vector<char> out_;
  struct Deflater;
  std::unique_ptr<Deflater> deflater_;
};

}  // namespace strata::data::detail
