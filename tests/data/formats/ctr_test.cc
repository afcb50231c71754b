// The synthetic CTR data set (strata/data/ctr.h): each field's ids follow the Zipf law asked for, the labels follow
// the hidden model (so they can be learned), every example is a function of the seed alone (whatever the shard
// count), and bad options are clear errors.
#include "strata/data/ctr.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "strata/data/example.h"
#include "strata/data/tfrecord.h"
#include "strata/error.h"
#include "test_util.h"

namespace strata::data {
namespace {

namespace fs = std::filesystem;

// P(rank k) of a Zipf law of exponent a over [1, n].
double zipf_p(int64_t k, double a, int64_t n) {
  double norm = 0;
  for (int64_t i = 1; i <= n; ++i) norm += std::pow(static_cast<double>(i), -a);
  return std::pow(static_cast<double>(k), -a) / norm;
}

TEST(CtrTest, EachFieldsIdsFollowTheZipfLawAndFieldsHaveTheirOwnHotIds) {
  const CtrOptions o{.features = 2, .vocab = 1000000, .zipf = 1.05, .seed = 3};
  const CtrGenerator gen(o);
  constexpr int64_t kDraws = 200000;
  std::map<int64_t, int64_t> counts[2];
  int64_t ids[2];
  for (int64_t i = 0; i < kDraws; ++i) {
    gen.example(CtrSplit::kTrain, i, ids);
    for (int f = 0; f < 2; ++f) {
      ASSERT_GE(ids[f], 0);
      ASSERT_LT(ids[f], o.vocab);
      ++counts[f][ids[f]];
    }
  }
  for (int f = 0; f < 2; ++f) {
    std::vector<int64_t> top;
    for (const auto& [id, n] : counts[f]) top.push_back(n);
    std::sort(top.rbegin(), top.rend());
    // The k-th most frequent id is rank k (hash collisions among a million ids add about 1e-6).
    for (int64_t k = 1; k <= 3; ++k) {
      const double p = zipf_p(k, o.zipf, o.vocab);
      const double sigma = std::sqrt(p * (1 - p) / kDraws);
      EXPECT_NEAR(static_cast<double>(top[static_cast<size_t>(k - 1)]) / kDraws, p, 5 * sigma) << "field " << f;
    }
  }
  const auto hottest = [](const std::map<int64_t, int64_t>& c) {
    return std::max_element(c.begin(), c.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  };
  EXPECT_NE(hottest(counts[0]), hottest(counts[1]));
}

TEST(CtrTest, LabelsFollowTheHiddenModelSoTheyCanBeLearned) {
  const CtrOptions o{.features = 8, .vocab = 1000, .zipf = 1.05, .seed = 5};
  const CtrGenerator gen(o);
  constexpr int64_t kExamples = 20000;
  int64_t clicks = 0, bayes_right = 0;
  std::vector<int64_t> ids(8);
  for (int64_t i = 0; i < kExamples; ++i) {
    const int64_t label = gen.example(CtrSplit::kTest, i, ids.data());
    ASSERT_TRUE(label == 0 || label == 1);
    double logit = 0;
    for (int64_t id : ids) logit += gen.weight(id);
    clicks += label;
    bayes_right += (logit > 0) == (label == 1);
  }
  const double base = static_cast<double>(clicks) / kExamples;
  EXPECT_GT(base, 0.3);
  EXPECT_LT(base, 0.7);
  // The hidden model itself predicts the labels far above the base rate.
  EXPECT_GT(static_cast<double>(bayes_right) / kExamples, std::max(base, 1 - base) + 0.15);
  for (int64_t id = 0; id < 100; ++id) {
    EXPECT_GE(gen.weight(id), -1);
    EXPECT_LT(gen.weight(id), 1);
  }
}

TEST(CtrTest, ExamplesAreAFunctionOfTheSeedSplitAndIndex) {
  const CtrOptions o{.features = 4, .vocab = 500, .seed = 9};
  const CtrGenerator a(o), b(o);
  CtrOptions other = o;
  other.seed = 10;
  const CtrGenerator c(other);
  int64_t x[4], y[4], z[4];
  int differ_seed = 0, differ_split = 0;
  for (int64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(a.example(CtrSplit::kTrain, i, x), b.example(CtrSplit::kTrain, i, y));
    EXPECT_TRUE(std::equal(x, x + 4, y));
    c.example(CtrSplit::kTrain, i, z);
    differ_seed += !std::equal(x, x + 4, z);
    a.example(CtrSplit::kTest, i, z);
    differ_split += !std::equal(x, x + 4, z);
  }
  EXPECT_GT(differ_seed, 40);
  EXPECT_GT(differ_split, 40);
}

struct Dir {
  fs::path path = fs::temp_directory_path() / ("strata_ctr_test_" + std::to_string(::getpid()));
  Dir() { fs::remove_all(path); }
  ~Dir() { fs::remove_all(path); }
};

std::vector<std::string> records_of(const std::vector<std::string>& paths, Compression c) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    TFRecordReader r(p, {.compression = c});
    std::string record;
    while (r.read(&record)) out.push_back(record);
  }
  return out;
}

TEST(CtrTest, ShardsHoldTheSameRecordsWhateverTheirCountAndParseAsExamples) {
  Dir dir;
  const CtrOptions o{.features = 3, .vocab = 100, .seed = 1};
  const CtrWritten one = write_ctr_shards((dir.path / "one").string(), CtrSplit::kTrain, 25, o, {.shards = 1});
  const CtrWritten three = write_ctr_shards((dir.path / "three").string(), CtrSplit::kTrain, 25, o,
                                            {.shards = 3, .writer = {.compression = Compression::kGzip}});
  ASSERT_EQ(one.paths.size(), 1u);
  ASSERT_EQ(three.paths.size(), 3u);
  EXPECT_EQ(fs::path(three.paths[2]).filename(), "train-00002-of-00003.tfrecord.gz");
  EXPECT_EQ(one.records, 25);
  EXPECT_EQ(one.clicks, three.clicks);
  const std::vector<std::string> a = records_of(one.paths, Compression::kNone);
  EXPECT_EQ(a, records_of(three.paths, Compression::kGzip));
  ASSERT_EQ(a.size(), 25u);
  const CtrGenerator gen(o);
  ExampleParser parser(
      {{"ids", FixedLenFeature(FeatureType::kInt64, {3})}, {"label", FixedLenFeature(FeatureType::kInt64)}});
  int64_t clicks = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto parsed = parser.parse(a[i]);
    std::vector<int64_t> ids(3);
    const int64_t label = gen.example(CtrSplit::kTrain, static_cast<int64_t>(i), ids.data());
    EXPECT_EQ(parsed.at("ids").values.to_vector<int64_t>(), ids);
    EXPECT_EQ(parsed.at("label").values.item<int64_t>(), label);
    clicks += label;
  }
  EXPECT_EQ(clicks, one.clicks);
  for (const auto& entry : fs::directory_iterator(dir.path / "three")) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
  }
}

TEST(CtrTest, BadOptionsAreClearErrors) {
  EXPECT_NE(test::message_of<InvalidArgument>([] { CtrGenerator({.features = 0}); }).find("features"),
            std::string::npos);
  EXPECT_NE(test::message_of<InvalidArgument>([] { CtrGenerator({.vocab = 0}); }).find("vocab"), std::string::npos);
  EXPECT_NE(test::message_of<InvalidArgument>([] { CtrGenerator({.zipf = 0}); }).find("zipf"), std::string::npos);
  EXPECT_NE(test::message_of<InvalidArgument>([] { CtrGenerator({.zipf = NAN}); }).find("zipf"), std::string::npos);
  Dir dir;
  EXPECT_NE(test::message_of<InvalidArgument>([&] {
              write_ctr_shards(dir.path.string(), CtrSplit::kTrain, 2, {}, {.shards = 3});
            }).find("shards"),
            std::string::npos);
  EXPECT_NE(test::message_of<InvalidArgument>([&] {
              write_ctr_shards(dir.path.string(), CtrSplit::kTrain, 0, {}, {});
            }).find("examples"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::data
