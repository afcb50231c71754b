// `strata info`: what this build of strata is and what it runs on: its version and features, the CPU cores this
// process may use (core/cpu_limits.h) and the host's memory, and with CUDA the driver and runtime versions, the
// GPU libraries' versions and each visible device (name, compute capability, memory total and free).
// Thread-safety: runs on the main thread.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/cpu_limits.h"
#include "core/device_allocator.h"
#include "strata/device_stats.h"
#ifdef STRATA_WITH_CUDA
#include "cli/gpu_libraries.h"
#endif

#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif

namespace strata::cli {

namespace {

// 12040 -> "12.4".
[[maybe_unused]] std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

void print_info() {
  std::printf("strata %s\n", STRATA_VERSION);
  std::printf("build: C++%ld, %s, CUDA %s\n", __cplusplus / 100 % 100,
#ifdef NDEBUG
              "optimised",
#else
              "debug (assertions on)",
#endif
              built_with_cuda() ? "yes" : "no");

  const detail::CpuLimits limits = detail::read_cpu_limits();
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::printf("CPU: %ld cores online; this process may use %d (affinity %d, cpuset %d", online,
              detail::usable_cores(limits), limits.affinity, limits.cpuset);
  if (limits.quota) {
    std::printf(", cgroup quota %.2f cores)\n", *limits.quota);
  } else {
    std::printf(", no cgroup quota)\n");
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0)
    std::printf("host memory: %s\n", detail::format_bytes(static_cast<size_t>(pages) * page_size).c_str());

  if (!built_with_cuda()) {
    std::printf("CUDA: not in this build (configure with -DSTRATA_WITH_CUDA=ON)\n");
    return;
  }
#ifdef STRATA_WITH_CUDA
  const CudaVersions v = cuda_versions();
  std::printf("CUDA: driver %s, runtime %s\n", v.driver ? cuda_version(v.driver).c_str() : "none installed",
              cuda_version(v.runtime).c_str());
  std::string libraries;
  for (const std::string& lib : cuda_library_versions()) libraries += (libraries.empty() ? "" : ", ") + lib;
  std::printf("GPU libraries: %s\n", libraries.c_str());
  const int n = cuda_device_count();
  if (n == 0) {
    std::printf("GPUs: none visible (%s)\n", cuda_unavailable_reason().c_str());
    return;
  }
  std::printf("GPUs: %d\n", n);
  for (int i = 0; i < n; ++i) {
    const CudaDeviceInfo d = cuda_device_info(i);
    std::printf("  cuda:%d  %s, compute capability %d.%d, %d SMs, memory %s total, %s free\n", i, d.name.c_str(),
                d.major, d.minor, d.multiprocessors, detail::format_bytes(d.total_memory).c_str(),
                detail::format_bytes(d.free_memory).c_str());
  }
#endif
}

}  // namespace

void add_info_command(CLI::App& app) {
  CLI::App* info = app.add_subcommand(
      "info",
      "Print what this build of strata is and what it can run on: its version and whether it has CUDA, the CPU "
      "cores this process may use (affinity mask and cgroup limits) and the host's memory, and with CUDA the driver "
      "and runtime versions, cuBLAS, cuDNN and NCCL versions, and each GPU's name, compute capability and memory.");
  info->callback([] { print_info(); });
}

}  // namespace strata::cli
