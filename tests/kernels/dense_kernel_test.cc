// dense / dense_backward: the fused product + bias + relu and its gradients against a double-precision
// reference, with and without bias and relu; the bias gradient over many row blocks, the same at 1 and 2
// threads; only the gradients asked for; the errors bad shapes get.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/kernels.h"
#include "strata/threading.h"
#include "test_util.h"

namespace strata::kernels {
namespace {

using test::message_of;
using test::random_tensor;
using ::testing::HasSubstr;

struct Reference {
  std::vector<double> y, dz, dx, dw, db;
};

// y = act(x w + b), dz = dy through relu's mask, dx = dz w^T, dw = x^T dz, db = column sums of dz; in double.
Reference reference(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy, bool relu) {
  const int64_t M = x.dim(0), K = x.dim(1), N = w.dim(1);
  const auto px = x.to_vector<double>(), pw = w.to_vector<double>(), pdy = dy.to_vector<double>();
  const auto pb = b.defined() ? b.to_vector<double>() : std::vector<double>(N, 0.0);
  Reference r{std::vector<double>(M * N), std::vector<double>(M * N), std::vector<double>(M * K, 0.0),
              std::vector<double>(K * N, 0.0), std::vector<double>(N, 0.0)};
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = pb[j];
      for (int64_t k = 0; k < K; ++k) s += px[i * K + k] * pw[k * N + j];
      r.y[i * N + j] = relu ? std::max(s, 0.0) : s;
      r.dz[i * N + j] = relu && s <= 0.0 ? 0.0 : pdy[i * N + j];
    }
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const double d = r.dz[i * N + j];
      r.db[j] += d;
      for (int64_t k = 0; k < K; ++k) {
        r.dx[i * K + k] += d * pw[k * N + j];
        r.dw[k * N + j] += px[i * K + k] * d;
      }
    }
  return r;
}

void expect_close(const Tensor& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_TRUE(got.defined()) << what;
  const auto g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], want[i], tol) << what << " element " << i;
}

TEST(DenseKernelTest, ForwardAndBackwardMatchTheReference) {
  // 300 rows of 128 span three row blocks of the bias gradient; 7 rows of 10 one.
  for (const Shape& mkn : {Shape{7, 5, 10}, Shape{300, 20, 128}}) {
    const int64_t M = mkn[0], K = mkn[1], N = mkn[2];
    const Tensor x = random_tensor({M, K}, 1), w = random_tensor({K, N}, 2), b = random_tensor({N}, 3);
    const Tensor dy = random_tensor({M, N}, 4);
    for (bool relu : {false, true}) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(shape_str(mkn) + (relu ? " relu" : " linear") + (with_bias ? " with bias" : " without bias"));
        const Tensor bias = with_bias ? b : Tensor();
        const Reference r = reference(x, w, bias, dy, relu);
        const Tensor y = dense(x, w, bias, relu);
        expect_close(y, r.y, 1e-4, "y");
        const DenseGrads g = dense_backward(x, w, y, dy, relu, true, true, true);
        expect_close(g.dx, r.dx, 1e-4, "dx");
        expect_close(g.dw, r.dw, 1e-3, "dw");
        expect_close(g.db, r.db, 1e-3, "db");
      }
    }
  }
}

TEST(DenseKernelTest, ResultsDoNotDependOnTheThreadCount) {
  const Tensor x = random_tensor({1000, 16}, 5), w = random_tensor({16, 64}, 6), b = random_tensor({64}, 7);
  const Tensor dy = random_tensor({1000, 64}, 8);
  auto forward = [&](int threads) {
    ScopedNumThreads scoped(threads);
    return dense(x, w, b, true);
  };
  const Tensor y = forward(1);
  // The product is oneDNN's sgemm, whose sums may be split otherwise at another thread count (its AVX2 kernels do):
  // equal to within rounding.
  expect_close(forward(2), y.to_vector<double>(), 1e-5, "y at 2 threads");
  auto bias_gradient = [&](int threads) {
    ScopedNumThreads scoped(threads);
    return dense_backward(x, w, y, dy, true, false, false, true).db.to_vector<float>();
  };
  EXPECT_EQ(bias_gradient(1), bias_gradient(2));  // bit for bit: strata's row blocks do not follow the threads
}

TEST(DenseKernelTest, ComputesOnlyTheGradientsAskedFor) {
  const Tensor x = random_tensor({4, 3}, 9), w = random_tensor({3, 2}, 10), dy = random_tensor({4, 2}, 11);
  const Tensor y = dense(x, w, Tensor(), true);
  const DenseGrads only_w = dense_backward(x, w, y, dy, true, false, true, false);
  EXPECT_FALSE(only_w.dx.defined());
  EXPECT_TRUE(only_w.dw.defined());
  EXPECT_FALSE(only_w.db.defined());
  const DenseGrads only_b = dense_backward(x, w, y, dy, false, false, false, true);
  EXPECT_FALSE(only_b.dw.defined());
  expect_close(only_b.db, reference(x, w, Tensor(), dy, false).db, 1e-5, "db");
}

TEST(DenseKernelTest, EmptyBatchGivesZeroWeightGradients) {
  const Tensor x = Tensor::empty({0, 3}), w = random_tensor({3, 2}, 12);
  const Tensor y = dense(x, w, random_tensor({2}, 13), true);
  EXPECT_EQ(y.shape(), (Shape{0, 2}));
  const DenseGrads g = dense_backward(x, w, y, Tensor::empty({0, 2}), true, true, true, true);
  EXPECT_EQ(g.dx.shape(), (Shape{0, 3}));
  expect_close(g.dw, std::vector<double>(6, 0.0), 0.0, "dw");
  expect_close(g.db, std::vector<double>(2, 0.0), 0.0, "db");
}

TEST(DenseKernelTest, BadShapesNameBothOperands) {
  const Tensor x = random_tensor({4, 3}, 14), w = random_tensor({5, 2}, 15);
  EXPECT_THAT(message_of<ShapeError>([&] { dense(x, w, Tensor(), false); }),
              AllOf(HasSubstr("dense"), HasSubstr("[4, 3]"), HasSubstr("[5, 2]")));
  const Tensor w2 = random_tensor({3, 2}, 16);
  EXPECT_THAT(message_of<ShapeError>([&] { dense(x, w2, random_tensor({3}, 17), false); }),
              AllOf(HasSubstr("bias"), HasSubstr("[3]")));
  EXPECT_THAT(message_of<ShapeError>([&] {
                dense_backward(x, w2, Tensor(), random_tensor({4, 3}, 18), false, true, true, true);
              }),
              HasSubstr("dense_backward"));
}

}  // namespace
}  // namespace strata::kernels
