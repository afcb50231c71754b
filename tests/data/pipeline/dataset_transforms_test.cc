// The transformations' tf.data semantics: filter, take/skip/shard, repeat, enumerate, zip,
// padded_batch, unbatch, shuffle (seeds, reshuffling), cache and interleave order.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "data/dataset_test_util.h"
#include "data/pipeline/rows.h"
#include "strata/random.h"

namespace strata::data {
namespace {

using test::collect_elements;
using test::collect_ints;
using test::ints;
using test::message_of;

int64_t value(const Element& e) { return e[0].item<int64_t>(); }

TEST(DatasetTransformTest, FilterTakeSkipShard) {
  auto even = Dataset::range(10).filter([](const Element& e) { return value(e) % 2 == 0; });
  EXPECT_EQ(collect_ints(even), ints({0, 2, 4, 6, 8}));
  EXPECT_EQ(even.cardinality(), Dataset::kUnknown);
  EXPECT_EQ(collect_ints(Dataset::range(10).take(3)), ints({0, 1, 2}));
  EXPECT_EQ(collect_ints(Dataset::range(3).take(10)), ints({0, 1, 2}));
  EXPECT_EQ(collect_ints(Dataset::range(10).skip(7)), ints({7, 8, 9}));
  EXPECT_EQ(collect_ints(Dataset::range(10).skip(-1)), ints({}));
  EXPECT_EQ(Dataset::range(10).skip(7).cardinality(), 3);
  EXPECT_EQ(collect_ints(Dataset::range(10).shard(3, 1)), ints({1, 4, 7}));
  EXPECT_EQ(Dataset::range(10).shard(3, 0).cardinality(), 4);
  EXPECT_EQ(Dataset::range(10).shard(3, 2).cardinality(), 3);
  EXPECT_THROW(Dataset::range(10).shard(3, 3), InvalidArgument);
}

TEST(DatasetTransformTest, RepeatEnumerateZip) {
  EXPECT_EQ(collect_ints(Dataset::range(3).repeat(2)), ints({0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(Dataset::range(3).repeat(2).cardinality(), 6);
  EXPECT_EQ(Dataset::range(3).repeat().cardinality(), Dataset::kInfinite);
  EXPECT_EQ(collect_ints(Dataset::range(3).repeat().take(7)), ints({0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(collect_ints(Dataset::range(0).repeat()), ints({}));  // an empty input ends, not hangs

  auto en = Dataset::range(10, 13).enumerate(5);
  auto rows = collect_elements(en.map([](const Element& e) {
    return Element({Tensor::from_vector<int64_t>({e[0].item<int64_t>(), e[1].item<int64_t>()})});
  }));
  EXPECT_EQ(rows, (std::vector<std::vector<int64_t>>{{5, 10}, {6, 11}, {7, 12}}));

  auto x = Dataset::from_tensor_slices({Tensor::from_vector<int64_t>({1, 2, 3})}, {"x"});
  auto z = Dataset::zip({x, Dataset::range(100, 110)});
  EXPECT_EQ(z.cardinality(), 3);
  auto it = z.make_iterator();
  auto e = it.next();
  EXPECT_EQ(e->names(), (std::vector<std::string>{"x", ""}));
  EXPECT_EQ((*e)["x"].item<int64_t>(), 1);
  EXPECT_EQ((*e)[1].item<int64_t>(), 100);
  int n = 1;
  while (it.next()) ++n;
  EXPECT_EQ(n, 3);
  auto named = Dataset::range(2).enumerate().make_iterator().next();
  EXPECT_TRUE(named->names().empty());
  auto named2 = x.enumerate().make_iterator().next();
  EXPECT_EQ(named2->names(), (std::vector<std::string>{"index", "x"}));
}

TEST(DatasetTransformTest, PaddedBatchPadsToTheLargestOrTheGivenShape) {
  // Element i is a vector of i+1 copies of i+1 (1, 22, 333, ...).
  auto ds = Dataset::range(1, 5).map([](const Element& e) {
    const int64_t v = value(e);
    return Element({Tensor::full({v}, static_cast<double>(v), DType::kInt64)});
  });
  auto it = ds.padded_batch(3).make_iterator();
  auto b = it.next();
  EXPECT_EQ((*b)[0].shape(), (Shape{3, 3}));
  EXPECT_EQ((*b)[0].to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 2, 2, 0, 3, 3, 3}));
  b = it.next();
  EXPECT_EQ((*b)[0].shape(), (Shape{1, 4}));
  EXPECT_FALSE(it.next());

  PaddedBatchOptions o;
  o.padded_shapes = {{5}};
  o.padding_values = {-1};
  o.drop_remainder = true;
  auto all = collect_elements(ds.padded_batch(2, o));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], (std::vector<int64_t>{1, -1, -1, -1, -1, 2, 2, -1, -1, -1}));
  o.padded_shapes = {{2}};
  const std::string msg = message_of<ShapeError>([&] { collect_elements(ds.padded_batch(4, o)); });
  EXPECT_NE(msg.find("padded shape"), std::string::npos) << msg;
}

TEST(DatasetTransformTest, UnbatchUndoesBatch) {
  EXPECT_EQ(collect_ints(Dataset::range(7).batch(3).unbatch()), ints({0, 1, 2, 3, 4, 5, 6}));
  Tensor img = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2});
  auto it = Dataset::from_tensor_slices({img}).batch(2).unbatch().make_iterator();
  auto e = it.next();
  EXPECT_EQ((*e)[0].shape(), (Shape{2, 2}));
  e = it.next();
  EXPECT_EQ((*e)[0].to_vector<float>(), (std::vector<float>{4, 5, 6, 7}));
}

TEST(DatasetTransformTest, BatchNamesTheMismatchedComponent) {
  auto ds = Dataset::range(1, 4).map([](const Element& e) {
    return Element({Tensor::zeros({value(e)})}, {"feature"});
  });
  const std::string msg = message_of<ShapeError>([&] { collect_elements(ds.batch(2)); });
  EXPECT_NE(msg.find("'feature'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
}

TEST(RowLayoutTest, SameLayoutComparesAgainOnlyAfterAChange) {
  const Element pair({Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2}), Tensor::from_vector(std::vector<int64_t>{3}, Shape{})});
  const Element other({Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}, {3}), Tensor::from_vector(std::vector<int64_t>{3}, Shape{})});
  detail::RowLayout mine, asked;
  ASSERT_TRUE(mine.assign(pair));
  ASSERT_TRUE(asked.assign(pair));
  EXPECT_NE(mine.version(), asked.version());
  const detail::RowLayout copy = mine;
  EXPECT_EQ(copy.version(), mine.version());

