// Temporary names and the rename that publishes a finished file (see temp_file.h).
// Thread-safety: the name counter is atomic.
#include "data/temp_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "strata/error.h"

namespace strata::data::detail {

std::string temp_name_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

namespace {
std::string parent_directory(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}
}  // namespace

void publish_temp_file(const std::string& temp, const std::string& path) {
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(temp.c_str());
    STRATA_THROW(IoError, "cannot rename " << temp << " to " << path << ": " << std::strerror(err));
  }
  const std::string dir = parent_directory(path);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  STRATA_CHECK(fd >= 0, IoError, "cannot open directory " << dir << " to sync it: " << std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems do not support fsync on directories; the file itself was synced already.
  STRATA_CHECK(rc == 0 || err == EINVAL || err == EROFS, IoError,
               "cannot sync directory " << dir << " after renaming " << path << ": " << std::strerror(err));
}

}  // namespace strata::data::detail
