// matmul: 2-D and batched products with every transpose combination, against a double-precision
// reference; thread counts; empty operands; the errors bad shapes and dtypes get.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "kernels/kernels.h"
#include "test_util.h"
#include "strata/threading.h"

namespace strata::kernels {
namespace {

using test::random_tensor;
using test::message_of;

using ::testing::HasSubstr;

// C[M, N] = op(A) op(B) in double, for one matrix each (A at pa, B at pb).
std::vector<double> reference(const float* pa, const float* pb, int64_t M, int64_t N, int64_t K, bool ta, bool tb) {
  std::vector<double> c(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? pa[k * M + i] : pa[i * K + k];
        const double b = tb ? pb[j * K + k] : pb[k * N + j];
        s += a * b;
      }
      c[i * N + j] = s;
    }
  return c;
}

// Checks matmul(a, b, ta, tb) against the reference, batch by batch.
void expect_matches(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Tensor c = matmul(a, b, ta, tb);
  const int64_t M = ta ? a.dim(-1) : a.dim(-2);
  const int64_t K = ta ? a.dim(-2) : a.dim(-1);
  const int64_t N = tb ? b.dim(-2) : b.dim(-1);
  const int64_t Ba = a.rank() == 3 ? a.dim(0) : 1;
  const int64_t Bb = b.rank() == 3 ? b.dim(0) : 1;
  const int64_t batch = std::max(Ba, Bb);
  if (a.rank() == 3 || b.rank() == 3) {
    ASSERT_EQ(c.shape(), (Shape{batch, M, N}));
  } else {
    ASSERT_EQ(c.shape(), (Shape{M, N}));
  }
  const float* pc = c.data<float>();
  for (int64_t i = 0; i < batch; ++i) {
    const float* pa = a.data<float>() + (Ba == 1 ? 0 : i * M * K);
    const float* pb = b.data<float>() + (Bb == 1 ? 0 : i * K * N);
    const std::vector<double> ref = reference(pa, pb, M, N, K, ta, tb);
    for (int64_t e = 0; e < M * N; ++e) {
      ASSERT_NEAR(pc[i * M * N + e], ref[e], 1e-4 * (1.0 + std::sqrt(static_cast<double>(K))))
          << "batch " << i << " element " << e << " ta=" << ta << " tb=" << tb;
    }
  }
}

Shape maybe_t(int64_t rows, int64_t cols, bool t) { return t ? Shape{cols, rows} : Shape{rows, cols}; }

TEST(MatmulTest, TwoDimensionalAllTransposes) {
  for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 5, 3}, {33, 65, 17}, {64, 128, 10}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Tensor a = random_tensor(maybe_t(M, K, ta), 1);
        const Tensor b = random_tensor(maybe_t(K, N, tb), 2);
        expect_matches(a, b, ta, tb);
      }
  }
}

TEST(MatmulTest, DenseLayerShapesAndBackwardProducts) {
  const Tensor x = random_tensor({256, 784}, 3);
  const Tensor w = random_tensor({784, 128}, 4);
  const Tensor dy = random_tensor({256, 128}, 5);
  expect_matches(x, w, false, false);  // forward
  expect_matches(dy, w, false, true);  // dx = dy w^T
  expect_matches(x, dy, true, false);  // dw = x^T dy
}

TEST(MatmulTest, BatchedBothOperands) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Tensor a = random_tensor({5, ta ? 6 : 4, ta ? 4 : 6}, 6);
      const Tensor b = random_tensor({5, tb ? 3 : 6, tb ? 6 : 3}, 7);
      expect_matches(a, b, ta, tb);
    }
}

TEST(MatmulTest, BatchedWithSharedOperand) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Tensor a3 = random_tensor({4, ta ? 6 : 5, ta ? 5 : 6}, 8);
      const Tensor b2 = random_tensor(maybe_t(6, 3, tb), 9);
      expect_matches(a3, b2, ta, tb);  // [B, M, K] x [K, N]
      const Tensor a2 = random_tensor(maybe_t(5, 6, ta), 10);
      const Tensor b3 = random_tensor({4, tb ? 3 : 6, tb ? 6 : 3}, 11);
      expect_matches(a2, b3, ta, tb);  // [M, K] x [B, K, N]
      const Tensor a1 = random_tensor({1, ta ? 6 : 5, ta ? 5 : 6}, 12);
      expect_matches(a1, b3, ta, tb);  // batch 1 broadcasts
    }
}

TEST(MatmulTest, BatchedLargeAndSmallMatricesAtOneAndTwoThreads) {
  const Tensor big_a = random_tensor({2, 160, 130}, 13);
  const Tensor big_b = random_tensor({2, 130, 150}, 14);
  const Tensor small_a = random_tensor({37, 8, 9}, 15);
  const Tensor small_b = random_tensor({37, 7, 9}, 16);  // [N, K], used transposed
  for (int threads : {1, 2}) {
    ScopedNumThreads scope(threads);
    expect_matches(big_a, big_b, false, false);
    expect_matches(small_a, small_b, false, true);
  }
}

TEST(MatmulTest, SameResultFromAnotherThread) {
  const Tensor a = random_tensor({100, 70}, 17);
  const Tensor b = random_tensor({70, 90}, 18);
  const Tensor c = matmul(a, b);
  Tensor d;
  std::thread t([&] {
    ScopedNumThreads scope(1);
    d = matmul(a, b);
  });
  t.join();
  EXPECT_EQ(c.to_vector<float>(), d.to_vector<float>());
}

TEST(MatmulTest, EmptyOperands) {
  EXPECT_EQ(matmul(Tensor::zeros({0, 4}), Tensor::zeros({4, 3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(matmul(Tensor::zeros({2, 4}), Tensor::zeros({4, 0})).shape(), (Shape{2, 0}));
  const Tensor c = matmul(Tensor::empty({2, 0}), Tensor::empty({0, 3}));
  ASSERT_EQ(c.shape(), (Shape{2, 3}));
  for (float v : c.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(matmul(Tensor::zeros({0, 2, 4}), Tensor::zeros({4, 3})).shape(), (Shape{0, 2, 3}));
}

TEST(MatmulTest, BadShapesRaiseShapeErrorNamingTheOp) {
  const std::string m = message_of<ShapeError>([] { matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); });
  EXPECT_THAT(m, HasSubstr("matmul"));
  EXPECT_THAT(m, HasSubstr("[2, 3]"));
  EXPECT_THAT(m, HasSubstr("[4, 5]"));
  EXPECT_THROW(matmul(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}), false, false), ShapeError);
  EXPECT_NO_THROW(matmul(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}), true, false));
  EXPECT_THROW(matmul(Tensor::zeros({3}), Tensor::zeros({3, 2})), ShapeError);
  EXPECT_THROW(matmul(Tensor::zeros({1, 2, 3, 4}), Tensor::zeros({4, 2})), ShapeError);
  EXPECT_THAT(message_of<ShapeError>([] {
                matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 2}));
              }),
              HasSubstr("batch"));
}

TEST(MatmulTest, BadInputsRaiseInvalidArgument) {
  EXPECT_THROW(matmul(Tensor::zeros({2, 2}, DType::kInt32), Tensor::zeros({2, 2})), InvalidArgument);
  EXPECT_THROW(matmul(Tensor(), Tensor::zeros({2, 2})), InvalidArgument);
}

}  // namespace
}  // namespace strata::kernels
