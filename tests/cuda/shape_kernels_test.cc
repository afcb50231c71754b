// GPU shape kernels (kernels/cuda/shape_ops.cu) against the CPU kernels: concat, stack and slice_axis of several
// dtypes and axes, gather by int32/int64 indices (and its out-of-range error), scatter_add with repeated indices,
// scatter_add_into, one_hot.
#include <gtest/gtest.h>

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

Tensor indices_host(const std::vector<int64_t>& values, const Shape& shape, DType dtype) {
  return Tensor::from_vector(values, shape).to(dtype);
}

TEST(GpuShapeOpsTest, ConcatStackAndSliceMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::kFloat32, DType::kInt64, DType::kUInt8, DType::kBFloat16}) {
    const Tensor a = random_host({4, 3, 5}, 1, 0.0f, 100.0f).to(dt);
    const Tensor b = random_host({4, 7, 5}, 2, 0.0f, 100.0f).to(dt);
    const Tensor c = random_host({4, 1, 5}, 3, 0.0f, 100.0f).to(dt);
    const std::string what = std::string(" of ") + dtype_name(dt);
    expect_matches_cpu(kernels::concat({on_gpu(a), on_gpu(b), on_gpu(c)}, 1), kernels::concat({a, b, c}, 1), 0.0,
                       "concat axis 1" + what);
    expect_matches_cpu(kernels::concat({on_gpu(a), on_gpu(a)}, 0), kernels::concat({a, a}, 0), 0.0,
                       "concat axis 0" + what);
    expect_matches_cpu(kernels::concat({on_gpu(a), on_gpu(a)}, -1), kernels::concat({a, a}, -1), 0.0,
                       "concat axis -1" + what);
    for (int axis = 0; axis <= 3; ++axis) {
      expect_matches_cpu(kernels::stack({on_gpu(a), on_gpu(a), on_gpu(a)}, axis), kernels::stack({a, a, a}, axis), 0.0,
                         "stack axis " + std::to_string(axis) + what);
    }
    for (int axis = 0; axis < 3; ++axis) {
      const int64_t d = b.shape()[axis];
      for (auto [s, e] : std::vector<std::pair<int64_t, int64_t>>{{0, d}, {1, d - 1}, {d - 1, d}, {2, 2}}) {
        expect_matches_cpu(
            kernels::slice_axis(on_gpu(b), axis, s, e), kernels::slice_axis(b, axis, s, e), 0.0,
            "slice_axis " + std::to_string(axis) + " [" + std::to_string(s) + ", " + std::to_string(e) + ")" + what);
      }
    }
  }
  EXPECT_THROW(kernels::concat({on_gpu(random_host({2, 3}, 1)), on_gpu(random_host({3, 3}, 2))}, 1), ShapeError);
  EXPECT_THROW(kernels::slice_axis(on_gpu(random_host({2, 3}, 1)), 1, 2, 4), InvalidArgument);
}

TEST(GpuShapeOpsTest, GatherMatchesTheCpuForBothIndexTypes) {
  STRATA_REQUIRE_GPU();
  const Tensor params = random_host({1023, 7}, 4);
  const std::vector<int64_t> idx = {0, 1022, 5, 5, 17, 3, 1000, 2};
  for (DType it : {DType::kInt32, DType::kInt64}) {
    const Tensor i = indices_host(idx, {2, 4}, it);
    expect_matches_cpu(kernels::gather(on_gpu(params), on_gpu(i)), kernels::gather(params, i), 0.0,
                       std::string("gather by ") + dtype_name(it));
    // Rows of one element, other dtypes, and a view that starts mid-storage.
    const Tensor flat = random_host({1023}, 5);
    expect_matches_cpu(kernels::gather(on_gpu(flat), on_gpu(i)), kernels::gather(flat, i), 0.0, "gather of a vector");
    const Tensor ints = params.to(DType::kInt64);
    expect_matches_cpu(kernels::gather(on_gpu(ints), on_gpu(i)), kernels::gather(ints, i), 0.0, "gather of int64");
    const Tensor view = on_gpu(random_host({2047}, 6)).slice(1, 2047).reshape({1023, 2});
    expect_matches_cpu(kernels::gather(view, on_gpu(i)), kernels::gather(view.to(Device::cpu()), i), 0.0,
                       "gather of a view at an odd offset");
  }
}

TEST(GpuShapeOpsTest, AnIndexOutOfRangeIsNamed) {
  STRATA_REQUIRE_GPU();
  const Tensor params = on_gpu(random_host({10, 3}, 1));
  for (DType it : {DType::kInt32, DType::kInt64}) {
    for (int64_t bad : {10, -1}) {
      const Tensor i = on_gpu(indices_host({0, 9, bad, 2}, {4}, it));
      try {
        kernels::gather(params, i);
        FAIL() << "index " << bad << " must be refused";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("index " + std::to_string(bad) + " (at flat position 2"),
                  std::string::npos)
            << e.what();
      }
      EXPECT_THROW(kernels::scatter_add(i, on_gpu(random_host({4, 3}, 2)), 10), InvalidArgument);
    }
  }
}

TEST(GpuShapeOpsTest, ScatterAddMatchesTheCpuWithRepeatedIndices) {
  STRATA_REQUIRE_GPU();
  const std::vector<int64_t> idx = {3, 0, 3, 3, 9, 0, 1, 3};
  for (DType it : {DType::kInt32, DType::kInt64}) {
    const Tensor i = indices_host(idx, {2, 4}, it);
    const Tensor updates = random_host({2, 4, 33}, 7);
    expect_matches_cpu(kernels::scatter_add(on_gpu(i), on_gpu(updates), 10), kernels::scatter_add(i, updates, 10),
                       kFloat32Tolerance, std::string("scatter_add by ") + dtype_name(it));
    Tensor into_cpu = random_host({10, 33}, 8);
    Tensor into_gpu = on_gpu(into_cpu);
    kernels::scatter_add_into(into_cpu, i, updates);
    kernels::scatter_add_into(into_gpu, on_gpu(i), on_gpu(updates));
    expect_matches_cpu(into_gpu, into_cpu, kFloat32Tolerance, "scatter_add_into");
  }
  // An embedding's gradient: many rows, many repeats.
  std::vector<int64_t> many(4096);
  for (size_t k = 0; k < many.size(); ++k) many[k] = static_cast<int64_t>((k * 7919) % 100);
  const Tensor i = indices_host(many, {64, 64}, DType::kInt32);
  const Tensor updates = random_host({64, 64, 16}, 9);
  expect_matches_cpu(kernels::scatter_add(on_gpu(i), on_gpu(updates), 100), kernels::scatter_add(i, updates, 100),
                     kFloat32Tolerance, "scatter_add of an embedding gradient");
}

TEST(GpuShapeOpsTest, OneHotMatchesTheCpu) {
  STRATA_REQUIRE_GPU();
  const std::vector<int64_t> idx = {0, 9, 3, -1, 10, 5};  // -1 and 10 give zero rows
  for (DType it : {DType::kInt32, DType::kInt64}) {
    const Tensor i = indices_host(idx, {2, 3}, it);
    expect_matches_cpu(kernels::one_hot(on_gpu(i), 10), kernels::one_hot(i, 10), 0.0,
                       std::string("one_hot of ") + dtype_name(it));
  }
  const Tensor labels = indices_host(std::vector<int64_t>(1024, 7), {1024}, DType::kInt64);
  expect_matches_cpu(kernels::one_hot(on_gpu(labels), 10), kernels::one_hot(labels, 10), 0.0, "one_hot of a batch");
}

}  // namespace
}  // namespace strata
