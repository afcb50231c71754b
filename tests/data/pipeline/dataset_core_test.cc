// Sources, Element access and the one-input transformations: order, remainders, cardinalities,
// and iterator save/restore mid-epoch.
#include <gtest/gtest.h>

#include "data/dataset_test_util.h"

namespace strata::data {
namespace {

using test::collect_ints;
using test::ints;
using test::message_of;

TEST(ElementTest, IndexAndNameAccessWithClearErrors) {
  Element e({Tensor::scalar(1.0f), Tensor::zeros({2})}, {"x", "y"});
  EXPECT_EQ(e.size(), 2u);
  EXPECT_EQ(e["y"].numel(), 2);
  EXPECT_FLOAT_EQ(e[0].item<float>(), 1.0f);
  const std::string bad_index = message_of<InvalidArgument>([&] { (void)e[5]; });
  EXPECT_NE(bad_index.find("index 5"), std::string::npos) << bad_index;
  EXPECT_NE(bad_index.find("2 components"), std::string::npos) << bad_index;
  const std::string bad_key = message_of<InvalidArgument>([&] { (void)e["z"]; });
  EXPECT_NE(bad_key.find("'z'"), std::string::npos) << bad_key;
  EXPECT_NE(bad_key.find("'x', 'y'"), std::string::npos) << bad_key;
  EXPECT_THROW(Element({Tensor::scalar(1.0f)}, {"a", "b"}), InvalidArgument);
  EXPECT_THROW(Element({Tensor::scalar(1.0f), Tensor::scalar(2.0f)}, {"a", "a"}), InvalidArgument);
  EXPECT_EQ(tensor_string(string_tensor("hello")), "hello");
}

TEST(DatasetSourcesTest, RangeAndSlices) {
  EXPECT_EQ(collect_ints(Dataset::range(5)), ints({0, 1, 2, 3, 4}));
  EXPECT_EQ(collect_ints(Dataset::range(10, 0, -3)), ints({10, 7, 4, 1}));
  EXPECT_EQ(Dataset::range(10, 0, -3).cardinality(), 4);
  EXPECT_EQ(Dataset::range(3, 3).cardinality(), 0);

  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor y = Tensor::from_vector<int64_t>({7, 8, 9}, {3});
  auto ds = Dataset::from_tensor_slices({x, y}, {"x", "y"});
  EXPECT_EQ(ds.cardinality(), 3);
  auto it = ds.make_iterator();
  auto e = it.next();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->size(), 2u);
  EXPECT_EQ((*e)["x"].shape(), (Shape{2}));
  EXPECT_EQ((*e)["y"].shape(), (Shape{}));
  EXPECT_EQ((*e)["x"].to_vector<float>(), (std::vector<float>{0, 1}));
  it.next();
  e = it.next();
  EXPECT_EQ((*e)["y"].item<int64_t>(), 9);
  EXPECT_FALSE(it.next());
  EXPECT_FALSE(it.next());
  const std::string msg = message_of<InvalidArgument>(
      [&] { Dataset::from_tensor_slices({x, Tensor::zeros({4})}); });
  EXPECT_NE(msg.find("4 rows"), std::string::npos) << msg;
}

TEST(DatasetTransformTest, BatchStacksAndKeepsOrDropsTheRemainder) {
  auto ds = Dataset::range(7).batch(3);
  EXPECT_EQ(ds.cardinality(), 3);
  auto it = ds.make_iterator();
  auto b0 = it.next();
  EXPECT_EQ((*b0)[0].shape(), (Shape{3}));
  EXPECT_EQ((*b0)[0].to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  it.next();
  auto b2 = it.next();
  EXPECT_EQ((*b2)[0].to_vector<int64_t>(), (std::vector<int64_t>{6}));
  EXPECT_FALSE(it.next());
  auto dropped = Dataset::range(7).batch(3, true);
  EXPECT_EQ(dropped.cardinality(), 2);
  int n = 0;
  for (auto it2 = dropped.make_iterator(); it2.next();) ++n;
  EXPECT_EQ(n, 2);
}

TEST(DatasetTransformTest, IteratorOutlivesItsTemporaryDataset) {
  auto it = Dataset::range(4).map([](const Element& e) { return e; }).batch(2).make_iterator();
  EXPECT_TRUE(it.next());
  EXPECT_TRUE(it.next());
  EXPECT_FALSE(it.next());
}

}  // namespace
}  // namespace strata::data
