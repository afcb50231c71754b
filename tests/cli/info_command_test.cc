// `strata info` runs the real binary: it names strata's version, the CPU cores this process may use and the host's
// memory, and says what it knows of CUDA: "not in this build" without it; with it, the driver, runtime and library
// versions, and either each GPU or why none is visible (checked against the core layer's own answers).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "cli/cli_test_util.h"
#include "strata/device_stats.h"

namespace strata::cli {
namespace {

TEST(InfoCommandTest, NamesTheVersionTheCpusAndWhatItKnowsOfCuda) {
  auto [rc, out] = run(std::string(STRATA_BINARY) + " info");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.rfind(std::string("strata ") + STRATA_VERSION + "\n", 0), 0u) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\nCPU: [0-9]+ cores online; this process may use [0-9]+ "
                                                "\\(affinity [0-9]+, cpuset [0-9]+, ")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\nhost memory: [0-9.]+ GiB\n"))) << out;
  if (!built_with_cuda()) {
    EXPECT_NE(out.find("build: C++20, optimised, CUDA no\n"), std::string::npos) << out;
    EXPECT_NE(out.find("\nCUDA: not in this build (configure with -DSTRATA_WITH_CUDA=ON)\n"), std::string::npos)
        << out;
    EXPECT_EQ(out.find("GPUs:"), std::string::npos) << out;
    return;
  }
  EXPECT_TRUE(std::regex_search(out, std::regex("\nCUDA: driver ([0-9]+\\.[0-9]+|none installed), runtime "
                                                "[0-9]+\\.[0-9]+\n")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\nGPU libraries: cuBLAS [0-9]+\\.[0-9]+\\.[0-9]+, cuDNN "
                                                "[0-9]+\\.[0-9]+\\.[0-9]+, NCCL [0-9]+\\.[0-9]+\\.[0-9]+\n")))
      << out;
  const int n = cuda_device_count();
  if (n == 0) {
    EXPECT_NE(out.find("\nGPUs: none visible (" + cuda_unavailable_reason() + ")\n"), std::string::npos) << out;
  } else {
    EXPECT_NE(out.find("\nGPUs: " + std::to_string(n) + "\n"), std::string::npos) << out;
    const CudaDeviceInfo d = cuda_device_info(0);
    EXPECT_NE(out.find("  cuda:0  " + d.name + ", compute capability " + std::to_string(d.major) + "." +
                       std::to_string(d.minor)),
              std::string::npos)
        << out;
  }
}

TEST(InfoCommandTest, TakesNoArguments) {
  auto [rc, out] = run(std::string(STRATA_BINARY) + " info --devices");
  EXPECT_NE(rc, 0) << out;
}

}  // namespace
}  // namespace strata::cli
