// Applying a task's share of its host's cores to the `strata` process (see core_share.h).
// Thread-safety: main thread, before other threads start.
#include "cli/core_share.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "strata/threading.h"

namespace strata::cli {

cluster::CoreShare apply_core_share(int threads_flag) {
  std::optional<cluster::ThreadSetting> user;
  if (threads_flag > 0) {
    user = cluster::ThreadSetting{threads_flag, "--threads"};
  } else if (const char* env = std::getenv("STRATA_NUM_THREADS"); env != nullptr && std::atoi(env) > 0) {
    user = cluster::ThreadSetting{std::atoi(env), "STRATA_NUM_THREADS"};
  }
  const cluster::CoreShare share = cluster::share_host_cores(cluster::resolve_cluster_from_environment(), user);
  set_default_num_threads(share.threads);
  set_num_threads(0);  // this thread follows the default too
  if (!share.warning.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "strata: warning: %s\n", share.warning.c_str());
  }
  return share;
}

std::string stages_warning(int stages, int threads) {
  if (stages <= threads) return "";
  std::ostringstream out;
  out << stages << " pipeline stages on " << threads << (threads == 1 ? " thread's" : " threads'")
      << " worth of cores: each stage is a thread, so the stages will take turns on the cores; training runs, "
         "slower than with "
      << threads << (threads == 1 ? " stage" : " stages") << " or more cores";
  return out.str();
}

}  // namespace strata::cli
