// `strata train --mixed-precision` end to end on a tiny job: bf16 trains and says so, an unknown value fails before
// training with the choices listed, and a CPU whose oneDNN ISA lacks bf16 (ONEDNN_MAX_CPU_ISA=AVX2 pretends so) warns
// once and trains exactly as float32 does; on a GPU (skipped without one) bf16 says it computes there and warns nothing
// about the CPU.
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_test_util.h"
#include "core/device_memory.h"
#include "kernels/compute_precision.h"

namespace strata::cli {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(MixedPrecisionCommandTest, UnknownValuesFailListingTheChoices) {
  TinyJob t("mixed_precision_flag");
  for (const char* value : {"fp16", "bfloat16x", "mixed_float16"}) {
    auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + t.job + " --threads 1 --mixed-precision " + value);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find(std::string("--mixed-precision: unknown mixed precision '") + value +
                       "'; choose one of float32, bf16, mixed_bfloat16"),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("Epoch 1/"), std::string::npos) << out;
  }
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train --help");
  EXPECT_NE(out.find("--mixed-precision"), std::string::npos) << out;
}

// The last row of a --csv-log file: the last epoch's loss and metrics to 9 digits.
std::string last_row(const fs::path& csv) { return last_line(read_file(csv)); }

TEST(MixedPrecisionCommandTest, Bf16TrainsLikeFloat32AndSaysSo) {
  TinyJob t("mixed_precision_bf16");
  const std::string base = std::string(STRATA_BINARY) + " train " + t.job + " --threads 1 --epochs 2 --verbose 2";
  const fs::path f32_csv = t.s.dir / "f32.csv";
  auto [rc, f32] = run(base + " --mixed-precision float32 --csv-log " + f32_csv.string());
  ASSERT_EQ(rc, 0) << f32;
  EXPECT_EQ(f32.find("mixed precision"), std::string::npos) << f32;
  for (const char* value : {"bf16", "mixed_bfloat16"}) {
    const fs::path csv = t.s.dir / (std::string(value) + ".csv");
    auto [rc2, out] = run(base + " --mixed-precision " + value + " --csv-log " + csv.string());
    ASSERT_EQ(rc2, 0) << out;
    if (kernels::cpu_has_native_bf16()) {  // (without, the next test checks its one warning)
      EXPECT_EQ(out.find("strata: warning"), std::string::npos) << out;
      EXPECT_NE(out.find("mixed precision: mixed_bfloat16: Dense, attention and convolution products compute in bf16"),
                std::string::npos)
          << out;
      EXPECT_NE(last_row(csv), last_row(f32_csv)) << "bf16 trained bit for bit as float32";
    }
    // Both learn the tiny task; bf16's loss is float32's to within bf16's rounding.
    ASSERT_FALSE(epoch_loss(out, 2).empty()) << out;
    EXPECT_NEAR(std::stod(epoch_loss(out, 2)), std::stod(epoch_loss(f32, 2)), 0.05) << out << "\n" << f32;
  }
}

TEST(MixedPrecisionCommandTest, ACpuWithoutBf16WarnsOnceAndTrainsAsFloat32) {
  TinyJob t("mixed_precision_no_bf16");
  const std::string base = "ONEDNN_MAX_CPU_ISA=AVX2 " + std::string(STRATA_BINARY) + " train " + t.job +
                           " --threads 1 --epochs 2 --verbose 2 --csv-log ";
  auto [rc, f32] = run(base + (t.s.dir / "f32.csv").string());
  ASSERT_EQ(rc, 0) << f32;
  auto [rc2, out] = run(base + (t.s.dir / "bf16.csv").string() + " --mixed-precision bf16");
  ASSERT_EQ(rc2, 0) << out;
  EXPECT_EQ(count(out, "strata: warning: mixed precision mixed_bfloat16: this CPU has no bf16 instructions (oneDNN's "
                       "ISA is avx2"),
            1u)
      << out;
  EXPECT_NE(out.find("this CPU has no bf16 instructions, so everything computes in float32"), std::string::npos) << out;
  ASSERT_EQ(last_row(t.s.dir / "f32.csv").rfind("1,", 0), 0u);  // the second epoch's row (Keras counts from 0)
  EXPECT_EQ(last_row(t.s.dir / "bf16.csv"), last_row(t.s.dir / "f32.csv"));  // bit for bit float32's training
  EXPECT_EQ(last_line(out), last_line(f32));                                  // and its test line
}

TEST(MixedPrecisionCommandTest, OnAGpuBf16ComputesThereWhateverTheCpuHas) {
  if (strata::detail::cuda_device_count() == 0) {
    GTEST_SKIP() << "no CUDA device visible (scripts/gpu_check.sh's step 2c runs this on a GPU machine)";
  }
  TinyJob t("mixed_precision_gpu");
  auto [rc, out] = run("ONEDNN_MAX_CPU_ISA=AVX2 " + std::string(STRATA_BINARY) + " train " + t.job +
                       " --device gpu --epochs 1 --verbose 2 --mixed-precision bf16");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("mixed precision: mixed_bfloat16: Dense, attention and convolution products compute in bf16 on "
                     "the GPU"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("strata: warning"), std::string::npos) << out;
}

}  // namespace
}  // namespace strata::cli
