// conv2d and its two backward passes against naive double-precision loops over NHWC / HWIO, for
// strides, dilations, VALID and SAME padding on odd sizes, with and without bias, few and many
// channels; results at 1 and 2 threads and on cache hits; the errors bad inputs get.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "kernels/cpu/dnnl_util.h"
#include "kernels/kernels.h"
#include "test_util.h"
#include "strata/random.h"
#include "strata/threading.h"

namespace strata::kernels {
namespace {

using test::random_tensor;

using ::testing::HasSubstr;

// The geometry TensorFlow defines, written out again independently of the kernel.
struct Axis {
  int64_t out, before;
};
Axis axis(int64_t in, int64_t k, int s, int d, Padding pad) {
  const int64_t span = (k - 1) * d + 1;
  if (pad == Padding::kValid) return {(in - span + s) / s, 0};
  const int64_t out = (in + s - 1) / s;
  const int64_t total = std::max<int64_t>((out - 1) * s + span - in, 0);
  return {out, total / 2};
}

struct Ref {
  std::vector<double> y, dx, dw, db;
  // Sums of the absolute values of the terms of each result: float rounding grows with them.
  std::vector<double> y_abs, dx_abs, dw_abs, db_abs;
  Shape y_shape;
};

// Forward, and with dy the two backward passes as the transposed loops.
Ref reference(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor* dy, const Conv2DParams& p) {
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  const int64_t KH = w.dim(0), KW = w.dim(1), F = w.dim(3);
  const Axis ah = axis(H, KH, p.stride_h, p.dilation_h, p.padding);
  const Axis aw = axis(W, KW, p.stride_w, p.dilation_w, p.padding);
  const int64_t OH = ah.out, OW = aw.out;
  Ref r;
  r.y_shape = {N, OH, OW, F};
  r.y.assign(N * OH * OW * F, 0.0);
  r.dx.assign(x.numel(), 0.0);
  r.dw.assign(w.numel(), 0.0);
  r.db.assign(F, 0.0);
  r.y_abs.assign(r.y.size(), 0.0);
  r.dx_abs.assign(r.dx.size(), 0.0);
  r.dw_abs.assign(r.dw.size(), 0.0);
  r.db_abs.assign(F, 0.0);
  const float* px = x.data<float>();
  const float* pw = w.data<float>();
  const float* pdy = dy ? dy->data<float>() : nullptr;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t f = 0; f < F; ++f) {
          const int64_t yi = ((n * OH + oh) * OW + ow) * F + f;
          double acc = bias ? bias->data<float>()[f] : 0.0;
          const double g = pdy ? pdy[yi] : 0.0;
          r.db[f] += g;
          r.db_abs[f] += std::abs(g);
          for (int64_t i = 0; i < KH; ++i)
            for (int64_t j = 0; j < KW; ++j) {
              const int64_t ih = oh * p.stride_h - ah.before + i * p.dilation_h;
              const int64_t iw = ow * p.stride_w - aw.before + j * p.dilation_w;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              for (int64_t c = 0; c < C; ++c) {
                const int64_t xi = ((n * H + ih) * W + iw) * C + c;
                const int64_t wi = ((i * KW + j) * C + c) * F + f;
                acc += static_cast<double>(px[xi]) * pw[wi];
                r.dx[xi] += g * pw[wi];
                r.dw[wi] += g * px[xi];
                r.y_abs[yi] += std::abs(static_cast<double>(px[xi]) * pw[wi]);
                r.dx_abs[xi] += std::abs(g * pw[wi]);
                r.dw_abs[wi] += std::abs(g * px[xi]);
              }
            }
          r.y[yi] = acc;
        }
  return r;
}

// Float32 sums of many terms: allow 1e-4 relative plus 1e-6 of the terms' absolute sum.
void expect_close(const Tensor& got, const std::vector<double>& want, const std::vector<double>& abs_sum,
                  const char* what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  const float* p = got.data<float>();
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (std::abs(p[i] - want[i]) > 1e-4 * (1.0 + std::abs(want[i])) + 1e-6 * abs_sum[i]) {
      ADD_FAILURE() << what << "[" << i << "] = " << p[i] << ", want " << want[i];
      ++bad;
    }
  }
}

struct Case {
  Shape x, w;
  int sh, sw, dh, dw;
  Padding padding;
  bool bias;
};

std::string name(const Case& c) {
  std::ostringstream os;
  os << shape_str(c.x) << " * " << shape_str(c.w) << " strides " << c.sh << "," << c.sw << " dilations " << c.dh << ","
     << c.dw << (c.padding == Padding::kSame ? " SAME" : " VALID") << (c.bias ? " +bias" : "");
  return os.str();
}

class ConvCase : public ::testing::TestWithParam<Case> {};

