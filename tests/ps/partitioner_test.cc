// The parameter-server partitioners against TensorFlow's documented cases (tf.distribute.experimental.partitioners
// docstrings), its "div" split and round-robin placement, and the errors on bad arguments.
#include <gtest/gtest.h>

#include "strata/error.h"
#include "strata/ps/partitioner.h"

namespace strata::ps {
namespace {

using V = std::vector<int64_t>;

TEST(PartitionerTest, FixedShardsAsTensorFlowDocumentsIt) {
  EXPECT_EQ(FixedShardsPartitioner(2).partitions({10, 3}, DType::kFloat32), (V{2, 1}));
  EXPECT_EQ(FixedShardsPartitioner(8).partitions({3, 4, 5}, DType::kFloat32), (V{3, 1, 1}));  // no more than rows
  EXPECT_EQ(FixedShardsPartitioner(5).num_shards({13}, DType::kInt64), 5);
}

TEST(PartitionerTest, MinSizeAsTensorFlowDocumentsIt) {
  EXPECT_EQ(MinSizePartitioner({.min_shard_bytes = 4, .max_shards = 2}).partitions({6, 1}, DType::kFloat32),
            (V{2, 1}));
  EXPECT_EQ(MinSizePartitioner({.min_shard_bytes = 4, .max_shards = 10}).partitions({6, 1}, DType::kFloat32),
            (V{6, 1}));
  // The defaults (256 KiB, one shard) keep a variable whole; a 1M x 32 float table over 256 KiB wants 489 shards.
  EXPECT_EQ(MinSizePartitioner().num_shards({1000000, 32}, DType::kFloat32), 1);
  EXPECT_EQ(MinSizePartitioner({.max_shards = 1000}).num_shards({1000000, 32}, DType::kFloat32), 489);
  EXPECT_EQ(MinSizePartitioner({.min_shard_bytes = 1 << 30, .max_shards = 4}).num_shards({10, 10}, DType::kFloat32), 1);
}

TEST(PartitionerTest, MaxSizeAsTensorFlowDocumentsIt) {
  EXPECT_EQ(MaxSizePartitioner({.max_shard_bytes = 4}).partitions({6, 1}, DType::kFloat32), (V{6, 1}));
  EXPECT_EQ(MaxSizePartitioner({.max_shard_bytes = 4, .max_shards = 2}).partitions({6, 1}, DType::kFloat32), (V{2, 1}));
  EXPECT_EQ(MaxSizePartitioner({.max_shard_bytes = 1024}).partitions({6, 1}, DType::kFloat32), (V{1, 1}));
  // A row larger than max_shard_bytes is a shard of its own.
  EXPECT_EQ(MaxSizePartitioner({.max_shard_bytes = 8}).num_shards({5, 100}, DType::kFloat32), 5);
  // bfloat16 rows are half the bytes: twice as many rows fit.
  EXPECT_EQ(MaxSizePartitioner({.max_shard_bytes = 64}).num_shards({16, 8}, DType::kFloat32), 8);
  EXPECT_EQ(MaxSizePartitioner({.max_shard_bytes = 64}).num_shards({16, 8}, DType::kBFloat16), 4);
}

TEST(PartitionerTest, DivSplitAndRoundRobinPlacement) {
  EXPECT_EQ(shard_rows(13, 5), (V{3, 3, 3, 2, 2}));
  EXPECT_EQ(shard_rows(12, 4), (V{3, 3, 3, 3}));
  EXPECT_EQ(shard_rows(7, 1), (V{7}));
  EXPECT_EQ(shard_task(0, 2), 0);
  EXPECT_EQ(shard_task(3, 2), 1);
  EXPECT_EQ(shard_task(4, 3), 1);
}

TEST(PartitionerTest, BadArgumentsAreClearErrors) {
  EXPECT_THROW(FixedShardsPartitioner(0), InvalidArgument);
  EXPECT_THROW(MinSizePartitioner({.min_shard_bytes = 0}), InvalidArgument);
  EXPECT_THROW(MinSizePartitioner({.max_shards = 0}), InvalidArgument);
  EXPECT_THROW(MaxSizePartitioner({}), InvalidArgument);  // max_shard_bytes is required
  EXPECT_THROW(MaxSizePartitioner({.max_shard_bytes = 4, .max_shards = 0}), InvalidArgument);
  try {
    FixedShardsPartitioner(2).num_shards({}, DType::kFloat32);
    ADD_FAILURE() << "a scalar was partitioned";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("scalar"), std::string::npos) << e.what();
  }
  EXPECT_THROW(FixedShardsPartitioner(2).num_shards({0, 3}, DType::kFloat32), InvalidArgument);
  EXPECT_THROW(shard_rows(3, 4), InvalidArgument);
  EXPECT_THROW(shard_rows(3, 0), InvalidArgument);
  EXPECT_THROW(shard_task(1, 0), InvalidArgument);
}

}  // namespace
}  // namespace strata::ps
