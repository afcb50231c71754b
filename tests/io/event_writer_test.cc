// TensorBoard event files through protobuf's generated messages: every Event is byte for byte what the former hand
// encoder of train/event_writer.cc wrote (kept below as the reference; an empty tag, which protobuf leaves out, is the
// one difference), a file is those bytes in TFRecord framing
// (checked by a bitwise CRC-32C of the test's own), read_scalar_events reads back tags, values, steps and wall times
// and skips what it does not plot (TensorFlow's tensors, graphs, fields it does not know), damage is a DataCorrupt
// naming the file, the record and its offset, and a write that fails is an IoError naming the file.
#include "io/event_writer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "io/event_file_reader.h"
#include "io/io_test_util.h"
#include "strata/error.h"

namespace strata {
namespace {

using io::detail::encode_file_version_event;
using io::detail::encode_scalars_event;
using io::detail::EventFileWriter;
using io::detail::read_scalar_events;
using io::detail::ScalarEvent;
using Scalars = std::vector<std::pair<std::string, float>>;

// The hand encoder the writer had before it used the generated messages, as it was.
namespace legacy {

constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

template <class T>
void put_fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string event_header(double wall_time, int64_t step) {
  std::string event;
  if (wall_time != 0) {
    put_key(event, 1, kFixed64);
    put_fixed(event, wall_time);
  }
  if (step != 0) {
    put_key(event, 2, kVarint);
    put_varint(event, static_cast<uint64_t>(step));
  }
  return event;
}

std::string encode_file_version_event(double wall_time, std::string_view version = "brain.Event:2") {
  std::string event = event_header(wall_time, 0);
  put_bytes(event, 3, version);
  return event;
}

std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_key(v, 2, kFixed32);
    put_fixed(v, value);
    put_bytes(summary, 1, v);
  }
  std::string event = event_header(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

}  // namespace legacy

// TFRecord framing of the test's own: CRC-32C bit by bit (reflected 0x82F63B78), masked as TensorFlow does.
uint32_t masked_crc(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  crc ^= 0xFFFFFFFFu;
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame(std::string_view data) {
  std::string out, length;
  legacy::put_fixed(length, static_cast<uint64_t>(data.size()));
  out += length;
  legacy::put_fixed(out, masked_crc(length));
  out += data;
  legacy::put_fixed(out, masked_crc(data));
  return out;
}

// The records of a framed file; a bad CRC or a cut record fails the test.
std::vector<std::string> unframe(const std::string& file) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < file.size()) {
    if (file.size() - at < 12) {
      ADD_FAILURE() << "a cut header at " << at;
      break;
    }
    uint64_t length;
    uint32_t length_crc, data_crc;
    std::memcpy(&length, file.data() + at, 8);
    std::memcpy(&length_crc, file.data() + at + 8, 4);
    EXPECT_EQ(length_crc, masked_crc(std::string_view(file).substr(at, 8))) << "length CRC at " << at;
    if (file.size() - at - 12 < length + 4) {
      ADD_FAILURE() << "a cut record at " << at;
      break;
    }
    const std::string data = file.substr(at + 12, length);
    std::memcpy(&data_crc, file.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc(data)) << "data CRC at " << at;
    records.push_back(data);
    at += 12 + length + 4;
  }
  return records;
}

// The wall_time of an Event the legacy encoder laid out: key 0x09, then the double.
double leading_wall_time(const std::string& event) {
  double wall_time = 0;
  EXPECT_GE(event.size(), 9u);
  EXPECT_EQ(event.empty() ? 0 : event[0], '\x09');
  if (event.size() >= 9) std::memcpy(&wall_time, event.data() + 1, 8);
  return wall_time;
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// The only file in `dir`.
std::string only_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path().string());
  EXPECT_EQ(files.size(), 1u) << dir;
  return files.empty() ? "" : files[0];
}

