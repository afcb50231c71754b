// Shape kernels: concat, stack, slice_axis over several dtypes and axes; gather, scatter_add and
// one_hot against reference loops; out-of-range indices and mismatched shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "kernels/kernels.h"
#include "strata/threading.h"

namespace strata::kernels {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// 0, 1, 2, ... in `shape`, as T.
template <class T>
Tensor iota(const Shape& shape, T start = 0) {
  std::vector<T> v(shape_numel(shape));
  std::iota(v.begin(), v.end(), start);
  return Tensor::from_vector(v, shape);
}

TEST(ConcatTest, EveryAxisAndDtype) {
  const Tensor a = iota<float>({2, 3});
  const Tensor b = iota<float>({2, 1}, 100);
  EXPECT_EQ(concat({a, b}, 1).to_vector<float>(), (std::vector<float>{0, 1, 2, 100, 3, 4, 5, 101}));
  EXPECT_EQ(concat({a, b}, -1).shape(), (Shape{2, 4}));
  const Tensor c = iota<float>({1, 3}, 50);
  EXPECT_EQ(concat({a, c}, 0).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5, 50, 51, 52}));
  const Tensor i64 = concat({iota<int64_t>({2, 2, 1}), iota<int64_t>({2, 2, 2}, 10)}, 2);
  EXPECT_EQ(i64.to_vector<int64_t>(), (std::vector<int64_t>{0, 10, 11, 1, 12, 13, 2, 14, 15, 3, 16, 17}));
  const Tensor u8 = concat({iota<uint8_t>({3}), Tensor::zeros({0}, DType::kUInt8), iota<uint8_t>({2}, 9)}, 0);
  EXPECT_EQ(u8.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 2, 9, 10}));
  EXPECT_EQ(concat({a}, 0).to_vector<float>(), a.to_vector<float>());
}

TEST(ConcatTest, LargeAtTwoThreadsMatchesReference) {
  ScopedNumThreads scope(2);
  const Tensor a = iota<float>({64, 300, 5});
  const Tensor b = iota<float>({64, 700, 5}, 1e6f);
  const Tensor c = concat({a, b}, 1);
  ASSERT_EQ(c.shape(), (Shape{64, 1000, 5}));
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 1000; ++j)
      for (int64_t k = 0; k < 5; ++k) {
        const float want =
            j < 300 ? a.data<float>()[(i * 300 + j) * 5 + k] : b.data<float>()[(i * 700 + j - 300) * 5 + k];
        ASSERT_EQ(c.data<float>()[(i * 1000 + j) * 5 + k], want);
      }
}

TEST(ConcatTest, Errors) {
  EXPECT_THAT(
      [] {
        concat({Tensor::zeros({2, 3}), Tensor::zeros({3, 3})}, 1);
      },
      ThrowsMessage<ShapeError>(AllOf(HasSubstr("concat"), HasSubstr("[3, 3]"), HasSubstr("[2, 3]"))));
  EXPECT_THROW(concat({Tensor::zeros({2, 3}), Tensor::zeros({2})}, 0), ShapeError);
  EXPECT_THROW(concat({Tensor::zeros({2}), Tensor::zeros({2}, DType::kInt32)}, 0), InvalidArgument);
  EXPECT_THROW(concat({}, 0), InvalidArgument);
  EXPECT_THROW(concat({Tensor::zeros({2})}, 1), InvalidArgument);
}

TEST(StackTest, NewAxisAnywhere) {
  const Tensor a = iota<float>({2, 2});
  const Tensor b = iota<float>({2, 2}, 10);
  EXPECT_EQ(stack({a, b}, 0).shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(stack({a, b}, 0).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 10, 11, 12, 13}));
  EXPECT_EQ(stack({a, b}, 1).to_vector<float>(), (std::vector<float>{0, 1, 10, 11, 2, 3, 12, 13}));
  EXPECT_EQ(stack({a, b}, -1).to_vector<float>(), (std::vector<float>{0, 10, 1, 11, 2, 12, 3, 13}));
  EXPECT_EQ(stack({a, b}, 2).shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(stack({Tensor::scalar(1.0f), Tensor::scalar(2.0f)}, 0).to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_THAT([&] { stack({a, Tensor::zeros({2, 3})}, 0); }, ThrowsMessage<ShapeError>(HasSubstr("stack")));
  EXPECT_THROW(stack({a, b}, 3), InvalidArgument);
}

TEST(SliceAxisTest, CopiesARange) {
  const Tensor x = iota<float>({2, 4, 3});
  const Tensor s = slice_axis(x, 1, 1, 3);
  ASSERT_EQ(s.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{3, 4, 5, 6, 7, 8, 15, 16, 17, 18, 19, 20}));
  EXPECT_FALSE(s.shares_storage_with(x));
  EXPECT_EQ(slice_axis(x, -1, 2, 3).to_vector<float>(), (std::vector<float>{2, 5, 8, 11, 14, 17, 20, 23}));
  EXPECT_EQ(slice_axis(x, 0, 1, 1).shape(), (Shape{0, 4, 3}));
  const Tensor u8 = slice_axis(iota<uint8_t>({10}), 0, 7, 10);
  EXPECT_EQ(u8.to_vector<uint8_t>(), (std::vector<uint8_t>{7, 8, 9}));
  EXPECT_THAT([&] { slice_axis(x, 1, 2, 5); }, ThrowsMessage<InvalidArgument>(HasSubstr("slice_axis")));
  EXPECT_THROW(slice_axis(x, 1, 3, 2), InvalidArgument);
  EXPECT_THROW(slice_axis(x, 3, 0, 1), InvalidArgument);
}