  detail::SameLayout same;
  EXPECT_TRUE(same(asked, mine));
  EXPECT_TRUE(same(asked, mine));  // remembered
  // The same object with another structure: its version changed, so it is compared again.
  ASSERT_TRUE(asked.assign(other));
  EXPECT_FALSE(same(asked, mine));
  ASSERT_TRUE(asked.assign(pair));
  EXPECT_TRUE(same(asked, mine));
  ASSERT_TRUE(mine.assign(other));
  EXPECT_FALSE(same(asked, mine));
  // Another object is compared too.
  EXPECT_TRUE(same(copy, detail::RowLayout(asked)));
}

TEST(DatasetShuffleTest, SameSeedSameOrderAndAPermutation) {
  const auto a = collect_ints(Dataset::range(100).shuffle(10, 42));
  const auto b = collect_ints(Dataset::range(100).shuffle(10, 42));
  const auto c = collect_ints(Dataset::range(100).shuffle(10, 43));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, collect_ints(Dataset::range(100)));
  EXPECT_NE(a, sorted);
  // A buffer of 10 moves an element at most 9 places earlier.
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(a[i], static_cast<int64_t>(i) + 9);
  // The order is fixed by Philox alone: the same on every machine and run.
  EXPECT_EQ(collect_ints(Dataset::range(10).shuffle(4, 7)), ints({0, 3, 4, 5, 2, 1, 8, 7, 6, 9}));
}

TEST(DatasetShuffleTest, MatchesTheBufferAlgorithmDrawnOneCallAtATime) {
  // The iterator draws slots ahead of time (to prefetch them); the order must still be exactly the
  // buffer algorithm's with one Philox draw per element, also as the input ends and the buffer drains.
  for (const int64_t buffer : {1, 2, 7, 30, 64}) {
    for (const int64_t n : {0, 1, 5, 30, 100}) {
      Generator gen(9, 0);  // seed 9, epoch 0
      std::vector<int64_t> slots, expected;
      int64_t next = 0;
      while (next < n && static_cast<int64_t>(slots.size()) < buffer) slots.push_back(next++);
      while (!slots.empty()) {
        const size_t i = static_cast<size_t>(gen.uniform_int(slots.size()));
        expected.push_back(slots[i]);
        if (next < n) {
          slots[i] = next++;
        } else {
          slots[i] = slots.back();
          slots.pop_back();
        }
      }
      EXPECT_EQ(collect_ints(Dataset::range(n).shuffle(buffer, 9)), expected) << "buffer " << buffer << ", n " << n;
    }
  }
}

