// TensorBoard event files: TFRecord records (io/tfrecord_framing.h: the length, the data and their masked CRC-32Cs)
// of `tensorflow.Event` messages, serialized by the classes protoc generates from io/proto/event.proto and
// summary.proto (TensorFlow's package, message names and field numbers, with the fields scalars need):
//   Event   { double wall_time = 1; int64 step = 2; oneof what { string file_version = 3; Summary summary = 5; } }
//   Summary { repeated Value value = 1; }   Value { bytes tag = 1; oneof value { float simple_value = 2; } }
// (TensorFlow's tag is a string: the same bytes on the wire, but protobuf would reject a tag that is not UTF-8.)
// The first event of a file is the version event (file_version "brain.Event:2"), which TensorBoard requires. Internal
// to the library: the TensorBoard callback (train/tensorboard.cc) writes through it, and `strata report` reads the
// files back with io/event_file_reader.h.
//
// Thread-safety: an EventFileWriter is used by one thread at a time; distinct writers are independent.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::io::detail {

// Serialized Event messages. A zero wall_time or step and an empty tag are left out, as protobuf leaves out proto3
// defaults (a reader takes 0 and ""); file_version, the summary and every simple_value are written, 0 included (they
// are in oneofs). These are the bytes the hand encoder this replaced wrote, but for an empty tag (it wrote one).
std::string encode_file_version_event(double wall_time, std::string_view version = "brain.Event:2");
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars);

// One events file in `directory` (created with its parents): "events.out.tfevents.<unix seconds>.<hostname>",
// with ".<n>" added when a file of that name exists already (a second writer in the same second). It starts
// with the version event. Records reach the file when flush() or close() is called (and when its buffer fills);
// a flushed file is valid, and a reader such as TensorBoard skips a record cut short by a crash after it.
// Errors are IoError naming the file.
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::string& directory);
  // Closes the file; errors are not reported (close() reports them).
  ~EventFileWriter();
  EventFileWriter(EventFileWriter&& other) noexcept;
  EventFileWriter& operator=(EventFileWriter&& other) noexcept;
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Writes one event of `scalars` (tag, value) at `step`, stamped with the current time. Nothing for none.
  // InvalidArgument after close().
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& scalars);
  // Hands the buffered records to the operating system. Nothing after close().
  void flush();
  // Finishes the file; throws IoError when the bytes could not be written. Closing twice does nothing.
  void close();
  const std::string& path() const { return path_; }

 private:
  // One framed record of `event` (a serialized Event).
  void write_record(std::string_view event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace strata::io::detail
