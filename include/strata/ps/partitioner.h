// Variable partitioners for the parameter-server strategy (tf.distribute.experimental.partitioners): how many
// shards a variable is split into along its first axis, how many rows each shard holds, and which `ps` task holds
// each shard.
//
//   ps::MinSizePartitioner partitioner({.min_shard_bytes = 256 << 10, .max_shards = 2});
//   int64_t n = partitioner.num_shards({1000000, 32}, DType::kFloat32);   // 2
//   std::vector<int64_t> rows = ps::shard_rows(1000000, n);              // {500000, 500000}
//   int64_t task = ps::shard_task(1, 2);                                 // shard 1 on ps:1
//
// As TensorFlow: the first axis only, its "div" split (13 rows over 5 shards: 3, 3, 3, 2, 2), and the shards placed
// round-robin over the `ps` tasks. The formulas are TensorFlow's (FixedShardsPartitioner; MinSizePartitioner =
// min_max_variable_partitioner; MaxSizePartitioner = variable_axis_size_partitioner). strata has no string
// tensors, so TensorFlow's bytes_per_string has nothing to apply to and is left out.
// Thread-safety: partitioners are immutable; every function is pure.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "strata/dtype.h"
#include "strata/shape.h"

namespace strata::ps {

class Partitioner {
 public:
  virtual ~Partitioner();
  // Shards along axis 0 for a variable of `shape` (rank >= 1, every dimension >= 1) and `dtype`: at least 1, at
  // most shape[0]. InvalidArgument for a scalar or an empty shape.
  virtual int64_t num_shards(const Shape& shape, DType dtype) const = 0;
  // TensorFlow's return value: num_shards at axis 0, 1 on every other axis.
  std::vector<int64_t> partitions(const Shape& shape, DType dtype) const;
};

// Exactly `num_shards` shards (fewer when the variable has fewer rows).
class FixedShardsPartitioner final : public Partitioner {
 public:
  explicit FixedShardsPartitioner(int64_t num_shards);
  int64_t num_shards(const Shape& shape, DType dtype) const override;

 private:
  int64_t num_shards_;
};

// As many shards as keep each at least `min_shard_bytes` (ceil(bytes / min_shard_bytes)), at most `max_shards`.
class MinSizePartitioner final : public Partitioner {
 public:
  struct Options {
    int64_t min_shard_bytes = 256 << 10;
    int64_t max_shards = 1;
  };
  explicit MinSizePartitioner(Options options);
  MinSizePartitioner() : MinSizePartitioner(Options{}) {}
  int64_t num_shards(const Shape& shape, DType dtype) const override;

 private:
  Options options_;
};

// As few shards as keep each at most `max_shard_bytes` (whole rows: a row larger than that is a shard of its
// own), at most `max_shards` when given.
class MaxSizePartitioner final : public Partitioner {
 public:
  struct Options {
    int64_t max_shard_bytes = 0;  // required, >= 1
    std::optional<int64_t> max_shards;
  };
  explicit MaxSizePartitioner(Options options);
  int64_t num_shards(const Shape& shape, DType dtype) const override;

 private:
  Options options_;
};

// The rows of each of `num_shards` shards of `rows` rows (TensorFlow's "div" split: the first rows % num_shards
// shards hold one row more). REQUIRES 1 <= num_shards <= rows, else InvalidArgument.
std::vector<int64_t> shard_rows(int64_t rows, int64_t num_shards);
// The `ps` task that holds shard `shard` when there are `num_ps` of them (round-robin).
int64_t shard_task(int64_t shard, int64_t num_ps);

}  // namespace strata::ps
