// TensorBoard event files: a TFRecord file (strata/data/tfrecord.h: the framing and masked CRC-32C) of
// `Event` protos, hand-encoded in protobuf's wire format with the fields of TensorFlow's event.proto and
// summary.proto that scalars need:
//   Event   { double wall_time = 1; int64 step = 2; oneof { string file_version = 3; Summary summary = 5; } }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first event of a file is the version event (file_version "brain.Event:2"), which TensorBoard requires.
// Private to the train layer (the TensorBoard callback writes through it).
//
// Thread-safety: an EventFileWriter is used by one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/data/tfrecord.h"

namespace strata::detail {

// Serialized Event protos. Zero fields are left out, as protobuf's own serializer does (a reader takes 0).
std::string encode_file_version_event(double wall_time, std::string_view version = "brain.Event:2");
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars);

// One events file in `directory` (created with its parents): "events.out.tfevents.<unix seconds>.<hostname>",
// with ".<n>" added when a file of that name exists already (a second writer in the same second). It starts
// with the version event. Records reach the file when flush() or close() is called (and when its buffer fills);
// a flushed file is valid, and a reader such as TensorBoard skips a record cut short by a crash after it.
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::string& directory);
  // Writes one event of `scalars` (tag, value) at `step`, stamped with the current time. Nothing for none.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& scalars);
  void flush() { writer_.flush(); }
  // Throws IoError when the bytes could not be written.
  void close() { writer_.close(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  data::TFRecordWriter writer_;
};

}  // namespace strata::detail
