// Distributed input: splitting global batches across replicas, and per-replica pipelines.
// Thread-safety: see strata/distribute/input.h (one thread per iterator).
#include "strata/distribute/input.h"

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

std::optional<PerReplica<data::Element>> DistributedIterator::next() {
  if (split_) {
    std::optional<data::Element> batch = it_.next();
    if (!batch) return std::nullopt;
    last_rows_ = batch_rows(*batch);
    return split_batch_share(*batch, parts_, first_, replicas_);
  }
  std::vector<data::Element> per_replica;
  per_replica.reserve(static_cast<size_t>(replicas_));
  last_rows_ = 0;
  for (int r = 0; r < replicas_; ++r) {
    std::optional<data::Element> e = it_.next();
    if (!e) break;
    last_rows_ += batch_rows(*e);
    per_replica.push_back(std::move(*e));
  }
  if (per_replica.empty()) return std::nullopt;
  while (static_cast<int>(per_replica.size()) < replicas_) {  // the data ran out mid-group: empty batches
    const data::Element& last = per_replica.back();
    std::vector<Tensor> components;
    for (const Tensor& t : last.components()) components.push_back(t.rank() >= 1 ? t.slice(0, 0) : t);
    per_replica.emplace_back(std::move(components), last.shared_names());
  }
  return PerReplica<data::Element>(std::move(per_replica));
}

}  // namespace strata::distribute
