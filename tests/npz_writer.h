// Test fixtures: .npz archives written with libzip the way numpy.savez (members stored) and numpy.savez_compressed
// (members deflated) write them, one "NAME.npy" member per array, so the readers are tested on archives they did
// not write. Thread-safety: none needed (each test writes its own files).
#pragma once

#include <zip.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "strata/io/npy.h"
#include "strata/tensor.h"

namespace strata::test {

// The bytes of `t` as a .npy file (io::write_npy's, which match numpy.save's).
inline std::string npy_bytes(const Tensor& t, const std::string& scratch_file) {
  io::write_npy(scratch_file, t);
  std::string bytes;
  if (FILE* f = std::fopen(scratch_file.c_str(), "rb")) {
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) bytes.append(buf, n);
    std::fclose(f);
  }
  std::remove(scratch_file.c_str());
  return bytes;
}

// Writes `members` (name -> bytes, in order) into a new zip archive at `path`, each with `method` (ZIP_CM_STORE or
// ZIP_CM_DEFLATE).
inline void write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& members,
                      zip_int32_t method) {
  int error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  ASSERT_NE(archive, nullptr) << "zip_open " << path << ": " << error;
  for (const auto& [name, bytes] : members) {
    void* copy = std::malloc(bytes.size() + 1);  // libzip frees it (freep = 1)
    std::memcpy(copy, bytes.data(), bytes.size());
    zip_source_t* source = zip_source_buffer(archive, copy, bytes.size(), 1);
    ASSERT_NE(source, nullptr) << zip_strerror(archive);
    const zip_int64_t index = zip_file_add(archive, name.c_str(), source, ZIP_FL_ENC_UTF_8);
    ASSERT_GE(index, 0) << zip_strerror(archive);
    ASSERT_EQ(zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), method, 0), 0)
        << zip_strerror(archive);
  }
  ASSERT_EQ(zip_close(archive), 0) << zip_strerror(archive);
}

// An .npz of named tensors, stored (numpy.savez) or deflated (numpy.savez_compressed).
inline void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays,
                      bool compressed) {
  std::vector<std::pair<std::string, std::string>> members;
  for (const auto& [name, t] : arrays) members.emplace_back(name + ".npy", npy_bytes(t, path + ".member.npy"));
  write_zip(path, members, compressed ? ZIP_CM_DEFLATE : ZIP_CM_STORE);
}

}  // namespace strata::test
