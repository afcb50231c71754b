// The cuDNN convolution, pooling and batch-norm kernels against the CPU kernels (oneDNN) on the same random inputs:
// the tutorial CNN's layers (batch 64 and 1024), a ResNet-20 block (3x3 SAME, the stride-2 SAME whose padding is
// asymmetric, 1x1 shortcuts), asymmetric and mixed paddings, dilations, empty shapes, pooling with every padding
// case, and batch norm over images and over rows (a batch of 1024 maps, channel counts off the reduction's block
// width, empty shapes, and runs that must repeat bit for bit).
// Tolerances: testing::kFloat32Tolerance (1e-4 of 1 + |expected|) where each output element sums at most a few
// thousand products; kLongReduction (1e-3) for the kernel, bias, gamma and beta gradients, each a sum over a whole
// batch of pixels (up to 692,224 terms for the batch-1024 CNN), which oneDNN and cuDNN round in different orders:
// the difference grows with the sum of the terms' magnitudes, not with the (much smaller) result.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/kernels.h"
#include "strata/error.h"

namespace strata {
namespace {

namespace k = kernels;
using testing::expect_matches_cpu;
using testing::kFloat32Tolerance;
using testing::on_gpu;
using testing::random_host;

constexpr double kLongReduction = 1e-3;

k::Conv2DParams conv_params(int stride_h, int stride_w, k::Padding padding, bool relu = false, int dilation_h = 1,
                            int dilation_w = 1) {
  k::Conv2DParams p;
  p.stride_h = stride_h;
  p.stride_w = stride_w;
  p.padding = padding;
  p.dilation_h = dilation_h;
  p.dilation_w = dilation_w;
  p.fused_relu = relu;
  return p;
}

// conv2d, its input gradient and its kernel (and bias) gradients on the GPU against the CPU.
void check_conv(const std::string& name, const Shape& x_shape, const Shape& w_shape, const k::Conv2DParams& p,
                bool with_bias, uint64_t seed) {
  SCOPED_TRACE(name);
  const Tensor x = random_host(x_shape, seed);
  const Tensor w = random_host(w_shape, seed + 1);
  const Tensor b = with_bias ? random_host({w_shape[3]}, seed + 2) : Tensor();
  const Tensor y = k::conv2d(x, w, b, p);
  expect_matches_cpu(k::conv2d(on_gpu(x), on_gpu(w), on_gpu(b), p), y, kFloat32Tolerance, name + ": conv2d");

  const Tensor dy = random_host(y.shape(), seed + 3);
  expect_matches_cpu(k::conv2d_backward_input(on_gpu(dy), on_gpu(w), x_shape, p),
                     k::conv2d_backward_input(dy, w, x_shape, p), kFloat32Tolerance, name + ": conv2d_backward_input");

  const k::Conv2DWeightGrads want = k::conv2d_backward_weights(x, dy, w_shape, with_bias, p);
  const k::Conv2DWeightGrads got = k::conv2d_backward_weights(on_gpu(x), on_gpu(dy), w_shape, with_bias, p);
  expect_matches_cpu(got.dw, want.dw, kLongReduction, name + ": conv2d_backward_weights dw");
  if (with_bias) {
    expect_matches_cpu(got.db, want.db, kLongReduction, name + ": conv2d_backward_weights db");
  } else {
    EXPECT_FALSE(got.db.defined()) << name;
  }
}

// ---------------------------------------------------------------- convolution

TEST(GpuConvTest, TutorialCnnLayerMatchesCpu) {
  STRATA_REQUIRE_GPU();
  // Conv2D(32, 3x3, relu) on MNIST: one input channel, VALID, bias and relu in the same call.
  check_conv("tutorial batch 64", {64, 28, 28, 1}, {3, 3, 1, 32}, conv_params(1, 1, k::Padding::kValid, true), true,
             10);
}

TEST(GpuConvTest, TutorialCnnLayerAtBatch1024MatchesCpu) {
  STRATA_REQUIRE_GPU();
  check_conv("tutorial batch 1024", {1024, 28, 28, 1}, {3, 3, 1, 32}, conv_params(1, 1, k::Padding::kValid, true), true,
             20);
}

TEST(GpuConvTest, ResNet20BlockMatchesCpu) {
  STRATA_REQUIRE_GPU();
  // CIFAR-10 stem, a 3x3 SAME block conv, the stride-2 3x3 SAME downsampling conv (TF pads 0 before and 1 after
  // on a 32-wide input: asymmetric), and the 1x1 stride-2 shortcut (VALID, and SAME, which pads nothing).
  check_conv("stem", {256, 32, 32, 3}, {3, 3, 3, 16}, conv_params(1, 1, k::Padding::kSame), false, 30);
  check_conv("stem with bias and relu", {256, 32, 32, 3}, {3, 3, 3, 16}, conv_params(1, 1, k::Padding::kSame, true),
             true, 31);
  check_conv("block 3x3", {256, 32, 32, 16}, {3, 3, 16, 16}, conv_params(1, 1, k::Padding::kSame), false, 32);
  check_conv("downsample 3x3 stride 2", {256, 32, 32, 16}, {3, 3, 16, 32}, conv_params(2, 2, k::Padding::kSame), false,
             33);
  check_conv("shortcut 1x1 stride 2 valid", {256, 32, 32, 16}, {1, 1, 16, 32}, conv_params(2, 2, k::Padding::kValid),
             false, 34);
  check_conv("shortcut 1x1 stride 2 same", {256, 32, 32, 16}, {1, 1, 16, 32}, conv_params(2, 2, k::Padding::kSame),
             true, 35);
  check_conv("1x1 stride 1", {256, 16, 16, 32}, {1, 1, 32, 64}, conv_params(1, 1, k::Padding::kValid), true, 36);
}

TEST(GpuConvTest, AsymmetricAndMixedSamePaddingMatchesCpu) {
  STRATA_REQUIRE_GPU();
  // An even kernel at stride 1: total 1 on both axes (0 before, 1 after).
  check_conv("2x2 same", {4, 9, 9, 5}, {2, 2, 5, 3}, conv_params(1, 1, k::Padding::kSame), true, 40);
  // Stride 2 on 8 x 9: rows pad (0, 1), columns (1, 1).
  check_conv("mixed rows and columns", {3, 8, 9, 4}, {3, 3, 4, 6}, conv_params(2, 2, k::Padding::kSame), false, 41);
  // A 4x4 kernel, strides (1, 2) on 10 x 11: rows and columns pad (1, 2).
  check_conv("4x4 strides 1 and 2", {2, 10, 11, 3}, {4, 4, 3, 4}, conv_params(1, 2, k::Padding::kSame), true, 42);
  // Stride 3 on 10: rows pad (0, 1) with a 2-row kernel, through more channels than the CPU's col2im threshold.
  check_conv("stride 3", {2, 10, 10, 8}, {2, 2, 8, 5}, conv_params(3, 3, k::Padding::kSame, true), true, 43);
}

TEST(GpuConvTest, DilationsMatchCpu) {
  STRATA_REQUIRE_GPU();
  check_conv("dilation 2 same", {4, 17, 17, 4}, {3, 3, 4, 6}, conv_params(1, 1, k::Padding::kSame, false, 2, 2), true,
             50);
  check_conv("dilations 2 and 3 valid", {4, 17, 19, 4}, {3, 3, 4, 6},
             conv_params(1, 1, k::Padding::kValid, false, 2, 3), false, 51);
  check_conv("dilation 2 stride 2 same", {4, 16, 16, 4}, {3, 3, 4, 6},
             conv_params(2, 2, k::Padding::kSame, false, 2, 2), false, 52);
}

TEST(GpuConvTest, EmptyShapesMatchCpu) {
  STRATA_REQUIRE_GPU();
  // No images: empty outputs, and zero kernel and bias gradients.
  check_conv("no images", {0, 5, 5, 3}, {3, 3, 3, 4}, conv_params(1, 1, k::Padding::kValid), true, 60);
  // No input channels: the output is relu(bias) everywhere and nothing flows back to the kernel.
  const Tensor x = Tensor::zeros({2, 5, 5, 0});
  const Tensor w = Tensor::zeros({3, 3, 0, 4});
  const Tensor b = random_host({4}, 61);
  const k::Conv2DParams p = conv_params(1, 1, k::Padding::kSame, true);
  expect_matches_cpu(k::conv2d(on_gpu(x), on_gpu(w), on_gpu(b), p), k::conv2d(x, w, b, p), kFloat32Tolerance,
                     "no input channels");
  const Tensor dy = random_host({2, 5, 5, 4}, 62);
  const k::Conv2DWeightGrads want = k::conv2d_backward_weights(x, dy, w.shape(), true, p);
  const k::Conv2DWeightGrads got = k::conv2d_backward_weights(on_gpu(x), on_gpu(dy), w.shape(), true, p);
  expect_matches_cpu(got.dw, want.dw, kFloat32Tolerance, "no input channels: dw");
  expect_matches_cpu(got.db, want.db, kLongReduction, "no input channels: db");
}

TEST(GpuConvTest, TheNchwFallbackMatchesCpu) {
  STRATA_REQUIRE_GPU();
  // Where cuDNN refuses every NHWC algorithm of a pass, the pass runs in NCHW on copies; the environment forces that
  // path here, on shapes no other test uses (the algorithm cache remembers a shape's layout).
  const testing::ForceNchwConvolutions force_nchw;
  check_conv("nchw 3x3 same", {6, 13, 13, 5}, {3, 3, 5, 7}, conv_params(1, 1, k::Padding::kSame, true), true, 90);
  check_conv("nchw stride 2 same, asymmetric", {6, 14, 14, 5}, {3, 3, 5, 7}, conv_params(2, 2, k::Padding::kSame),
             false, 91);
  check_conv("nchw one input channel", {6, 13, 13, 1}, {3, 3, 1, 7}, conv_params(1, 1, k::Padding::kValid), true, 92);
}

TEST(GpuConvTest, ShapeErrorsMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  const Tensor x = on_gpu(random_host({2, 8, 8, 3}, 70));
  const Tensor w = on_gpu(random_host({3, 3, 4, 5}, 71));
  EXPECT_THROW(k::conv2d(x, w, Tensor(), conv_params(1, 1, k::Padding::kValid)), ShapeError);
  const Tensor big = on_gpu(random_host({9, 9, 3, 5}, 72));
  EXPECT_THROW(k::conv2d(x, big, Tensor(), conv_params(1, 1, k::Padding::kValid)), ShapeError);
  // A kernel on the host with an input on the GPU names both devices.
  EXPECT_THROW(k::conv2d(x, random_host({3, 3, 3, 5}, 73), Tensor(), conv_params(1, 1, k::Padding::kValid)),
               InvalidArgument);
}

TEST(GpuConvTest, ThreadsConvolvingAtOnceGetTheCpuResult) {
  STRATA_REQUIRE_GPU();
  // Per-thread cuDNN handles and workspaces, one shared algorithm cache: each thread's first call may be the one
  // that picks the algorithm.
  const Tensor x = random_host({16, 20, 20, 8}, 80);
  const Tensor w = random_host({3, 3, 8, 8}, 81);
  const k::Conv2DParams p = conv_params(2, 2, k::Padding::kSame);
  const Tensor want = k::conv2d(x, w, Tensor(), p);
  const Tensor gx = on_gpu(x), gw = on_gpu(w);
  std::vector<Tensor> got(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < 5; ++r) got[i] = k::conv2d(gx, gw, Tensor(), p).to(Device::cpu());
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < got.size(); ++i) expect_matches_cpu(got[i], want, kFloat32Tolerance, "thread result");
}

// ---------------------------------------------------------------- pooling

k::Pool2DParams pool_params(int pool, int stride, k::Padding padding) {
  k::Pool2DParams p;
  p.pool_h = p.pool_w = pool;
  p.stride_h = p.stride_w = stride;
  p.padding = padding;
  return p;
}

void check_max_pool(const std::string& name, const Shape& x_shape, const k::Pool2DParams& p, uint64_t seed) {
  SCOPED_TRACE(name);
  const Tensor x = random_host(x_shape, seed);
  const k::MaxPoolResult want = k::max_pool2d(x, p);
  const k::MaxPoolResult got = k::max_pool2d(on_gpu(x), p);
  expect_matches_cpu(got.y, want.y, kFloat32Tolerance, name + ": max_pool2d");
  EXPECT_EQ(got.workspace.device(), testing::gpu()) << name;
  const Tensor dy = random_host(want.y.shape(), seed + 1);
  expect_matches_cpu(k::max_pool2d_backward(on_gpu(dy), got.workspace, x_shape, p),
                     k::max_pool2d_backward(dy, want.workspace, x_shape, p), kFloat32Tolerance,
                     name + ": max_pool2d_backward");
}

void check_avg_pool(const std::string& name, const Shape& x_shape, const k::Pool2DParams& p, uint64_t seed) {
  SCOPED_TRACE(name);
  const Tensor x = random_host(x_shape, seed);
  const Tensor y = k::avg_pool2d(x, p);
  expect_matches_cpu(k::avg_pool2d(on_gpu(x), p), y, kFloat32Tolerance, name + ": avg_pool2d");
  const Tensor dy = random_host(y.shape(), seed + 1);
  expect_matches_cpu(k::avg_pool2d_backward(on_gpu(dy), x_shape, p), k::avg_pool2d_backward(dy, x_shape, p),
                     kFloat32Tolerance, name + ": avg_pool2d_backward");
}

TEST(GpuPoolTest, MaxPoolMatchesCpu) {
  STRATA_REQUIRE_GPU();
  // 24-bit random values can repeat, and a window holding its maximum twice may pass its gradient to another cell
  // than the CPU's: no window of these inputs does (checked on the CPU for these seeds when this test was written).
  check_max_pool("tutorial 2x2", {64, 26, 26, 32}, pool_params(2, 2, k::Padding::kValid), 100);
  check_max_pool("tutorial 2x2 batch 1024", {1024, 26, 26, 32}, pool_params(2, 2, k::Padding::kValid), 101);
  check_max_pool("3x3 stride 1 same (symmetric)", {8, 16, 16, 4}, pool_params(3, 1, k::Padding::kSame), 102);
  check_max_pool("2x2 stride 2 same on 7x7 (0, 1)", {8, 7, 7, 3}, pool_params(2, 2, k::Padding::kSame), 103);
  // Rows of 15 pad (1, 1), columns of 16 pad (0, 1); overlapping windows.
  k::Pool2DParams p = pool_params(3, 2, k::Padding::kSame);
  check_max_pool("3x3 stride 2 same, mixed", {8, 15, 16, 4}, p, 104);
  check_max_pool("3x3 stride 2 valid", {8, 15, 16, 4}, pool_params(3, 2, k::Padding::kValid), 105);
  p.pool_w = 2;
  p.stride_w = 1;
  check_max_pool("3x2 window, strides 2 and 1", {4, 9, 10, 5}, p, 106);
}

TEST(GpuPoolTest, MaxPoolPassesEachWindowsGradientOnceThroughTies) {
  STRATA_REQUIRE_GPU();
  // After relu many windows hold their maximum (0) more than once. Whichever cell cuDNN picks, a window's gradient
  // must reach exactly one of its maxima, once: every dx is 0 or its window's dy, at a cell holding the maximum, and
  // each window's cells sum to its dy. (2x2 stride 2 windows do not overlap.)
  const int64_t n = 4, h = 8, w = 8, c = 3;
  Tensor x = random_host({n, h, w, c}, 110);
  float* px = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) px[i] = px[i] < 0.3f ? 0.0f : 1.0f;  // mostly ties
  const k::Pool2DParams p = pool_params(2, 2, k::Padding::kValid);
  const k::MaxPoolResult r = k::max_pool2d(on_gpu(x), p);
  const Tensor dy = random_host({n, h / 2, w / 2, c}, 111, 0.5f, 1.5f);  // never 0
  const Tensor dx = k::max_pool2d_backward(on_gpu(dy), r.workspace, x.shape(), p).to(Device::cpu());
  const Tensor y = r.y.to(Device::cpu());
  const float* pdx = dx.data<float>();
  const float* pdy = dy.data<float>();
  const float* py = y.data<float>();
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t o = 0; o < h / 2; ++o) {
      for (int64_t q = 0; q < w / 2; ++q) {
        for (int64_t ch = 0; ch < c; ++ch) {
          const int64_t yi = ((b * (h / 2) + o) * (w / 2) + q) * c + ch;
          float sum = 0.0f;
          int receivers = 0;
          for (int64_t i = 0; i < 2; ++i) {
            for (int64_t j = 0; j < 2; ++j) {
              const int64_t xi = ((b * h + 2 * o + i) * w + 2 * q + j) * c + ch;
              if (pdx[xi] == 0.0f) continue;
              ++receivers;
              sum += pdx[xi];
              EXPECT_EQ(px[xi], py[yi]) << "a cell that is not its window's maximum got a gradient, window " << yi;
            }
          }
          EXPECT_EQ(receivers, 1) << "window " << yi;
          EXPECT_EQ(sum, pdy[yi]) << "window " << yi;
        }
      }
    }
  }
}