// Elements 0..29 as int64 tensors whose structure changes part-way: scalars, then from `change` on
// vectors of (value % 3 + 1) copies of the value, and a name list that differs too.
Dataset changing_structure(int64_t n, int64_t change) {
  return Dataset::range(n).map([change](const Element& e) {
    const int64_t v = value(e);
    if (v < change) return e;
    return Element({Tensor::from_vector<int64_t>(std::vector<int64_t>(static_cast<size_t>(v % 3 + 1), v))}, {"x"});
  });
}

TEST(DatasetShuffleTest, OrderDoesNotDependOnHowElementsAreHeld) {
  // The buffer keeps same-structured elements as rows of one slab and falls back to Elements at the
  // first one that differs: the order and the values must be those of plain scalars either way.
  for (const int64_t change : {0, 1, 5, 12, 30}) {
    std::vector<int64_t> firsts;
    auto it = changing_structure(30, change).shuffle(8, 4).make_iterator();
    while (auto e = it.next()) {
      const auto v = (*e)[0].to_vector<int64_t>();
      ASSERT_FALSE(v.empty());
      EXPECT_EQ(static_cast<int64_t>(v.size()), v[0] < change ? 1 : v[0] % 3 + 1) << "value " << v[0];
      EXPECT_EQ(e->has("x"), v[0] >= change) << "value " << v[0];
      firsts.push_back(v[0]);
    }
    EXPECT_EQ(firsts, collect_ints(Dataset::range(30).shuffle(8, 4))) << "change at " << change;
  }
}

TEST(DatasetShuffleTest, ReshufflesEachIterationUnlessAskedNot) {
  auto ds = Dataset::range(50).shuffle(50, 1);
  const auto e0 = collect_ints(ds), e1 = collect_ints(ds);
  EXPECT_NE(e0, e1);
  // repeat() makes a new iterator of the shuffle per epoch: a fresh pipeline replays epochs 0 and 1.
  auto epochs = collect_ints(Dataset::range(50).shuffle(50, 1).repeat(2));
  EXPECT_EQ(epochs, collect_ints(Dataset::range(50).shuffle(50, 1).repeat(2)));
  EXPECT_EQ(std::vector<int64_t>(epochs.begin(), epochs.begin() + 50), e0);
  EXPECT_EQ(std::vector<int64_t>(epochs.begin() + 50, epochs.end()), e1);
  auto fixed = Dataset::range(50).shuffle(50, 1, false);
  EXPECT_EQ(collect_ints(fixed), collect_ints(fixed));
}

TEST(DatasetCacheTest, MemoryCacheReadsTheInputOnce) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = Dataset::range(5)
                .map([calls](const Element& e) {
                  ++*calls;
                  return e;
                })
                .cache();
  {  // an abandoned first pass publishes nothing
    auto it = ds.make_iterator();
    it.next();
  }
  EXPECT_EQ(collect_ints(ds), ints({0, 1, 2, 3, 4}));
  EXPECT_EQ(calls->load(), 6);
  EXPECT_EQ(collect_ints(ds.repeat(3)), ints({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  EXPECT_EQ(calls->load(), 6);
}

TEST(DatasetCacheTest, FileCacheIsWrittenOnceAndReadByANewPipeline) {
  const std::string path = ::testing::TempDir() + "/strata_cache_test.bin";
  std::filesystem::remove(path);
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto make = [&] {
    return Dataset::range(4)
        .map([calls](const Element& e) {
          ++*calls;
          return Element({e[0], Tensor::full({2}, 0.5)}, {"i", "f"});
        })
        .cache(path);
  };
  EXPECT_EQ(collect_ints(make()), ints({0, 1, 2, 3}));
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(calls->load(), 4);
  auto it = make().make_iterator();  // a new pipeline reads the file
  it.next();
  auto e = it.next();
  EXPECT_EQ((*e)["i"].item<int64_t>(), 1);
  EXPECT_EQ((*e)["f"].to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(calls->load(), 4);
  std::filesystem::remove(path);
}

TEST(DatasetInterleaveTest, CycleAndBlockOrderLikeTensorFlow) {
  // tf.data's documented example: range(1, 6).interleave(lambda x: repeat(x, 6), cycle_length=2, block_length=4).
  auto make_fn = [](const Element& e) { return Dataset::from_tensor_slices({Tensor::full({6}, double(value(e)), DType::kInt64)}); };
  const auto expected =
      ints({1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5});
  InterleaveOptions o;
  o.cycle_length = 2;
  o.block_length = 4;
  EXPECT_EQ(collect_ints(Dataset::range(1, 6).interleave(make_fn, o)), expected);
  o.num_parallel_calls = kAutotune;
  EXPECT_EQ(collect_ints(Dataset::range(1, 6).interleave(make_fn, o)), expected);
}

}  // namespace
}  // namespace strata::data
