// The synthetic CTR data set (strata/data/ctr.h): Zipf ranks by rejection-inversion (Hörmann & Derflinger, "Rejection-
// inversion to generate variates from monotone discrete distributions", 1996, as Apache Commons RNG's
// RejectionInversionZipfSampler writes it), hashed per field to ids, labels from a hidden logistic model.
// Thread-safety: CtrGenerator is immutable; every draw comes from a counter-based Generator of its own.
#include "strata/data/ctr.h"

#include <cmath>

#include "strata/data/example.h"
#include "strata/error.h"
#include "strata/random.h"

namespace strata::data {

namespace {
// splitmix64's finaliser: a bijective mix of 64 bits.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from two 32-bit words (53 bits).
double unit(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32 | lo) >> 11)) * 0x1.0p-53;
}

// log1p(x) / x and expm1(x) / x, continued smoothly through 0.
double helper1(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x)); }
double helper2(double x) {
  return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x));
}

// Examples of a split draw from the seed's streams 2i (train) and 2i + 1 (test); the hidden weights from another key.
constexpr uint64_t kWeightKey = 0x5eedc7a11ab1e5ull;
// The hidden model's logit has this standard deviation over random ids, whatever the number of features: labels are
// neither coin flips nor a function of the ids.
constexpr double kLogitStddev = 2.5;
}  // namespace

const char* ctr_split_name(CtrSplit split) { return split == CtrSplit::kTrain ? "train" : "test"; }

CtrGenerator::CtrGenerator(CtrOptions options) : options_(options) {
  STRATA_CHECK(options_.features >= 1, InvalidArgument, "ctr: features must be >= 1, got " << options_.features);
  STRATA_CHECK(options_.vocab >= 1, InvalidArgument, "ctr: vocab must be >= 1, got " << options_.vocab);
  STRATA_CHECK(std::isfinite(options_.zipf) && options_.zipf > 0, InvalidArgument,
               "ctr: zipf (the exponent) must be a finite number > 0, got " << options_.zipf);
  h_integral_x1_ = h_integral(1.5) - 1;
  h_integral_n_ = h_integral(static_cast<double>(options_.vocab) + 0.5);
  s_ = 2 - h_integral_inverse(h_integral(2.5) - h(2));
  // The sum of `features` weights uniform in [-1, 1) has variance features / 3.
  logit_scale_ = kLogitStddev / std::sqrt(static_cast<double>(options_.features) / 3);
}

// The integral of h from 1 to x: (x^(1-a) - 1) / (1 - a), or log(x) when a = 1.
double CtrGenerator::h_integral(double x) const {
  const double log_x = std::log(x);
  return helper2((1 - options_.zipf) * log_x) * log_x;
}

double CtrGenerator::h(double x) const { return std::exp(-options_.zipf * std::log(x)); }

double CtrGenerator::h_integral_inverse(double x) const {
  double t = x * (1 - options_.zipf);
  if (t < -1) t = -1;  // rounding can push it just below its bound
  return std::exp(helper1(t) * x);
}

int64_t CtrGenerator::zipf_rank(double u01) const {
  const double u = h_integral_n_ + u01 * (h_integral_x1_ - h_integral_n_);
  const double x = h_integral_inverse(u);
  int64_t k = static_cast<int64_t>(x + 0.5);
  if (k < 1) k = 1;
  if (k > options_.vocab) k = options_.vocab;
  const double kd = static_cast<double>(k);
  return (kd - x <= s_ || u >= h_integral(kd + 0.5) - h(kd)) ? k : 0;
}

double CtrGenerator::weight(int64_t id) const {
  Generator g(options_.seed ^ kWeightKey, static_cast<uint64_t>(id));
  const auto b = g.next_block();
  return 2 * unit(b[0], b[1]) - 1;
}

int64_t CtrGenerator::example(CtrSplit split, int64_t index, int64_t* ids) const {
  Generator g(options_.seed, 2 * static_cast<uint64_t>(index) + (split == CtrSplit::kTest ? 1 : 0));
  double logit = 0;
  for (int64_t f = 0; f < options_.features; ++f) {
    int64_t rank = 0;
    while (rank == 0) {  // rejection: about 1 draw in 1.x is accepted whatever the exponent
      const auto b = g.next_block();
      rank = zipf_rank(unit(b[0], b[1]));
      if (rank == 0) rank = zipf_rank(unit(b[2], b[3]));
    }
    const uint64_t key = mix(mix(options_.seed ^ (static_cast<uint64_t>(f) << 40)) ^ static_cast<uint64_t>(rank));
    ids[f] = static_cast<int64_t>(key % static_cast<uint64_t>(options_.vocab));
    logit += weight(ids[f]);
  }
  logit *= logit_scale_;
  const auto b = g.next_block();
  return unit(b[0], b[1]) < 1 / (1 + std::exp(-logit)) ? 1 : 0;
}

CtrWritten write_ctr_shards(const std::string& out_dir, CtrSplit split, int64_t examples, const CtrOptions& options,
                            const CtrShardOptions& shard_options) {
  STRATA_CHECK(examples >= 1, InvalidArgument, "ctr: examples must be >= 1, got " << examples);
  STRATA_CHECK(shard_options.shards >= 1 && shard_options.shards <= examples, InvalidArgument,
               "ctr: shards must be in [1, examples = " << examples << "], got " << shard_options.shards);
  const CtrGenerator gen(options);
  std::vector<int64_t> ids(static_cast<size_t>(options.features));
  CtrWritten out;
  static_cast<WrittenShards&>(out) = write_record_shards(out_dir, ctr_split_name(split), examples, shard_options.shards,
                                                         shard_options.writer, [&](int64_t i) {
                                                           const int64_t label = gen.example(split, i, ids.data());
                                                           out.clicks += label;
                                                           Example ex;
                                                           ex.set_int64s("ids", ids).set_int64s("label", {label});
                                                           return ex.serialize();
                                                         });
  return out;
}

}  // namespace strata::data