TEST(GpuPoolTest, MaxPoolRefusesTheWorkspaceOfAnotherShape) {
  STRATA_REQUIRE_GPU();
  const k::Pool2DParams p = pool_params(2, 2, k::Padding::kValid);
  const k::MaxPoolResult r = k::max_pool2d(on_gpu(random_host({2, 8, 8, 3}, 120)), p);
  const Tensor dy = on_gpu(random_host({2, 5, 5, 3}, 121));
  EXPECT_THROW(k::max_pool2d_backward(dy, r.workspace, {2, 10, 10, 3}, p), InvalidArgument);
}

TEST(GpuPoolTest, AvgPoolExcludesPaddingLikeCpu) {
  STRATA_REQUIRE_GPU();
  check_avg_pool("tutorial 2x2 valid", {64, 26, 26, 32}, pool_params(2, 2, k::Padding::kValid), 130);
  check_avg_pool("3x3 stride 1 same (symmetric)", {8, 16, 16, 4}, pool_params(3, 1, k::Padding::kSame), 131);
  check_avg_pool("2x2 stride 2 same on 15x15 (0, 1)", {8, 15, 15, 4}, pool_params(2, 2, k::Padding::kSame), 132);
  check_avg_pool("3x3 stride 2 same on 16x16 (0, 1)", {4, 16, 16, 3}, pool_params(3, 2, k::Padding::kSame), 133);
  check_avg_pool("3x3 stride 2 same, rows (1, 1) columns (0, 1)", {4, 15, 16, 3}, pool_params(3, 2, k::Padding::kSame),
                 134);
  check_avg_pool("3x3 stride 2 valid", {4, 15, 16, 3}, pool_params(3, 2, k::Padding::kValid), 135);
  // Keras's GlobalAveragePooling done as one window, and a 8x8 window at stride 1 (pads (3, 4)).
  check_avg_pool("global 8x8", {32, 8, 8, 64}, pool_params(8, 8, k::Padding::kValid), 136);
  check_avg_pool("8x8 stride 1 same", {2, 8, 8, 5}, pool_params(8, 1, k::Padding::kSame), 137);
}

