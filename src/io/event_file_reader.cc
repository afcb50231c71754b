// read_scalar_events (event_file_reader.h): records read one at a time through stdio, unframed by
// io/tfrecord_framing.h, parsed by the generated tensorflow::Event. Thread-safety: plain functions.
#include "io/event_file_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "io/proto/event.pb.h"
#include "io/tfrecord_framing.h"
#include "strata/error.h"

namespace strata::io::detail {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// "<path>: corrupt record 7 (0-based index in the file) at byte offset 1834: <what>", as data's TFRecordReader names
// a damaged record.
[[noreturn]] void corrupt(const std::string& path, int64_t record, uint64_t offset, const std::string& what) {
  STRATA_THROW(DataCorrupt, path << ": corrupt record " << record << " (0-based index in the file) at byte offset "
                                 << offset << ": " << what);
}

}  // namespace

std::vector<ScalarEvent> read_scalar_events(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  STRATA_CHECK(file, IoError, "cannot open " << path << ": " << std::strerror(errno));
  std::FILE* f = file.get();
  // The file's size bounds a record's length, so that a damaged one is never allocated.
  STRATA_CHECK(std::fseek(f, 0, SEEK_END) == 0, IoError, "cannot seek in " << path << ": " << std::strerror(errno));
  const long end = std::ftell(f);
  STRATA_CHECK(end >= 0 && std::fseek(f, 0, SEEK_SET) == 0, IoError,
               "cannot seek in " << path << ": " << std::strerror(errno));
  const auto size = static_cast<uint64_t>(end);

  std::vector<ScalarEvent> out;
  std::string record;
  tensorflow::Event event;
  // Reads bytes the size above says are there; fewer means the file shrank under the reader.
  const auto read_exactly = [&](char* into, size_t n, int64_t index, uint64_t offset) {
    const size_t got = std::fread(into, 1, n, f);
    STRATA_CHECK(!std::ferror(f), IoError, "read error in " << path << ": " << std::strerror(errno));
    if (got < n) corrupt(path, index, offset, "the file was cut short while it was read");
  };
  uint64_t offset = 0;
  for (int64_t index = 0; offset < size; ++index) {  // the bytes there when it was opened: a live file may grow
    if (size - offset < kRecordHeaderBytes)
      corrupt(path, index, offset, "truncated header (" + std::to_string(size - offset) + " of 12 bytes)");
    char header[kRecordHeaderBytes];
    read_exactly(header, sizeof header, index, offset);
    uint64_t length;
    if (!decode_record_header(header, &length)) corrupt(path, index, offset, "length CRC mismatch");
    const uint64_t follow = size - offset - kRecordHeaderBytes;
    if (length > follow || follow - length < kRecordFooterBytes)
      corrupt(path, index, offset,
              "truncated record: length " + std::to_string(length) + " but only " + std::to_string(follow) +
                  " bytes follow the header");
    if (length > static_cast<uint64_t>(std::numeric_limits<int>::max()))
      corrupt(path, index, offset, "length " + std::to_string(length) + " is more than protobuf parses");
    record.resize(length + kRecordFooterBytes);
    read_exactly(record.data(), record.size(), index, offset);
    if (!record_footer_matches(record.data(), length, record.data() + length))
      corrupt(path, index, offset, "data CRC mismatch (length " + std::to_string(length) + ")");
    if (!event.ParseFromArray(record.data(), static_cast<int>(length)))
      corrupt(path, index, offset, "not an Event protobuf");
    if (event.has_summary()) {
      for (const tensorflow::Summary::Value& value : event.summary().value()) {
        if (value.value_case() != tensorflow::Summary::Value::kSimpleValue) continue;
        out.push_back(
            {.tag = value.tag(), .step = event.step(), .value = value.simple_value(), .wall_time = event.wall_time()});
      }
    }
    offset += kRecordHeaderBytes + length + kRecordFooterBytes;
  }
  return out;
}

}  // namespace strata::io::detail
