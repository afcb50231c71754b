// The `strata` process's share of its host's cores, applied before anything computes: the default thread
// count of every thread of the process becomes this task's share (strata/cluster/host_cores.h), unless
// `--threads` or STRATA_NUM_THREADS says otherwise, and a count that oversubscribes the host is warned about
// once per host.
// Thread-safety: call from the main thread before other threads start.
#pragma once

#include <string>

#include "strata/cluster/host_cores.h"

namespace strata::cli {

// Resolves the cluster from the environment, sets the process's default thread count to this task's share
// (`threads_flag` > 0: --threads wins, else STRATA_NUM_THREADS), prints the warning, if any, on stderr, and
// returns the share; its reason goes on the strategy line.
cluster::CoreShare apply_core_share(int threads_flag);

// "4 pipeline stages on 2 threads' worth of cores: ...", or "" when the stages fit in `threads`.
std::string stages_warning(int stages, int threads);

}  // namespace strata::cli
