// max_pool2d / avg_pool2d and their backward passes against naive loops over NHWC: VALID and SAME
// (TensorFlow's asymmetric padding) on odd sizes; max-pool gradients land on the argmax, SAME average
// pooling divides by the cells inside the input; the errors bad inputs and workspaces get.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/kernels.h"
#include "test_util.h"
#include "strata/random.h"
#include "strata/threading.h"

namespace strata::kernels {
namespace {

using test::random_tensor;

using ::testing::HasSubstr;

struct Axis {
  int64_t out, before;
};
Axis axis(int64_t in, int64_t k, int s, Padding pad) {
  if (pad == Padding::kValid) return {(in - k + s) / s, 0};
  const int64_t out = (in + s - 1) / s;
  return {out, std::max<int64_t>((out - 1) * s + k - in, 0) / 2};
}

struct Ref {
  Shape y_shape;
  std::vector<double> y, dx;
};

// Pools x; with dy also the gradient (max: to the first maximum of each window; avg: spread evenly
// over the window's cells inside the input).
Ref reference(const Tensor& x, const Tensor* dy, const Pool2DParams& p, bool max) {
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  const Axis ah = axis(H, p.pool_h, p.stride_h, p.padding), aw = axis(W, p.pool_w, p.stride_w, p.padding);
  Ref r;
  r.y_shape = {N, ah.out, aw.out, C};
  r.y.assign(shape_numel(r.y_shape), 0.0);
  r.dx.assign(x.numel(), 0.0);
  const float* px = x.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < ah.out; ++oh)
      for (int64_t ow = 0; ow < aw.out; ++ow)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t yi = ((n * ah.out + oh) * aw.out + ow) * C + c;
          double best = -std::numeric_limits<double>::infinity(), sum = 0.0;
          int64_t arg = -1, count = 0;
          for (int64_t i = 0; i < p.pool_h; ++i)
            for (int64_t j = 0; j < p.pool_w; ++j) {
              const int64_t ih = oh * p.stride_h - ah.before + i, iw = ow * p.stride_w - aw.before + j;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const int64_t xi = ((n * H + ih) * W + iw) * C + c;
              if (px[xi] > best) best = px[xi], arg = xi;
              sum += px[xi];
              ++count;
            }
          r.y[yi] = max ? best : sum / count;
          if (!dy) continue;
          const double g = dy->data<float>()[yi];
          if (max) {
            r.dx[arg] += g;
            continue;
          }
          for (int64_t i = 0; i < p.pool_h; ++i)
            for (int64_t j = 0; j < p.pool_w; ++j) {
              const int64_t ih = oh * p.stride_h - ah.before + i, iw = ow * p.stride_w - aw.before + j;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              r.dx[((n * H + ih) * W + iw) * C + c] += g / count;
            }
        }
  return r;
}

void expect_close(const Tensor& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  const float* p = got.data<float>();
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (std::abs(p[i] - want[i]) > 1e-5 * (1.0 + std::abs(want[i]))) {
      ADD_FAILURE() << what << "[" << i << "] = " << p[i] << ", want " << want[i];
      ++bad;
    }
  }
}

struct Case {
  Shape x;
  Pool2DParams p;
};

class PoolCase : public ::testing::TestWithParam<Case> {};

