// `strata data convert` (IDX -> TFRecord shards of tf.train.Example, each renamed into place once complete),
// `strata data ctr` (a synthetic click-through-rate data set of Zipf-distributed hashed ids, strata/data/ctr.h) and
// `strata data inspect` (record counts, features, compression and corrupt records of TFRecord files; it fails on a
// file with a corrupt record or with no record at all, the mark of a conversion cut short).
// Thread-safety: run from main's thread only.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "strata/data/ctr.h"
#include "strata/data/dataset.h"
#include "strata/data/example.h"
#include "strata/data/tfrecord.h"
#include "strata/data/tfrecord_shards.h"
#include "strata/error.h"

namespace strata::cli {
namespace {

using data::Compression;

struct ConvertArgs {
  std::vector<std::string> from;  // {format, directory}
  std::vector<std::string> to;    // {format, directory}
  int64_t shards = 1;
  std::string compression = "none";
  int compression_level = data::image_shard_writer(Compression::kGzip).compression_level;
  std::string compression_strategy =
      data::compression_strategy_name(data::image_shard_writer(Compression::kGzip).compression_strategy);
  std::string split = "all";
};

void run_convert(const ConvertArgs& a) {
  STRATA_CHECK(a.from.size() == 2 && a.from[0] == "idx", InvalidArgument,
               "data convert: --from wants `idx DIR` (the only input format), got '" << a.from[0] << "'");
  STRATA_CHECK(a.to.size() == 2 && a.to[0] == "tfrecord", InvalidArgument,
               "data convert: --to wants `tfrecord OUTDIR` (the only output format), got '" << a.to[0] << "'");
  STRATA_CHECK(a.shards >= 1, InvalidArgument, "data convert: --shards must be >= 1, got " << a.shards);
  data::IdxShardOptions options{.shards = a.shards,
                                .writer = data::image_shard_writer(data::parse_compression(a.compression))};
  options.writer.compression_level = a.compression_level;
  options.writer.compression_strategy = data::parse_compression_strategy(a.compression_strategy);
  std::vector<std::pair<std::string, data::Split>> splits;
  if (a.split == "all" || a.split == "train") splits.emplace_back("train", data::Split::kTrain);
  if (a.split == "all" || a.split == "test") splits.emplace_back("test", data::Split::kTest);
  STRATA_CHECK(!splits.empty(), InvalidArgument, "data convert: --split must be train, test or all, got " << a.split);

  for (const auto& [split_name, split] : splits) {
    const auto written = data::write_idx_shards(a.from[1], split, a.to[1], options);
    std::cout << "wrote " << written.records << " " << split_name << " records to " << a.shards << " shard"
              << (a.shards == 1 ? "" : "s") << " " << written.paths.front() << (a.shards > 1 ? " ..." : "") << " ("
              << data::compression_name(options.writer.compression) << ")\n";
  }
}

// ---- ctr

struct CtrArgs {
  std::string output;
  int64_t examples = 100000;
  int64_t test_examples = -1;  // -1: examples / 10 (at least 1)
  int64_t shards = 1;
  data::CtrOptions options;
  std::string compression = "none";
};

void run_ctr(const CtrArgs& a) {
  STRATA_CHECK(a.examples >= 1, InvalidArgument, "data ctr: --examples must be >= 1, got " << a.examples);
  const int64_t test_examples = a.test_examples < 0 ? std::max<int64_t>(1, a.examples / 10) : a.test_examples;
  STRATA_CHECK(test_examples >= 1, InvalidArgument, "data ctr: --test-examples must be >= 1, got " << test_examples);
  STRATA_CHECK(a.shards >= 1 && a.shards <= a.examples, InvalidArgument,
               "data ctr: --shards must be in [1, --examples = " << a.examples << "], got " << a.shards);
  STRATA_CHECK(a.compression == "none" || a.compression == "gzip", InvalidArgument,
               "data ctr: --compression must be none or gzip, got '" << a.compression << "'");
  data::CtrShardOptions shard_options{.shards = a.shards,
                                      .writer = {.compression = data::parse_compression(a.compression)}};
  STRATA_CHECK(a.options.features >= 1, InvalidArgument,
               "data ctr: --features must be >= 1, got " << a.options.features);
  STRATA_CHECK(a.options.vocab >= 1, InvalidArgument, "data ctr: --vocab must be >= 1, got " << a.options.vocab);
  STRATA_CHECK(std::isfinite(a.options.zipf) && a.options.zipf > 0, InvalidArgument,
               "data ctr: --zipf must be a finite number > 0, got " << a.options.zipf);
  for (const data::CtrSplit split : {data::CtrSplit::kTrain, data::CtrSplit::kTest}) {
    const int64_t n = split == data::CtrSplit::kTrain ? a.examples : test_examples;
    data::CtrShardOptions o = shard_options;
    o.shards = std::min(o.shards, n);
    const data::CtrWritten written = data::write_ctr_shards(a.output, split, n, a.options, o);
    std::printf("wrote %lld %s records (%lld ids each in [0, %lld), clicks %.1f%%) to %lld shard%s %s%s (%s)\n",
                static_cast<long long>(written.records), data::ctr_split_name(split),
                static_cast<long long>(a.options.features), static_cast<long long>(a.options.vocab),
                100.0 * static_cast<double>(written.clicks) / static_cast<double>(written.records),
                static_cast<long long>(o.shards), o.shards == 1 ? "" : "s", written.paths.front().c_str(),
                o.shards > 1 ? " ..." : "", data::compression_name(o.writer.compression));
  }
  std::fflush(stdout);
}

// ---- inspect

struct FeatureStats {
  data::FeatureType type = data::FeatureType::kInt64;
  bool mixed_types = false;
  int64_t records = 0;  // records holding the feature
  size_t min_values = SIZE_MAX, max_values = 0;
  size_t min_bytes = SIZE_MAX, max_bytes = 0;  // length of each bytes value
};

std::string range_str(size_t lo, size_t hi) {
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi);
}

struct InspectArgs {
  std::vector<std::string> files;
  std::string compression = "auto";
};

// Returns true when the file had a corrupt record or held no record.
bool inspect_file(const std::string& path, const std::string& compression_flag, std::ostream& out) {
  const Compression c =
      compression_flag == "auto" ? data::detect_compression(path) : data::parse_compression(compression_flag);
  out << path << "\n  compression: " << data::compression_name(c) << (compression_flag == "auto" ? " (detected)" : "")
      << "\n";
  data::TFRecordReader reader(path, {.compression = c, .skip_corrupt = true});
  std::map<std::string, FeatureStats> features;
  int64_t records = 0, not_examples = 0;
  std::string_view record;
  std::string stream_error;
  try {
    while (reader.read(&record)) {
      ++records;
      data::Example ex;
      try {
        ex = data::Example::parse(record);
      } catch (const DataCorrupt&) {
        ++not_examples;
        continue;
      }
      for (const auto& [name, f] : ex.features()) {
        FeatureStats& s = features[name];
        if (s.records > 0 && s.type != f.type) s.mixed_types = true;
        s.type = f.type;
        ++s.records;
        s.min_values = std::min(s.min_values, f.size());
        s.max_values = std::max(s.max_values, f.size());
        for (const auto& b : f.bytes) {
          s.min_bytes = std::min(s.min_bytes, b.size());
          s.max_bytes = std::max(s.max_bytes, b.size());
        }
      }
    }
  } catch (const DataCorrupt& e) {  // a damaged compressed stream cannot be read past
    stream_error = e.what();
  }
  out << "  records: " << records << "\n";
  // A file of no records among shards is almost always a conversion cut short; it is an error here
  // (the datasets only warn, once per file).
  const bool empty = records == 0;
  if (empty) out << "  error: the file holds no record (a conversion cut short?)\n";
  if (not_examples) out << "  records that are not tf.train.Example: " << not_examples << "\n";
  if (!features.empty()) out << "  features:\n";
  for (const auto& [name, s] : features) {
    out << "    " << name << ": " << (s.mixed_types ? "mixed types" : data::feature_type_name(s.type)) << " ["
        << range_str(s.min_values, s.max_values) << "]";
    if (s.type == data::FeatureType::kBytes && s.max_bytes > 0)
      out << ", " << range_str(s.min_bytes, s.max_bytes) << " bytes each";
    if (s.records != records - not_examples)
      out << ", in " << s.records << " of " << records - not_examples << " records";
    out << "\n";
  }
  const bool corrupt = reader.corrupt_records() > 0 || !stream_error.empty();
  if (reader.corrupt_records() > 0)
    out << "  corrupt records: " << reader.corrupt_records() << " (first: " << reader.first_corruption() << ")\n";
  if (!stream_error.empty()) out << "  corrupt stream: " << stream_error << "\n";
  if (!corrupt) out << "  corrupt records: 0\n";
  return corrupt || empty;
}

}  // namespace

