// Writing an IDX image split (Fashion-MNIST, MNIST) as TFRecord shards of tf.train.Example, the
// schema `strata data convert` documents: `image` (bytes, the rows*cols uint8 pixels) and `label`
// (int64). Records are cut into contiguous runs, so reading the shards in order gives the IDX order.
// Each shard is written atomically (TFRecordWriterOptions::atomic): under "<name>.tmp-<pid>-<n>" in the
// output directory, fsync'ed and renamed to its final name only once complete, so a conversion that
// fails or is interrupted never leaves a truncated file under a shard's name (an interrupted process
// may leave a "*.tmp-*" file, which no shard pattern matches).
//
//   auto written = data::write_idx_shards("/usr/share/datasets/fashion-mnist", data::Split::kTrain, "out/",
//                                       {.shards = 4, .writer = data::image_shard_writer(data::Compression::kGzip)});
//
// Thread-safety: pure functions of their arguments (each call writes its own files).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/data/dataset.h"  // Split
#include "strata/data/tfrecord.h"

namespace strata::data {

// What `strata data convert` writes with by default: zlib level 9 with the kFiltered strategy, as
// libpng compresses image rows. On Fashion-MNIST the shards come out the size of level 6's and
// inflate about 10% faster (fewer short matches to decode).
TFRecordWriterOptions image_shard_writer(Compression compression);

struct IdxShardOptions {
  int64_t shards = 1;
  TFRecordWriterOptions writer = image_shard_writer(Compression::kNone);
};

// "<split>-00003-of-00010.tfrecord[.gz|.zz]"
std::string shard_file_name(const std::string& split_name, int64_t shard, int64_t shards, Compression compression);

struct WrittenShards {
  std::vector<std::string> paths;  // in record order
  int64_t records = 0;
};

// Writes `records` records, record(i) for i = 0, 1, ... in order, into `shards` files in `out_dir` (created when
// missing) named by shard_file_name(split_name, ...), cut into contiguous runs, each written atomically whatever
// writer.atomic says. InvalidArgument for shards < 1; IoError when a file cannot be written; an error of `record`
// passes through. The shards finished before an error are in place, the one being written is not.
WrittenShards write_record_shards(const std::string& out_dir, const std::string& split_name, int64_t records,
                                  int64_t shards, const TFRecordWriterOptions& writer,
                                  const std::function<std::string(int64_t)>& record);

// Writes `split` of the IDX files in `idx_dir` into options.shards files in `out_dir` (created when
// missing) named by shard_file_name with "train" or "test", each atomically whatever options.writer.atomic
// says. Throws InvalidArgument for shards < 1, IoError when a file cannot be written, DataCorrupt when the
// IDX files end early; the shards finished before the error are in place, the one being written is not.
WrittenShards write_idx_shards(const std::string& idx_dir, Split split, const std::string& out_dir,
                               const IdxShardOptions& options);

}  // namespace strata::data
