// read_scalar_events (event_file_reader.h).
#include "train/event_file_reader.h"

#include <google/protobuf/unknown_field_set.h>

#include <cstring>

#include "strata/data/tfrecord.h"
#include "strata/error.h"

namespace strata::detail {

namespace {

using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// Summary.Value { string tag = 1; float simple_value = 2; } -> a scalar, when it has a simple_value.
bool read_value(const std::string& bytes, ScalarEvent& out) {
  UnknownFieldSet value;
  if (!value.ParseFromString(bytes)) return false;
  bool has_value = false;
  for (int i = 0; i < value.field_count(); ++i) {
    const UnknownField& f = value.field(i);
    if (f.number() == 1 && f.type() == UnknownField::TYPE_LENGTH_DELIMITED) out.tag = f.length_delimited();
    if (f.number() == 2 && f.type() == UnknownField::TYPE_FIXED32) {
      const uint32_t bits = f.fixed32();
      std::memcpy(&out.value, &bits, sizeof bits);
      has_value = true;
    }
  }
  return has_value;
}

}  // namespace

std::vector<ScalarEvent> read_scalar_events(const std::string& path) {
  data::TFRecordReader reader(path);
  std::vector<ScalarEvent> out;
  std::string record;
  while (reader.read(&record)) {
    UnknownFieldSet event;
    STRATA_CHECK(event.ParseFromString(record), DataCorrupt,
                 path << ": record " << reader.records_read() - 1 << " is not an Event protobuf");
    double wall_time = 0;
    int64_t step = 0;
    std::vector<const std::string*> summaries;
    for (int i = 0; i < event.field_count(); ++i) {
      const UnknownField& f = event.field(i);
      if (f.number() == 1 && f.type() == UnknownField::TYPE_FIXED64) {
        const uint64_t bits = f.fixed64();
        std::memcpy(&wall_time, &bits, sizeof bits);
      } else if (f.number() == 2 && f.type() == UnknownField::TYPE_VARINT) {
        step = static_cast<int64_t>(f.varint());
      } else if (f.number() == 5 && f.type() == UnknownField::TYPE_LENGTH_DELIMITED) {
        summaries.push_back(&f.length_delimited());
      }
    }
    for (const std::string* bytes : summaries) {
      UnknownFieldSet summary;  // Summary { repeated Value value = 1; }
      STRATA_CHECK(summary.ParseFromString(*bytes), DataCorrupt,
                   path << ": record " << reader.records_read() - 1 << " has a Summary that is not protobuf");
      for (int i = 0; i < summary.field_count(); ++i) {
        const UnknownField& f = summary.field(i);
        if (f.number() != 1 || f.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
        ScalarEvent scalar{.step = step, .wall_time = wall_time};
        if (read_value(f.length_delimited(), scalar)) out.push_back(std::move(scalar));
      }
    }
  }
  return out;
}

}  // namespace strata::detail
