// GPU elementwise kernels (kernels/cuda/elementwise.cu) against the CPU kernels on the same random inputs: every
// binary op over same-shape, scalar, row, column and two-sided broadcasts, affine, axpy_, every unary op and its
// gradient, leaky ReLU, ELU and clip.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/kernels.h"

namespace strata {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;
using testing::expect_matches_cpu;
using testing::kFloat32Tolerance;
using testing::on_gpu;
using testing::random_host;

const std::vector<std::pair<Shape, Shape>>& broadcast_cases() {
  static const std::vector<std::pair<Shape, Shape>> cases = {
      {{1023}, {1023}},                 // same shape
      {{64, 5408}, {64, 5408}},         // same shape, large
      {{7, 13}, {}},                    // scalar
      {{}, {7, 13}},                    // scalar on the left
      {{1024, 64}, {64}},               // row (a bias)
      {{1024, 64}, {1024, 1}},          // column
      {{7, 1}, {1, 13}},                // both sides broadcast
      {{2, 3, 4, 5}, {3, 1, 5}},        // a middle axis
      {{1, 1}, {1, 1}},                 // all units
      {{5, 1, 7, 1, 3}, {4, 1, 2, 1}},  // interleaved
      {{0, 3}, {3}},                    // empty
  };
  return cases;
}

TEST(GpuElementwiseTest, BinaryOpsMatchTheCpuUnderBroadcasting) {
  STRATA_REQUIRE_GPU();
  const BinaryOp ops[] = {BinaryOp::kAdd,     BinaryOp::kSub,     BinaryOp::kMul,   BinaryOp::kDiv,    BinaryOp::kPow,
                          BinaryOp::kMaximum, BinaryOp::kMinimum, BinaryOp::kEqual, BinaryOp::kGreater};
  uint64_t seed = 1;
  for (const auto& [sa, sb] : broadcast_cases()) {
    for (BinaryOp op : ops) {
      // pow wants a positive base; equal wants some equal pairs (b = relu(a) where shapes match).
      const bool positive = op == BinaryOp::kPow;
      const Tensor a = random_host(sa, seed++, positive ? 0.1f : -1.0f, 2.0f);
      Tensor b = random_host(sb, seed++, -1.0f, 2.0f);
      if (op == BinaryOp::kEqual && sa == sb) b = kernels::unary(UnaryOp::kRelu, a);
      const std::string what =
          "binary op " + std::to_string(static_cast<int>(op)) + " of " + shape_str(sa) + " and " + shape_str(sb);
      expect_matches_cpu(kernels::binary(op, on_gpu(a), on_gpu(b)), kernels::binary(op, a, b), kFloat32Tolerance, what);
    }
  }
}

TEST(GpuElementwiseTest, IncompatibleShapesAreAShapeError) {
  STRATA_REQUIRE_GPU();
  EXPECT_THROW(kernels::add(on_gpu(random_host({2, 3}, 1)), on_gpu(random_host({4}, 2))), ShapeError);
}

TEST(GpuElementwiseTest, AffineAndAxpyMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  for (int64_t n : {1, 7, 1023, 1 << 20}) {
    const Tensor x = random_host({n}, 10 + n);
    expect_matches_cpu(kernels::affine(on_gpu(x), 1.5f, -0.25f), kernels::affine(x, 1.5f, -0.25f), kFloat32Tolerance,
                       "affine");
    Tensor y_cpu = random_host({n}, 20 + n);
    Tensor y_gpu = on_gpu(y_cpu);
    kernels::axpy_(y_cpu, -0.3f, x);
    kernels::axpy_(y_gpu, -0.3f, on_gpu(x));
    expect_matches_cpu(y_gpu, y_cpu, kFloat32Tolerance, "axpy_");
    kernels::axpy_(y_cpu, 0.5f, y_cpu);  // y += alpha * y
    kernels::axpy_(y_gpu, 0.5f, y_gpu);
    expect_matches_cpu(y_gpu, y_cpu, kFloat32Tolerance, "axpy_ onto itself");
  }
  Tensor y = on_gpu(random_host({3}, 1));
  EXPECT_THROW(kernels::axpy_(y, 1.0f, on_gpu(random_host({4}, 2))), ShapeError);
}

TEST(GpuElementwiseTest, UnaryOpsAndTheirGradientsMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  const UnaryOp ops[] = {UnaryOp::kNeg,     UnaryOp::kExp,    UnaryOp::kLog,  UnaryOp::kSqrt,
                         UnaryOp::kAbs,     UnaryOp::kSquare, UnaryOp::kSign, UnaryOp::kRelu,
                         UnaryOp::kSigmoid, UnaryOp::kTanh,   UnaryOp::kGelu};
  for (const Shape& shape : {Shape{1}, Shape{7, 13}, Shape{1023, 65}}) {
    for (UnaryOp op : ops) {
      const bool positive = op == UnaryOp::kLog || op == UnaryOp::kSqrt;
      const Tensor x = random_host(shape, 30 + static_cast<int>(op), positive ? 0.05f : -6.0f, 6.0f);
      const Tensor dy = random_host(shape, 60 + static_cast<int>(op));
      const std::string what = "unary op " + std::to_string(static_cast<int>(op)) + " " + shape_str(shape);
      const Tensor y = kernels::unary(op, x);
      expect_matches_cpu(kernels::unary(op, on_gpu(x)), y, kFloat32Tolerance, what);
      expect_matches_cpu(kernels::unary_backward(op, on_gpu(x), on_gpu(y), on_gpu(dy)),
                         kernels::unary_backward(op, x, y, dy), kFloat32Tolerance, what + " gradient");
    }
  }
}

TEST(GpuElementwiseTest, AGradientReadsOnlyWhatItNeeds) {
  STRATA_REQUIRE_GPU();
  const Tensor x = random_host({5, 3}, 1, 0.1f, 2.0f);
  const Tensor y = kernels::unary(UnaryOp::kExp, x);
  const Tensor dy = random_host({5, 3}, 2);
  // exp's gradient reads y; relu's x; neg's neither.
  expect_matches_cpu(kernels::unary_backward(UnaryOp::kExp, Tensor(), on_gpu(y), on_gpu(dy)),
                     kernels::unary_backward(UnaryOp::kExp, Tensor(), y, dy), kFloat32Tolerance, "exp gradient");
  expect_matches_cpu(kernels::unary_backward(UnaryOp::kRelu, on_gpu(x), Tensor(), on_gpu(dy)),
                     kernels::unary_backward(UnaryOp::kRelu, x, Tensor(), dy), kFloat32Tolerance, "relu gradient");
  expect_matches_cpu(kernels::unary_backward(UnaryOp::kNeg, Tensor(), Tensor(), on_gpu(dy)),
                     kernels::unary_backward(UnaryOp::kNeg, Tensor(), Tensor(), dy), kFloat32Tolerance, "neg gradient");
}

TEST(GpuElementwiseTest, LeakyReluEluAndClipMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  for (const Shape& shape : {Shape{1}, Shape{7}, Shape{1023, 33}}) {
    const Tensor x = random_host(shape, 70, -3.0f, 3.0f);
    const Tensor dy = random_host(shape, 71);
    const Tensor gx = on_gpu(x), gdy = on_gpu(dy);
    expect_matches_cpu(kernels::leaky_relu(gx, 0.2f), kernels::leaky_relu(x, 0.2f), kFloat32Tolerance, "leaky_relu");
    expect_matches_cpu(kernels::leaky_relu_backward(gx, gdy, 0.2f), kernels::leaky_relu_backward(x, dy, 0.2f),
                       kFloat32Tolerance, "leaky_relu_backward");
    const Tensor y = kernels::elu(x, 1.3f);
    expect_matches_cpu(kernels::elu(gx, 1.3f), y, kFloat32Tolerance, "elu");
    expect_matches_cpu(kernels::elu_backward(gx, on_gpu(y), gdy, 1.3f), kernels::elu_backward(x, y, dy, 1.3f),
                       kFloat32Tolerance, "elu_backward");
    expect_matches_cpu(kernels::clip(gx, -1.0f, 0.5f), kernels::clip(x, -1.0f, 0.5f), kFloat32Tolerance, "clip");
    expect_matches_cpu(kernels::clip_backward(gx, gdy, -1.0f, 0.5f), kernels::clip_backward(x, dy, -1.0f, 0.5f),
                       kFloat32Tolerance, "clip_backward");
  }
  EXPECT_THROW(kernels::clip(on_gpu(random_host({2}, 1)), 1.0f, 0.0f), InvalidArgument);
}

}  // namespace
}  // namespace strata