void check_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(name(c));
  const Tensor x = random_tensor(c.x, seed);
  const Tensor w = random_tensor(c.w, seed + 1);
  const Tensor b = random_tensor({c.w[3]}, seed + 2);
  const Conv2DParams p{c.sh, c.sw, c.padding, c.dh, c.dw};
  const Ref shape_only = reference(x, w, nullptr, nullptr, p);
  const Tensor dy = random_tensor(shape_only.y_shape, seed + 3);
  const Ref ref = reference(x, w, c.bias ? &b : nullptr, &dy, p);

  const Tensor y = conv2d(x, w, c.bias ? b : Tensor(), p);
  ASSERT_EQ(y.shape(), ref.y_shape);
  expect_close(y, ref.y, ref.y_abs, "y");
  const Tensor dx = conv2d_backward_input(dy, w, x.shape(), p);
  ASSERT_EQ(dx.shape(), x.shape());
  expect_close(dx, ref.dx, ref.dx_abs, "dx");
  const Conv2DWeightGrads g = conv2d_backward_weights(x, dy, w.shape(), c.bias, p);
  ASSERT_EQ(g.dw.shape(), w.shape());
  expect_close(g.dw, ref.dw, ref.dw_abs, "dw");
  if (c.bias) {
    ASSERT_TRUE(g.db.defined());
    expect_close(g.db, ref.db, ref.db_abs, "db");
  } else {
    EXPECT_FALSE(g.db.defined());
  }
}

