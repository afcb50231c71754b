// Crash-safe file writes through a temporary file, fsync and rename, and removal of the temporaries
// that killed writers left (see atomic_file.h).
// Thread-safety: the name counter is atomic and the in-progress registry is under a mutex; each
// AtomicFile belongs to one thread.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

#include "strata/error.h"

namespace strata::io::detail {

std::string temp_name_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

namespace {

std::mutex registry_mutex;
// File names (not paths: a directory may be spelled two ways) of the temporaries this process is
// writing. Names are unique within the process (temp_name_for's counter), so a name is enough.
std::multiset<std::string>& in_progress_names() {
  static std::multiset<std::string> names;
  return names;
}

std::string file_name_of(std::string_view path) {
  const auto slash = path.find_last_of('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool name_in_progress(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return in_progress_names().count(name) > 0;
}

// True when no process `pid` exists (kill's EPERM means one exists that we may not signal).
bool process_is_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

TempInProgress::TempInProgress(std::string path) : name_(file_name_of(path)) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  in_progress_names().insert(name_);
}

TempInProgress::~TempInProgress() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& names = in_progress_names();
  if (const auto it = names.find(name_); it != names.end()) names.erase(it);
}

std::optional<pid_t> temp_writer_pid(std::string_view name) {
  if (name.size() > 4 && name.substr(name.size() - 4) == ".old") name.remove_suffix(4);
  const auto tmp = name.rfind(".tmp-");
  if (tmp == std::string_view::npos || tmp == 0) return std::nullopt;
  const std::string_view rest = name.substr(tmp + 5);  // "<pid>-<n>"
  const auto dash = rest.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const std::string_view pid = rest.substr(0, dash);
  if (!all_digits(pid) || !all_digits(rest.substr(dash + 1)) || pid.size() > 9) return std::nullopt;
  const long value = std::stol(std::string(pid));
  if (value <= 0 || value > INT_MAX) return std::nullopt;
  return static_cast<pid_t>(value);
}

std::vector<std::string> remove_dead_writers_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  const pid_t self = ::getpid();
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const auto pid = temp_writer_pid(name);
    if (!pid) continue;
    std::string base = name;  // the aside name "<temp>.old" is in progress while "<temp>" is
    if (base.size() > 4 && base.compare(base.size() - 4, 4, ".old") == 0) base.resize(base.size() - 4);
    const bool litter = *pid == self ? !name_in_progress(base) : process_is_gone(*pid);
    if (!litter) continue;
    std::error_code remove_ec;
    fs::remove_all(entry.path(), remove_ec);
    if (!remove_ec) removed.push_back(name);
  }
  return removed;
}

std::string parent_directory(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string errno_message(int err) { return std::strerror(err); }

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  STRATA_CHECK(fd >= 0, IoError, "cannot open directory " << dir << " to sync it: " << errno_message(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems do not support fsync on directories; the data itself was synced already.
  STRATA_CHECK(rc == 0 || err == EINVAL || err == EROFS, IoError,
               "cannot sync directory " << dir << ": " << errno_message(err));
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), temp_(temp_name_for(path_)), in_progress_(temp_) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  STRATA_CHECK(fd_ >= 0, IoError,
               "cannot write " << path_ << ": cannot create temporary file " << temp_ << ": " << errno_message(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::fail(const char* what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_.c_str());
  STRATA_THROW(IoError, "cannot write " << path_ << ": " << what << " " << temp_ << " failed: " << errno_message(err)
                                        << " (the previous " << path_ << ", if any, is unchanged)");
}

void AtomicFile::write(const void* data, size_t n) {
  STRATA_CHECK(fd_ >= 0 && !committed_, IoError, "cannot write " << path_ << ": the file is already closed");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("write to", errno);
    }
    if (w == 0) fail("write to", EIO);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void publish_temp_file(const std::string& temp, const std::string& path) {
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(temp.c_str());
    STRATA_THROW(IoError, "cannot rename " << temp << " to " << path << ": " << errno_message(err));
  }
  fsync_directory(parent_directory(path));
}

void AtomicFile::commit() {
  STRATA_CHECK(fd_ >= 0 && !committed_, IoError, "cannot write " << path_ << ": the file is already closed");
  if (::fsync(fd_) != 0) fail("fsync of", errno);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("close of", errno);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("rename of", errno);
  committed_ = true;
  fsync_directory(parent_directory(path_));
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

}  // namespace strata::io::detail
