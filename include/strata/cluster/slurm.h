// The text formats of SLURM's environment, parsed as SLURM writes and reads them: hostlist expressions
// (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST), tasks-per-node lists (SLURM_STEP_TASKS_PER_NODE), and strata's
// own job layout (STRATA_SLURM_JOBS). cluster_resolver.cc builds a TaskInfo from them under `srun`
// (cluster_resolver.h describes that resolution and its variables).
//
//   expand_hostlist("node[01-03,07],gpu[1-2]-ib[0-1]")
//     -> node01 node02 node03 node07 gpu1-ib0 gpu1-ib1 gpu2-ib0 gpu2-ib1
//   expand_tasks_per_node("2(x3),1")                     -> 2 2 2 1
//   parse_slurm_jobs("worker:2,chief:1,ps:1")            -> {chief: 1, ps: 1, worker: 2}
//
// Every error is InvalidArgument naming the variable (the `variable` argument), the whole value, and what
// is wrong with it.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata::cluster {

// Where a task under srun listens without STRATA_SLURM_PORT_BASE: 8888 + its SLURM_LOCALID, as TensorFlow's
// SlurmClusterResolver (port_base=8888).
inline constexpr int kDefaultSlurmPortBase = 8888;

// The most hosts one bracket range, and the most nodes one tasks-per-node entry, may expand to; more is
// taken as a mistake, not as a cluster (SLURM's own hostlist has the same 65536-host limit per range).
inline constexpr int64_t kMaxSlurmExpansion = 65536;

// The host names of a SLURM hostlist expression, in order and with repeats kept, as
// `scontrol show hostnames` prints them:
//   - names are separated by ',' (and, as SLURM also accepts, by spaces, tabs and newlines) outside brackets;
//   - "prefix[ranges]suffix" expands each range of the comma-separated list "lo-hi" or "n" in order;
//     the numbers are zero-padded to the width of the range's lower bound as written ("[08-10]": 08 09 10;
//     "[8-10]": 8 9 10);
//   - several bracket groups in one name multiply out, the leftmost varying slowest:
//     "rack[1-2]-node[1-2]": rack1-node1 rack1-node2 rack2-node1 rack2-node2;
//   - a name without brackets is itself.
// InvalidArgument ("SLURM_STEP_NODELIST: bad hostlist 'node[1-': '[' without ']'") for an empty list, an
// unbalanced or nested bracket, an empty name or range, a range bound that is not a decimal number, a range
// whose upper bound is below its lower bound, or a range of more than kMaxSlurmExpansion hosts.
std::vector<std::string> expand_hostlist(const std::string& hostlist, const std::string& variable = "hostlist");

// The task counts of a SLURM tasks-per-node list, one per node: "2(x3),1" -> 2 2 2 1 (a count, optionally
// repeated "(xN)" times over consecutive nodes). Counts are >= 0, repeats 1..kMaxSlurmExpansion.
// InvalidArgument naming `variable` and the list otherwise.
std::vector<int64_t> expand_tasks_per_node(const std::string& tasks_per_node,
                                           const std::string& variable = "tasks per node");

// strata's layout of a SLURM step into task types, TensorFlow SlurmClusterResolver's `jobs` as a string:
// "type:count" entries separated by ',' (spaces around them ignored), the types among chief, worker, ps,
// evaluator, each at most once, counts >= 0, at most one chief and one evaluator. A type with count 0 is
// absent. The map orders the types by name, which is the order in which they take the step's ranks.
// InvalidArgument naming `variable` and the value otherwise.
std::map<std::string, int64_t> parse_slurm_jobs(const std::string& jobs,
                                                const std::string& variable = "STRATA_SLURM_JOBS");

}  // namespace strata::cluster
