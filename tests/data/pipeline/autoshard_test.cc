// Auto-sharding policies: FILE splits the file source (and fails with fewer files than workers),
// DATA keeps every N-th element, AUTO picks FILE when it can, OFF changes nothing; the pieces a multi-worker
// strategy builds on (rebatching the last batch(), options carried through the pipeline).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/dataset_test_util.h"
#include "strata/data/autoshard.h"

namespace strata::data {
namespace {

using test::collect_ints;
using test::ints;

class AutoShardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/strata_autoshard";
    std::filesystem::create_directories(dir_);
    for (int i = 0; i < 5; ++i) std::ofstream(dir_ + "/f" + std::to_string(i) + ".txt") << i;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Each file i holds the numbers 10*i .. 10*i+2; the pipeline reads them through interleave.
  Dataset pipeline() const {
    InterleaveOptions o;
    o.cycle_length = 2;
    return Dataset::list_files(dir_ + "/f*.txt", false)
        .interleave(
            [](const Element& e) {
              const std::string name = tensor_string(e["filename"]);
              const int64_t i = name[name.size() - 5] - '0';
              return Dataset::range(10 * i, 10 * i + 3);
            },
            o)
        .prefetch(2);
  }
  std::string dir_;
};

TEST_F(AutoShardTest, FilePolicyGivesEachWorkerItsFiles) {
  EXPECT_EQ(collect_ints(auto_shard(pipeline(), 2, 0, AutoShardPolicy::kFile)),
            ints({0, 20, 1, 21, 2, 22, 40, 41, 42}));
  EXPECT_EQ(collect_ints(auto_shard(pipeline(), 2, 1, AutoShardPolicy::kFile)), ints({10, 30, 11, 31, 12, 32}));
  EXPECT_EQ(collect_ints(auto_shard(pipeline(), 2, 1, AutoShardPolicy::kAuto)), ints({10, 30, 11, 31, 12, 32}));
  const std::string msg =
      test::message_of<InvalidArgument>([&] { auto_shard(pipeline(), 6, 0, AutoShardPolicy::kFile); });
  EXPECT_NE(msg.find("5 file(s) for 6 workers"), std::string::npos) << msg;
}

TEST_F(AutoShardTest, DataPolicyAndAutoFallback) {
  const auto all = collect_ints(pipeline());
  ASSERT_EQ(all.size(), 15u);
  for (int64_t w = 0; w < 3; ++w) {
    std::vector<int64_t> expected;
    for (size_t i = static_cast<size_t>(w); i < all.size(); i += 3) expected.push_back(all[i]);
    EXPECT_EQ(collect_ints(auto_shard(pipeline(), 3, w, AutoShardPolicy::kData)), expected);
  }
  // Six workers, five files: AUTO shards by data instead.
  EXPECT_EQ(collect_ints(auto_shard(pipeline(), 6, 4, AutoShardPolicy::kAuto)), ints({2, 22}));
  // No file source at all.
  EXPECT_EQ(collect_ints(auto_shard(Dataset::range(10).batch(2), 2, 1, AutoShardPolicy::kAuto)).size(), 4u);
  EXPECT_THROW(auto_shard(Dataset::range(10), 2, 1, AutoShardPolicy::kFile), InvalidArgument);
  EXPECT_EQ(collect_ints(auto_shard(Dataset::range(4), 2, 1, AutoShardPolicy::kOff)), ints({0, 1, 2, 3}));
  EXPECT_EQ(parse_auto_shard_policy("data"), AutoShardPolicy::kData);
  EXPECT_THROW(parse_auto_shard_policy("files"), InvalidArgument);
  EXPECT_THROW(auto_shard(Dataset::range(4), 2, 2), InvalidArgument);
}

TEST_F(AutoShardTest, RebatchChangesTheLastBatchThroughOneInputStagesOnly) {
  const Dataset batched = Dataset::range(10).batch(4).map([](const Element& e) { return e; }).prefetch(2);
  EXPECT_EQ(final_batch_size(batched), 4);
  const Dataset rebatched = rebatch(batched, 3);
  EXPECT_EQ(final_batch_size(rebatched), 3);
  EXPECT_EQ(rebatched.cardinality(), 4);  // 3, 3, 3, 1
  std::vector<int64_t> sizes;
  data::Iterator it = rebatched.make_iterator();
  while (auto e = it.next()) sizes.push_back((*e)[0].dim(0));
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 3, 1}));
  // Only the last batching stage changes; padded_batch counts as one.
  EXPECT_EQ(final_batch_size(rebatch(Dataset::range(12).batch(2).unbatch().batch(6), 4)), 4);
  EXPECT_EQ(final_batch_size(Dataset::range(6).padded_batch(2)), 2);
  EXPECT_FALSE(final_batch_size(Dataset::range(6).batch(2).unbatch()).has_value());
  EXPECT_FALSE(final_batch_size(Dataset::zip({Dataset::range(4).batch(2), Dataset::range(4).batch(2)})).has_value());
  const std::string msg = test::message_of<InvalidArgument>([] { rebatch(Dataset::range(4), 2); });
  EXPECT_NE(msg.find("does not end in batch()"), std::string::npos) << msg;
}

TEST_F(AutoShardTest, OptionsTravelThroughThePipelineAndTheOutermostWin) {
  EXPECT_EQ(Dataset::range(4).options().auto_shard_policy, AutoShardPolicy::kAuto);
  const Dataset data_policy = Dataset::range(4).with_options({AutoShardPolicy::kData});
  EXPECT_EQ(data_policy.batch(2).prefetch(1).options().auto_shard_policy, AutoShardPolicy::kData);
  EXPECT_EQ(data_policy.batch(2).with_options({AutoShardPolicy::kOff}).options().auto_shard_policy,
            AutoShardPolicy::kOff);
  // The options stage is transparent: same elements, cardinality and iterator state.
  EXPECT_EQ(collect_ints(data_policy), ints({0, 1, 2, 3}));
  EXPECT_EQ(data_policy.cardinality(), 4);
  data::Iterator a = data_policy.make_iterator();
  a.next();
  data::Iterator b = Dataset::range(4).make_iterator();
  b.restore_state(a.save_state());
  EXPECT_EQ(b.next().value()[0].item<int64_t>(), 1);
  // FILE sharding rebuilds the stages around the files, options stage included.
  EXPECT_EQ(collect_ints(shard_files(pipeline().with_options({AutoShardPolicy::kFile}), 2, 1)),
            ints({10, 30, 11, 31, 12, 32}));
  std::string why;
  EXPECT_FALSE(can_shard_files(pipeline(), 6, &why));
  EXPECT_NE(why.find("5 file(s) for 6 workers"), std::string::npos) << why;
}

}  // namespace
}  // namespace strata::data