// ---------------------------------------------------------------- batch norm

void check_batch_norm(const std::string& name, const Shape& x_shape, float epsilon, uint64_t seed) {
  SCOPED_TRACE(name);
  const int64_t c = x_shape.back();
  // An offset and a scale per tensor, so the statistics are not those of the uniform draw.
  const Tensor x = k::affine(random_host(x_shape, seed), 3.0f, 0.5f);
  const Tensor gamma = random_host({c}, seed + 1, 0.5f, 1.5f);
  const Tensor beta = random_host({c}, seed + 2);
  const k::BatchNormResult want = k::batch_norm_training(x, gamma, beta, epsilon);
  const k::BatchNormResult got = k::batch_norm_training(on_gpu(x), on_gpu(gamma), on_gpu(beta), epsilon);
  expect_matches_cpu(got.y, want.y, kFloat32Tolerance, name + ": batch_norm_training y");
  expect_matches_cpu(got.mean, want.mean, kFloat32Tolerance, name + ": batch_norm_training mean");
  expect_matches_cpu(got.variance, want.variance, kFloat32Tolerance, name + ": batch_norm_training variance");

  const Tensor mean = random_host({c}, seed + 3);
  const Tensor variance = random_host({c}, seed + 4, 0.25f, 2.0f);
  expect_matches_cpu(
      k::batch_norm_inference(on_gpu(x), on_gpu(gamma), on_gpu(beta), on_gpu(mean), on_gpu(variance), epsilon),
      k::batch_norm_inference(x, gamma, beta, mean, variance, epsilon), kFloat32Tolerance,
      name + ": batch_norm_inference");

  // The backward takes the training statistics (the CPU's, on both sides, so only the backward is compared).
  const Tensor dy = random_host(x_shape, seed + 5);
  const k::BatchNormGrads gw = k::batch_norm_backward(x, dy, want.mean, want.variance, gamma, epsilon);
  const k::BatchNormGrads gg =
      k::batch_norm_backward(on_gpu(x), on_gpu(dy), on_gpu(want.mean), on_gpu(want.variance), on_gpu(gamma), epsilon);
  expect_matches_cpu(gg.dx, gw.dx, kFloat32Tolerance, name + ": batch_norm_backward dx");
  expect_matches_cpu(gg.dgamma, gw.dgamma, kLongReduction, name + ": batch_norm_backward dgamma");
  expect_matches_cpu(gg.dbeta, gw.dbeta, kLongReduction, name + ": batch_norm_backward dbeta");
}

