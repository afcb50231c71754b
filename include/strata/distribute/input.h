// Distributed input: global batches split across replicas (tf.distribute's DistributedDataset).
//
//   auto dist = strategy.experimental_distribute_dataset(train.batch(global_batch));
//   auto it = dist.make_iterator();
//   while (auto batch = it.next()) strategy.run(step, *batch);     // batch: PerReplica<data::Element>
//
// experimental_distribute_dataset: each element of the dataset is a global batch; every component is
// split along its first axis into num_replicas_in_sync contiguous parts of ceil(rows / N) rows, the last
// ones smaller, so an uneven last batch gives some replicas fewer rows, possibly none (an empty batch with
// the same trailing shape). Across workers every worker reads the same global batches and keeps its
// replicas' parts (TensorFlow's AutoShardPolicy.DATA). distribute_datasets_from_function: the function builds the per-replica
// pipeline from an InputContext (its batch size is already per replica); replica r takes the r-th
// element of each group of N, and when the data runs out mid-group the remaining replicas get empty
// batches shaped like the last one.
//
// Thread-safety: an iterator is used by one thread (the one driving the strategy).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "strata/data/dataset.h"
#include "strata/distribute/values.h"

namespace strata::distribute {

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

class DistributedIterator {
 public:
  // The next global batch, one element per replica; nullopt at the end.
  std::optional<PerReplica<data::Element>> next();
  // Rows of the last global batch next() gave (the sum over replicas).
  int64_t last_global_batch_size() const { return last_rows_; }

 private:
  friend class DistributedDataset;
  DistributedIterator(data::Iterator it, int replicas, bool split, int parts, int first)
      : it_(std::move(it)), replicas_(replicas), split_(split), parts_(parts), first_(first) {}
  data::Iterator it_;
  int replicas_;
  bool split_;
  int parts_, first_;
  int64_t last_rows_ = 0;
};

class DistributedDataset {
 public:
  // `num_replicas`: this process's replicas. With split_global_batches, each global batch is split over
  // `split_parts` replicas in sync (0: num_replicas) and this process keeps parts [first_part, first_part +
  // num_replicas): its workers' share, every worker reading the same global batches.
  DistributedDataset(data::Dataset dataset, int num_replicas, bool split_global_batches, int split_parts = 0,
                     int first_part = 0)
      : dataset_(std::move(dataset)),
        replicas_(num_replicas),
        split_(split_global_batches),
        parts_(split_parts > 0 ? split_parts : num_replicas),
        first_(first_part) {}
  DistributedIterator make_iterator() const {
    return DistributedIterator(dataset_.make_iterator(), replicas_, split_, parts_, first_);
  }
  int num_replicas() const { return replicas_; }
  // The dataset underneath (global batches, or per-replica batches from the function).
  const data::Dataset& dataset() const { return dataset_; }

 private:
  data::Dataset dataset_;
  int replicas_;
  bool split_;
  int parts_, first_;
};

}  // namespace strata::distribute
