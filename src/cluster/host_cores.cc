// A task's share of its host's cores (see strata/cluster/host_cores.h).
// Thread-safety: pure functions.
#include "strata/cluster/host_cores.h"

#include <algorithm>
#include <sstream>

#include "core/cpu_limits.h"

namespace strata::cluster {
namespace {

// The job's tasks on this task's host, split into those that compute and those that mostly wait, and whether
// this task is the host's first (the one that speaks for the host).
struct HostTasks {
  int computing = 1;
  int waiting = 0;
  bool first = true;
};

bool names_addresses(const ClusterSpec& cluster) {
  for (const auto& [type, addresses] : cluster.jobs) {
    for (const std::string& a : addresses) {
      if (!a.empty()) return true;
    }
  }
  return false;
}

HostTasks host_tasks(const TaskInfo& task) {
  HostTasks tasks;
  if (task.address.empty() || !names_addresses(task.cluster)) {  // mpirun, torchrun: a count, all computing
    tasks.computing = static_cast<int>(std::max<int64_t>(1, task.local_world_size.value_or(1)));
    tasks.first = task.local_rank.value_or(0) == 0;
    return tasks;
  }
  const std::string my_host = parse_address(task.address, task.name()).host;
  tasks.computing = 0;
  std::string first_name;  // the host's first task in the cluster's order (chief, evaluator, ps, worker)
  for (const auto& [type, addresses] : task.cluster.jobs) {
    for (size_t i = 0; i < addresses.size(); ++i) {
      if (addresses[i].empty() || !same_host(parse_address(addresses[i], type).host, my_host)) continue;
      (mostly_waits(task.cluster, type) ? tasks.waiting : tasks.computing) += 1;
      if (first_name.empty()) first_name = type + ":" + std::to_string(i);
    }
  }
  tasks.first = first_name == task.name();
  return tasks;
}

std::string plural(int n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

}  // namespace

bool mostly_waits(const ClusterSpec& cluster, const std::string& type) {
  return type == "ps" || (type == "chief" && cluster.has("ps"));
}

CoreShare share_host_cores(const TaskInfo& task, const std::optional<ThreadSetting>& user) {
  return share_host_cores(task, detail::read_cpu_limits(), user);
}

CoreShare share_host_cores(const TaskInfo& task, const detail::CpuLimits& limits,
                           const std::optional<ThreadSetting>& user) {
  CoreShare share;
  share.cores = detail::usable_cores(limits);
  const HostTasks tasks = host_tasks(task);
  share.tasks_on_host = tasks.computing + tasks.waiting;
  const bool bound = limits.affinity < limits.cpuset;  // a launcher gave this process its own cores
  const std::string cores = plural(share.cores, "core", "cores");
  std::ostringstream why;
  if (user) {
    share.threads = std::max(1, user->threads);
    why << user->source << (user->source.rfind("--", 0) == 0 ? " " : "=") << user->threads;
    // Every computing task of the host is taken to set the same count (one environment, one command line).
    const int wanted = bound ? share.threads : share.threads * tasks.computing;
    if (wanted > share.cores && tasks.first) {
      std::ostringstream warning;
      warning << user->source << (user->source.rfind("--", 0) == 0 ? " " : "=") << user->threads;
      if (!bound && share.tasks_on_host > 1) {
        warning << " in each of the " << share.tasks_on_host << " tasks on this host asks for " << wanted << " threads";
      } else {
        warning << " asks for " << wanted << " threads";
      }
      warning << " on " << cores << ": they will take turns and run slower; leave it unset to share the cores ("
              << std::max(1, share.cores / (bound ? 1 : tasks.computing)) << " each)";
      share.warning = warning.str();
    }
  } else if (mostly_waits(task.cluster, task.task_type)) {
    share.threads = 1;
    why << (task.task_type == "ps" ? "a ps task" : "the chief of a parameter-server job") << " mostly waits";
  } else if (bound) {
    share.threads = share.cores;
    why << "the " << cores << " this task is bound to";
  } else if (task.cpus_per_task) {  // SLURM's allocation for each task, when it did not bind the task itself
    share.threads = static_cast<int>(std::clamp<int64_t>(*task.cpus_per_task, 1, share.cores));
    why << "SLURM_CPUS_PER_TASK=" << *task.cpus_per_task;
  } else {
    share.threads = std::max(1, share.cores / tasks.computing);
    if (share.tasks_on_host == 1) {
      why << "the " << cores << (limits.quota ? " of this process's CPU quota" : " of this host");
    } else {
      why << cores << " shared by " << plural(tasks.computing, "task", "tasks") << " on this host";
      if (tasks.waiting > 0) {
        why << " (and " << plural(tasks.waiting, "task that mostly waits", "tasks that mostly wait")
            << ", 1 thread each)";
      }
    }
  }
  share.reason = plural(share.threads, "thread", "threads") + ": " + why.str();
  return share;
}

}  // namespace strata::cluster
