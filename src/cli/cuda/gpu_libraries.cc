// The GPU libraries' versions (cli/gpu_libraries.h): each library's own query, which needs no GPU.
// Thread-safety: the queries are thread-safe.
#include "cli/gpu_libraries.h"

#include <cublas_v2.h>
#include <cudnn.h>
#include <nccl.h>

namespace strata::cli {

namespace {
std::string dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}
}  // namespace

std::vector<std::string> cuda_library_versions() {
  std::vector<std::string> out;
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    out.push_back("cuBLAS " + dotted(major, minor, patch));
  } else {
    out.push_back("cuBLAS unknown (cublasGetProperty failed)");
  }
  if (cudnnGetProperty(MAJOR_VERSION, &major) == CUDNN_STATUS_SUCCESS &&
      cudnnGetProperty(MINOR_VERSION, &minor) == CUDNN_STATUS_SUCCESS &&
      cudnnGetProperty(PATCH_LEVEL, &patch) == CUDNN_STATUS_SUCCESS) {
    out.push_back("cuDNN " + dotted(major, minor, patch));
  } else {
    out.push_back("cuDNN unknown (cudnnGetProperty failed; cudnnGetVersion says " +
                  std::to_string(cudnnGetVersion()) + ")");
  }
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9, major * 1000 + minor * 100 + patch before.
    const int scale = nccl >= 20900 ? 10000 : 1000;
    out.push_back("NCCL " + dotted(nccl / scale, nccl % scale / 100, nccl % 100));
  } else {
    out.push_back("NCCL unknown (ncclGetVersion failed)");
  }
  return out;
}

}  // namespace strata::cli
