// Checking the paths a command or a callback will write before it starts its work, so that a path it cannot write
// fails at once with its flag (or callback) named, not after an epoch (or a whole run) of training. Used by the CLI
// (cli/output_paths.h) and by fit's callbacks when training begins.
// Thread-safety: plain functions; each touches only the path it is given.
#pragma once

#include <string>

namespace strata::io {

// `dir` exists as a directory we can write in, created (with its parents) if need be. Writability is proven by
// creating and removing a file there: permission bits do not tell (root, read-only mounts). `what` names where the
// path came from ("--checkpoint-dir"). IoError otherwise.
void check_output_directory(const std::string& dir, const std::string& what);

// `path` can be opened for appending (an existing file is left as it is; a new one is created and removed again,
// so a run that fails before training leaves nothing behind). IoError naming `what` otherwise: a directory, a
// missing folder, a folder we cannot write in.
void check_output_file(const std::string& path, const std::string& what);

}  // namespace strata::io
