// Cluster resolution: who is in the job and which task this process is, from the environment a launcher
// left behind. Four launchers are understood, and all resolve to the same TaskInfo value:
//
//   TF_CONFIG (TensorFlow's JSON, one process per task; `strata launch` writes it):
//     {"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"], "ps": ["h3:2222"]},
//      "task": {"type": "worker", "index": 1}}
//   mpirun (OpenMPI):  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE [, OMPI_COMM_WORLD_LOCAL_RANK, _LOCAL_SIZE]
//   torchrun:          RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT [, LOCAL_RANK, LOCAL_WORLD_SIZE]
//   srun (SLURM):      SLURM_STEP_ID, SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_NODELIST,
//                      SLURM_STEP_TASKS_PER_NODE [, SLURM_CPUS_PER_TASK, SLURMD_NODENAME]
//                      and strata's STRATA_SLURM_JOBS, STRATA_SLURM_PORT_BASE (below)
//
// and none of them is a single process (source kSingle: worker 0 of 1).
//
//   const cluster::TaskInfo me = cluster::resolve_cluster_from_environment();
//   if (me.hosts_coordinator) start_coordination_service(me.coordinator_address);
//   std::cout << me.name() << " is worker " << *me.id_in_cluster << " of " << me.num_workers;
//
// TF_CONFIG follows TensorFlow (TFConfigClusterResolver and multi_worker_util): task types chief, worker,
// ps, evaluator; at most one chief and one evaluator; `is_chief` is the chief, or worker 0 when the cluster
// has no chief, or the evaluator (which TensorFlow treats as the chief of its own partition);
// `id_in_cluster` is 0 for the chief, index + (1 if there is a chief) for a worker, the index for the
// evaluator, and none for a ps; `num_workers` (a MultiWorkerMirroredStrategy's, multi_worker_util.worker_count)
// counts chief + workers, except for the evaluator, whose own partition is one worker.
// The keys "rpc_layer" and "environment" are read; other top-level keys are ignored, as TensorFlow does.
// Stricter than TensorFlow, so that a mistake is an error and not a silent single-process run or a hang:
// a cluster job with an unknown name, an address that is not "host:port", two tasks on one address, a
// cluster without a task, a task without a cluster, a negative index, and two launchers' variables at
// once are errors. An empty job list ("ps": []) counts as absent.
//
// srun follows TensorFlow's SlurmClusterResolver. A process is an srun task when SLURM_STEP_ID (or its old
// name SLURM_STEPID) is set: an sbatch script also has SLURM_PROCID=0 but no step id, and is one process.
// Its rank is SLURM_PROCID of SLURM_STEP_NUM_TASKS (else SLURM_NTASKS); the step's nodes are
// SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST, SLURM_NODELIST), a hostlist expression expanded as
// `scontrol show hostnames` does (cluster/slurm.h), with SLURM_STEP_TASKS_PER_NODE (else SLURM_TASKS_PER_NODE,
// as "2(x3),1", else one SLURM_NTASKS_PER_NODE for every node) tasks each. Ranks fill the nodes in list order,
// as srun's block distribution places them; the task of local id L on node H listens on "H:P+L", P being
// STRATA_SLURM_PORT_BASE (default kDefaultSlurmPortBase, 8888, TensorFlow's port_base). A task whose
// SLURM_LOCALID (or SLURMD_NODENAME, when set) is not where block distribution puts its rank is an error
// (srun --distribution=cyclic, plane, arbitrary), never a cluster of wrong addresses. STRATA_SLURM_JOBS
// ("chief:1,worker:2,ps:1", TensorFlow's `jobs`; default all workers) splits the ranks into task types: the
// types in name order (chief, evaluator, ps, worker, as TensorFlow sorts them, whatever order the variable
// lists them in) take consecutive ranks, so the chief is rank 0; the counts must add up to the step's tasks.
// Unlike TensorFlow, which sorts host names as strings (node10 before node9), the node list's own order is
// kept, since that is where srun puts the ranks. is_chief, id_in_cluster, num_workers and the coordinator
// then follow as for TF_CONFIG. local_rank is SLURM_LOCALID, local_world_size the tasks of this task's node,
// cpus_per_task SLURM_CPUS_PER_TASK.
// With other launchers: TF_CONFIG in an srun step is an error naming both (a TF_CONFIG exported in the
// shell reaches every task through srun, so all would claim one task). mpirun or torchrun variables in an
// srun step win, and the step's are ignored: mpirun inside an sbatch job starts its daemons with srun and
// torchrun runs as srun's task, so their processes inherit an srun step's variables that describe the
// launcher's daemons, while OMPI_COMM_WORLD_* / RANK describe the process itself.
//
// Every error is InvalidArgument naming the variable and the problem (for malformed JSON, the parser's
// line and column).
// Thread-safety: pure functions of their arguments; resolve_cluster_from_environment reads `environ`,
// which must not be changed concurrently (as for getenv).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::cluster {

// Where a TaskInfo came from.
enum class Source { kSingle, kTfConfig, kMpi, kTorchrun, kSlurm };
// "single", "tf_config", "mpi", "torchrun", "slurm".
const char* source_name(Source source);

