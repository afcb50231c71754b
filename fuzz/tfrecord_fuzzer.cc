// Fuzzes TFRecordReader (src/data/tfrecord.cc and the GZIP / ZLIB readers under it) on a file of untrusted bytes.
// Input: one mode byte, then the file. Mode bits 0-1: the compression (none, GZIP, ZLIB); bit 2: skip_corrupt;
// bit 3: a 4 KiB read buffer (the smallest, so records cross buffer refills). Every record is read, then the file
// again from the offset of the second record (seek), as a resumed iterator does.
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "strata/data/tfrecord.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  data::TFRecordReaderOptions options;
  options.compression = static_cast<data::Compression>((mode & 3) % 3);
  options.skip_corrupt = (mode & 4) != 0;
  if (mode & 8) options.buffer_size = 4096;
  const std::string path = fuzz::write_scratch("input.tfrecord", fuzz::as_view(data + 1, size - 1));
  try {
    data::TFRecordReader reader(path, options);
    std::string_view record;
    std::vector<uint64_t> offsets;
    while (reader.read(&record)) offsets.push_back(reader.last_record_offset());
    if (offsets.size() >= 2) {
      reader.seek(offsets[1], 1);
      while (reader.read(&record)) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