TEST(GpuBatchNormTest, OverImagesMatchesCpu) {
  STRATA_REQUIRE_GPU();
  check_batch_norm("tutorial feature map", {64, 26, 26, 32}, 1e-3f, 200);
  check_batch_norm("ResNet-20 block", {256, 32, 32, 16}, 1e-3f, 201);
  check_batch_norm("ResNet-20 stage 3", {256, 8, 8, 64}, 1e-5f, 202);
}

TEST(GpuBatchNormTest, OverRowsMatchesCpu) {
  STRATA_REQUIRE_GPU();
  check_batch_norm("dense [64, 10]", {64, 10}, 1e-3f, 210);
  check_batch_norm("dense [1024, 128]", {1024, 128}, 1e-3f, 211);
  check_batch_norm("two rows", {2, 7}, 1e-3f, 212);
  check_batch_norm("epsilon 0", {128, 16}, 0.0f, 213);
}

TEST(GpuBatchNormTest, OneRowHasZeroVariance) {
  STRATA_REQUIRE_GPU();
  // One value per channel: the biased variance is 0 (cuDNN's unbiased one would divide by 0), y is beta.
  check_batch_norm("one row", {1, 6}, 1e-3f, 220);
  const Tensor beta = random_host({6}, 222);
  const k::BatchNormResult r =
      k::batch_norm_training(on_gpu(random_host({1, 6}, 221)), on_gpu(Tensor::ones({6})), on_gpu(beta), 1e-3f);
  EXPECT_EQ(r.variance.to(Device::cpu()).to_vector<float>(), std::vector<float>(6, 0.0f));
  expect_matches_cpu(r.y, beta.reshape({1, 6}), kFloat32Tolerance, "one row: y is beta");
}

