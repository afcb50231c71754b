// GPU matrix products (kernels/cuda/matmul.cc, dense.cu) against the CPU kernels on the same random inputs: plain,
// transposed and batched products (shared operands too), odd sizes, the tutorial CNN's and an MLP's dense layers,
// with and without bias and relu, and every gradient of dense.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/cuda_test_util.h"
#include "kernels/kernels.h"

namespace strata {
namespace {

using testing::expect_matches_cpu;
using testing::kFloat32Tolerance;
using testing::on_gpu;
using testing::random_host;

void check_matmul(const Shape& sa, const Shape& sb, bool ta, bool tb, uint64_t seed) {
  const Tensor a = random_host(sa, seed);
  const Tensor b = random_host(sb, seed + 1);
  const std::string what = "matmul " + shape_str(sa) + (ta ? "^T" : "") + " x " + shape_str(sb) + (tb ? "^T" : "");
  expect_matches_cpu(kernels::matmul(on_gpu(a), on_gpu(b), ta, tb), kernels::matmul(a, b, ta, tb), kFloat32Tolerance,
                     what);
}

TEST(GpuMatmulTest, MatchesTheCpuForEveryTransposeAndOddSizes) {
  STRATA_REQUIRE_GPU();
  for (int64_t m : {1, 7, 1023}) {
    for (int64_t k : {1, 7, 64}) {
      for (int64_t n : {1, 7, 1023}) {
        for (int t = 0; t < 4; ++t) {
          const bool ta = t & 1, tb = t & 2;
          check_matmul(ta ? Shape{k, m} : Shape{m, k}, tb ? Shape{n, k} : Shape{k, n}, ta, tb,
                       static_cast<uint64_t>(m * 100 + k * 10 + n + t));
        }
      }
    }
  }
}

TEST(GpuMatmulTest, MatchesTheCpuOnTheTutorialShapes) {
  STRATA_REQUIRE_GPU();
  for (int64_t batch : {64, 1024}) {
    check_matmul({batch, 5408}, {5408, 64}, false, false, 1);  // the CNN's flatten -> dense
    check_matmul({batch, 5408}, {batch, 64}, true, false, 2);  // its weight gradient x^T dy
    check_matmul({batch, 64}, {5408, 64}, false, true, 3);     // its input gradient dy w^T
    check_matmul({batch, 64}, {64, 10}, false, false, 4);
  }
  check_matmul({512, 784}, {784, 4096}, false, false, 5);
  check_matmul({512, 4096}, {4096, 4096}, false, false, 6);
  check_matmul({512, 4096}, {512, 4096}, true, false, 7);
}

TEST(GpuMatmulTest, MatchesTheCpuForBatchesAndSharedOperands) {
  STRATA_REQUIRE_GPU();
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const Shape a3 = ta ? Shape{5, 33, 17} : Shape{5, 17, 33};
    const Shape b3 = tb ? Shape{5, 9, 33} : Shape{5, 33, 9};
    const Shape a2(a3.begin() + 1, a3.end());
    const Shape b2(b3.begin() + 1, b3.end());
    check_matmul(a3, b3, ta, tb, 10 + t);                 // batch x batch
    check_matmul(a3, b2, ta, tb, 20 + t);                 // batch x shared
    check_matmul(a2, b3, ta, tb, 30 + t);                 // shared x batch
    check_matmul({1, a3[1], a3[2]}, b3, ta, tb, 40 + t);  // batch of 1 broadcast
    check_matmul(a3, {1, b3[1], b3[2]}, ta, tb, 50 + t);  // the other side
  }
}

TEST(GpuMatmulTest, EmptyAndZeroInnerDimensions) {
  STRATA_REQUIRE_GPU();
  check_matmul({3, 0}, {0, 4}, false, false, 1);  // K = 0: zeros
  check_matmul({0, 5}, {5, 4}, false, false, 2);
  check_matmul({2, 0, 3}, {3, 4}, false, false, 3);
}

TEST(GpuMatmulTest, ShapeErrorsAreTheCpusErrors) {
  STRATA_REQUIRE_GPU();
  EXPECT_THROW(kernels::matmul(on_gpu(random_host({2, 3}, 1)), on_gpu(random_host({4, 5}, 2))), ShapeError);
  EXPECT_THROW(kernels::matmul(on_gpu(random_host({2, 3, 4}, 1)), on_gpu(random_host({3, 4, 5}, 2))), ShapeError);
}

// Dense forward and every gradient, with w scaled like a Glorot init so activations stay O(1).
void check_dense(int64_t M, int64_t K, int64_t N, bool with_bias, bool relu, uint64_t seed, double tolerance) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(K, 1)));
  const Tensor x = random_host({M, K}, seed);
  const Tensor w = random_host({K, N}, seed + 1, -scale, scale);
  const Tensor b = with_bias ? random_host({N}, seed + 2) : Tensor();
  const Tensor dy = random_host({M, N}, seed + 3);
  const std::string what = "dense [" + std::to_string(M) + ", " + std::to_string(K) + "] x [" + std::to_string(K) +
                           ", " + std::to_string(N) + "]" + (with_bias ? " + bias" : "") + (relu ? " relu" : "");
  const Tensor y_cpu = kernels::dense(x, w, b, relu);
  const Tensor y_gpu = kernels::dense(on_gpu(x), on_gpu(w), with_bias ? on_gpu(b) : Tensor(), relu);
  expect_matches_cpu(y_gpu, y_cpu, tolerance, what);
  // The backward reads y's sign: hand both devices the CPU's y, so a near-zero element cannot flip the mask.
  const kernels::DenseGrads g_cpu = kernels::dense_backward(x, w, y_cpu, dy, relu, true, true, with_bias);
  const kernels::DenseGrads g_gpu =
      kernels::dense_backward(on_gpu(x), on_gpu(w), on_gpu(y_cpu), on_gpu(dy), relu, true, true, with_bias);
  expect_matches_cpu(g_gpu.dx, g_cpu.dx, tolerance, what + " dx");
  expect_matches_cpu(g_gpu.dw, g_cpu.dw, tolerance, what + " dw");
  if (with_bias) expect_matches_cpu(g_gpu.db, g_cpu.db, tolerance, what + " db");
  // Only what is asked for.
  const kernels::DenseGrads only_db =
      kernels::dense_backward(on_gpu(x), on_gpu(w), on_gpu(y_cpu), on_gpu(dy), relu, false, false, true);
  EXPECT_FALSE(only_db.dx.defined());
  EXPECT_FALSE(only_db.dw.defined());
  expect_matches_cpu(only_db.db, kernels::dense_backward(x, w, y_cpu, dy, relu, false, false, true).db, tolerance,
                     what + " db alone");
}

