// Auto-sharding a Dataset across N workers, with TensorFlow's policies
// (tf.data.experimental.AutoShardPolicy):
//   kFile: each worker reads a subset of the files of the pipeline's file source (files i with
//          i % num_workers == index); an InvalidArgument when there are fewer files than workers or
//          no file source can be found.
//   kData: each worker reads everything and keeps every num_workers-th element (a shard() at the end
//          of the pipeline, before a trailing prefetch).
//   kAuto: kFile when the pipeline has a file source with at least num_workers files, else kData.
//   kOff:  the dataset unchanged.
// Thread-safety: pure function on immutable datasets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "strata/data/dataset.h"
#include "strata/data/options.h"

namespace strata::data {

// "OFF", "AUTO", "FILE", "DATA" (case-insensitive) -> policy; InvalidArgument otherwise.
AutoShardPolicy parse_auto_shard_policy(const std::string& name);
const char* auto_shard_policy_name(AutoShardPolicy policy);

Dataset auto_shard(const Dataset& dataset, int64_t num_workers, int64_t worker_index,
                   AutoShardPolicy policy = AutoShardPolicy::kAuto);

// The building blocks of sharding across workers (strata/distribute/input.h):
// Whether the pipeline has a file source and every one has at least num_workers files (AUTO picks FILE then);
// else why not, in words, in *problem.
bool can_shard_files(const Dataset& dataset, int64_t num_workers, std::string* problem = nullptr);
// The dataset with every file source reading only files i with i % num_workers == worker_index; InvalidArgument
// naming the reason when can_shard_files is false or a stage cannot be rebuilt.
Dataset shard_files(const Dataset& dataset, int64_t num_workers, int64_t worker_index);
// The dataset with its last batching stage (batch or padded_batch, followed only by stages that keep elements
// whole: map, filter, shuffle, prefetch, cache, repeat, take, skip, shard, enumerate) making batches of
// `batch_size` instead; InvalidArgument when the pipeline does not end in one.
Dataset rebatch(const Dataset& dataset, int64_t batch_size);
// That stage's batch size, or nullopt when the pipeline does not end in one.
std::optional<int64_t> final_batch_size(const Dataset& dataset);

}  // namespace strata::data
