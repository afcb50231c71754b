// Options a Dataset carries for whoever consumes it (tf.data.Options): today how a distribution strategy shards
// it across workers (tf.data.experimental.AutoShardPolicy). Set with Dataset::with_options, read with
// Dataset::options(); the options stage is transparent to iteration and iterator state.
// Thread-safety: plain values.
#pragma once

namespace strata::data {

// How a dataset of global batches is split across the workers of a multi-worker strategy (see
// strata/data/autoshard.h and strata/distribute/input.h):
//   kFile: each worker reads the files i with i % workers == its index, and its batches hold its share of the
//          global batch (the last batch() is rebatched);
//   kData: each worker reads every global batch and keeps its replicas' part of it;
//   kAuto: kFile when the pipeline has a file source with at least as many files as workers, else kData;
//   kOff:  no sharding: each worker reads the whole dataset, rebatched to its share of the global batch.
enum class AutoShardPolicy { kOff, kAuto, kFile, kData };

struct Options {
  AutoShardPolicy auto_shard_policy = AutoShardPolicy::kAuto;
};

}  // namespace strata::data