TEST(GpuBatchNormTest, LargeBatchMatchesCpu) {
  STRATA_REQUIRE_GPU();
  // 692,224 rows: the reduction's largest grid of row chunks, each thread adding many rows before the trees.
  check_batch_norm("tutorial feature map at batch 1024", {1024, 26, 26, 32}, 1e-3f, 240);
}

TEST(GpuBatchNormTest, ChannelCountsOffTheBlockWidthMatchCpu) {
  STRATA_REQUIRE_GPU();
  // The reduction blocks cover a power of two of channels (at most 32): fewer channels than that, a last group only
  // partly used, one channel, and row counts that are no multiple of a block's rows per sweep.
  check_batch_norm("3 channels", {64, 9, 9, 3}, 1e-3f, 250);
  check_batch_norm("10 channels", {300, 10}, 1e-3f, 251);
  check_batch_norm("100 channels", {32, 7, 7, 100}, 1e-3f, 252);
  check_batch_norm("1 channel", {4097, 1}, 1e-3f, 253);
  check_batch_norm("33 channels", {513, 33}, 1e-5f, 254);
}

TEST(GpuBatchNormTest, RepeatsBitForBit) {
  STRATA_REQUIRE_GPU();
  // The reductions add in a fixed order (no atomics): the same inputs give the same bits.
  const Tensor x = on_gpu(random_host({256, 8, 8, 64}, 260));
  const Tensor gamma = on_gpu(random_host({64}, 261));
  const Tensor beta = on_gpu(random_host({64}, 262));
  const Tensor dy = on_gpu(random_host({256, 8, 8, 64}, 263));
  const k::BatchNormResult a = k::batch_norm_training(x, gamma, beta, 1e-3f);
  const k::BatchNormResult b = k::batch_norm_training(x, gamma, beta, 1e-3f);
  EXPECT_EQ(a.mean.to(Device::cpu()).to_vector<float>(), b.mean.to(Device::cpu()).to_vector<float>());
  EXPECT_EQ(a.variance.to(Device::cpu()).to_vector<float>(), b.variance.to(Device::cpu()).to_vector<float>());
  const k::BatchNormGrads ga = k::batch_norm_backward(x, dy, a.mean, a.variance, gamma, 1e-3f);
  const k::BatchNormGrads gb = k::batch_norm_backward(x, dy, a.mean, a.variance, gamma, 1e-3f);
  EXPECT_EQ(ga.dgamma.to(Device::cpu()).to_vector<float>(), gb.dgamma.to(Device::cpu()).to_vector<float>());
  EXPECT_EQ(ga.dbeta.to(Device::cpu()).to_vector<float>(), gb.dbeta.to(Device::cpu()).to_vector<float>());
}