TEST_P(ConvCase, MatchesReferenceAtOneAndTwoThreads) {
  for (int threads : {1, 2}) {
    ScopedNumThreads scoped(threads);
    SCOPED_TRACE("threads " + std::to_string(threads));
    check_case(GetParam(), 10);
    check_case(GetParam(), 20);  // a cache hit with new values
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvCase,
                         ::testing::Values(Case{{2, 7, 9, 3}, {3, 3, 3, 4}, 1, 1, 1, 1, Padding::kValid, true},
                                           Case{{2, 7, 9, 3}, {3, 3, 3, 4}, 1, 1, 1, 1, Padding::kSame, false},
                                           Case{{1, 8, 7, 2}, {3, 2, 2, 5}, 2, 2, 1, 1, Padding::kSame, true},
                                           Case{{2, 9, 10, 3}, {3, 3, 3, 4}, 2, 3, 1, 1, Padding::kValid, false},
                                           Case{{1, 11, 9, 2}, {3, 3, 2, 3}, 1, 1, 2, 2, Padding::kSame, true},
                                           Case{{2, 10, 11, 3}, {2, 3, 3, 2}, 3, 2, 2, 1, Padding::kSame, false},
                                           Case{{1, 12, 13, 2}, {3, 3, 2, 3}, 2, 1, 2, 3, Padding::kValid, true},
                                           Case{{1, 5, 5, 1}, {5, 5, 1, 2}, 1, 1, 1, 1, Padding::kValid, true},
                                           Case{{2, 6, 7, 1}, {3, 3, 1, 8}, 1, 1, 1, 1, Padding::kSame, true},
                                           Case{{2, 7, 7, 4}, {1, 1, 4, 6}, 2, 2, 1, 1, Padding::kValid, false},
                                           Case{{2, 9, 9, 20}, {3, 3, 20, 33}, 1, 1, 1, 1, Padding::kSame, true},
                                           Case{{2, 9, 8, 17}, {3, 3, 17, 16}, 2, 2, 1, 1, Padding::kSame, false},
                                           Case{{4, 28, 28, 1}, {3, 3, 1, 32}, 1, 1, 1, 1, Padding::kValid, true},
                                           Case{{1, 3, 3, 2}, {5, 5, 2, 3}, 1, 1, 1, 1, Padding::kSame, true},
                                           Case{{1, 4, 4, 2}, {5, 5, 2, 3}, 2, 2, 1, 1, Padding::kSame, false},
                                           Case{{2, 9, 10, 4}, {3, 3, 4, 5}, 2, 3, 2, 1, Padding::kSame, true},
                                           Case{{3, 11, 12, 3}, {5, 3, 3, 6}, 2, 2, 1, 1, Padding::kValid, false},
                                           Case{{2, 10, 9, 5}, {3, 3, 5, 7}, 1, 2, 1, 2, Padding::kSame, true},
                                           // Input gradient done in two groups of images (planes over 16 MB).
                                           Case{{40, 64, 64, 4}, {3, 3, 4, 8}, 1, 1, 1, 1, Padding::kSame, false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "case" + std::to_string(info.index);
                         });

TEST(Conv2D, ConcurrentCallsFromTwoThreads) {
  // Each thread has its own stream and scratch; the two share cached primitives.
  const Case a{{2, 9, 9, 20}, {3, 3, 20, 33}, 1, 1, 1, 1, Padding::kSame, true};
  const Case b{{2, 6, 7, 1}, {3, 3, 1, 8}, 2, 1, 1, 1, Padding::kSame, true};
  auto work = [](const Case& c, uint64_t seed) {
    set_num_threads(1);
    for (int i = 0; i < 5; ++i) check_case(c, seed + i);
  };
  std::thread t1(work, a, 100), t2(work, b, 200), t3(work, a, 300);
  t1.join();
  t2.join();
  t3.join();
}

TEST(Conv2D, SamePaddingKeepsSizeAndPadsTheEndMore) {
  // 4x4 input, 2x2 kernel of ones, stride 1, SAME: total pad 1, all of it after (TensorFlow).
  const Tensor x = Tensor::from_list({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 4, 4, 1});
  const Tensor w = Tensor::ones({2, 2, 1, 1});
  const Tensor y = conv2d(x, w, Tensor(), {1, 1, Padding::kSame});
  ASSERT_EQ(y.shape(), (Shape{1, 4, 4, 1}));
  EXPECT_EQ(y.to_vector<float>()[0], 1 + 2 + 5 + 6);
  EXPECT_EQ(y.to_vector<float>()[15], 16);
}

TEST(Conv2D, RepeatedCallsHitThePrimitiveCache) {
  const Tensor x = random_tensor({2, 10, 10, 3}, 1);
  const Tensor w = random_tensor({3, 3, 3, 7}, 2);
  conv2d(x, w, Tensor(), {});
  const int64_t misses = cpu::primitive_cache_stats().misses;
  for (int i = 0; i < 3; ++i) conv2d(x, w, Tensor(), {});
  EXPECT_EQ(cpu::primitive_cache_stats().misses, misses);
}

TEST(Conv2D, EmptyBatch) {
  const Tensor y = conv2d(Tensor::zeros({0, 5, 5, 2}), random_tensor({3, 3, 2, 4}, 1), Tensor(), {});
  EXPECT_EQ(y.shape(), (Shape{0, 3, 3, 4}));
  const auto g =
      conv2d_backward_weights(Tensor::zeros({0, 5, 5, 2}), Tensor::zeros({0, 3, 3, 4}), {3, 3, 2, 4}, true, {});
  EXPECT_EQ(g.dw.to_vector<float>(), std::vector<float>(72, 0.0f));
  EXPECT_EQ(g.db.to_vector<float>(), std::vector<float>(4, 0.0f));
}

TEST(Conv2D, ChannelMismatchNamesOpAndShapes) {
  try {
    conv2d(Tensor::zeros({64, 28, 28, 3}), Tensor::zeros({3, 3, 1, 32}), Tensor(), {});
    FAIL() << "no throw";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("conv2d: input [64, 28, 28, 3] has 3 channels but kernel [3, 3, 1, 32] expects 1"));
  }
}

TEST(Conv2D, BadInputsThrow) {
  const Tensor x = Tensor::zeros({1, 5, 5, 2});
  const Tensor w = Tensor::zeros({3, 3, 2, 4});
  EXPECT_THROW(conv2d(Tensor::zeros({5, 5, 2}), w, Tensor(), {}), ShapeError);
  EXPECT_THROW(conv2d(x, Tensor::zeros({3, 2, 4}), Tensor(), {}), ShapeError);
  EXPECT_THROW(conv2d(x, Tensor::zeros({7, 7, 2, 4}), Tensor(), {}), ShapeError);  // does not fit VALID
  EXPECT_NO_THROW(conv2d(x, Tensor::zeros({7, 7, 2, 4}), Tensor(), {1, 1, Padding::kSame}));
  EXPECT_THROW(conv2d(x, w, Tensor::zeros({3}), {}), ShapeError);
  EXPECT_THROW(conv2d(x, w, Tensor(), {0, 1}), InvalidArgument);
  EXPECT_THROW(conv2d(x, w, Tensor(), {1, 1, Padding::kValid, 0, 1}), InvalidArgument);
  EXPECT_THROW(conv2d(x.to(DType::kInt32), w, Tensor(), {}), InvalidArgument);
  EXPECT_THROW(conv2d(Tensor(), w, Tensor(), {}), InvalidArgument);
  EXPECT_THROW(conv2d_backward_input(Tensor::zeros({1, 3, 4, 4}), w, x.shape(), {}), ShapeError);
  EXPECT_THROW(conv2d_backward_weights(x, Tensor::zeros({1, 3, 3, 5}), w.shape(), false, {}), ShapeError);
  try {
    conv2d_backward_input(Tensor::zeros({1, 3, 4, 4}), w, x.shape(), {});
    FAIL() << "no throw";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("conv2d_backward_input: output gradient [1, 3, 4, 4] does not match the output "
                                    "[1, 3, 3, 4]"));
  }
}

}  // namespace
}  // namespace strata::kernels
