// Reading back TensorBoard event files (the ones io/event_writer.h writes, or TensorFlow's): the scalars of every
// Event in a file, for `strata report`. Each record's framing and both CRCs are checked (io/tfrecord_framing.h), and
// the record is parsed into the `tensorflow.Event` class generated from io/proto/event.proto. Events without scalars
// (the file-version event, graphs, session logs) are skipped; so are values other than simple_value (images,
// histograms, tensors: their fields are not in io/proto/summary.proto, and parse as unknown fields).
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::io::detail {

struct ScalarEvent {
  std::string tag;
  int64_t step = 0;
  float value = 0;
  double wall_time = 0;
};

// Every scalar of the events file at `path`, in file order. DataCorrupt naming the file, the record (its 0-based
// index) and its byte offset for a damaged or cut record, or one that is not an Event; IoError when the file cannot
// be read.
std::vector<ScalarEvent> read_scalar_events(const std::string& path);

}  // namespace strata::io::detail
