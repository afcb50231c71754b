// check_output_directory and check_output_file (output_paths.h).
#include "io/output_paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "strata/error.h"

namespace strata::io {

namespace fs = std::filesystem;

void check_output_directory(const std::string& dir, const std::string& what) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    STRATA_CHECK(fs::is_directory(dir, ec), IoError, what << ": '" << dir << "' exists and is not a directory");
  } else {
    fs::create_directories(dir, ec);
    STRATA_CHECK(!ec, IoError, what << ": cannot create directory '" << dir << "': " << ec.message());
  }
  const std::string probe = (fs::path(dir) / (".strata-write-test-" + std::to_string(::getpid()))).string();
  std::FILE* f = std::fopen(probe.c_str(), "w");
  STRATA_CHECK(f != nullptr, IoError, what << ": cannot write in directory '" << dir << "': " << std::strerror(errno));
  std::fclose(f);
  std::remove(probe.c_str());
}

void check_output_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  STRATA_CHECK(!existed || !fs::is_directory(path, ec), IoError, what << ": '" << path << "' is a directory");
  std::FILE* f = std::fopen(path.c_str(), "a");
  STRATA_CHECK(f != nullptr, IoError, what << ": cannot write '" << path << "': " << std::strerror(errno));
  std::fclose(f);
  if (!existed) std::remove(path.c_str());
}

}  // namespace strata::io