// The tasks of a job by type, each type a list of "host:port" addresses in task-index order. Only the
// types chief, worker, ps and evaluator occur, and only with at least one task. Under mpirun and torchrun
// the addresses of the tasks are not known: the list holds one empty string per task.
struct ClusterSpec {
  std::map<std::string, std::vector<std::string>> jobs;

  int64_t num_tasks(const std::string& type) const;
  bool has(const std::string& type) const { return num_tasks(type) > 0; }
  // The `cluster` object of a TF_CONFIG: {"chief": [...], "worker": [...], ...}.
  std::string to_json() const;
  bool operator==(const ClusterSpec&) const = default;
};

// This process's place in the job.
struct TaskInfo {
  Source source = Source::kSingle;
  ClusterSpec cluster;
  std::string task_type = "worker";
  int64_t task_index = 0;
  // TensorFlow's multi_worker_util.is_chief (see the top of this file).
  bool is_chief = true;
  // TensorFlow's multi_worker_util.id_in_cluster: the task's rank among the workers; none for a ps.
  std::optional<int64_t> id_in_cluster = 0;
  // Workers of a MultiWorkerMirroredStrategy: chief + workers (the world size under mpirun / torchrun); 1 for the
  // evaluator (its own partition).
  int64_t num_workers = 1;
  // The task's index among the tasks of its machine, where the launcher says (mpirun, torchrun, srun).
  std::optional<int64_t> local_rank;
  // How many of the job's tasks run on this task's machine, this one included, where it is known: mpirun's
  // OMPI_COMM_WORLD_LOCAL_SIZE, torchrun's LOCAL_WORLD_SIZE, srun's tasks per node for this task's node; for
  // TF_CONFIG the tasks whose host is this task's host (the same name, or both loopback addresses). Threads are
  // shared out by it (cluster/host_cores.h).
  std::optional<int64_t> local_world_size;
  // The CPUs SLURM gave each task (SLURM_CPUS_PER_TASK, srun --cpus-per-task), under srun only: a process
  // that mpirun or torchrun started inside a step shares its launcher's CPUs, so the number is not its own.
  // The thread sharing (cluster/host_cores.h) may take it as this task's share of its node's cores.
  std::optional<int64_t> cpus_per_task;
  // This task's "host:port" ("" when the launcher does not say: mpirun, torchrun, single). Under srun, the
  // node's name and STRATA_SLURM_PORT_BASE + SLURM_LOCALID.
  std::string address;
  // Where the coordination service is: the chief's address, or worker 0's when there is no chief
  // (TF_CONFIG, srun); MASTER_ADDR:MASTER_PORT (torchrun); "" when unknown (mpirun, single, a ps-only
  // cluster).
  std::string coordinator_address;
  // Whether this task serves the coordination service: the chief, or worker 0 without a chief; rank 0
  // under mpirun and torchrun; the single process. Under srun, as for TF_CONFIG.
  bool hosts_coordinator = true;
  std::string rpc_layer;    // TF_CONFIG "rpc_layer" ("" when absent)
  std::string environment;  // TF_CONFIG "environment" ("" when absent)

  // "worker:1", "chief:0", "ps:2".
  std::string name() const { return task_type + ":" + std::to_string(task_index); }
};

// Variable name -> value.
using Environment = std::map<std::string, std::string>;

// Parses and checks one TF_CONFIG value. An empty or blank string, "{}", or a TF_CONFIG whose cluster is
// empty and that names no task, is a single process (as in TensorFlow).
TaskInfo resolve_tf_config(const std::string& tf_config);

// Resolves from an environment given as a map (tests, or a launcher checking what it is about to set).
// At most one launcher's variables may be set: TF_CONFIG (non-blank), OMPI_COMM_WORLD_*, torchrun's
// RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT / LOCAL_RANK / LOCAL_WORLD_SIZE, or an srun step's (which
// give way to mpirun's and torchrun's, see the top of this file).
TaskInfo resolve_cluster(const Environment& env);

// resolve_cluster over this process's environment.
TaskInfo resolve_cluster_from_environment();

// A TF_CONFIG value naming `cluster` and the task `type`:`index` (what `strata launch` gives each task).
// REQUIRES: the result resolves (resolve_tf_config) to that task; checked, InvalidArgument otherwise.
std::string make_tf_config(const ClusterSpec& cluster, const std::string& type, int64_t index);

// Splits "host:port" (IPv6 as "[::1]:2222") and checks it: a non-empty host of letters, digits, '.', '-',
// '_' (or a bracketed IPv6 literal) and a port 1..65535. `what` names the address in the error
// ("TF_CONFIG cluster worker[1]").
struct HostPort {
  std::string host;
  int port = 0;
};
HostPort parse_address(const std::string& address, const std::string& what);
// Whether two hosts of task addresses are one machine, as far as the names tell without asking DNS: the same
// name, or both loopback ("localhost", 127.x.x.x, [::1]).
bool same_host(const std::string& a, const std::string& b);
// Where a server of the job listens for "host:port": as given, with an empty host (or a bare port) bound to
// 127.0.0.1, never to every interface.
std::string listen_address(const std::string& address);

}  // namespace strata::cluster
