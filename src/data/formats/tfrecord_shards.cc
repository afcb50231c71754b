// IDX split -> TFRecord shards of tf.train.Example (see strata/data/tfrecord_shards.h), each written
// under a temporary name and renamed into place once complete. Thread-safety: no shared state.
#include "strata/data/tfrecord_shards.h"

#include <filesystem>
#include <iomanip>
#include <sstream>

#include "strata/data/example.h"
#include "strata/error.h"

namespace strata::data {

namespace fs = std::filesystem;

TFRecordWriterOptions image_shard_writer(Compression compression) {
  return {.compression = compression,
          .compression_level = 9,
          .mem_level = 9,
          .compression_strategy = CompressionStrategy::kFiltered};
}

std::string shard_file_name(const std::string& split_name, int64_t shard, int64_t shards, Compression compression) {
  std::ostringstream s;
  s << split_name << "-" << std::setw(5) << std::setfill('0') << shard << "-of-" << std::setw(5) << shards
    << ".tfrecord"
    << (compression == Compression::kGzip   ? ".gz"
        : compression == Compression::kZlib ? ".zz"
                                            : "");
  return s.str();
}

WrittenShards write_record_shards(const std::string& out_dir, const std::string& split_name, int64_t records,
                                  int64_t shards, const TFRecordWriterOptions& writer,
                                  const std::function<std::string(int64_t)>& record) {
  STRATA_CHECK(shards >= 1, InvalidArgument, "shards must be >= 1, got " << shards);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  STRATA_CHECK(!ec, IoError, "cannot create " << out_dir << ": " << ec.message());
  TFRecordWriterOptions atomic = writer;
  atomic.atomic = true;  // a shard is under its name only once it is complete
  WrittenShards out;
  for (int64_t s = 0; s < shards; ++s) {
    const int64_t end = records * (s + 1) / shards;
    out.paths.push_back((fs::path(out_dir) / shard_file_name(split_name, s, shards, writer.compression)).string());
    TFRecordWriter w(out.paths.back(), atomic);
    for (; out.records < end; ++out.records) w.write(record(out.records));
    w.close();
  }
  return out;
}

WrittenShards write_idx_shards(const std::string& idx_dir, Split split, const std::string& out_dir,
                               const IdxShardOptions& options) {
  STRATA_CHECK(options.shards >= 1, InvalidArgument, "shards must be >= 1, got " << options.shards);
  // The whole split is in memory already (IDX files are read at once); count it, then cut it into
  // contiguous shards so record order is preserved across shard files.
  const Dataset ds = Dataset::from_idx(idx_dir, split);
  const int64_t total = ds.cardinality();
  STRATA_CHECK(total >= 0, Error, "unknown record count for " << idx_dir);
  const std::string split_name = split == Split::kTrain ? "train" : "test";
  auto it = ds.make_iterator();
  return write_record_shards(out_dir, split_name, total, options.shards, options.writer, [&](int64_t written) {
    auto e = it.next();
    STRATA_CHECK(e, DataCorrupt, idx_dir << " ended after " << written << " " << split_name << " records");
    const Tensor& image = (*e)["image"];
    Example ex;
    ex.set_bytes("image", std::string_view(static_cast<const char*>(image.raw_data()), image.nbytes()))
        .set_int64s("label", {(*e)["label"].item<int64_t>()});
    return ex.serialize();
  });
}

}  // namespace strata::data