TEST(EventWriterTest, EncodesTheBytesTheHandEncoderWrote) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(encode_file_version_event(1.7e9 + 0.25), legacy::encode_file_version_event(1.7e9 + 0.25));
  EXPECT_EQ(encode_file_version_event(0), legacy::encode_file_version_event(0)) << "a zero wall_time is left out";
  EXPECT_EQ(encode_file_version_event(12.5, ""), legacy::encode_file_version_event(12.5, ""));
  EXPECT_EQ(encode_file_version_event(12.5, "brain.Event:1"), legacy::encode_file_version_event(12.5, "brain.Event:1"));

  Scalars many;  // a summary longer than 127 bytes: its length takes a 2-byte varint
  for (int i = 0; i < 40; ++i) many.emplace_back("tag_" + std::to_string(i), static_cast<float>(i) * 0.5f);
  const std::vector<Scalars> scalar_sets = {
      {},
      {{"epoch_loss", 0.75f}},
      {{"epoch_loss", 0.0f}, {"epoch_zero", -0.0f}},  // zeros are written: simple_value is in a oneof
      {{"validation/epoch_accuracy", 0.5f}, {"\xc3\xa9psilon", -1.5f}, {"not UTF-8 \xff", 2.0f}},
      {{"nan", nan}, {"inf", inf}, {"-inf", -inf}, {"denormal", std::numeric_limits<float>::denorm_min()}},
      {{std::string(200, 't'), 3.0f}},  // a tag of a 2-byte length
      many};
  const std::vector<int64_t> steps = {
      0, 1, -3, 127, 128, int64_t{1} << 40, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  for (const double wall_time : {0.0, 1.7e9 + 0.125, -1.0}) {
    for (const int64_t step : steps) {
      for (size_t s = 0; s < scalar_sets.size(); ++s) {
        EXPECT_EQ(encode_scalars_event(wall_time, step, scalar_sets[s]),
                  legacy::encode_scalars_event(wall_time, step, scalar_sets[s]))
            << "wall_time " << wall_time << ", step " << step << ", scalar set " << s;
      }
    }
  }
}

TEST(EventWriterTest, AFileIsTheHandEncodedEventsInTFRecordFraming) {
  test::ScratchDir dir;
  std::string path;
  {
    EventFileWriter writer(dir.path());
    writer.add_scalars(0, {{"epoch_loss", 0.75f}, {"epoch_accuracy", 0.5f}});
    writer.add_scalars(5, {});  // nothing
    writer.add_scalars(-2, {{"batch_loss", 0.0f}});
    writer.close();
    path = writer.path();
  }
  EXPECT_EQ(only_file(dir.path()), path);
  const std::string file = test::read_bytes(path);
  const std::vector<std::string> records = unframe(file);
  ASSERT_EQ(records.size(), 3u);
  const std::string expected[] = {
      legacy::encode_file_version_event(leading_wall_time(records[0])),
      legacy::encode_scalars_event(leading_wall_time(records[1]), 0, {{"epoch_loss", 0.75f}, {"epoch_accuracy", 0.5f}}),
      legacy::encode_scalars_event(leading_wall_time(records[2]), -2, {{"batch_loss", 0.0f}})};
  EXPECT_EQ(file, frame(expected[0]) + frame(expected[1]) + frame(expected[2]));
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos) << "the file opens with the version event";
}

TEST(EventWriterTest, ReadsBackTagsValuesStepsAndWallTimes) {
  test::ScratchDir dir;
  const double before = unix_now();
  EventFileWriter writer(dir.path());
  writer.add_scalars(3, {{"epoch_loss", 0.25f}, {"epoch_nan", std::numeric_limits<float>::quiet_NaN()}});
  writer.add_scalars(int64_t{1} << 40, {{"epoch_loss", -0.0f}});
  writer.flush();  // a flushed file reads while the writer is open
  const double after = unix_now();
  const std::vector<ScalarEvent> events = read_scalar_events(writer.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].tag, "epoch_loss");
  EXPECT_EQ(events[0].step, 3);
  EXPECT_EQ(events[0].value, 0.25f);
  EXPECT_EQ(events[1].tag, "epoch_nan");
  EXPECT_TRUE(std::isnan(events[1].value));
  EXPECT_EQ(events[2].step, int64_t{1} << 40);
  EXPECT_TRUE(std::signbit(events[2].value)) << "-0 reads back as -0";
  for (const ScalarEvent& e : events) {
    EXPECT_GE(e.wall_time, before);
    EXPECT_LE(e.wall_time, after);
  }
  EXPECT_EQ(events[0].wall_time, events[1].wall_time) << "one event, one time";
  writer.close();
}

// The one difference from the hand encoder: protobuf leaves out an empty proto3 field, so an empty tag is not
// written (the hand encoder wrote "\x0a\x00"); it reads back as "" all the same.
TEST(EventWriterTest, AnEmptyTagIsLeftOutAndReadsBackEmptyAndAnyTagReadsBack) {
  std::string legacy_bytes = legacy::encode_scalars_event(5.0, 1, {{"", 1.0f}});
  const std::string empty_tag("\x0a\x00", 2);
  ASSERT_NE(legacy_bytes.find(empty_tag), std::string::npos);
  legacy_bytes.erase(legacy_bytes.find(empty_tag), 2);
  legacy_bytes[legacy_bytes.size() - 6] -= 2;  // the Value's length
  legacy_bytes[legacy_bytes.size() - 8] -= 2;  // the Summary's length
  EXPECT_EQ(encode_scalars_event(5.0, 1, {{"", 1.0f}}), legacy_bytes);

  test::ScratchDir dir;
  EventFileWriter writer(dir.path());
  writer.add_scalars(1, {{"", 1.0f}, {"after", 2.0f}, {"not UTF-8 \xff", 3.0f}});
  writer.close();
  const std::vector<ScalarEvent> events = read_scalar_events(writer.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].tag, "");
  EXPECT_EQ(events[0].value, 1.0f);
  EXPECT_EQ(events[1].tag, "after");
  EXPECT_EQ(events[2].tag, "not UTF-8 \xff") << "tags are bytes, read back as written";
}