TEST(GpuDenseTest, MatchesTheCpuWithAndWithoutBiasAndRelu) {
  STRATA_REQUIRE_GPU();
  for (int v = 0; v < 4; ++v) {
    const bool with_bias = v & 1, relu = v & 2;
    check_dense(1, 1, 1, with_bias, relu, 100 + v, kFloat32Tolerance);
    check_dense(7, 13, 5, with_bias, relu, 110 + v, kFloat32Tolerance);
    check_dense(1023, 7, 1023, with_bias, relu, 120 + v, kFloat32Tolerance);
    check_dense(3, 1023, 1, with_bias, relu, 130 + v, kFloat32Tolerance);
  }
}

TEST(GpuDenseTest, MatchesTheCpuOnTheTutorialCnnAndAnMlp) {
  STRATA_REQUIRE_GPU();
  for (int64_t batch : {64, 1024}) {
    check_dense(batch, 5408, 64, true, true, 200, kFloat32Tolerance);
    check_dense(batch, 64, 10, true, false, 210, kFloat32Tolerance);
  }
  check_dense(512, 784, 4096, true, true, 220, kFloat32Tolerance);
  check_dense(512, 4096, 4096, true, true, 230, kFloat32Tolerance);
  check_dense(512, 4096, 10, true, false, 240, kFloat32Tolerance);
}

// The MLP 784-4096-4096-10 at batch 512 end to end: three chained layers carry each one's rounding into the next,
// so the tolerance is 1e-3 (the GPU's and CPU's sgemm sum 4096 products in different orders).
TEST(GpuDenseTest, AChainedMlpForwardMatchesTheCpu) {
  STRATA_REQUIRE_GPU();
  const int64_t widths[] = {784, 4096, 4096, 10};
  Tensor h_cpu = random_host({512, 784}, 300);
  Tensor h_gpu = on_gpu(h_cpu);
  for (int l = 0; l < 3; ++l) {
    const float scale = std::sqrt(6.0f / static_cast<float>(widths[l] + widths[l + 1]));
    const Tensor w = random_host({widths[l], widths[l + 1]}, 310 + l, -scale, scale);
    const Tensor b = random_host({widths[l + 1]}, 320 + l, -0.1f, 0.1f);
    const bool relu = l < 2;
    h_cpu = kernels::dense(h_cpu, w, b, relu);
    h_gpu = kernels::dense(h_gpu, on_gpu(w), on_gpu(b), relu);
  }
  expect_matches_cpu(h_gpu, h_cpu, 1e-3, "MLP 784-4096-4096-10 logits");
}

// Views that start off cuBLASLt's preferred 256-byte alignment: x from a batch's second row, and a bias 4 bytes into
// its storage (which takes the sgemm + Thrust path).
TEST(GpuDenseTest, MisalignedViewsMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  const Tensor x_all = random_host({65, 13}, 500);
  const Tensor w = random_host({13, 33}, 501);
  const Tensor b_all = random_host({34}, 502);
  const Tensor x = x_all.slice(1, 65);
  const Tensor b = b_all.slice(1, 34);
  for (bool relu : {false, true}) {
    const Tensor want = kernels::dense(x, w, b, relu);
    expect_matches_cpu(kernels::dense(on_gpu(x_all).slice(1, 65), on_gpu(w), on_gpu(b_all).slice(1, 34), relu), want,
                       kFloat32Tolerance, "dense of misaligned views");
    expect_matches_cpu(kernels::dense(on_gpu(x_all).slice(1, 65), on_gpu(w), Tensor(), relu),
                       kernels::dense(x, w, Tensor(), relu), kFloat32Tolerance, "dense of a misaligned x, no bias");
    const Tensor b_aligned = b.clone();
    expect_matches_cpu(kernels::dense(on_gpu(x_all).slice(1, 65), on_gpu(w), on_gpu(b_aligned), relu), want,
                       kFloat32Tolerance, "dense of a misaligned x, aligned bias (cuBLASLt)");
  }
}

TEST(GpuDenseTest, EmptyInnerDimensionGivesTheBiasAlone) {
  STRATA_REQUIRE_GPU();
  check_dense(4, 0, 3, true, true, 400, kFloat32Tolerance);
  check_dense(0, 5, 3, true, false, 410, kFloat32Tolerance);
}

TEST(GpuDenseTest, ABiasOfTheWrongSizeIsAShapeError) {
  STRATA_REQUIRE_GPU();
  EXPECT_THROW(kernels::dense(on_gpu(random_host({2, 3}, 1)), on_gpu(random_host({3, 4}, 2)),
                              on_gpu(random_host({5}, 3)), false),
               ShapeError);
}

}  // namespace
}  // namespace strata
