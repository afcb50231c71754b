// GPU LSTM cell and dropout (kernels/cuda/lstm_cell.cu, dropout.cu) against the CPU kernels: the cell forward and
// backward with and without a previous state, and dropout's mask, which is the CPU's own for the same Generator.
#include <gtest/gtest.h>

#include <string>

#include "cuda/cuda_test_util.h"
#include "kernels/kernels.h"

namespace strata {
namespace {

using testing::expect_matches_cpu;
using testing::kFloat32Tolerance;
using testing::on_gpu;
using testing::random_host;

TEST(GpuLstmCellTest, ForwardAndBackwardMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  for (auto [batch, units] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {512, 256}}) {
    for (bool with_state : {false, true}) {
      const std::string what =
          "lstm_cell " + std::to_string(batch) + "x" + std::to_string(units) + (with_state ? " with c_prev" : "");
      const Tensor z = random_host({batch, 4 * units}, 1, -4.0f, 4.0f);
      const Tensor c = with_state ? random_host({batch, units}, 2, -2.0f, 2.0f) : Tensor();
      const Tensor d = random_host({batch, 2 * units}, 3);
      const kernels::LstmCellResult want = kernels::lstm_cell(z, c);
      const kernels::LstmCellResult got = kernels::lstm_cell(on_gpu(z), with_state ? on_gpu(c) : Tensor());
      expect_matches_cpu(got.gates, want.gates, kFloat32Tolerance, what + " gates");
      expect_matches_cpu(got.packed, want.packed, kFloat32Tolerance, what + " packed");
      const kernels::LstmCellGrads gw = kernels::lstm_cell_backward(want.gates, want.packed, c, d);
      const kernels::LstmCellGrads gg = kernels::lstm_cell_backward(on_gpu(want.gates), on_gpu(want.packed),
                                                                    with_state ? on_gpu(c) : Tensor(), on_gpu(d));
      expect_matches_cpu(gg.dz, gw.dz, kFloat32Tolerance, what + " dz");
      EXPECT_EQ(gg.dc_prev.defined(), with_state) << what;
      if (with_state) expect_matches_cpu(gg.dc_prev, gw.dc_prev, kFloat32Tolerance, what + " dc_prev");
    }
  }
}

TEST(GpuDropoutTest, DrawsTheCpusMaskAndAdvancesTheGeneratorAlike) {
  STRATA_REQUIRE_GPU();
  for (int64_t n : {1, 7, 1023, 1 << 20}) {
    const Tensor x = random_host({n}, 4);
    Generator cpu_gen(42, 3), gpu_gen(42, 3);
    cpu_gen.uniform();  // start mid-stream
    gpu_gen.uniform();
    for (float rate : {0.0f, 0.25f, 0.5f}) {
      const kernels::DropoutResult want = kernels::dropout(x, rate, cpu_gen);
      const kernels::DropoutResult got = kernels::dropout(on_gpu(x), rate, gpu_gen);
      const std::string what = "dropout of " + std::to_string(n) + " at rate " + std::to_string(rate);
      expect_matches_cpu(got.mask, want.mask, 0.0, what + " mask");
      expect_matches_cpu(got.y, want.y, 0.0, what + " y");
      EXPECT_EQ(gpu_gen.state(), cpu_gen.state()) << what;
    }
  }
  Generator gen(1);
  EXPECT_THROW(kernels::dropout(on_gpu(random_host({3}, 1)), 1.0f, gen), InvalidArgument);
}

}  // namespace
}  // namespace strata
