// GPU reductions and softmax (kernels/cuda/reduce.cu, softmax.cc) against the CPU kernels on the same random inputs:
// sum, mean and max over every kind of axis set, argmax (ties and NaN too), broadcast_to of several dtypes,
// sum_to_shape (the bias gradients of the tutorial CNN), and softmax/log-softmax with their gradients on any axis.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/kernels.h"

namespace strata {
namespace {

using testing::expect_matches_cpu;
using testing::kFloat32Tolerance;
using testing::on_gpu;
using testing::random_host;

std::string axes_str(const std::vector<int>& axes) {
  std::string s = "{";
  for (int a : axes) s += std::to_string(a) + ",";
  return s + "}";
}

struct ReduceCase {
  Shape shape;
  std::vector<int> axes;
  // Sums of 700k floats: the CPU adds in double, the GPU in float (each thread of a CUB block some 2700 of them),
  // which rounds to ~1e-3 of the partial sums' size whatever the total.
  double tolerance = testing::kFloat32Tolerance;
};

const std::vector<ReduceCase>& reduce_cases() {
  static const std::vector<ReduceCase> cases = {
      {{1}, {}},
      {{1023}, {}},
      {{1 << 20}, {0}},   // one long run
      {{64, 1023}, {1}},  // rows (inner == 1)
      {{64, 1023}, {0}},  // columns (strided)
      {{64, 1023}, {-1}},
      {{7, 13, 5}, {1}},          // a middle axis: outer, n and inner all > 1
      {{7, 13, 5}, {0, 2}},       // two groups
      {{4, 1, 6, 1, 3}, {1, 3}},  // only unit axes: a copy
      {{4, 1, 6, 1, 3}, {0, 1, 4}},
      {{1024, 26, 26, 32}, {0, 1, 2}, 2e-3},  // the CNN's conv bias gradient
      {{2, 3, 4, 5}, {}},                     // all
  };
  return cases;
}

TEST(GpuReduceTest, SumMeanAndMaxMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const ReduceCase& c : reduce_cases()) {
    const Tensor x = random_host(c.shape, seed++);
    const Tensor g = on_gpu(x);
    for (bool keep : {false, true}) {
      const std::string what = shape_str(c.shape) + " over " + axes_str(c.axes) + (keep ? " keepdims" : "");
      expect_matches_cpu(kernels::sum(g, c.axes, keep), kernels::sum(x, c.axes, keep), c.tolerance, "sum " + what);
      expect_matches_cpu(kernels::mean(g, c.axes, keep), kernels::mean(x, c.axes, keep), kFloat32Tolerance,
                         "mean " + what);
      expect_matches_cpu(kernels::max(g, c.axes, keep), kernels::max(x, c.axes, keep), 0.0, "max " + what);
    }
  }
}

TEST(GpuReduceTest, EmptyAxesAndErrorsAreTheCpus) {
  STRATA_REQUIRE_GPU();
  const Tensor x = random_host({3, 0, 2}, 1);
  const Tensor g = on_gpu(x);
  expect_matches_cpu(kernels::sum(g, {1}), kernels::sum(x, {1}), 0.0, "sum over an empty axis");
  const Tensor m = kernels::mean(g, {1}).to(Device::cpu());
  for (float v : m.to_vector<float>()) EXPECT_TRUE(std::isnan(v));
  EXPECT_THROW(kernels::max(g, {1}), InvalidArgument);
  EXPECT_THROW(kernels::sum(g, {0, 0}), InvalidArgument);
  EXPECT_EQ(kernels::sum(g, {0}).shape(), Shape({0, 2}));
}

TEST(GpuReduceTest, MaxPropagatesNaNLikeTheCpu) {
  STRATA_REQUIRE_GPU();
  Tensor x = random_host({4, 9}, 2);
  x.data<float>()[13] = std::numeric_limits<float>::quiet_NaN();
  const Tensor got = kernels::max(on_gpu(x), {1}).to(Device::cpu());
  const Tensor want = kernels::max(x, {1});
  for (int i = 0; i < 4; ++i) {
    if (std::isnan(want.data<float>()[i])) {
      EXPECT_TRUE(std::isnan(got.data<float>()[i])) << i;
    } else {
      EXPECT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
    }
  }
}

TEST(GpuReduceTest, ArgmaxMatchesTheCpuWithTiesAndNaN) {
  STRATA_REQUIRE_GPU();
  for (const Shape& shape : {Shape{1}, Shape{1024, 10}, Shape{7, 1023}, Shape{5, 6, 7}}) {
    const Tensor x = random_host(shape, 3);
    for (int axis = -static_cast<int>(shape.size()); axis < static_cast<int>(shape.size()); ++axis) {
      expect_matches_cpu(kernels::argmax(on_gpu(x), axis), kernels::argmax(x, axis), 0.0,
                         "argmax " + shape_str(shape) + " axis " + std::to_string(axis));
    }
  }
  // Ties take the first index; a NaN wins, the first one.
  const Tensor t = Tensor::from_list(
      {1, 3, 3, 0, std::numeric_limits<float>::quiet_NaN(), 2, 5, std::numeric_limits<float>::quiet_NaN()}, {2, 4});
  expect_matches_cpu(kernels::argmax(on_gpu(t), 1), kernels::argmax(t, 1), 0.0, "argmax ties and NaN");
  EXPECT_EQ(kernels::argmax(on_gpu(t), 1).to(Device::cpu()).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
}

TEST(GpuReduceTest, BroadcastToMatchesTheCpuForEveryElementSize) {
  STRATA_REQUIRE_GPU();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{64}, {1024, 64}}, {{1024, 1}, {1024, 64}}, {{}, {7, 3}}, {{3, 1, 5}, {2, 3, 4, 5}}, {{1}, {0, 1}}};
  for (const auto& [from, to] : cases) {
    const Tensor x = random_host(from, 4, -100.0f, 100.0f);
    const std::string what = "broadcast_to " + shape_str(from) + " -> " + shape_str(to);
    for (DType dt : {DType::kFloat32, DType::kInt64, DType::kInt32, DType::kUInt8, DType::kBFloat16}) {
      const Tensor xt = dt == DType::kUInt8 ? kernels::unary(kernels::UnaryOp::kAbs, x).to(dt) : x.to(dt);
      expect_matches_cpu(kernels::broadcast_to(on_gpu(xt), to), kernels::broadcast_to(xt, to), 0.0,
                         what + " " + dtype_name(dt));
    }
  }
  EXPECT_THROW(kernels::broadcast_to(on_gpu(random_host({3}, 1)), {4}), ShapeError);
}

