// The versions of the GPU libraries this build of strata links (cuBLAS, cuDNN, NCCL), as the loaded libraries
// report them, for `strata info`. Defined in cli/cuda/gpu_libraries.cc, built only with STRATA_WITH_CUDA (the CLI
// links those libraries there; the core layer links only the CUDA runtime). Thread-safety: safe from any thread.
#pragma once

#include <string>
#include <vector>

namespace strata::cli {

// "cuBLAS 13.0.2", "cuDNN 9.13.0", "NCCL 2.27.7" (a library that does not answer reads "cuDNN unknown (...)").
// Needs no GPU.
std::vector<std::string> cuda_library_versions();

}  // namespace strata::cli