TEST(GpuBatchNormTest, EmptyShapesKeepTheCpuContract) {
  STRATA_REQUIRE_GPU();
  // No channels: empty outputs. No rows: training refuses, inference returns the empty map, backward zero sums.
  const Tensor none = on_gpu(Tensor::zeros({0}));
  const k::BatchNormResult r = k::batch_norm_training(on_gpu(Tensor::zeros({4, 0})), none, none, 1e-3f);
  EXPECT_EQ(r.y.shape(), (Shape{4, 0}));
  EXPECT_EQ(r.mean.numel(), 0);
  const Tensor ones = on_gpu(Tensor::ones({3}));
  const Tensor rows0 = on_gpu(Tensor::zeros({0, 3}));
  EXPECT_THROW(k::batch_norm_training(rows0, ones, ones, 1e-3f), ShapeError);
  EXPECT_EQ(k::batch_norm_inference(rows0, ones, ones, ones, ones, 1e-3f).shape(), (Shape{0, 3}));
  const k::BatchNormGrads g = k::batch_norm_backward(rows0, rows0, ones, ones, ones, 1e-3f);
  EXPECT_EQ(g.dx.shape(), (Shape{0, 3}));
  EXPECT_EQ(g.dgamma.to(Device::cpu()).to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(g.dbeta.to(Device::cpu()).to_vector<float>(), std::vector<float>(3, 0.0f));
}

TEST(GpuBatchNormTest, ShapeErrorsMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  const Tensor x = on_gpu(random_host({4, 3}, 230));
  EXPECT_THROW(k::batch_norm_training(x, on_gpu(Tensor::ones({4})), on_gpu(Tensor::zeros({3})), 1e-3f), ShapeError);
  EXPECT_THROW(k::batch_norm_training(x, on_gpu(Tensor::ones({3})), on_gpu(Tensor::zeros({3})), -1.0f),
               InvalidArgument);
}

}  // namespace
}  // namespace strata