TEST(GpuReduceTest, SumToShapeMatchesTheCpu) {
  STRATA_REQUIRE_GPU();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{1024, 64}, {64}},        {{1024, 64}, {1, 64}}, {{1024, 64}, {1024, 1}}, {{64, 26, 26, 32}, {32}},
      {{2, 3, 4, 5}, {3, 1, 5}}, {{7, 3}, {}},          {{7, 3}, {7, 3}}};
  for (const auto& [from, to] : cases) {
    const Tensor x = random_host(from, 5);
    expect_matches_cpu(kernels::sum_to_shape(on_gpu(x), to), kernels::sum_to_shape(x, to), kFloat32Tolerance,
                       "sum_to_shape " + shape_str(from) + " -> " + shape_str(to));
  }
  EXPECT_THROW(kernels::sum_to_shape(on_gpu(random_host({3, 4}, 1)), {5}), ShapeError);
}

TEST(GpuSoftmaxTest, ForwardAndBackwardMatchTheCpuOnEveryAxis) {
  STRATA_REQUIRE_GPU();
  for (const Shape& shape : {Shape{1, 1}, Shape{64, 10}, Shape{1024, 10}, Shape{7, 1023}, Shape{3, 5, 7}}) {
    const Tensor x = random_host(shape, 6, -20.0f, 20.0f);  // large logits: the max must be subtracted
    const Tensor dy = random_host(shape, 7);
    for (int axis = -1; axis >= -static_cast<int>(shape.size()); --axis) {
      const std::string what = shape_str(shape) + " axis " + std::to_string(axis);
      const Tensor y = kernels::softmax(x, axis);
      const Tensor ly = kernels::log_softmax(x, axis);
      expect_matches_cpu(kernels::softmax(on_gpu(x), axis), y, kFloat32Tolerance, "softmax " + what);
      expect_matches_cpu(kernels::log_softmax(on_gpu(x), axis), ly, kFloat32Tolerance, "log_softmax " + what);
      expect_matches_cpu(kernels::softmax_backward(on_gpu(y), on_gpu(dy), axis), kernels::softmax_backward(y, dy, axis),
                         kFloat32Tolerance, "softmax_backward " + what);
      expect_matches_cpu(kernels::log_softmax_backward(on_gpu(ly), on_gpu(dy), axis),
                         kernels::log_softmax_backward(ly, dy, axis), kFloat32Tolerance,
                         "log_softmax_backward " + what);
    }
  }
  EXPECT_THROW(kernels::softmax_backward(on_gpu(random_host({2, 3}, 1)), on_gpu(random_host({3, 2}, 2))), ShapeError);
}

}  // namespace
}  // namespace strata
