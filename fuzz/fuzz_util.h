// Helpers the fuzz targets share: scratch files that hold an input for the parsers that read files, and the rule
// every target follows: bad bytes may raise a strata::Error (DataCorrupt, InvalidArgument, IoError ...), which the
// target catches; any other exception escapes to libFuzzer and is reported as a finding, as is a crash or a hang.
// Thread-safety: one fuzzer process runs one input at a time; the scratch names are unique per process.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "strata/error.h"

namespace strata::fuzz {

// A directory of this process under $TMPDIR (or /tmp), created on first use and removed at exit.
inline const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors.
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* d = new std::string(std::string(tmp && *tmp ? tmp : "/tmp") + "/strata-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();  // the fuzzer's own machinery failed: not a finding in strata
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Reads an input front to back, the layout the service targets use: single bytes, and byte strings each preceded
// by its length (2 bytes, little-endian, cut to what is left). Past the end it reads zeros and empty strings.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return at_ == size_; }
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::string string() {
    const size_t n = std::min<size_t>(byte() | (size_t{byte()} << 8), size_ - at_);
    std::string s(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// The same layout written: `method`, then `request` with its length (make_seeds writes the seeds so).
inline std::string encode_call(int method, const std::string& request) {
  const size_t n = std::min<size_t>(request.size(), 0xffff);
  std::string out{static_cast<char>(method), static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
  return out + request.substr(0, n);
}

}  // namespace strata::fuzz
