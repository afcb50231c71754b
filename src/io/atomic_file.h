// Crash-safe file writes: the bytes go to a temporary file beside the target, which is fsync'ed,
// closed and renamed over the target, and the directory is fsync'ed so the rename itself survives a
// crash. Until `commit` the target is untouched; a writer destroyed without `commit` (an exception
// on the way) removes its temporary file.
//
// A writer that is killed leaves its temporary behind. Temporary names carry the writer's pid
// ("<base>.tmp-<pid>-<n>"), and this process registers every temporary it is writing (TempInProgress),
// so `remove_dead_writers_temporaries` can tell litter (the pid is gone, or is this process but the
// name is not in progress) from another writer's work in progress.
//
// Thread-safety: an AtomicFile belongs to one thread; temporary names are unique per process and call;
// the in-progress registry is synchronised, so any thread may clean up while others write.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::io::detail {

// "<path>.tmp-<pid>-<n>", unique within this process.
std::string temp_name_for(const std::string& path);

// Renames the complete, fsync'ed and closed `temp` over `path`, then fsyncs their directory: for writers
// that stream through their own file handle (the data layer's TFRecord shards) rather than AtomicFile.
// Throws IoError naming both when the rename fails (and removes `temp`) or the directory cannot be synced.
void publish_temp_file(const std::string& temp, const std::string& path);

// While alive, marks the temporary `path` (a temp_name_for name, file or directory) as being written by
// this process, so remove_dead_writers_temporaries leaves it alone. Register before creating it.
class TempInProgress {
 public:
  explicit TempInProgress(std::string path);
  ~TempInProgress();
  TempInProgress(const TempInProgress&) = delete;
  TempInProgress& operator=(const TempInProgress&) = delete;

 private:
  std::string name_;
};

// The writer's pid in a temporary's file name "<base>.tmp-<pid>-<n>" (or that with ".old" appended,
// CheckpointManager's aside name); none for any other name.
std::optional<pid_t> temp_writer_pid(std::string_view file_name);

// Removes (recursively) every entry directly in `dir` whose name is a temporary of a writer that no
// longer runs: kill(pid, 0) fails with ESRCH, or the pid is this process's and the name is not in
// progress here. A live process's temporaries are kept (so is everything when the pid was reused).
// Best effort: entries that cannot be removed stay. Returns the names removed. Assumes the writers
// ran on this machine (pids of another host's processes mean nothing here).
std::vector<std::string> remove_dead_writers_temporaries(const std::string& dir);

// fsync on a directory, so renames and new entries in it are durable. Throws IoError.
void fsync_directory(const std::string& dir);

// The directory part of `path` ("." when it has none).
std::string parent_directory(const std::string& path);

// "<what>: <strerror(errno)>" for IoError messages.
std::string errno_message(int err);

class AtomicFile {
 public:
  // Creates the temporary file; throws IoError naming `path` when it cannot.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes; throws IoError naming the target (the temporary file is removed).
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // fsync, close, rename over the target, fsync the directory. Throws IoError.
  void commit();

 private:
  [[noreturn]] void fail(const char* what, int err);

  std::string path_;
  std::string temp_;
  TempInProgress in_progress_;
  int fd_ = -1;
  bool committed_ = false;
};

// AtomicFile in one call.
void write_file_atomically(const std::string& path, std::string_view contents);

}  // namespace strata::io::detail
