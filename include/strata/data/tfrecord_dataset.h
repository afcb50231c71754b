// TFRecordDataset (tf.data.TFRecordDataset) and make_example_dataset, which reads TFRecord files of
// tf.train.Example and parses them in the same stage (no serialized-string elements in between).
//
//   auto train = data::make_example_dataset(shards, data::fashion_mnist_example_spec(),
//                                           {.compression = data::Compression::kGzip, .num_parallel_reads = 2})
//                    .map(to_float).shuffle(10000).batch(64);
//   // elements: {"image": uint8 [28, 28, 1], "label": int64 []}
//
// num_parallel_reads > 1 reads that many files at once, each on its own thread (reading, inflating
// and parsing), and hands out their records in a fixed round-robin order (tf.data's parallel
// interleave with block_length 1, deterministic): slot k reads files k, k + n, ... in turn, a slot
// whose file ends takes the next unread file. Iterator state is the file and offset of every slot.
// Both datasets expose their files to auto-sharding (FILE policy).
//
// A file that holds no record (read from its start to its end without one, and without a corrupt one)
// is reported on stderr, once per file per dataset (not per epoch), since a 0-record shard among
// shards is almost always a conversion cut short and would otherwise silently drop its share of data:
//   strata: warning: TFRecord shard 'out/train-00001-of-00004.tfrecord' holds no record (a file of 0 bytes)
//
// Thread-safety: the Datasets follow Dataset's rules; corrupt_records counters are atomic; the files
// reported as empty are a set under a mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/data/dataset.h"
#include "strata/data/example.h"
#include "strata/data/tfrecord.h"

namespace strata::data {

struct TFRecordDatasetOptions {
  Compression compression = Compression::kNone;
  size_t buffer_size = 256 << 10;
  // Files read at once (kAutotune: one per core); 1 reads them one after another on the caller's thread.
  int64_t num_parallel_reads = 1;
  // Skip corrupt records (bad CRC, truncation) instead of raising DataCorrupt; each one skipped is
  // added to `corrupt_records` when set, and the first of each file is reported on stderr.
  bool skip_corrupt = false;
  std::shared_ptr<std::atomic<int64_t>> corrupt_records = nullptr;
};

// Elements: one component, the record's bytes as a rank-1 uint8 tensor (tensor_string() reads it).
Dataset TFRecordDataset(std::vector<std::string> files, TFRecordDatasetOptions options = {});

// Elements named by the spec's features (in key order): FixedLen float/int64 -> float32/int64 tensors
// of the spec's shape; VarLen -> 1-D; decode_raw bytes -> the decoded tensor; a scalar bytes feature ->
// a rank-1 uint8 string tensor. Other bytes features (several values) are InvalidArgument here.
// Errors in a record name the feature, the file, the record number and its byte offset.
Dataset make_example_dataset(std::vector<std::string> files, ExampleSpec spec, TFRecordDatasetOptions options = {});

// The schema `strata data convert --from idx` writes: image = bytes (28*28 raw uint8, row-major),
// decoded to uint8 [28, 28, 1]; label = int64 scalar.
ExampleSpec fashion_mnist_example_spec(int64_t rows = 28, int64_t cols = 28);

// A FeatureSpec from names, for config files: type "bytes" | "float" | "int64"; `decode_raw` a dtype
// name ("uint8", "float32", "int32", "int64") or "" for none; `var_len` for VarLenFeature.
FeatureSpec make_feature_spec(std::string_view type, Shape shape = {}, std::string_view decode_raw = "",
                              bool var_len = false);

}  // namespace strata::data
