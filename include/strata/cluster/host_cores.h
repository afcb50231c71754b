// How a task of a job shares its host's cores with the job's other tasks there, so that co-located
// processes never oversubscribe the machine (each taking every core made a 2-worker job on 2 cores 30x
// slower than one thread each).
//
//   const cluster::CoreShare share = cluster::share_host_cores(cluster::resolve_cluster_from_environment());
//   set_default_num_threads(share.threads);    // "1 thread: 2 cores shared by 2 tasks on this host"
//
// The cores are the ones this process may run on (its affinity mask, lowered to its cgroup's CPU quota).
// When a launcher bound the process to a subset of its cgroup's CPUs (mpirun --bind-to core, taskset,
// SLURM's task binding), that subset is already its share and is used whole. Otherwise the cores are
// divided by the job's tasks on this host: from TF_CONFIG (the tasks whose address names this host:
// `strata launch`, single or multi-node, writes it), mpirun's OMPI_COMM_WORLD_LOCAL_SIZE, torchrun's
// LOCAL_WORLD_SIZE, or SLURM's tasks per node (SLURM_CPUS_PER_TASK, where set, is the task's share). Tasks that mostly
// wait — a ps, and the chief of a parameter-server job, which only schedules — get one thread and are not counted
// against the others. A user's own count (`--threads`, STRATA_NUM_THREADS) wins; when it asks for more threads than the
// host's cores across its tasks there, `warning` says so with the numbers (on the first task of the host only, so that
// a job prints it once per host). Thread-safety: a pure function of its arguments.
#pragma once

#include <optional>
#include <string>

#include "strata/cluster/cluster_resolver.h"

namespace strata::detail {
struct CpuLimits;
}

namespace strata::cluster {

// A thread count the user set, and where: "--threads" or "STRATA_NUM_THREADS".
struct ThreadSetting {
  int threads = 0;
  std::string source;
};

struct CoreShare {
  int threads = 1;        // intra-op threads for this process's math
  int cores = 1;          // cores this process may run on
  int tasks_on_host = 1;  // the job's tasks on this host, this one included
  std::string reason;     // "1 thread: 2 cores shared by 2 tasks on this host"
  std::string warning;    // the user's own count oversubscribes the host ("" otherwise)
};

// This process's share, from the CPU limits the kernel and the cgroup set for it now. A program that links strata
// applies it with set_default_num_threads(share.threads) (strata/threading.h), as the CLI does.
CoreShare share_host_cores(const TaskInfo& task, const std::optional<ThreadSetting>& user = std::nullopt);
// The same for given limits (tests; core/cpu_limits.h reads them).
CoreShare share_host_cores(const TaskInfo& task, const detail::CpuLimits& limits,
                           const std::optional<ThreadSetting>& user);

// Whether a task of `type` mostly waits on the others (a ps; the chief of a cluster with ps tasks).
bool mostly_waits(const ClusterSpec& cluster, const std::string& type);

}  // namespace strata::cluster