// What TensorFlow writes beside scalars: a graph, a tensor value with its plugin metadata, fields this reader's
// messages do not have. Those are skipped; the simple_value beside them is read.
TEST(EventWriterTest, SkipsWhatItDoesNotPlotInTensorFlowsFiles) {
  test::ScratchDir dir;
  std::string graph_event = legacy::event_header(10.0, 0);
  legacy::put_bytes(graph_event, 4, "a GraphDef");  // graph_def
  std::string tensor_value;
  legacy::put_bytes(tensor_value, 1, "tf2_scalar");
  legacy::put_bytes(tensor_value, 9, std::string("\x0a\x09\x0a\x07scalars", 11));      // metadata: plugin "scalars"
  legacy::put_bytes(tensor_value, 8, std::string("\x08\x01\x2d\x00\x00\x80\x3f", 7));  // tensor: DT_FLOAT 1.0
  std::string simple_value;
  legacy::put_bytes(simple_value, 1, "simple");
  legacy::put_key(simple_value, 2, legacy::kFixed32);
  legacy::put_fixed(simple_value, 2.5f);
  std::string summary;
  legacy::put_bytes(summary, 1, tensor_value);
  legacy::put_bytes(summary, 1, simple_value);
  std::string scalars_event = legacy::event_header(11.0, 7);
  legacy::put_bytes(scalars_event, 10, "source_metadata");  // a field of TensorFlow's Event not in io's
  legacy::put_bytes(scalars_event, 5, summary);
  const std::string path = dir / "events.out.tfevents.1.tensorflow";
  test::write_bytes(path, frame(legacy::encode_file_version_event(9.0)) + frame(graph_event) + frame(scalars_event));

  const std::vector<ScalarEvent> events = read_scalar_events(path);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].tag, "simple");
  EXPECT_EQ(events[0].value, 2.5f);
  EXPECT_EQ(events[0].step, 7);
  EXPECT_EQ(events[0].wall_time, 11.0);
}

TEST(EventWriterTest, DamageIsDataCorruptNamingTheFileTheRecordAndItsOffset) {
  test::ScratchDir dir;
  const std::string first = frame(legacy::encode_file_version_event(1.0));
  const std::string second = frame(legacy::encode_scalars_event(2.0, 1, {{"epoch_loss", 0.5f}}));
  const std::string at = "record 1 (0-based index in the file) at byte offset " + std::to_string(first.size());
  std::string bad_length_crc = second, bad_data = second;
  bad_length_crc[9] ^= 0x01;
  bad_data[bad_data.size() - 6] ^= 0x01;
  const std::pair<std::string, std::string> cases[] = {
      {first + second.substr(0, second.size() - 3), "truncated record"},
      {first + second.substr(0, 5), "truncated header (5 of 12 bytes)"},
      {first + bad_length_crc, "length CRC mismatch"},
      {first + bad_data, "data CRC mismatch"},
      {first + frame("\xff\xff\xff"), "not an Event protobuf"},
  };
  for (const auto& [bytes, what] : cases) {
    const std::string path = dir / "events.out.tfevents.1.damaged";
    test::write_bytes(path, bytes);
    try {
      read_scalar_events(path);
      ADD_FAILURE() << "expected DataCorrupt for " << what;
    } catch (const DataCorrupt& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path + ": corrupt " + at + ": " + what), std::string::npos) << message;
    }
  }
  EXPECT_THROW(read_scalar_events(dir / "missing"), IoError);
}

TEST(EventWriterTest, AFailedWriteIsAnIoErrorNamingTheFile) {
  test::ScratchDir dir;
  const Scalars scalars = {{"a_tag_long_enough_to_pass_the_limit", 1.0f}};
  {
    EventFileWriter writer(dir.path());  // the version event: 40 bytes, flushed
    const test::FileSizeLimit limit(64);
    writer.add_scalars(0, scalars);
    try {
      writer.flush();
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("flush failed for " + writer.path()), std::string::npos) << e.what();
    }
  }
  {
    EventFileWriter writer(dir.path());
    const test::FileSizeLimit limit(64);
    writer.add_scalars(0, scalars);
    try {
      writer.close();
      ADD_FAILURE() << "expected IoError";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("close failed for " + writer.path()), std::string::npos) << e.what();
    }
    EXPECT_THROW(writer.add_scalars(1, scalars), InvalidArgument) << "closed";
    writer.flush();  // nothing after close
    writer.close();
  }

  test::write_bytes(dir / "a_file", "not a directory");
  EXPECT_THROW(EventFileWriter((dir / "a_file") + "/logs"), IoError);
}

}  // namespace
}  // namespace strata
