// A synthetic click-through-rate (CTR) data set, the workload of a model whose weights are mostly one large
// embedding table: each example holds `features` hashed categorical ids in [0, vocab) and a click label, written
// as tf.train.Example (`ids`: int64 list of `features` values; `label`: int64 0 or 1) by `strata data ctr`.
//
//   data::CtrOptions o{.features = 8, .vocab = 1000000, .zipf = 1.05, .seed = 1};
//   data::CtrGenerator gen(o);
//   std::vector<int64_t> ids(o.features);
//   int64_t click = gen.example(data::CtrSplit::kTrain, 17, ids.data());
//   auto written = data::write_ctr_shards("out/", data::CtrSplit::kTrain, 100000, o, {.shards = 4});
//
// Ids, as in DLRM's random-data mode with a Zipf trace: each feature field f draws a rank k in [1, vocab] from a
// Zipf distribution of exponent `zipf` (P(k) ~ k^-zipf; rejection-inversion sampling, Hörmann & Derflinger 1996),
// then hashes (f, k) to an id in [0, vocab), so every field has its own hot ids (the fields share the table and may
// collide, as with the hashing trick). Labels come from a hidden model: every id has a fixed weight w(id) uniform in
// [-1, 1) (from the seed), and an example clicks with probability sigmoid(c * sum_f w(id_f)), c = 2.5 / sqrt(features
// / 3) (the logit's standard deviation over uniform ids is 2.5 whatever the feature count), so the task is learnable
// (frequent ids can be learned; the click rate is near 50%, moved by the weights of each field's hottest ids). Every
// example is a pure function of (seed, split, index): the same seed gives the same files whatever the shard count.
// Thread-safety: a CtrGenerator is immutable (example() is const); write_ctr_shards writes its own files.
#pragma once

#include <cstdint>
#include <string>

#include "strata/data/tfrecord_shards.h"

namespace strata::data {

struct CtrOptions {
  int64_t features = 26;    // ids per example (Criteo's 26 categorical fields)
  int64_t vocab = 1000000;  // the table's rows: ids lie in [0, vocab)
  double zipf = 1.05;       // the Zipf exponent of each field's ranks (> 0)
  uint64_t seed = 0;
};

enum class CtrSplit { kTrain, kTest };
// "train" / "test".
const char* ctr_split_name(CtrSplit split);

class CtrGenerator {
 public:
  // InvalidArgument naming the option for features < 1, vocab < 1 or zipf not finite and > 0.
  explicit CtrGenerator(CtrOptions options);
  // Example `index` of `split`: writes its options().features ids to `ids`, returns its label (0 or 1).
  int64_t example(CtrSplit split, int64_t index, int64_t* ids) const;
  // The hidden weight of id `id` (uniform in [-1, 1)).
  double weight(int64_t id) const;
  const CtrOptions& options() const { return options_; }

 private:
  // A Zipf rank in [1, vocab] from a uniform u in [0, 1) and a second one for the acceptance test; 0 when rejected.
  int64_t zipf_rank(double u) const;
  double h_integral(double x) const;
  double h(double x) const;
  double h_integral_inverse(double x) const;

  CtrOptions options_;
  double h_integral_x1_, h_integral_n_, s_;  // the Zipf sampler's constants
  double logit_scale_;                       // c above
};

struct CtrShardOptions {
  int64_t shards = 1;
  TFRecordWriterOptions writer = {};
};

struct CtrWritten : WrittenShards {
  int64_t clicks = 0;  // examples labelled 1
};

// Writes examples 0..examples-1 of `split` into options.shards files of `out_dir` (created when missing) named by
// shard_file_name, contiguous runs in order, each written atomically (renamed into place once complete). Features:
// "ids" (int64, options.features values) and "label" (int64). InvalidArgument for examples < 1 or shards outside
// [1, examples]; IoError when a file cannot be written.
CtrWritten write_ctr_shards(const std::string& out_dir, CtrSplit split, int64_t examples, const CtrOptions& options,
                            const CtrShardOptions& shard_options);

}  // namespace strata::data
