// The task machinery of `strata launch` (src/cli/launch_command.cc): the launcher's signals, the ports of its
// tasks, the environment each task gets, and the loop that starts this machine's tasks, copies their output
// with a prefix, and stops, restarts or waits them out (how it decides is described in launch_command.cc).
// A multi-node job (src/cli/launch_rendezvous.h) runs the same loop on every node, for that node's tasks, and
// learns through `Peers` what the other nodes' tasks did.
//
// Thread-safety: the functions and classes here run on the launcher's main thread; SignalScope installs
// process-wide handlers (one scope at a time). Peers implementations are called from that thread only.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "strata/cluster/cluster_resolver.h"

namespace strata::cli::launch {

// One line from the launcher itself, on stderr: "strata launch: <line>".
void say(const std::string& line);
// "SIGKILL" for 9; "signal 42" when it has no name.
std::string signal_name(int sig);
// 5 -> "5", 0.25 -> "0.25".
std::string format_seconds(double seconds);

// While it lives: handlers for SIGINT, SIGTERM and SIGCHLD that write the signal into a pipe the task loop
// polls, SIGPIPE ignored, and those signals unblocked; the previous handlers and mask come back after.
class SignalScope {
 public:
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  // The signals that arrived since the last call (SIGCHLD included), oldest first.
  static std::vector<int> take();
  // The first SIGINT or SIGTERM among take()'s signals (the others are dropped), or 0.
  static int take_interrupt();
  // The read end of the pipe (for poll).
  static int fd();
};

// One listening socket per task name on `host` (an IPv4 or IPv6 address or name of this machine): free ports
// picked by the kernel, or port_base, port_base+1, ... (one in use is Unavailable naming it and the task). The
// sockets are held, so that no other process takes the ports, until release() (just before the tasks start).
class PortReservation {
 public:
  PortReservation(const std::string& host, const std::vector<std::string>& names, int port_base);
  ~PortReservation() { release(); }
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  const std::vector<int>& ports() const { return ports_; }
  void release();

 private:
  std::vector<int> ports_, fds_;
};

// "host:port", with an IPv6 host bracketed.
std::string host_port(const std::string& host, int port);

// The executable for `command`: as given when it has a '/', else the first match on PATH. InvalidArgument
// ("launch: command not found: ...") otherwise.
std::string find_executable(const std::string& command);

// The environment of a task: the launcher's, without any launcher's cluster variables (another TF_CONFIG,
// mpirun's OMPI_COMM_WORLD_*, torchrun's RANK/LOCAL_WORLD_SIZE/..., SLURM's task and step variables), plus
// TF_CONFIG, STRATA_LAUNCH_RESTART=attempt, and STRATA_ELASTIC_MIN_WORKERS when min_workers > 0.
std::vector<std::string> task_environment(const std::string& tf_config, int attempt, int min_workers);

// A task of the job: "worker", 1 -> worker:1.
struct TaskId {
  std::string type;
  int index = 0;
  std::string name() const { return type + ":" + std::to_string(index); }
};

// What the task loop needs from the command line: the job's shape and the policies.
struct TaskOptions {
  bool chief = false;    // the job has a chief
  int ps = 0;            // the job's ps tasks (on any node)
  int max_restarts = 0;  // restarts of the cluster, or of a task alone (parameter-server and elastic jobs)
  int min_workers = 0;   // elastic (one node only); 0: not elastic
  double stop_timeout = 5.0;
  std::vector<std::string> command;
};

// The other nodes of a multi-node job, as this node's task loop sees them. Every call returns at once: the
// network is someone else's thread's business.
class Peers {
 public:
  struct Stop {
    std::string why;          // "node 1: worker:3 exited with status 3"
    int exit_code = 1;        // for this node's launcher
    bool restartable = true;  // a task failed (not a launcher's signal)
    bool node_lost = false;   // a node (or the rendezvous's node 0) is gone: `why` names it
  };
  virtual ~Peers() = default;
  // Why this node must stop its tasks now (another node's task failed or its launcher got a signal, or a
  // node was lost), if it must.
  virtual std::optional<Stop> stop() = 0;
  // This node's task failed (`why`: "worker:1 exited with status 3"), or its launcher got a signal: every
  // node must stop.
  virtual void publish_stop(const std::string& why, int exit_code, bool restartable) = 0;
  // Every chief and worker task of this node has exited 0.
  virtual void publish_workers_done() = 0;
  // ... of every node: the ps tasks may stop.
  virtual bool all_workers_done() = 0;
  // The chief (a parameter-server job's, on node 0) exited 0: the job is done.
  virtual void publish_chief_done() = 0;
  virtual bool chief_done() = 0;
};

// How one run of this node's tasks ended.
struct Outcome {
  int exit_code = 0;         // for the launcher: 0, the failed task's, or 128 + the signal the launcher got
  bool task_failed = false;  // a task (here or on another node) failed on its own: restart material
  int interrupted = 0;       // the signal the launcher got, or 0
  std::string node_lost;     // a node was lost (Peers::Stop::why), so the job cannot go on
};

// Starts `tasks` (this machine's share of `spec`'s tasks), each with its TF_CONFIG from `spec`, and runs them
// until the job is done, a task fails or the launcher gets a signal; every task and its process group are
// gone when it returns or throws. `attempt` is STRATA_LAUNCH_RESTART; `restarts` counts the restarts made so
// far (a task restarted alone adds one). `peers` is null for a one-machine job.
Outcome run_tasks(const TaskOptions& options, const std::string& executable, const std::vector<TaskId>& tasks,
                  const cluster::ClusterSpec& spec, int attempt, int& restarts, Peers* peers);

}  // namespace strata::cli::launch
