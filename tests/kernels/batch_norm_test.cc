// batch_norm_training / inference / backward, channels last, against the formulas in double:
// statistics over every axis but the last, biased variance, and the standard backward pass.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/kernels.h"
#include "test_util.h"
#include "strata/random.h"
#include "strata/threading.h"

namespace strata::kernels {
namespace {

using test::random_tensor;

using ::testing::HasSubstr;

void expect_close(const Tensor& got, const std::vector<double>& want, const char* what, double tol = 1e-4) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  const float* p = got.data<float>();
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (std::abs(p[i] - want[i]) > tol * (1.0 + std::abs(want[i]))) {
      ADD_FAILURE() << what << "[" << i << "] = " << p[i] << ", want " << want[i];
      ++bad;
    }
  }
}

struct Stats {
  std::vector<double> mean, var;
};
Stats statistics(const Tensor& x) {
  const int64_t C = x.dim(-1), M = x.numel() / C;
  Stats s{std::vector<double>(C, 0.0), std::vector<double>(C, 0.0)};
  const float* px = x.data<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) s.mean[c] += px[m * C + c];
  for (auto& v : s.mean) v /= M;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) s.var[c] += (px[m * C + c] - s.mean[c]) * (px[m * C + c] - s.mean[c]);
  for (auto& v : s.var) v /= M;
  return s;
}

// y = gamma * (x - mean) / sqrt(var + eps) + beta.
std::vector<double> normalize(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                              const Tensor& gamma, const Tensor& beta, double eps) {
  const int64_t C = x.dim(-1);
  std::vector<double> y(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = i % C;
    y[i] = gamma.data<float>()[c] * (x.data<float>()[i] - mean[c]) / std::sqrt(var[c] + eps) + beta.data<float>()[c];
  }
  return y;
}

class BatchNormShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(BatchNormShapes, TrainingInferenceAndBackwardMatchFormulas) {
  const Shape shape = GetParam();
  const int64_t C = shape.back();
  const int64_t M = shape_numel(shape) / C;
  const float eps = 1e-3f;
  for (int threads : {1, 2}) {
    ScopedNumThreads scoped(threads);
    SCOPED_TRACE(shape_str(shape) + " threads " + std::to_string(threads));
    const Tensor x = random_tensor(shape, 1, 2.0f, 5.0f);  // an offset mean, as real activations have
    const Tensor gamma = random_tensor({C}, 2, 0.5f, 1.5f);
    const Tensor beta = random_tensor({C}, 3);
    const Tensor dy = random_tensor(shape, 4);
    const Stats s = statistics(x);

    const BatchNormResult r = batch_norm_training(x, gamma, beta, eps);
    ASSERT_EQ(r.y.shape(), shape);
    expect_close(r.mean, s.mean, "mean");
    expect_close(r.variance, s.var, "variance");
    expect_close(r.y, normalize(x, s.mean, s.var, gamma, beta, eps), "y");

    // Inference with other statistics (a moving average).
    const Tensor moving_mean = random_tensor({C}, 5);
    const Tensor moving_var = random_tensor({C}, 6, 0.5f, 2.0f);
    const auto mm = moving_mean.to_vector<double>(), mv = moving_var.to_vector<double>();
    expect_close(batch_norm_inference(x, gamma, beta, moving_mean, moving_var, eps),
                 normalize(x, mm, mv, gamma, beta, eps), "inference y");

    // Backward: dbeta = sum dy, dgamma = sum dy * xhat,
    // dx = gamma / sqrt(var + eps) * (dy - dbeta / M - xhat * dgamma / M).
    const BatchNormGrads g = batch_norm_backward(x, dy, r.mean, r.variance, gamma, eps);
    std::vector<double> dgamma(C, 0.0), dbeta(C, 0.0), dx(x.numel());
    const float* px = x.data<float>();
    const float* pdy = dy.data<float>();
    const auto mean = r.mean.to_vector<double>(), var = r.variance.to_vector<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t c = i % C;
      dbeta[c] += pdy[i];
      dgamma[c] += pdy[i] * (px[i] - mean[c]) / std::sqrt(var[c] + eps);
    }
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t c = i % C;
      const double inv = 1.0 / std::sqrt(var[c] + eps);
      const double xhat = (px[i] - mean[c]) * inv;
      dx[i] = gamma.data<float>()[c] * inv * (pdy[i] - dbeta[c] / M - xhat * dgamma[c] / M);
    }
    expect_close(g.dbeta, dbeta, "dbeta");
    expect_close(g.dgamma, dgamma, "dgamma");
    expect_close(g.dx, dx, "dx", 5e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormShapes,
                         ::testing::Values(Shape{64, 10}, Shape{3, 5, 7, 4}, Shape{2, 9, 9, 37}, Shape{100, 1},
                                           Shape{16, 13, 13, 32}, Shape{6, 5, 16}, Shape{1031, 3}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "case" + std::to_string(info.index);
                         });

TEST(BatchNorm, ConstantChannelNormalisesToBeta) {
  const BatchNormResult r =
      batch_norm_training(Tensor::full({8, 2}, 3.0), Tensor::ones({2}), Tensor::from_list({0.5f, -1.0f}, {2}), 1e-3f);
  EXPECT_EQ(r.mean.to_vector<float>(), (std::vector<float>{3, 3}));
  EXPECT_EQ(r.variance.to_vector<float>(), (std::vector<float>{0, 0}));
  const auto y = r.y.to_vector<float>();
  for (int i = 0; i < 16; ++i) EXPECT_FLOAT_EQ(y[i], i % 2 == 0 ? 0.5f : -1.0f);
}

TEST(BatchNorm, BadInputsThrow) {
  const Tensor x = Tensor::zeros({4, 3});
  const Tensor c3 = Tensor::ones({3});
  try {
    batch_norm_training(x, Tensor::ones({4}), c3, 1e-3f);
    FAIL() << "no throw";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("batch_norm_training: gamma [4] does not match the 3 channels of input [4, 3]"));
  }
  EXPECT_THROW(batch_norm_training(x, c3, Tensor::ones({3, 1}), 1e-3f), ShapeError);
  EXPECT_THROW(batch_norm_training(Tensor::zeros({0, 3}), c3, c3, 1e-3f), ShapeError);
  EXPECT_THROW(batch_norm_training(x, c3, c3, -1.0f), InvalidArgument);
  EXPECT_THROW(batch_norm_training(x.to(DType::kInt32), c3, c3, 1e-3f), InvalidArgument);
  EXPECT_THROW(batch_norm_inference(x, c3, c3, c3, Tensor::ones({2}), 1e-3f), ShapeError);
  EXPECT_THROW(batch_norm_backward(x, Tensor::zeros({4, 2}), c3, c3, c3, 1e-3f), ShapeError);
}

}  // namespace
}  // namespace strata::kernels