TEST_P(PoolCase, MaxAndAvgMatchReference) {
  const Case& c = GetParam();
  for (int threads : {1, 2}) {
    ScopedNumThreads scoped(threads);
    SCOPED_TRACE(shape_str(c.x) + " threads " + std::to_string(threads));
    const Tensor x = random_tensor(c.x, 7);
    const Shape y_shape = reference(x, nullptr, c.p, true).y_shape;
    const Tensor dy = random_tensor(y_shape, 8);

    const Ref max_ref = reference(x, &dy, c.p, true);
    const MaxPoolResult m = max_pool2d(x, c.p);
    ASSERT_EQ(m.y.shape(), y_shape);
    EXPECT_EQ(m.workspace.dtype(), DType::kUInt8);
    expect_close(m.y, max_ref.y, "max y");
    expect_close(max_pool2d_backward(dy, m.workspace, x.shape(), c.p), max_ref.dx, "max dx");

    const Ref avg_ref = reference(x, &dy, c.p, false);
    const Tensor a = avg_pool2d(x, c.p);
    ASSERT_EQ(a.shape(), y_shape);
    expect_close(a, avg_ref.y, "avg y");
    expect_close(avg_pool2d_backward(dy, x.shape(), c.p), avg_ref.dx, "avg dx");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolCase,
                         ::testing::Values(Case{{2, 8, 8, 3}, {2, 2, 2, 2, Padding::kValid}},
                                           Case{{2, 9, 7, 5}, {2, 2, 2, 2, Padding::kValid}},
                                           Case{{2, 9, 7, 5}, {2, 2, 2, 2, Padding::kSame}},
                                           Case{{1, 9, 11, 4}, {3, 3, 2, 2, Padding::kSame}},
                                           Case{{1, 10, 8, 17}, {3, 3, 2, 2, Padding::kSame}},
                                           Case{{2, 7, 7, 2}, {3, 3, 1, 1, Padding::kSame}},
                                           Case{{1, 11, 10, 3}, {3, 2, 2, 1, Padding::kSame}},
                                           Case{{1, 11, 10, 3}, {2, 3, 3, 2, Padding::kValid}},
                                           Case{{64, 26, 26, 32}, {2, 2, 2, 2, Padding::kValid}}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "case" + std::to_string(info.index);
                         });

TEST(MaxPool2D, GradientGoesToTheArgmax) {
  // One 2x2 window per channel; the maximum is at a different place in each channel.
  const Tensor x = Tensor::from_list({1, 8, 5, 2, 7, 3, 4, 6}, {1, 2, 2, 2});  // [h][w][c]
  const MaxPoolResult m = max_pool2d(x, {});
  EXPECT_EQ(m.y.to_vector<float>(), (std::vector<float>{7, 8}));
  const Tensor dx = max_pool2d_backward(Tensor::from_list({10, 20}, {1, 1, 1, 2}), m.workspace, x.shape(), {});
  EXPECT_EQ(dx.to_vector<float>(), (std::vector<float>{0, 20, 0, 0, 10, 0, 0, 0}));
}

TEST(MaxPool2D, PaddingNeverWins) {
  const Tensor x = Tensor::full({1, 3, 3, 1}, -5.0);
  const MaxPoolResult m = max_pool2d(x, {2, 2, 2, 2, Padding::kSame});
  EXPECT_EQ(m.y.to_vector<float>(), std::vector<float>(4, -5.0f));
}

TEST(AvgPool2D, SameExcludesPadding) {
  // A 3x3 input of ones pooled 2x2 stride 2 SAME: the edge windows hold 2 or 1 real cells, and
  // still average to 1 (including the zero padding would give 0.5 and 0.25).
  const Tensor y = avg_pool2d(Tensor::ones({1, 3, 3, 1}), {2, 2, 2, 2, Padding::kSame});
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(4, 1.0f));
  // Its gradient: the corner window (1 cell) gives its cell the whole gradient.
  const Tensor dx = avg_pool2d_backward(Tensor::ones({1, 2, 2, 1}), {1, 3, 3, 1}, {2, 2, 2, 2, Padding::kSame});
  EXPECT_EQ(dx.to_vector<float>(), (std::vector<float>{0.25f, 0.25f, 0.5f, 0.25f, 0.25f, 0.5f, 0.5f, 0.5f, 1.0f}));
}

TEST(Pool2D, BadInputsThrow) {
  const Tensor x = Tensor::zeros({1, 4, 4, 2});
  EXPECT_THROW(max_pool2d(Tensor::zeros({4, 4, 2}), {}), ShapeError);
  EXPECT_THROW(avg_pool2d(Tensor::zeros({1, 1, 4, 2}), {}), ShapeError);  // 2x2 does not fit VALID
  EXPECT_NO_THROW(avg_pool2d(Tensor::zeros({1, 1, 4, 2}), {2, 2, 2, 2, Padding::kSame}));
  EXPECT_THROW(max_pool2d(x, {0, 2, 2, 2}), InvalidArgument);
  EXPECT_THROW(max_pool2d(x.to(DType::kInt32), {}), InvalidArgument);
  const MaxPoolResult m = max_pool2d(x, {});
  EXPECT_THROW(max_pool2d_backward(Tensor::zeros({1, 3, 3, 2}), m.workspace, x.shape(), {}), ShapeError);
  EXPECT_THROW(max_pool2d_backward(m.y, m.workspace.to(DType::kInt32), x.shape(), {}), InvalidArgument);
  try {
    max_pool2d_backward(m.y, Tensor::zeros({3}, DType::kUInt8), x.shape(), {});
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("max_pool2d_backward: workspace of 3 bytes"));
  }
  EXPECT_THROW(avg_pool2d_backward(Tensor::zeros({1, 2, 2, 3}), x.shape(), {}), ShapeError);
}

}  // namespace
}  // namespace strata::kernels
