// The file store (strata/comm/store.h): keys as files in a directory that the processes of one machine share.
//
// Key k lives in the file "k_<encoding of k>": bytes outside [A-Za-z0-9._-] are written as %XX, so any key maps
// to one plain file name and two keys never share one. A value is written to a temporary file
// (".tmp.<pid>.<n>") and renamed over the key's file, so a reader sees the old value or the new one, never half
// of one. add and compare_set (read, decide, write) hold an exclusive flock on "lock" in the directory; each
// call opens the lock file itself, so threads of one process exclude each other as processes do. get and wait
// poll (1 ms, growing to 10 ms) until the keys exist or the timeout passes.
// Thread-safety: a FileStore may be used from many threads and processes at once.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "comm/store_internal.h"
#include "strata/comm/store.h"
#include "strata/error.h"

namespace strata::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxFileName = 250;  // NAME_MAX is 255 on Linux filesystems

std::string encode_key(const std::string& key) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "k_";
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
        c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string errno_text(int err) { return std::strerror(err); }

// An open descriptor closed on every path.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

class FileStore final : public Store, public detail::KeyCounter {
 public:
  FileStore(const std::string& directory, std::chrono::milliseconds timeout)
      : Store(timeout), dir_(directory), name_("file store '" + directory + "'") {
    std::string partial;
    for (size_t pos = 0; pos != std::string::npos;) {
      pos = dir_.find('/', pos + 1);
      partial = dir_.substr(0, pos);
      if (partial.empty()) continue;
      if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        STRATA_THROW(IoError, name_ << ": cannot create directory '" << partial << "': " << errno_text(errno));
      }
    }
    struct stat st {};
    STRATA_CHECK(::stat(dir_.c_str(), &st) == 0 && S_ISDIR(st.st_mode), IoError,
                 name_ << ": '" << dir_ << "' is not a directory");
  }

  void set(const std::string& key, const std::string& value) override { write_value(key, value); }

  std::string get(const std::string& key) override {
    wait({key}, timeout());
    std::string value;
    STRATA_CHECK(read_value(key, &value), IoError, name_ << ": key '" << key << "' was deleted while being read");
    return value;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    Fd lock = lock_directory();
    std::string value;
    read_value(key, &value);
    const int64_t now = detail::add_counter(name_, key, detail::parse_counter(name_, key, value), delta);
    write_value(key, std::to_string(now));
    return now;
  }

  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    Fd lock = lock_directory();
    std::string value;
    const bool exists = read_value(key, &value);
    if ((!exists && expected.empty()) || (exists && value == expected)) {
      write_value(key, desired);
      return desired;
    }
    return value;
  }

  bool check(const std::vector<std::string>& keys) override {
    for (const auto& key : keys) {
      if (!exists(key)) return false;
    }
    return true;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto start = Clock::now();
    const auto deadline = start + timeout;
    auto pause = std::chrono::microseconds(1000);
    std::vector<std::string> missing = keys;
    while (true) {
      std::vector<std::string> still;
      for (const auto& key : missing) {
        if (!exists(key)) still.push_back(key);
      }
      missing.swap(still);
      if (missing.empty()) return;
      const auto now = Clock::now();
      if (now >= deadline) detail::throw_wait_timeout(name_, keys, missing, timeout);
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, std::chrono::microseconds(10000));
    }
  }

  bool delete_key(const std::string& key) override {
    if (::unlink(path(key).c_str()) == 0) return true;
    STRATA_CHECK(errno == ENOENT, IoError, name_ << ": cannot delete key '" << key << "': " << errno_text(errno));
    return false;
  }

  int64_t num_keys() override { return num_keys_with_prefix(""); }

  int64_t num_keys_with_prefix(const std::string& prefix) override {
    const std::string encoded = encode_key(prefix);
    DIR* dir = ::opendir(dir_.c_str());
    STRATA_CHECK(dir != nullptr, IoError, name_ << ": cannot list the directory: " << errno_text(errno));
    int64_t n = 0;
    while (dirent* entry = ::readdir(dir)) {
      if (std::strncmp(entry->d_name, encoded.c_str(), encoded.size()) == 0) ++n;
    }
    ::closedir(dir);
    return n;
  }

 private:
  std::string path(const std::string& key) const {
    std::string file = encode_key(key);
    STRATA_CHECK(file.size() <= kMaxFileName, InvalidArgument,
                 name_ << ": key '" << key.substr(0, 64) << "...' is too long (" << key.size()
                       << " bytes; its file name would be " << file.size() << " > " << kMaxFileName << ")");
    return dir_ + "/" + file;
  }

  bool exists(const std::string& key) const { return ::access(path(key).c_str(), F_OK) == 0; }

  // Whether the key exists; its value in *value.
  bool read_value(const std::string& key, std::string* value) const {
    const std::string file = path(key);
    Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) {
      STRATA_CHECK(errno == ENOENT, IoError, name_ << ": cannot read key '" << key << "': " << errno_text(errno));
      return false;
    }
    value->clear();
    char buffer[4096];
    while (true) {
      const ssize_t n = ::read(fd.fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      STRATA_CHECK(n >= 0, IoError, name_ << ": cannot read key '" << key << "': " << errno_text(errno));
      if (n == 0) return true;
      value->append(buffer, static_cast<size_t>(n));
    }
  }

  void write_value(const std::string& key, const std::string& value) const {
    static std::atomic<uint64_t> counter{0};
    const std::string file = path(key);
    const std::string temp = dir_ + "/.tmp." + std::to_string(::getpid()) + "." + std::to_string(++counter);
    {
      Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
      STRATA_CHECK(fd.fd >= 0, IoError, name_ << ": cannot write key '" << key << "': " << errno_text(errno));
      size_t done = 0;
      while (done < value.size()) {
        const ssize_t n = ::write(fd.fd, value.data() + done, value.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          const int err = errno;
          ::unlink(temp.c_str());
          STRATA_THROW(IoError, name_ << ": cannot write key '" << key << "': " << errno_text(err));
        }
        done += static_cast<size_t>(n);
      }
    }
    if (::rename(temp.c_str(), file.c_str()) != 0) {
      const int err = errno;
      ::unlink(temp.c_str());
      STRATA_THROW(IoError, name_ << ": cannot publish key '" << key << "': " << errno_text(err));
    }
  }

  // An exclusive flock on "<dir>/lock", released when the returned Fd closes.
  Fd lock_directory() const {
    const std::string file = dir_ + "/lock";
    Fd fd(::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    STRATA_CHECK(fd.fd >= 0, IoError, name_ << ": cannot open the lock file: " << errno_text(errno));
    while (::flock(fd.fd, LOCK_EX) != 0) {
      STRATA_CHECK(errno == EINTR, IoError, name_ << ": cannot lock: " << errno_text(errno));
    }
    return Fd(std::exchange(fd.fd, -1));
  }

  const std::string dir_;
  const std::string name_;
};

}  // namespace

std::shared_ptr<Store> make_file_store(const std::string& directory, std::chrono::milliseconds timeout) {
  STRATA_CHECK(!directory.empty(), InvalidArgument, "make_file_store: the directory is empty");
  STRATA_CHECK(timeout.count() >= 0, InvalidArgument,
               "make_file_store: timeout must not be negative, got " << timeout.count() << " ms");
  return std::make_shared<FileStore>(directory, timeout);
}

}  // namespace strata::comm
