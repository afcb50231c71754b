// Iterator save/restore: for every stage, stopping after k elements, saving, and restoring into a
// fresh pipeline (a new Dataset object, as after a restart) gives exactly the elements an
// uninterrupted run gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/dataset_test_util.h"

namespace strata::data {
namespace {

using test::expect_resumes_exactly;

int64_t value(const Element& e) { return e[0].item<int64_t>(); }
Element plus_one(const Element& e) { return Element({Tensor::from_vector<int64_t>({value(e) + 1}, {})}); }

void expect_resumes_at(const std::function<Dataset()>& make, std::initializer_list<int64_t> stops, int64_t limit = -1) {
  for (int64_t k : stops) expect_resumes_exactly(make, k, limit);
}

TEST(DatasetStateTest, SourcesAndSimpleStages) {
  expect_resumes_at([] { return Dataset::range(10); }, {0, 3, 10});
  expect_resumes_at([] { return Dataset::from_tensor_slices({Tensor::from_vector<int64_t>({5, 6, 7, 8})}); }, {2});
  expect_resumes_at([] { return Dataset::range(30).map(plus_one).filter([](const Element& e) { return value(e) % 3; }); },
                    {0, 5, 19});
  expect_resumes_at([] { return Dataset::range(30).skip(4).take(20).shard(3, 1); }, {1, 4});
  expect_resumes_at([] { return Dataset::range(30).enumerate(3).batch(4); }, {2, 7});
  expect_resumes_at([] { return Dataset::zip({Dataset::range(10), Dataset::range(20).shuffle(5, 3)}); }, {4});
  expect_resumes_at([] { return Dataset::range(10).batch(4).unbatch(); }, {1, 5, 9});
  expect_resumes_at([] { return Dataset::range(5).repeat(3); }, {4, 5, 12});
  expect_resumes_at(
      [] {
        return Dataset::from_generator([] {
          auto i = std::make_shared<int64_t>(0);
          return std::function<std::optional<Element>()>([i]() -> std::optional<Element> {
            if (*i >= 6) return std::nullopt;
            return Element({Tensor::from_vector<int64_t>({(*i)++}, {})});
          });
        });
      },
      {3});
}

TEST(DatasetStateTest, ShuffleBufferAndEpochsSurviveARestart) {
  expect_resumes_at([] { return Dataset::range(40).shuffle(8, 11).batch(3); }, {0, 2, 9, 14});
  // Mid-way through the second of three reshuffled epochs.
  expect_resumes_at([] { return Dataset::range(20).shuffle(20, 5).repeat(3); }, {7, 25, 41, 59});
  expect_resumes_at([] { return Dataset::range(20).shuffle(4, 5, false).repeat(2).shuffle(6, 9); }, {13, 30});
  // Elements that change structure part-way (held as slab rows, then as Elements), and wider rows.
  auto changing = [] {
    return Dataset::range(30)
        .map([](const Element& e) {
          const int64_t v = value(e);
          return v < 12 ? e : Element({Tensor::from_vector<int64_t>({v, v, v})});
        })
        .shuffle(8, 4);
  };
  expect_resumes_at(changing, {0, 3, 9, 20});
  expect_resumes_at([] { return Dataset::range(40).batch(4).shuffle(5, 2); }, {1, 6});
}

TEST(DatasetStateTest, ParallelStagesSaveTheirBufferedResults) {
  expect_resumes_at([] { return Dataset::range(50).map(plus_one, {.num_parallel_calls = 3}).prefetch(4); },
                    {0, 1, 10, 49, 50});
  expect_resumes_at(
      [] { return Dataset::range(50).shuffle(10, 2).map(plus_one, {.num_parallel_calls = 4}).batch(5).prefetch(2); },
      {3, 7});
  // Not deterministic: the restored iterator still yields exactly the elements not yet seen.
  auto make = [] { return Dataset::range(60).map(plus_one, {.num_parallel_calls = 4, .deterministic = false}); };
  auto it = make().make_iterator();
  std::vector<int64_t> got = test::drain_ints(it, 25);
  auto resumed = make().make_iterator();
  resumed.restore_state(it.save_state());
  for (int64_t v : test::drain_ints(resumed)) got.push_back(v);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, test::collect_ints(Dataset::range(1, 61)));
}

TEST(DatasetStateTest, InterleaveSavesEveryOpenInput) {
  for (int64_t parallel : {int64_t{1}, int64_t{3}}) {
    SCOPED_TRACE(parallel);
    auto make = [parallel] {
      InterleaveOptions o;
      o.cycle_length = 3;
      o.block_length = 2;
      o.num_parallel_calls = parallel;
      return Dataset::range(1, 8).interleave(
          [](const Element& e) { return Dataset::range(value(e) * 10, value(e) * 10 + value(e)).shuffle(3, 1); }, o);
    };
    expect_resumes_at(make, {0, 1, 5, 12, 27});
  }
}

TEST(DatasetStateTest, CacheAndFilesResumeMidEpoch) {
  auto cached = Dataset::range(12).map(plus_one).cache().shuffle(4, 1, false).repeat(2);
  expect_resumes_at([&] { return cached; }, {5});      // same dataset object: cache filled then read
  expect_resumes_at([] { return Dataset::range(12).map(plus_one).cache().repeat(2); }, {4, 12, 17});

  const std::string dir = ::testing::TempDir() + "/strata_state_files";
  std::filesystem::create_directories(dir);
  for (int i = 0; i < 5; ++i) std::ofstream(dir + "/part-" + std::to_string(i) + ".txt") << i;
  auto files = [&] {
    return Dataset::list_files(dir + "/part-*.txt", true, 17).repeat(2).map([](const Element& e) {
      const std::string name = tensor_string(e["filename"]);
      return Element({Tensor::from_vector<int64_t>({name[name.size() - 5] - '0'}, {})});
    });
  };
  auto first = test::collect_ints(files());
  EXPECT_EQ(first.size(), 10u);
  EXPECT_NE(std::vector<int64_t>(first.begin(), first.begin() + 5), std::vector<int64_t>(first.begin() + 5, first.end()));
  expect_resumes_at(files, {2, 7});
  std::filesystem::remove_all(dir);
}

TEST(DatasetStateTest, AStateRestoredIntoAnotherPipelineFailsClearly) {
  auto it = Dataset::range(10).shuffle(3, 1).make_iterator();
  it.next();
  auto other = Dataset::range(10).batch(2).make_iterator();
  const std::string msg = test::message_of<InvalidArgument>([&] { other.restore_state(it.save_state()); });
  EXPECT_NE(msg.find("'shuffle'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'batch'"), std::string::npos) << msg;
  EXPECT_THROW(other.restore_state("garbage"), InvalidArgument);
}

}  // namespace
}  // namespace strata::data
