// TFRecord reader and writer (see strata/data/tfrecord.h): records framed and checked here, bytes
// (de)compressed by ByteReader / ByteWriter. Errors name the file, the record's 0-based index in it and
// its byte offset; the index costs nothing per record (it is worked out from the counters when an error
// is raised). Thread-safety: per object.
#include "strata/data/tfrecord.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <sstream>

#include "data/compression/byte_streams.h"
#include "io/tfrecord_framing.h"
#include "strata/error.h"

namespace strata::data {

namespace {
std::string lowercase(std::string_view name) {
  std::string s(name);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

constexpr const char* kStrategyNames[] = {"default", "filtered", "huffman_only", "rle", "fixed"};
}  // namespace

Compression parse_compression(std::string_view name) {
  const std::string s = lowercase(name);
  if (s.empty() || s == "none") return Compression::kNone;
  if (s == "gzip") return Compression::kGzip;
  if (s == "zlib") return Compression::kZlib;
  STRATA_THROW(InvalidArgument, "unknown compression '" << name << "' (want none, gzip or zlib)");
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kGzip:
      return "GZIP";
    case Compression::kZlib:
      return "ZLIB";
  }
  return "?";
}

// A valid TFRecord header means none, else gzip's magic 1f 8b means GZIP, else a valid zlib header
// means ZLIB, else none.
Compression detect_compression(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  STRATA_CHECK(f, IoError, "cannot open " << path << ": " << std::strerror(errno));
  unsigned char head[12] = {};
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  uint64_t length;
  if (n == 12 && io::detail::decode_record_header(reinterpret_cast<const char*>(head), &length))
    return Compression::kNone;
  if (n >= 2 && head[0] == 0x1f && head[1] == 0x8b) return Compression::kGzip;
  if (n >= 2 && (head[0] & 0x0f) == 8 && (head[0] >> 4) <= 7 && ((head[0] << 8) | head[1]) % 31 == 0)
    return Compression::kZlib;
  return Compression::kNone;
}

CompressionStrategy parse_compression_strategy(std::string_view name) {
  const std::string s = lowercase(name);
  for (size_t i = 0; i < std::size(kStrategyNames); ++i)
    if (s == kStrategyNames[i]) return static_cast<CompressionStrategy>(i);
  STRATA_THROW(InvalidArgument,
               "unknown compression strategy '" << name << "' (want default, filtered, huffman_only, rle or fixed)");
}

const char* compression_strategy_name(CompressionStrategy s) {
  const auto i = static_cast<size_t>(s);
  return i < std::size(kStrategyNames) ? kStrategyNames[i] : "?";
}

// ---- writer

TFRecordWriter::TFRecordWriter(const std::string& path, Compression compression, int level)
    : TFRecordWriter(path, TFRecordWriterOptions{.compression = compression, .compression_level = level}) {}
TFRecordWriter::TFRecordWriter(const std::string& path, const TFRecordWriterOptions& options)
    : out_(std::make_unique<detail::ByteWriter>(
          path, options.compression,
          detail::DeflateSettings{.level = options.compression_level,
                                  .mem_level = options.mem_level,
                                  .strategy = static_cast<int>(options.compression_strategy)},
          options.atomic)) {}
TFRecordWriter::~TFRecordWriter() = default;
TFRecordWriter::TFRecordWriter(TFRecordWriter&&) noexcept = default;
TFRecordWriter& TFRecordWriter::operator=(TFRecordWriter&&) noexcept = default;

void TFRecordWriter::write(std::string_view record) {
  STRATA_CHECK(out_, InvalidArgument, "write to a moved-from TFRecordWriter");
  char header[io::detail::kRecordHeaderBytes], footer[io::detail::kRecordFooterBytes];
  io::detail::encode_record_header(record.size(), header);
  io::detail::encode_record_footer(record.data(), record.size(), footer);
  out_->write(header, sizeof header);
  out_->write(record.data(), record.size());
  out_->write(footer, sizeof footer);
  ++records_;
}

void TFRecordWriter::flush() {
  if (out_) out_->flush();
}

void TFRecordWriter::close() {
  if (out_) out_->close();
}

// ---- reader

TFRecordReader::TFRecordReader(const std::string& path, TFRecordReaderOptions options)
    : in_(std::make_unique<detail::ByteReader>(path, options.compression, options.buffer_size)), options_(options) {}
TFRecordReader::~TFRecordReader() = default;
TFRecordReader::TFRecordReader(TFRecordReader&&) noexcept = default;
TFRecordReader& TFRecordReader::operator=(TFRecordReader&&) noexcept = default;

const std::string& TFRecordReader::path() const { return in_->path(); }
uint64_t TFRecordReader::offset() const { return in_->position(); }
void TFRecordReader::seek(uint64_t offset) { seek(offset, offset == 0 ? 0 : -1); }
void TFRecordReader::seek(uint64_t offset, int64_t record_index) {
  in_->seek(offset);
  index_base_ = record_index;
  seen_at_base_ = records_ + corrupt_;
}

std::string TFRecordReader::next_record_name() const {
  if (index_base_ < 0) return "record (number unknown: the reader was moved here by seek)";
  return "record " + std::to_string(index_base_ + records_ + corrupt_ - seen_at_base_) + " (0-based index in the file)";
}

void TFRecordReader::corrupt(uint64_t at, const std::string& what) {
  std::ostringstream msg;
  msg << in_->path() << ": corrupt " << next_record_name() << " at byte offset " << at;
  if (options_.compression != Compression::kNone)
    msg << " (of the uncompressed " << compression_name(options_.compression) << " stream)";
  msg << ": " << what;
  if (!options_.skip_corrupt) STRATA_THROW(DataCorrupt, msg.str());
  if (corrupt_ == 0) first_corruption_ = msg.str();
  ++corrupt_;
}

bool TFRecordReader::read(std::string_view* record) {
  detail::ByteReader& in = *in_;
  // A damaged compressed stream is reported by ByteReader::ensure(), which knows the offset in the
  // stream but not the record: it is named here (the try costs nothing until something throws).
  try {
    for (;;) {
      const uint64_t at = in.position();
      const size_t have = in.ensure(12);
      if (have == 0) return false;
      if (have < 12) {
        corrupt(at, "truncated header (" + std::to_string(have) + " of 12 bytes)");
        in.consume(have);
        return false;
      }
      const char* p = in.data();
      uint64_t length;
      if (!io::detail::decode_record_header(p, &length)) {
        corrupt(at, "length CRC mismatch");
        // Resynchronise: the next offset whose 12 bytes form a valid header.
        in.consume(1);
        for (;;) {
          const size_t n = in.ensure(12);
          if (n < 12) {
            in.consume(n);
            return false;
          }
          uint64_t skipped_length;
          if (io::detail::decode_record_header(in.data(), &skipped_length)) break;
          in.consume(1);
        }
        continue;
      }
      const uint64_t total = 12 + length + 4;
      // A length this large cannot be a record of this stream; ensure() would try to allocate it.
      if (length > (uint64_t{1} << 40)) {
        corrupt(at, "implausible length " + std::to_string(length));
        in.consume(12);
        continue;
      }
      const size_t got = in.ensure(static_cast<size_t>(total));
      if (got < total) {
        corrupt(at, "truncated record: length " + std::to_string(length) + " but only " +
                        std::to_string(got < 12 ? 0 : got - 12) + " bytes follow the header");
        in.consume(got);
        return false;
      }
      p = in.data();
      if (!io::detail::record_footer_matches(p + 12, length, p + 12 + length)) {
        corrupt(at, "data CRC mismatch (length " + std::to_string(length) + ")");
        in.consume(total);
        continue;
      }
      *record = std::string_view(p + 12, length);
      in.consume(total);  // the bytes stay in the buffer until the next ensure()
      last_offset_ = at;
      ++records_;
      return true;
    }
  } catch (const detail::StreamCorrupt& e) {
    // ensure() throws before it consumes: position() is the offset of the record being read.
    STRATA_THROW(DataCorrupt, in.path() << ": " << e.detail() << " while reading " << next_record_name()
                                        << " at uncompressed byte offset " << in.position());
  }
}

bool TFRecordReader::read(std::string* record) {
  std::string_view view;
  if (!read(&view)) return false;
  record->assign(view.data(), view.size());
  return true;
}

}  // namespace strata::data
