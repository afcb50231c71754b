// Publishing a file only once it is complete: it is written under a temporary name beside its final
// one, fsync'ed, closed and renamed over the target, and the directory is fsync'ed so the rename
// itself survives a crash. What `strata data convert` writes its shards with, through
// TFRecordWriterOptions::atomic (ByteWriter). The data layer sits beside io, not above it, so this is
// the few lines of io/atomic_file.h it needs, with the same temporary names.
//
// Thread-safety: the name counter is atomic; the functions touch only the files they are given.
#pragma once

#include <string>

namespace strata::data::detail {

// "<path>.tmp-<pid>-<n>", unique within this process (io::detail::temp_name_for's form).
std::string temp_name_for(const std::string& path);

// Renames the complete, fsync'ed and closed `temp` over `path`, then fsyncs their directory. Throws
// IoError naming both when the rename fails (and removes `temp`) or the directory cannot be synced.
void publish_temp_file(const std::string& temp, const std::string& path);

}  // namespace strata::data::detail
