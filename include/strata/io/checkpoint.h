// Training checkpoints: the weights, the optimizer's slots, the step, epoch and RNG state, and a JSON
// manifest, in a numbered directory that is written whole or not at all (like TF's CheckpointManager).
//
//   <directory>/checkpoint                 {"latest": "ckpt-7", "all": ["ckpt-5", "ckpt-6", "ckpt-7"], ...}
//   <directory>/ckpt-7/model.safetensors   the model's variables by name
//   <directory>/ckpt-7/optimizer.safetensors   optimizer slots ("dense/kernel/m", ...) and "iterations"
//   <directory>/ckpt-7/input.safetensors   the input pipeline's iterator state (only when there is one)
//   <directory>/ckpt-7/manifest.json       format and version, created time, step, epoch, rng,
//                                          the files and every tensor's name/shape/dtype, `extra`
//
// `save` writes a ckpt-<n> into a temporary directory ".ckpt-<n>.tmp-<pid>-<k>", fsyncs it and renames it
// into place (an existing ckpt-<n> is swapped out atomically and then removed), then replaces the
// pointer file atomically, and only then deletes the checkpoints beyond `max_to_keep` (oldest saved
// first; each is renamed to a temporary name before it is removed). A crash at any moment leaves the
// previous checkpoint complete and `latest()` pointing at a complete one, and never a ckpt-<n> without
// its manifest.json — so one found without it is damage, and `latest()` says so rather than skip it.
//
// Every tensor file carries a CRC-32C per tensor (strata/io/safetensors.h): `restore` raises the
// DataCorrupt that names the damaged file and tensor.
//
// Temporaries of writers that were killed (".ckpt-<n>.tmp-<pid>-<k>/", "checkpoint.tmp-<pid>-<k>" and
// any "*.tmp-<pid>-<k>" directly in the directory) are removed by the next successful `save`, when
// process <pid> no longer exists, or is this process and is not writing that temporary now. Another
// live process's temporaries are never touched. (pids are this machine's: one host writes a directory.)
//
// Thread-safety: a CheckpointManager is not synchronised, and one process (the chief) should write a
// directory; `restore` and `latest` may run from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/io/safetensors.h"
#include "strata/random.h"

namespace strata::io {

struct TrainingCheckpoint {
  NamedTensors weights;           // model variables by name
  NamedTensors optimizer;         // optimizer slots + "iterations"
  int64_t step = 0;               // global step
  int64_t epoch = 0;              // epochs completed
  Generator::State rng{};         // strata/random.h
  NamedTensors input;             // the input pipeline's iterator state (U8 tensors); none: no input.safetensors
  std::string extra_json = "{}";  // free-form JSON object the caller wants kept (e.g. the data iterator state)
};

// The manifest's format version; `restore` refuses manifests from a newer version.
inline constexpr int kCheckpointFormatVersion = 1;

class CheckpointManager {
 public:
  // `max_to_keep` < 1 keeps every checkpoint. The directory is created on the first save.
  explicit CheckpointManager(std::string directory, int max_to_keep = 5);

  // Writes `checkpoint` as "<directory>/ckpt-<number>" (replacing a complete one of the same number) and
  // makes it the latest; then removes the checkpoints beyond max_to_keep and dead writers' temporaries;
  // returns its path. A damaged (incomplete) ckpt-<n> is never written over or deleted: one of the same
  // number makes save throw DataCorrupt naming it before anything is written; others are left where they
  // are and out of the pointer file's list. Throws InvalidArgument for a negative number, an
  // `extra_json` that is not a JSON object, or bad tensors (see save_safetensors); IoError when writing
  // fails (the previous checkpoints are left as they were).
  std::string save(const TrainingCheckpoint& checkpoint, int64_t number);

  // The path of the latest checkpoint: the one the pointer file names, or, when it is missing or names
  // a checkpoint that is gone, the highest-numbered complete ckpt-<n>. None when the directory is
  // missing or holds no ckpt-<n> and no pointer file (nothing to resume from). Throws DataCorrupt,
  // naming the directory, when the checkpoint the pointer file names exists but is incomplete (no
  // manifest.json), when the highest-numbered ckpt-<n> is incomplete, when the pointer file names a
  // checkpoint that is gone and no complete one is left, or when the pointer file is not what this
  // class writes. A resume never silently starts over or from an older checkpoint past the damage.
  std::optional<std::string> latest() const;

  // Every checkpoint the pointer file lists that still exists, oldest first.
  std::vector<std::string> checkpoints() const;

  // Deletes every ckpt-<n> and the pointer file (the pointer first, so a crash halfway leaves older complete
  // checkpoints that latest() still finds), then the directory if nothing else is in it. Nothing to do when the
  // directory is missing. IoError when an entry cannot be removed.
  void remove_all() const;

  const std::string& directory() const { return directory_; }
  int max_to_keep() const { return max_to_keep_; }

  // Reads a ckpt-<n> directory. Throws IoError when a file is missing or unreadable, DataCorrupt when
  // the manifest is bad, a file's tensors differ from those the manifest lists (naming which), or a
  // tensor's data fails its checksum (naming the file and the tensor).
  static TrainingCheckpoint restore(const std::string& checkpoint_path);

 private:
  std::string directory_;
  int max_to_keep_;
};

}  // namespace strata::io
