// The cores this process may run on, as the kernel and its cgroup limit them: the affinity mask
// (sched_getaffinity: taskset, numactl, mpirun --bind-to, SLURM's task binding), the cgroup's CPU quota
// (cpu.max in cgroup v2, cpu.cfs_quota_us / cpu.cfs_period_us in v1: a container's --cpus) and the cgroup's
// cpuset (the CPUs a container or a job step was given). The parsers are pure functions, tested on text.
// Thread-safety: read_cpu_limits reads /proc and /sys each call and is safe from any thread; the parsers
// are pure.
#pragma once

#include <optional>
#include <string>

namespace strata::detail {

struct CpuLimits {
  int affinity = 1;             // CPUs in this process's affinity mask
  int cpuset = 1;               // CPUs of its cgroup's cpuset (the machine's online CPUs when none is set)
  std::optional<double> quota;  // cores' worth of time the cgroup may use per period, when limited
};

// CPUs in a kernel CPU list ("0-3,8,10-11" -> 7; "" -> 0). nullopt when the text is not a CPU list.
std::optional<int> count_cpu_list(const std::string& list);
// A cgroup v2 cpu.max ("200000 100000" -> 2.0; "max 100000" -> nullopt), or nullopt when malformed.
std::optional<double> parse_cpu_max(const std::string& text);
// A cgroup v1 quota and period in microseconds ("-1" quota: none).
std::optional<double> parse_cfs_quota(const std::string& quota_us, const std::string& period_us);

CpuLimits read_cpu_limits();

// Cores this process may keep busy: its affinity mask, lowered to the cgroup's quota (rounded up), >= 1.
int usable_cores(const CpuLimits& limits);

}  // namespace strata::detail
