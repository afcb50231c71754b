// TensorBoard event files (see event_writer.h): Event messages built and serialized by protobuf's generated classes,
// framed by io/tfrecord_framing.h into a stdio file. Thread-safety: per object.
#include "io/event_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "io/proto/event.pb.h"
#include "io/tfrecord_framing.h"
#include "strata/error.h"

namespace strata::io::detail {

namespace {

namespace fs = std::filesystem;

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

std::string serialize(const tensorflow::Event& event) {
  std::string bytes;
  // Fails only past protobuf's 2 GiB limit on a message.
  STRATA_CHECK(event.SerializeToString(&bytes), InvalidArgument,
               "TensorBoard: an Event of " << event.ByteSizeLong() << " bytes is too large to serialize");
  return bytes;
}

}  // namespace

std::string encode_file_version_event(double wall_time, std::string_view version) {
  tensorflow::Event event;
  event.set_wall_time(wall_time);
  event.set_file_version(std::string(version));
  return serialize(event);
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars) {
  tensorflow::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  tensorflow::Summary* summary = event.mutable_summary();  // written even when empty: the event is a summary
  for (const auto& [tag, value] : scalars) {
    tensorflow::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
  }
  return serialize(event);
}

EventFileWriter::EventFileWriter(const std::string& directory) : path_(events_file_path(directory)) {
  file_ = std::fopen(path_.c_str(), "wb");
  STRATA_CHECK(file_, IoError, "cannot create " << path_ << ": " << std::strerror(errno));
  try {
    write_record(encode_file_version_event(now_unix_seconds()));
    flush();
  } catch (...) {
    std::fclose(file_);
    throw;
  }
}

EventFileWriter::~EventFileWriter() {
  try {
    close();
  } catch (...) {
  }
}

EventFileWriter::EventFileWriter(EventFileWriter&& other) noexcept
    : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}

EventFileWriter& EventFileWriter::operator=(EventFileWriter&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
  }
  return *this;
}

void EventFileWriter::write_record(std::string_view event) {
  STRATA_CHECK(file_, InvalidArgument, "write to closed file " << path_);
  char header[kRecordHeaderBytes], footer[kRecordFooterBytes];
  encode_record_header(event.size(), header);
  encode_record_footer(event.data(), event.size(), footer);
  const bool written = std::fwrite(header, 1, sizeof header, file_) == sizeof header &&
                       std::fwrite(event.data(), 1, event.size(), file_) == event.size() &&
                       std::fwrite(footer, 1, sizeof footer, file_) == sizeof footer;
  STRATA_CHECK(written, IoError, "write error in " << path_ << ": " << std::strerror(errno));
}

void EventFileWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  if (scalars.empty()) return;
  write_record(encode_scalars_event(now_unix_seconds(), step, scalars));
}

void EventFileWriter::flush() {
  if (!file_) return;
  STRATA_CHECK(std::fflush(file_) == 0, IoError, "flush failed for " << path_ << ": " << std::strerror(errno));
}

void EventFileWriter::close() {
  if (!file_) return;
  std::FILE* f = std::exchange(file_, nullptr);
  STRATA_CHECK(std::fclose(f) == 0, IoError, "close failed for " << path_ << ": " << std::strerror(errno));
}

}  // namespace strata::io::detail
