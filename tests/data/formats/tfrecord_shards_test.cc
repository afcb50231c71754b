// write_idx_shards: shard names and contiguous runs of records, and shards published only once
// complete: a conversion that fails part-way (a write past a file-size cap, as on a full disk) leaves
// the shards finished before it intact, no file under a later shard's name and no temporary file; a
// successful one leaves exactly the shards.
#include "strata/data/tfrecord_shards.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/dataset_test_util.h"
#include "strata/data/idx.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::data {
namespace {

using test::file_bytes;
using test::file_names;

class TFRecordShardsTest : public test::ScratchDirTest {
 protected:
  TFRecordShardsTest() : ScratchDirTest("strata_tfrecord_shards_") {}
  void SetUp() override {
    ScratchDirTest::SetUp();
    // 3 train images of 28x28 pixels (2 shards: 1 record, then 2).
    std::filesystem::create_directories(dir_ / "idx");
    Tensor images = Tensor::empty({3, 28, 28}, DType::kUInt8);
    Tensor labels = Tensor::empty({3}, DType::kUInt8);
    for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7919 >> 5);
    for (int64_t i = 0; i < 3; ++i) labels.data<uint8_t>()[i] = static_cast<uint8_t>(i);
    write_idx(path("idx/train-images-idx3-ubyte"), images);
    write_idx(path("idx/train-labels-idx1-ubyte"), labels);
  }
  std::vector<std::string> shard_names(Compression c) const {
    return {shard_file_name("train", 0, 2, c), shard_file_name("train", 1, 2, c)};
  }
};

int64_t count_records(const std::string& path, Compression c) {
  TFRecordReader r(path, {.compression = c});
  std::string record;
  int64_t n = 0;
  while (r.read(&record)) ++n;
  return n;
}

TEST_F(TFRecordShardsTest, ASuccessfulConversionLeavesExactlyTheShards) {
  for (Compression c : {Compression::kNone, Compression::kGzip}) {
    SCOPED_TRACE(compression_name(c));
    const std::string out = path(std::string("out-") + compression_name(c));
    const auto written = write_idx_shards(path("idx"), Split::kTrain, out, {.shards = 2, .writer = image_shard_writer(c)});
    EXPECT_EQ(written.records, 3);
    ASSERT_EQ(written.paths.size(), 2u);
    EXPECT_EQ(file_names(out), shard_names(c));  // no temporary file left
    EXPECT_EQ(count_records(written.paths[0], c), 1);
    EXPECT_EQ(count_records(written.paths[1], c), 2);
  }
}

TEST_F(TFRecordShardsTest, AConversionThatFailsPartWayLeavesNoTruncatedShard) {
  for (Compression c : {Compression::kNone, Compression::kGzip}) {
    SCOPED_TRACE(compression_name(c));
    const auto names = shard_names(c);
    const std::string good = path(std::string("good-") + compression_name(c));
    write_idx_shards(path("idx"), Split::kTrain, good, {.shards = 2, .writer = image_shard_writer(c)});
    const uintmax_t first = std::filesystem::file_size(good + "/" + names[0]);
    const uintmax_t second = std::filesystem::file_size(good + "/" + names[1]);
    ASSERT_LT(first, second);
    // Files may grow to a size between the two shards': the first is written whole, the second fails.
    const std::string out = path(std::string("cut-") + compression_name(c));
    std::filesystem::create_directories(out);
    std::string error;
    try {
      test::FileSizeLimit cap((first + second) / 2);
      write_idx_shards(path("idx"), Split::kTrain, out, {.shards = 2, .writer = image_shard_writer(c)});
    } catch (const IoError& e) {
      error = e.what();
    }
    EXPECT_NE(error.find(names[1]), std::string::npos) << error;
    // The shard finished before the failure is complete; the one that failed is not there at all.
    EXPECT_EQ(file_names(out), std::vector<std::string>{names[0]});
    EXPECT_EQ(file_bytes(out + "/" + names[0]), file_bytes(good + "/" + names[0]));
  }
}

}  // namespace
}  // namespace strata::data
