// TFRecord files, byte-compatible with TensorFlow's tf.io.TFRecordWriter / tf.data.TFRecordDataset.
//
// Each record is   uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
// (little-endian), optionally inside one GZIP or ZLIB stream. Offsets in errors and in saved reader
// state count bytes of the uncompressed stream. A corrupt record or stream raises DataCorrupt naming
// the file, the record's number (its 0-based index in the file) and its byte offset, e.g.
//   "f.gz: corrupt record 7 (0-based index in the file) at byte offset 1834 (of the uncompressed GZIP
//    stream): data CRC mismatch (length 100)"
//   "f.gz: GZIP stream is corrupt near uncompressed offset 4096 (invalid block type) while reading
//    record 12 (0-based index in the file) at uncompressed byte offset 3456"
//
//   data::TFRecordWriter w("out.tfrecord.gz", data::Compression::kGzip);
//   w.write(example.serialize());
//   w.close();
//   data::TFRecordReader r("out.tfrecord.gz", {.compression = data::Compression::kGzip});
//   std::string_view record;
//   while (r.read(&record)) use(record);
//
// Thread-safety: a reader or writer is used by one thread at a time; distinct objects are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace strata::data {

enum class Compression { kNone, kGzip, kZlib };

// "" / "none" / "gzip" / "zlib" (any case) -> Compression; InvalidArgument otherwise.
Compression parse_compression(std::string_view name);
// "none", "GZIP", "ZLIB" (TensorFlow's spelling).
const char* compression_name(Compression c);
// The compression of an existing file, told from its first bytes (a valid TFRecord header -> none,
// gzip magic 1f 8b -> GZIP, a zlib header -> ZLIB). Throws IoError when the file cannot be read.
Compression detect_compression(const std::string& path);

// zlib's deflate strategies, as TensorFlow's TFRecordOptions.compression_strategy names them (0..4).
// kFiltered drops matches of 5 bytes or fewer, the strategy libpng uses for image rows: for
// Fashion-MNIST's pixels it gives files as small as kDefault's that inflate about 10% faster.
enum class CompressionStrategy { kDefault, kFiltered, kHuffmanOnly, kRle, kFixed };

// "default" / "filtered" / "huffman_only" / "rle" / "fixed" (any case); InvalidArgument otherwise.
CompressionStrategy parse_compression_strategy(std::string_view name);
const char* compression_strategy_name(CompressionStrategy s);

// How a TFRecordWriter compresses, like tf.io.TFRecordOptions (ignored for Compression::kNone).
struct TFRecordWriterOptions {
  Compression compression = Compression::kNone;
  int compression_level = -1;  // zlib's 0..9, or -1 for its default (6)
  int mem_level = 9;           // zlib's 1..9; TensorFlow's default 9 keeps deflate blocks twice as long as 8
  CompressionStrategy compression_strategy = CompressionStrategy::kDefault;
  // true: the records go to "<path>.tmp-<pid>-<n>" beside `path`, and close() fsyncs that file and
  // renames it over `path` (then fsyncs the directory), so `path` never holds a partial file: a writer
  // destroyed without close(), or whose write() or close() threw, removes its temporary file and leaves
  // `path` as it was. false: `path` is written in place.
  bool atomic = false;
};

namespace detail {
class ByteReader;
class ByteWriter;
}  // namespace detail

class TFRecordWriter {
 public:
  // Creates (truncates) `path`. `level` is zlib's compression level (-1 = its default).
  explicit TFRecordWriter(const std::string& path, Compression compression = Compression::kNone, int level = -1);
  // Throws InvalidArgument naming the option when a setting is out of zlib's range. A GZIP file is one
  // gzip member written by zlib, as TensorFlow writes it (zcat, Python's gzip and TensorFlow read it).
  TFRecordWriter(const std::string& path, const TFRecordWriterOptions& options);
  ~TFRecordWriter();
  TFRecordWriter(TFRecordWriter&&) noexcept;
  TFRecordWriter& operator=(TFRecordWriter&&) noexcept;

  void write(std::string_view record);
  void flush();
  // Finishes the file (atomic: and renames it into place); throws IoError when the bytes could not be
  // written. The destructor closes a non-atomic file too but cannot report errors; it discards an
  // atomic one that was not closed.
  void close();
  int64_t records_written() const { return records_; }

 private:
  std::unique_ptr<detail::ByteWriter> out_;
  int64_t records_ = 0;
};

struct TFRecordReaderOptions {
  Compression compression = Compression::kNone;
  // Bytes read from the file at a time.
  size_t buffer_size = 256 << 10;
  // false: a bad CRC or a truncated record throws DataCorrupt naming the file, the record number and
  // its byte offset. A damaged compressed stream throws DataCorrupt whatever this says.
  // true: the record is skipped and counted in corrupt_records() (after a bad length CRC the reader
  // scans forward for the next valid record header; a truncated tail ends the file).
  bool skip_corrupt = false;
};

class TFRecordReader {
 public:
  explicit TFRecordReader(const std::string& path, TFRecordReaderOptions options = {});
  ~TFRecordReader();
  TFRecordReader(TFRecordReader&&) noexcept;
  TFRecordReader& operator=(TFRecordReader&&) noexcept;

  // The next record; false at the end of the file. The view stays valid until the next call.
  bool read(std::string_view* record);
  bool read(std::string* record);

  // Uncompressed offset of the next record: save it, and seek() to it later to resume there.
  uint64_t offset() const;
  // Errors after seek(offset) number records from the one at `offset` when that is 0; otherwise they
  // cannot (the message says the number is unknown). seek(offset, record_index) tells the reader that
  // the record at `offset` is record `record_index` of the file (0-based), so errors number them all.
  void seek(uint64_t offset);
  void seek(uint64_t offset, int64_t record_index);
  // Offset of the record the last read() returned.
  uint64_t last_record_offset() const { return last_offset_; }

  int64_t records_read() const { return records_; }
  int64_t corrupt_records() const { return corrupt_; }
  // A description of the first corrupt record skipped ("" if none).
  const std::string& first_corruption() const { return first_corruption_; }
  const std::string& path() const;

 private:
  // Handles a corrupt record at `at`: throws, or counts it and returns.
  void corrupt(uint64_t at, const std::string& what);
  // "record 7 (0-based index in the file)" for the record read next, or "record (number unknown ...)".
  std::string next_record_name() const;

  std::unique_ptr<detail::ByteReader> in_;
  TFRecordReaderOptions options_;
  uint64_t last_offset_ = 0;
  int64_t records_ = 0;
  int64_t corrupt_ = 0;
  // The record read next is record index_base_ + (records_ + corrupt_ - seen_at_base_) of the file; -1:
  // unknown (after a seek to an offset other than 0 without a record index).
  int64_t index_base_ = 0;
  int64_t seen_at_base_ = 0;
  std::string first_corruption_;
};

}  // namespace strata::data
