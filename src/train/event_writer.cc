// TensorBoard event files (see event_writer.h).
#include "train/event_writer.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "strata/error.h"

namespace strata::detail {

namespace {

namespace fs = std::filesystem;

// Protobuf wire types.
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
void put_fixed(std::string& out, T value) {  // little-endian hosts only, as the TFRecord writer
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event's wall_time (1) and step (2).
std::string event_header(double wall_time, int64_t step) {
  std::string event;
  if (wall_time != 0) {
    put_key(event, 1, kFixed64);
    put_fixed(event, wall_time);
  }
  if (step != 0) {
    put_key(event, 2, kVarint);
    put_varint(event, static_cast<uint64_t>(step));  // a negative int64 takes 10 bytes, as protobuf writes it
  }
  return event;
}

double now_unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "<directory>/events.out.tfevents.<unix seconds>.<hostname>", or with ".<n>" when that file exists.
std::string events_file_path(const std::string& directory) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  STRATA_CHECK(!ec, IoError, "TensorBoard: cannot create the log directory '" << directory << "': " << ec.message());
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const std::string base =
      (fs::path(directory) /
       ("events.out.tfevents." + std::to_string(static_cast<long long>(now_unix_seconds())) + "." + host))
          .string();
  std::string path = base;
  for (int n = 1; fs::exists(path, ec); ++n) path = base + "." + std::to_string(n);
  return path;
}

}  // namespace

std::string encode_file_version_event(double wall_time, std::string_view version) {
  std::string event = event_header(wall_time, 0);
  put_bytes(event, 3, version);
  return event;
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_key(v, 2, kFixed32);  // simple_value, always written: 0 is a value worth plotting
    put_fixed(v, value);
    put_bytes(summary, 1, v);
  }
  std::string event = event_header(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

EventFileWriter::EventFileWriter(const std::string& directory) : path_(events_file_path(directory)), writer_(path_) {
  writer_.write(encode_file_version_event(now_unix_seconds()));
  writer_.flush();
}

void EventFileWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  if (scalars.empty()) return;
  writer_.write(encode_scalars_event(now_unix_seconds(), step, scalars));
}

}  // namespace strata::detail
