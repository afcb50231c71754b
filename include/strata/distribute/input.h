// Distributed input: global batches split across replicas and workers (tf.distribute's DistributedDataset).
//
//   auto dist = strategy.experimental_distribute_dataset(train.batch(global_batch));
//   auto it = dist.make_iterator();
//   while (auto batch = it.next()) strategy.run(step, *batch);     // batch: PerReplica<data::Element>
//
// experimental_distribute_dataset: each element of the dataset is a global batch; every component is split
// along its first axis into num_replicas_in_sync contiguous parts of ceil(rows / N) rows, the last ones smaller,
// so an uneven last batch gives some replicas fewer rows, possibly none (an empty batch with the same trailing
// shape). distribute_datasets_from_function: the function builds the per-replica pipeline from an InputContext
// (its batch size is already per replica); replica r takes the r-th element of each group of N, and when the data
// runs out mid-group the remaining replicas get empty batches shaped like the last one.
//
// Across workers (WorkerInput), the dataset's AutoShardPolicy (data::Options, set with Dataset::with_options)
// says how each worker reads it, as in TensorFlow:
//   DATA: every worker reads every global batch and keeps its replicas' parts, so N workers compute exactly what
//         one process with the same global batch would;
//   FILE: each worker reads its own files (data::shard_files) and its batches hold its share of the global
//         batch (the pipeline's last batch() is rebatched), so no worker reads another's data;
//   OFF:  every worker reads the whole dataset, rebatched to its share (each example is seen N times an epoch);
//   AUTO (the default): FILE when the pipeline has a file source with at least as many files as workers, else
//         DATA.
// When workers read their own batches (FILE, OFF, and per-replica pipelines from a function), shards of unequal
// size never deadlock: at every group of steps the workers exchange how many rows each has, the group has the
// steps any worker still has a batch for, and a worker whose shard has ended takes part with empty batches
// (zero gradients), so all workers make the same number of steps and every example is trained on once; the loss
// is averaged over the rows of the global batch the workers have together (a short last global batch is
// averaged as it is on one machine).
//
// Thread-safety: an iterator and a WorkerInput are used by one thread (the one driving the strategy).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "strata/data/dataset.h"
#include "strata/distribute/values.h"

namespace strata::distribute {

class Strategy;

// What distribute_datasets_from_function's function is told (tf.distribute.InputContext).
struct InputContext {
  int num_input_pipelines = 1;  // pipelines across all workers (one per worker)
  int input_pipeline_id = 0;    // this worker's pipeline
  int num_replicas_in_sync = 1;
  // global / num_replicas_in_sync; InvalidArgument when it does not divide evenly.
  int64_t get_per_replica_batch_size(int64_t global_batch_size) const;
};

// Splits every component of `batch` along axis 0 into `parts` contiguous pieces of ceil(rows / parts)
// rows (the last ones smaller or empty). Views: no copies.
PerReplica<data::Element> split_batch(const data::Element& batch, int parts);
// Rows of an element's first component (0 for an empty element or a scalar component).
int64_t batch_rows(const data::Element& batch);
// Parts [first, first + count) of split_batch(batch, parts): one worker's replicas' share of a global batch.
PerReplica<data::Element> split_batch_share(const data::Element& batch, int parts, int first, int count);

// The steps of one group, as this process's replicas run them.
struct StepGroup {
  std::vector<PerReplica<data::Element>> batches;  // per step: one batch per local replica
  std::vector<int64_t> global_rows;                // per step: rows of the global batch (all workers together)
  // Per step, the global batch itself when every worker read it (DATA; empty when each read its own): an elastic
  // group splits it again over its members after a regroup.
  std::vector<data::Element> global;
  size_t size() const { return batches.size(); }
};

// How this worker reads a dataset of global batches, for `strategy` (with one worker: the dataset as it is, each
// global batch split over the local replicas).
class WorkerInput {
 public:
  WorkerInput(const Strategy& strategy, const data::Dataset& global_batches);
  // What this worker iterates: the global batches (DATA), or its own share of them (FILE, OFF).
  const data::Dataset& dataset() const { return dataset_; }
  // The policy as applied: kData, kFile or kOff (kData with one worker).
  data::AutoShardPolicy policy() const { return policy_; }
  // Whether each worker reads its own batches (FILE, OFF): then the workers agree on the steps at every group.
  bool own_batches() const { return policy_ != data::AutoShardPolicy::kData; }
  // One group of steps from the batches this worker read for it (fewer than `want` when its input ended). With
  // own batches it is a collective: every worker calls it at the same point with the same `want`, and the group
  // has the steps any worker has a batch for. Empty when no worker has one.
  // A worker without a batch for a step takes empty batches shaped like the last one it read.
  StepGroup group(std::vector<data::Element> batches, int64_t want);

 private:
  const Strategy* strategy_;
  data::Dataset dataset_;
  data::AutoShardPolicy policy_ = data::AutoShardPolicy::kData;
  std::optional<data::Element> last_;  // the last batch read: the shape of empty batches
};

// Rows of this worker's share of a global batch of `global_rows` split into `parts` replicas' parts of
// ceil(rows / parts) rows, of which it holds [first, first + count).
int64_t share_rows(int64_t global_rows, int parts, int first, int count);

class DistributedIterator {
 public:
  // The next global batch, one element per replica, each on its replica's device (a GPU: a copy there); nullopt at
  // the end (every worker's).
  std::optional<PerReplica<data::Element>> next();
  // Rows of the last global batch next() gave (the sum over replicas and workers).
  int64_t last_global_batch_size() const { return last_rows_; }

 private:
  friend class DistributedDataset;
  // next() before the copies to the replicas' devices.
  std::optional<PerReplica<data::Element>> next_on_host();
  DistributedIterator(const Strategy* strategy, std::optional<WorkerInput> input, int replicas, data::Iterator it)
      : strategy_(strategy), input_(std::move(input)), replicas_(replicas), it_(std::move(it)) {}
  const Strategy* strategy_;
  std::optional<WorkerInput> input_;  // none: per-replica elements (distribute_datasets_from_function)
  int replicas_;
  data::Iterator it_;
  std::optional<data::Element> last_;  // the last element read, the shape of empty batches
  int64_t last_rows_ = 0;
};

class DistributedDataset {
 public:
  // Global batches, read as WorkerInput says.
  DistributedDataset(const Strategy& strategy, const data::Dataset& global_batches);
  // Per-replica batches, one element per local replica in turn (distribute_datasets_from_function).
  DistributedDataset(const Strategy& strategy, const data::Dataset& per_replica_batches, int num_replicas);
  DistributedIterator make_iterator() const;
  int num_replicas() const { return replicas_; }
  // What this worker iterates (its share of the global batches, or the per-replica batches).
  const data::Dataset& dataset() const { return dataset_; }

 private:
  const Strategy* strategy_;
  std::optional<WorkerInput> input_;
  data::Dataset dataset_;
  int replicas_;
};

}  // namespace strata::distribute
