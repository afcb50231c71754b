// Distributed input: splitting global batches across replicas and workers, per-replica pipelines, and the
// workers' agreement on the steps when each reads its own batches. A distributed iterator hands each replica its
// batch on the replica's device (a GPU's copy under OneDeviceStrategy("/gpu:N")).
// Thread-safety: see strata/distribute/input.h (one thread per iterator).
#include "strata/distribute/input.h"

#include <algorithm>

#include "strata/data/autoshard.h"
#include "strata/distribute/strategy.h"
#include "strata/distribute/training_program.h"

namespace strata::distribute {

int64_t InputContext::get_per_replica_batch_size(int64_t global_batch_size) const {
  STRATA_CHECK(num_replicas_in_sync > 0 && global_batch_size % num_replicas_in_sync == 0, InvalidArgument,
               "InputContext: the global batch size " << global_batch_size << " is not divisible by the "
                                                      << num_replicas_in_sync << " replicas in sync");
  return global_batch_size / num_replicas_in_sync;
}

int64_t batch_rows(const data::Element& batch) {
  if (batch.empty() || batch[0].rank() == 0) return 0;
  return batch[0].dim(0);
}

PerReplica<data::Element> split_batch(const data::Element& batch, int parts) {
  STRATA_CHECK(parts >= 1, InvalidArgument, "split_batch: parts must be >= 1, got " << parts);
  if (parts == 1) return PerReplica<data::Element>({batch});
  const int64_t rows = batch_rows(batch);
  for (size_t c = 0; c < batch.size(); ++c) {
    STRATA_CHECK(batch[c].rank() >= 1 && batch[c].dim(0) == rows, ShapeError,
                 "distributing a batch: component " << c << " is " << batch[c].shape_str()
                                                    << "; every component needs the batch's " << rows
                                                    << " rows on its first axis");
  }
  const int64_t per_replica = (rows + parts - 1) / parts;
  std::vector<data::Element> out;
  out.reserve(static_cast<size_t>(parts));
  for (int r = 0; r < parts; ++r) {
    const int64_t begin = std::min(rows, r * per_replica), end = std::min(rows, begin + per_replica);
    std::vector<Tensor> components;
    components.reserve(batch.size());
    for (const Tensor& t : batch.components()) components.push_back(t.slice(begin, end));
    out.emplace_back(std::move(components), batch.shared_names());
  }
  return PerReplica<data::Element>(std::move(out));
}

PerReplica<data::Element> split_batch_share(const data::Element& batch, int parts, int first, int count) {
  STRATA_CHECK(first >= 0 && count >= 1 && first + count <= parts, InvalidArgument,
               "split_batch_share: parts [" << first << ", " << first + count << ") of " << parts);
  if (count == parts) return split_batch(batch, parts);
  const PerReplica<data::Element> all = split_batch(batch, parts);
  std::vector<data::Element> mine(all.values().begin() + first, all.values().begin() + first + count);
  return PerReplica<data::Element>(std::move(mine));
}

int64_t share_rows(int64_t global_rows, int parts, int first, int count) {
  const int64_t per_part = (global_rows + parts - 1) / parts;
  int64_t rows = 0;
  for (int p = first; p < first + count; ++p) rows += std::clamp<int64_t>(global_rows - p * per_part, 0, per_part);
  return rows;
}

namespace {
// A batch of no rows shaped like `like` (every component sliced to 0 rows), or one empty float32 column when no
// batch was ever read: what a replica without data runs (the model skips it and contributes zero gradients).
data::Element empty_batch_like(const std::optional<data::Element>& like) {
  if (!like) return data::Element({Tensor::empty({0}, DType::kFloat32)});
  std::vector<Tensor> components;
  for (const Tensor& t : like->components()) components.push_back(t.rank() >= 1 ? t.slice(0, 0) : t);
  return data::Element(std::move(components), like->shared_names());
}

// FILE or OFF for this pipeline across `workers`, or kData when AUTO finds no files to split or no batch() to
// rebatch; FILE and OFF given explicitly throw instead.
data::AutoShardPolicy resolve_policy(const data::Dataset& dataset, int workers) {
  const data::AutoShardPolicy policy = dataset.options().auto_shard_policy;
  if (policy != data::AutoShardPolicy::kAuto) return policy;
  return data::can_shard_files(dataset, workers) && data::final_batch_size(dataset) ? data::AutoShardPolicy::kFile
                                                                                     : data::AutoShardPolicy::kData;
}
}  // namespace

WorkerInput::WorkerInput(const Strategy& strategy, const data::Dataset& global_batches)
    : strategy_(&strategy), dataset_(global_batches) {
  const int workers = strategy.num_workers(), worker = strategy.worker_index(), local = strategy.num_local_replicas();
  if (workers == 1) return;
  const data::AutoShardPolicy policy = resolve_policy(global_batches, workers);
  if (policy == data::AutoShardPolicy::kData) return;
  const bool automatic = global_batches.options().auto_shard_policy == data::AutoShardPolicy::kAuto;
  const char* name = data::auto_shard_policy_name(policy);
  try {
    const std::optional<int64_t> global = data::final_batch_size(global_batches);
    STRATA_CHECK(global.has_value(), InvalidArgument,
                 name << " auto-shard policy across " << workers
                      << " workers: the pipeline does not end in batch() or padded_batch() (only stages that keep "
                         "elements whole, such as map, shuffle or prefetch, may follow it), so its global batches "
                         "cannot be split into each worker's share; batch the dataset last, or use the DATA policy");
    const int64_t rows = share_rows(*global, strategy.num_replicas_in_sync(), worker * local, local);
    STRATA_CHECK(rows >= 1, InvalidArgument,
                 name << " auto-shard policy: the global batch of " << *global << " rows is split over "
                      << strategy.num_replicas_in_sync() << " replicas in sync, which leaves worker " << worker
                      << " none; use a global batch of at least that many rows");
    const data::Dataset mine =
        policy == data::AutoShardPolicy::kFile ? data::shard_files(global_batches, workers, worker) : global_batches;
    dataset_ = data::rebatch(mine, rows);
    policy_ = policy;
  } catch (const InvalidArgument&) {
    if (!automatic) throw;
    dataset_ = global_batches;  // AUTO falls back to DATA when a stage cannot be rewritten
  }
}

StepGroup WorkerInput::group(std::vector<data::Element> batches, int64_t want) {
  const int local = strategy_->num_local_replicas();
  StepGroup g;
  if (!own_batches()) {  // every worker read the same global batches: no need to ask the others
    const int parts = strategy_->num_replicas_in_sync(), first = strategy_->worker_index() * local;
    for (const data::Element& b : batches) {
      g.global_rows.push_back(batch_rows(b));
      g.batches.push_back(split_batch_share(b, parts, first, local));
      g.global.push_back(b);
    }
    return g;
  }
  if (!batches.empty()) last_ = batches.back();
  std::vector<double> rows(static_cast<size_t>(want), 0.0);
  for (size_t k = 0; k < batches.size() && k < rows.size(); ++k) rows[k] = static_cast<double>(batch_rows(batches[k]));
  const std::vector<double> global = strategy_->sum_across_workers(rows);
  for (size_t k = 0; k < global.size() && global[k] > 0; ++k) {
    g.global_rows.push_back(static_cast<int64_t>(global[k]));
    g.batches.push_back(split_batch(k < batches.size() ? batches[k] : empty_batch_like(last_), local));
  }
  return g;
}

DistributedDataset::DistributedDataset(const Strategy& strategy, const data::Dataset& global_batches)
    : strategy_(&strategy),
      input_(WorkerInput(strategy, global_batches)),
      dataset_(input_->dataset()),
      replicas_(strategy.num_local_replicas()) {}

DistributedDataset::DistributedDataset(const Strategy& strategy, const data::Dataset& per_replica_batches,
                                       int num_replicas)
    : strategy_(&strategy), dataset_(per_replica_batches), replicas_(num_replicas) {}

DistributedIterator DistributedDataset::make_iterator() const {
  return DistributedIterator(strategy_, input_, replicas_, dataset_.make_iterator());
}

namespace {
// Each replica's element on its device.
PerReplica<data::Element> on_replica_devices(const Strategy& strategy, const PerReplica<data::Element>& batches) {
  std::vector<data::Element> placed;
  placed.reserve(batches.values().size());
  for (size_t r = 0; r < batches.values().size(); ++r)
    placed.push_back(batch_on_device(batches.values()[r], strategy.replica_device(static_cast<int>(r))));
  return PerReplica<data::Element>(std::move(placed));
}
}  // namespace

std::optional<PerReplica<data::Element>> DistributedIterator::next() {
  std::optional<PerReplica<data::Element>> batches = next_on_host();
  if (!batches || strategy_->replica_device(0).is_cpu()) return batches;
  return on_replica_devices(*strategy_, *batches);
}

std::optional<PerReplica<data::Element>> DistributedIterator::next_on_host() {
  if (input_) {
    std::vector<data::Element> batch;
    if (std::optional<data::Element> e = it_.next()) batch.push_back(std::move(*e));
    StepGroup g = input_->group(std::move(batch), 1);
    if (g.size() == 0) return std::nullopt;
    last_rows_ = g.global_rows[0];
    return std::move(g.batches[0]);
  }
  std::vector<data::Element> per_replica;
  per_replica.reserve(static_cast<size_t>(replicas_));
  int64_t rows = 0;
  for (int r = 0; r < replicas_; ++r) {
    std::optional<data::Element> e = it_.next();
    if (!e) break;
    rows += batch_rows(*e);
    per_replica.push_back(std::move(*e));
  }
  if (!per_replica.empty()) last_ = per_replica.back();
  last_rows_ = rows;
  if (strategy_->num_workers() > 1) {  // each worker's pipeline may end at another step: go on while any has data
    const std::vector<double> sums =
        strategy_->sum_across_workers({static_cast<double>(rows), per_replica.empty() ? 0.0 : 1.0});
    if (sums[1] == 0) return std::nullopt;
    last_rows_ = static_cast<int64_t>(sums[0]);
  } else if (per_replica.empty()) {
    return std::nullopt;
  }
  while (static_cast<int>(per_replica.size()) < replicas_) per_replica.push_back(empty_batch_like(last_));
  return PerReplica<data::Element>(std::move(per_replica));
}

}  // namespace strata::distribute
