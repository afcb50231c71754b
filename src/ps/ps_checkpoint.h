// Where a parameter-server job's checkpoints live on disk, and the manifest that makes one complete. Every ps
// writes only under the directory it was started with; an RPC names a checkpoint by number, never a path:
//
//   <checkpoint_dir>/ps_checkpoint.json        the manifest, committed last by the chief (atomically): the number
//                                              of the newest checkpoint that every ps wrote whole, its step, and
//                                              each ps's shard count
//   <checkpoint_dir>/ps-<i>/ckpt-<n>/          ps i's shards of checkpoint n (one safetensors file per shard)
//   <checkpoint_dir>/ps-<i>/ckpt-<n>.tmp-...   a checkpoint being written; renamed to ckpt-<n> once whole
//
// A ps's ckpt-<n> that the manifest does not name is never loaded by a restarting ps; the next save removes it,
// and the temporaries of writers that died.
// Thread-safety: free functions over the file system; one chief commits a directory's manifest, and each ps writes
// only its own ps-<i>.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/io/safetensors.h"

namespace strata::ps::detail {

// The key of a shard file's safetensors metadata that holds its ShardRecord (name, optimizer, version, step ids) as
// JSON.
inline constexpr const char* kShardMetadataKey = "shard";

// "ckpt-<n>".
std::string checkpoint_name(int64_t number);
// <root>/ps-<index>: the directory ps task <index> of a job checkpointing under <root> writes.
std::filesystem::path ps_checkpoint_directory(const std::filesystem::path& root, int64_t index);

// The chief's record of the newest complete checkpoint.
struct PsCheckpointManifest {
  int64_t checkpoint = 0;            // every ps holds ckpt-<checkpoint> whole
  int64_t step = 0;                  // the job's training steps done when it was written
  std::vector<int64_t> ps_shards;    // shards per ps task, in task order
  std::string job_id;                // the job that wrote it (cluster::JobCredentials::job_id; "": no secret)
  int64_t epochs_done = 0;           // the chief's fit position then: epochs completed
  int64_t step_in_epoch = 0;         // and steps done in the next one
};
// The manifest under `root`; none when no checkpoint was committed there. DataCorrupt naming the file when it
// cannot be read as one.
std::optional<PsCheckpointManifest> read_ps_manifest(const std::filesystem::path& root);
// Writes the manifest under `root` atomically (a crash leaves the old one or the new one). IoError.
void commit_ps_manifest(const std::filesystem::path& root, const PsCheckpointManifest& manifest);

// Every shard's value in checkpoint `manifest.checkpoint` under `root`, by shard name ("model/var_3/part_1"), read
// from each ps's ckpt-<n> (each shard is saved by the ps that serves it; one found twice is read once). DataCorrupt
// naming a file that is damaged or not a shard file, or a ps directory the manifest names that lacks the checkpoint.
std::map<std::string, Tensor> read_ps_checkpoint_values(const std::filesystem::path& root,
                                                        const PsCheckpointManifest& manifest);

// Writes checkpoint `number` of one ps into `directory`: `write_shards` fills a fresh temporary directory it is
// given, which is then renamed to ckpt-<number> (replacing one of that number left by a save that was never
// committed). Then removes every other ckpt-<n> but ckpt-<keep> (keep 0: none;
// checkpoints are numbered from 1), and dead writers' temporaries.
// IoError naming the directory; whatever write_shards throws (its temporary is removed).
template <class WriteShards>
void write_ps_checkpoint(const std::filesystem::path& directory, int64_t number, int64_t keep,
                         const WriteShards& write_shards);

// The implementation's two halves (write_ps_checkpoint calls them around write_shards).
class PsCheckpointWriter {
 public:
  PsCheckpointWriter(std::filesystem::path directory, int64_t number);
  ~PsCheckpointWriter();  // removes the temporary unless published
  PsCheckpointWriter(const PsCheckpointWriter&) = delete;
  PsCheckpointWriter& operator=(const PsCheckpointWriter&) = delete;
  const std::filesystem::path& temporary() const { return temporary_; }
  // Renames the temporary to ckpt-<number>, then removes the litter (above).
  void publish(int64_t keep);

 private:
  struct InProgress;
  std::filesystem::path directory_;
  int64_t number_;
  std::filesystem::path temporary_;
  std::unique_ptr<InProgress> in_progress_;
  bool published_ = false;
};

template <class WriteShards>
void write_ps_checkpoint(const std::filesystem::path& directory, int64_t number, int64_t keep,
                         const WriteShards& write_shards) {
  PsCheckpointWriter writer(directory, number);
  write_shards(writer.temporary());
  writer.publish(keep);
}

}  // namespace strata::ps::detail
