// Variable partitioners (strata/ps/partitioner.h), with TensorFlow's formulas.
// Thread-safety: immutable objects and pure functions.
#include "strata/ps/partitioner.h"

#include <algorithm>
#include <cmath>

#include "strata/error.h"

namespace strata::ps {

namespace {
// The variable's rows (axis 0) and its bytes, after checking the shape is one a partitioner can split.
int64_t checked_rows(const char* who, const Shape& shape) {
  STRATA_CHECK(!shape.empty(), InvalidArgument, who << ": a scalar variable cannot be partitioned (it has no axis 0)");
  for (int64_t d : shape) {
    STRATA_CHECK(d >= 1, InvalidArgument, who << ": cannot partition a variable of shape " << shape_str(shape)
                                              << " (every dimension must be at least 1)");
  }
  return shape[0];
}
}  // namespace

Partitioner::~Partitioner() = default;

std::vector<int64_t> Partitioner::partitions(const Shape& shape, DType dtype) const {
  std::vector<int64_t> out(shape.size(), 1);
  const int64_t n = num_shards(shape, dtype);
  out[0] = n;
  return out;
}

FixedShardsPartitioner::FixedShardsPartitioner(int64_t num_shards) : num_shards_(num_shards) {
  STRATA_CHECK(num_shards_ >= 1, InvalidArgument,
               "FixedShardsPartitioner: num_shards must be at least 1, got " << num_shards_);
}

int64_t FixedShardsPartitioner::num_shards(const Shape& shape, DType) const {
  return std::min(num_shards_, checked_rows("FixedShardsPartitioner", shape));
}

MinSizePartitioner::MinSizePartitioner(Options options) : options_(options) {
  STRATA_CHECK(options_.min_shard_bytes >= 1, InvalidArgument,
               "MinSizePartitioner: min_shard_bytes must be at least 1, got " << options_.min_shard_bytes);
  STRATA_CHECK(options_.max_shards >= 1, InvalidArgument,
               "MinSizePartitioner: max_shards must be at least 1, got " << options_.max_shards);
}

int64_t MinSizePartitioner::num_shards(const Shape& shape, DType dtype) const {
  const int64_t rows = checked_rows("MinSizePartitioner", shape);
  const double bytes = static_cast<double>(shape_numel(shape)) * static_cast<double>(dtype_size(dtype));
  const auto wanted = static_cast<int64_t>(std::ceil(bytes / static_cast<double>(options_.min_shard_bytes)));
  return std::max<int64_t>(1, std::min({rows, options_.max_shards, wanted}));
}

MaxSizePartitioner::MaxSizePartitioner(Options options) : options_(options) {
  STRATA_CHECK(options_.max_shard_bytes >= 1, InvalidArgument,
               "MaxSizePartitioner: max_shard_bytes must be at least 1, got " << options_.max_shard_bytes);
  STRATA_CHECK(!options_.max_shards || *options_.max_shards >= 1, InvalidArgument,
               "MaxSizePartitioner: max_shards must be at least 1, got " << *options_.max_shards);
}

int64_t MaxSizePartitioner::num_shards(const Shape& shape, DType dtype) const {
  const int64_t rows = checked_rows("MaxSizePartitioner", shape);
  const double bytes_per_row =
      static_cast<double>(shape_numel(shape)) / static_cast<double>(rows) * static_cast<double>(dtype_size(dtype));
  const double rows_per_shard = std::max(1.0, std::floor(static_cast<double>(options_.max_shard_bytes) / bytes_per_row));
  int64_t shards = static_cast<int64_t>(std::ceil(static_cast<double>(rows) / rows_per_shard));
  if (options_.max_shards) shards = std::min(shards, *options_.max_shards);
  return shards;
}

std::vector<int64_t> shard_rows(int64_t rows, int64_t num_shards) {
  STRATA_CHECK(num_shards >= 1 && num_shards <= rows, InvalidArgument,
               "shard_rows: " << rows << " rows cannot be split into " << num_shards << " shards");
  std::vector<int64_t> out(static_cast<size_t>(num_shards), rows / num_shards);
  for (int64_t i = 0; i < rows % num_shards; ++i) ++out[static_cast<size_t>(i)];
  return out;
}

int64_t shard_task(int64_t shard, int64_t num_ps) {
  STRATA_CHECK(num_ps >= 1 && shard >= 0, InvalidArgument,
               "shard_task: shard " << shard << " of " << num_ps << " ps tasks");
  return shard % num_ps;
}

}  // namespace strata::ps