void add_data_commands(CLI::App& app) {
  CLI::App* data_cmd = app.add_subcommand("data", "Convert and inspect data files (TFRecord, IDX).");
  data_cmd->require_subcommand(1);

  auto convert_args = std::make_shared<ConvertArgs>();
  CLI::App* convert = data_cmd->add_subcommand(
      "convert",
      "Convert a data set to TFRecord shards of tf.train.Example. From IDX (MNIST / Fashion-MNIST): each record "
      "holds `image` (bytes: rows*cols raw uint8, row-major) and `label` (int64); shards are named "
      "<split>-NNNNN-of-MMMMM.tfrecord[.gz], with split train and test. Each shard is written as "
      "<name>.tmp-<pid>-<n> and renamed to its name once complete and synced, so a failed or interrupted "
      "conversion leaves no truncated shard.");
  convert
      ->add_option("--from", convert_args->from, "FORMAT DIR: the input, e.g. `idx /usr/share/datasets/fashion-mnist`")
      ->expected(2)
      ->required();
  convert->add_option("--to", convert_args->to, "FORMAT OUTDIR: the output, e.g. `tfrecord out/`")
      ->expected(2)
      ->required();
  convert->add_option("--shards", convert_args->shards, "Files per split (records are cut into contiguous runs)")
      ->capture_default_str();
  convert->add_option("--compression", convert_args->compression, "none, gzip or zlib")->capture_default_str();
  convert
      ->add_option("--compression-level", convert_args->compression_level,
                   "zlib level 0..9 for gzip/zlib (9: the smallest files; a higher level does not slow reading)")
      ->capture_default_str();
  convert
      ->add_option("--compression-strategy", convert_args->compression_strategy,
                   "zlib strategy: default, filtered (libpng's for images: inflates ~10% faster on Fashion-MNIST), "
                   "huffman_only, rle or fixed")
      ->capture_default_str();
  convert->add_option("--split", convert_args->split, "train, test or all")->capture_default_str();
  convert->callback([convert_args] { run_convert(*convert_args); });

  auto ctr_args = std::make_shared<CtrArgs>();
  CLI::App* ctr = data_cmd->add_subcommand(
      "ctr",
      "Write a synthetic click-through-rate data set as TFRecord shards of tf.train.Example: each record holds `ids` "
      "(int64 list of --features hashed categorical ids in [0, --vocab), each field's ids Zipf-distributed, as DLRM's "
      "random-data mode) and `label` (int64 click, 0 or 1, from a hidden logistic model of the ids, so it can be "
      "learned). Shards train-NNNNN-of-MMMMM.tfrecord[.gz] and test-..., each renamed into place once complete. The "
      "same --seed gives the same records whatever --shards says. Train it with configs/ctr_embedding.yaml.");
  ctr->add_option("--output", ctr_args->output, "OUTDIR: where the shards go (created when missing)")->required();
  ctr->add_option("--examples", ctr_args->examples, "Training examples")->capture_default_str();
  ctr->add_option("--test-examples", ctr_args->test_examples, "Test examples (default: --examples / 10)");
  ctr->add_option("--shards", ctr_args->shards, "Files per split (records cut into contiguous runs)")
      ->capture_default_str();
  ctr->add_option("--features", ctr_args->options.features, "Categorical ids per example (feature fields)")
      ->capture_default_str();
  ctr->add_option("--vocab", ctr_args->options.vocab, "Ids lie in [0, vocab): the embedding table's rows")
      ->capture_default_str();
  ctr->add_option("--zipf", ctr_args->options.zipf, "Zipf exponent of each field's id ranks (> 0)")
      ->capture_default_str();
  ctr->add_option("--seed", ctr_args->options.seed, "Seed of the ids, the hidden model and the labels")
      ->capture_default_str();
  ctr->add_option("--compression", ctr_args->compression, "none or gzip")->capture_default_str();
  ctr->callback([ctr_args] { run_ctr(*ctr_args); });

  auto inspect_args = std::make_shared<InspectArgs>();
  CLI::App* inspect = data_cmd->add_subcommand(
      "inspect",
      "Print each TFRecord file's compression, record count, features (type, [values per record], bytes per value) "
      "and corrupt records. Exits with status 1 when a file has a corrupt record or holds no record at all (a "
      "0-record shard is almost always a conversion cut short).");
  inspect->add_option("files", inspect_args->files, "TFRecord files")->required();
  inspect
      ->add_option("--compression", inspect_args->compression, "auto (detect from the first bytes), none, gzip, zlib")
      ->capture_default_str();
  inspect->callback([inspect_args] {
    bool bad = false;
    for (const auto& f : inspect_args->files) bad = inspect_file(f, inspect_args->compression, std::cout) || bad;
    std::cout.flush();
    if (bad) throw CLI::RuntimeError(1);
  });
}

}  // namespace strata::cli
