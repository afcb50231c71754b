// Reading back TensorBoard event files (the ones event_writer.h writes, or TensorFlow's): the scalars of every
// Event in a file, for `strata report`. The records' framing and CRCs are checked by data's TFRecordReader; each
// record is parsed by protobuf's wire-format parser (UnknownFieldSet) with the field numbers of TensorFlow's
// event.proto / summary.proto that event_writer.h lists. Events without scalars (the file-version event, images,
// histograms) are skipped; so are values other than simple_value.
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::detail {

struct ScalarEvent {
  std::string tag;
  int64_t step = 0;
  float value = 0;
  double wall_time = 0;
};

// Every scalar of the events file at `path`, in file order. DataCorrupt naming the file and record for a damaged
// record or an Event that is not protobuf; IoError when the file cannot be read.
std::vector<ScalarEvent> read_scalar_events(const std::string& path);

}  // namespace strata::detail