TEST(GatherTest, RowsByIndicesOfAnyShape) {
  const Tensor params = iota<float>({5, 3});
  const Tensor idx32 = Tensor::from_vector(std::vector<int32_t>{4, 0, 4, 2}, {2, 2});
  const Tensor g = gather(params, idx32);
  ASSERT_EQ(g.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{12, 13, 14, 0, 1, 2, 12, 13, 14, 6, 7, 8}));
  const Tensor g64 = gather(params, Tensor::from_vector(std::vector<int64_t>{1}));
  EXPECT_EQ(g64.to_vector<float>(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(gather(iota<int32_t>({4}), Tensor::from_vector(std::vector<int64_t>{3, 3})).to_vector<int32_t>(),
            (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(gather(params, Tensor::zeros({0}, DType::kInt64)).shape(), (Shape{0, 3}));
  // Many rows at two threads.
  ScopedNumThreads scope(2);
  const Tensor big = iota<float>({1000, 64});
  std::vector<int64_t> ids(5000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919) % 1000);
  const Tensor gb = gather(big, Tensor::from_vector(ids));
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(gb.data<float>()[i * 64 + 5], ids[i] * 64 + 5.0f);
}

TEST(GatherTest, OutOfRangeIndexNamesTheIndexAndRowCount) {
  const Tensor params = iota<float>({5, 3});
  EXPECT_THAT(
      [&] {
        gather(params, Tensor::from_vector(std::vector<int32_t>{0, 7}));
      },
      ThrowsMessage<InvalidArgument>(AllOf(HasSubstr("gather"), HasSubstr("index 7"), HasSubstr("5 rows"))));
  EXPECT_THAT([&] { gather(params, Tensor::from_vector(std::vector<int64_t>{-1})); },
              ThrowsMessage<InvalidArgument>(HasSubstr("index -1")));
  EXPECT_THROW(gather(params, Tensor::zeros({2})), InvalidArgument);  // float indices
  EXPECT_THROW(gather(Tensor::scalar(1.0f), Tensor::zeros({1}, DType::kInt32)), ShapeError);
}

TEST(ScatterAddTest, SumsDuplicateRows) {
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{2, 0, 2}, {3});
  const Tensor upd = Tensor::from_list({1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor s = scatter_add(idx, upd, 4);
  ASSERT_EQ(s.shape(), (Shape{4, 2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{3, 4, 0, 0, 6, 8, 0, 0}));
  // 2-D indices, wide rows, two threads, against a reference.
  ScopedNumThreads scope(2);
  std::mt19937 gen(1);
  std::vector<int32_t> ids(60);
  for (int32_t& i : ids) i = static_cast<int32_t>(gen() % 10);
  const Tensor idx2 = Tensor::from_vector(ids, {6, 10});
  std::vector<float> u(60 * 2000);
  for (float& v : u) v = static_cast<float>(gen() % 100) / 10.0f;
  const Tensor upd2 = Tensor::from_vector(u, {6, 10, 2000});
  const Tensor s2 = scatter_add(idx2, upd2, 10);
  std::vector<double> ref(10 * 2000, 0.0);
  for (int i = 0; i < 60; ++i)
    for (int c = 0; c < 2000; ++c) ref[ids[i] * 2000 + c] += u[i * 2000 + c];
  for (int e = 0; e < 10 * 2000; ++e) ASSERT_NEAR(s2.data<float>()[e], ref[e], 1e-4);
  // The gradient of gather: scatter_add of ones counts how often each row was gathered.
  const Tensor counts = scatter_add(idx, Tensor::ones({3}), 3);
  EXPECT_EQ(counts.to_vector<float>(), (std::vector<float>{1, 0, 2}));
}

TEST(ScatterAddTest, Errors) {
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{0, 5});
  EXPECT_THAT(
      [&] {
        scatter_add(idx, Tensor::zeros({2, 3}), 5);
      },
      ThrowsMessage<InvalidArgument>(AllOf(HasSubstr("index 5"), HasSubstr("5 rows"))));
  EXPECT_THAT(
      [&] {
        scatter_add(idx, Tensor::zeros({3, 3}), 6);
      },
      ThrowsMessage<ShapeError>(AllOf(HasSubstr("scatter_add"), HasSubstr("[3, 3]"))));
  EXPECT_THROW(scatter_add(idx, Tensor::zeros({2}), -1), InvalidArgument);
}

TEST(OneHotTest, RowsAndOutOfRange) {
  const Tensor idx = Tensor::from_vector(std::vector<int32_t>{0, 2, 3, -1}, {2, 2});
  const Tensor oh = one_hot(idx, 3);
  ASSERT_EQ(oh.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(oh.dtype(), DType::kFloat32);
  EXPECT_EQ(oh.to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(one_hot(Tensor::from_vector(std::vector<int64_t>{1}), 2).to_vector<float>(), (std::vector<float>{0, 1}));
  EXPECT_THROW(one_hot(Tensor::zeros({2}), 3), InvalidArgument);
}

}  // namespace
}  // namespace strata::kernels
