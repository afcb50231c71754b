// `strata launch --workers N [--chief] [--ps M] [--max-restarts R] [--port-base P] -- COMMAND ARGS...`:
// a local cluster on 127.0.0.1, or with --nnodes one machine's part of a job on many (below). The flags and the
// restart loop are here; the task machinery is launch_tasks.h, the multi-node rendezvous launch_rendezvous.h.
// One process per task (chief:0, worker:0..N-1, ps:0..M-1), each with its own TF_CONFIG naming every task's
// address and its own task, and STRATA_LAUNCH_RESTART (0 on the first run, k on the k-th restart). Every line a
// task writes is copied to the launcher's stdout or stderr with the task's prefix ("[worker:1] ..."), whole lines
// only (a line longer than 64 KiB is cut into pieces).
//
// When a task exits non-zero or is killed by a signal, the launcher says which and how, stops the others
// (SIGTERM to each task's process group, SIGKILL after --stop-timeout seconds), and starts the whole cluster
// again, up to R times; then it exits with that task's status (128 + the signal for a signal). When every
// chief and worker task has exited 0, the ps tasks (servers that never end on their own) are stopped the
// same way and the launcher exits 0.
//
// A cluster with a chief and ps tasks (--chief --ps M) is a parameter-server job: the chief coordinates and the
// workers and ps tasks serve it. There a failed worker or ps task is restarted alone, on its own address, while
// the others go on (each such restart counts against R; STRATA_LAUNCH_RESTART is the task's own count); a failed
// chief stops the cluster as above. The job is done when the chief exits 0: the workers, whose fit the chief ended,
// get until --stop-timeout to exit by themselves (after their last words), then the other tasks are stopped.
// With --min-workers M (elastic synchronous training) every task also gets STRATA_ELASTIC_MIN_WORKERS=M, and a
// failed worker (not the one serving the coordination service) is restarted alone while --max-restarts allows (it
// joins the running job at a step boundary), else left out while M workers still run: the others regroup without
// it and the job goes on.
// SIGINT and SIGTERM sent to the launcher go to every task; the launcher then waits for them as above and exits
// with 128 + that signal (a second one kills the tasks at once).
//
// Ports: by default each task's port is found by binding 127.0.0.1:0 (all sockets are held until every
// port is known, then closed just before the tasks start; a process taking one in that instant is the
// only race). With --port-base P the ports are P, P+1, ... in task order, and one already in use is an
// error naming it. A fresh set is picked for each restart (the same P, P+1, ... with --port-base).
//
// Many machines (--nnodes N > 1, torchrun's static rendezvous): the same launcher runs on each machine with
// `--nnodes N --node-rank R --master-addr HOST --master-port P --workers-per-node K`. Node 0's launcher serves the
// rendezvous (the coordination service) on HOST:P; every launcher announces its address (--node-addr, default
// the local address of the route to HOST) and the free ports it reserved there, waits up to --rdzv-timeout for
// all N nodes, and starts its own tasks with the job's TF_CONFIG: chief:0 (with --chief) on node 0, workers
// R*K .. R*K+K-1 on node R, ps:i on node i % N. A task failing on any node, or a launcher's SIGINT/SIGTERM,
// stops the tasks of every node (each launcher says which node and task); with --max-restarts every node stops
// and a new round of the rendezvous starts the whole cluster again (--chief --ps jobs restart a failed worker or
// ps alone on its node, as on one machine). A node lost (no heartbeat for --node-timeout; node 0's launcher
// gone is the same for the others) stops every surviving node's tasks, and each survivor ends with an error
// naming it. --min-workers (elastic) is for one machine only.
//
// Thread-safety: runs on the main thread; installs handlers for SIGINT, SIGTERM, SIGCHLD (and ignores
// SIGPIPE) while it runs, and restores the previous ones. A multi-node launcher has two more threads (the
// rendezvous's watcher and the coordination client's heartbeats), which never touch the tasks.
#include <sys/prctl.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/launch_rendezvous.h"
#include "cli/launch_tasks.h"
#include "cli/security_flags.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/error.h"

namespace strata::cli {
namespace {

using launch::say;
using launch::signal_name;

struct LaunchArgs {
  int workers = -1;
  bool chief = false;
  int ps = 0;
  int max_restarts = 0;
  int min_workers = 0;  // 0: not elastic
  int port_base = 0;
  double stop_timeout = 5.0;
  // Many machines.
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  int workers_per_node = -1;
  std::string node_addr;
  double rdzv_timeout = 60.0;
  double node_timeout = 10.0;
  std::vector<std::string> command;
  SecurityFlags security;
};

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

launch::NodeLayout layout_of(const LaunchArgs& a) {
  return {.nnodes = a.nnodes, .workers_per_node = a.workers_per_node, .chief = a.chief, .ps = a.ps};
}

void check_args(LaunchArgs& a) {
  STRATA_CHECK(a.nnodes >= 1, InvalidArgument, "launch: --nnodes must be >= 1, got " << a.nnodes);
  STRATA_CHECK(a.node_rank >= 0 && a.node_rank < a.nnodes, InvalidArgument,
               "launch: --node-rank " << a.node_rank << " is out of range for --nnodes " << a.nnodes << " (0.."
                                      << a.nnodes - 1 << ")");
  if (a.nnodes == 1 && a.workers_per_node >= 0) {  // one machine: --workers-per-node is --workers
    STRATA_CHECK(a.workers < 0 || a.workers == a.workers_per_node, InvalidArgument,
                 "launch: --workers " << a.workers << " and --workers-per-node " << a.workers_per_node
                                      << " disagree on one node; give one of them");
    a.workers = a.workers_per_node;
  }
  if (a.nnodes > 1) {
    STRATA_CHECK(a.workers < 0, InvalidArgument,
                 "launch: with --nnodes " << a.nnodes
                                          << " give --workers-per-node K (worker tasks on each node), not "
                                             "--workers");
    STRATA_CHECK(a.workers_per_node >= 1, InvalidArgument,
                 "launch: --nnodes " << a.nnodes << " needs --workers-per-node K >= 1 (worker tasks on each node)"
                                     << (a.workers_per_node >= 0 ? ", got " + std::to_string(a.workers_per_node)
                                                                 : std::string()));
    STRATA_CHECK(!a.master_addr.empty(), InvalidArgument,
                 "launch: --nnodes " << a.nnodes
                                     << " needs --master-addr HOST: node 0's address, where its launcher "
                                        "serves the rendezvous");
    STRATA_CHECK(
        a.master_port >= 1 && a.master_port <= 65535, InvalidArgument,
        "launch: --nnodes " << a.nnodes << " needs --master-port P (1..65535): the port node 0 serves the rendezvous on"
                            << (a.master_port != 0 ? ", got " + std::to_string(a.master_port) : std::string()));
    cluster::parse_address(launch::host_port(a.master_addr, a.master_port), "launch --master-addr");
    if (!a.node_addr.empty()) cluster::parse_address(launch::host_port(a.node_addr, 1), "launch --node-addr");
    STRATA_CHECK(a.rdzv_timeout > 0 && a.rdzv_timeout <= 86400, InvalidArgument,
                 "launch: --rdzv-timeout must be 0..86400 seconds (not 0), got " << a.rdzv_timeout);
    STRATA_CHECK(a.node_timeout >= 0.2 && a.node_timeout <= 3600, InvalidArgument,
                 "launch: --node-timeout must be 0.2..3600 seconds, got " << a.node_timeout);
    STRATA_CHECK(a.min_workers == 0, InvalidArgument,
                 "launch: --min-workers (elastic training) is for one machine; a job of --nnodes "
                     << a.nnodes << " restarts every node with --max-restarts");
    a.workers = a.nnodes * a.workers_per_node;
  }
  STRATA_CHECK(a.workers != -1, InvalidArgument,
               "launch: --workers N is required (or --nnodes N --workers-per-node K for many machines)");
  STRATA_CHECK(a.workers >= 0, InvalidArgument, "launch: --workers must be >= 0, got " << a.workers);
  STRATA_CHECK(a.workers + (a.chief ? 1 : 0) >= 1, InvalidArgument,
               "launch: the cluster needs a chief or a worker (--workers 0 wants --chief)");
  STRATA_CHECK(a.ps >= 0, InvalidArgument, "launch: --ps must be >= 0, got " << a.ps);
  STRATA_CHECK(a.max_restarts >= 0, InvalidArgument, "launch: --max-restarts must be >= 0, got " << a.max_restarts);
  const int tasks = a.nnodes > 1 ? static_cast<int>(launch::node_tasks(layout_of(a), a.node_rank).size())
                                 : a.workers + (a.chief ? 1 : 0) + a.ps;
  STRATA_CHECK(a.port_base == 0 || (a.port_base >= 1 && a.port_base + tasks - 1 <= 65535), InvalidArgument,
               "launch: --port-base must leave room for " << tasks << " ports in 1..65535, got " << a.port_base);
  STRATA_CHECK(a.stop_timeout >= 0 && a.stop_timeout <= 3600, InvalidArgument,
               "launch: --stop-timeout must be 0..3600 seconds, got " << a.stop_timeout);
  STRATA_CHECK(!a.command.empty(), InvalidArgument, "launch: no command (put it after --)");
  const int workers = a.workers + (a.chief ? 1 : 0);
  STRATA_CHECK(a.min_workers >= 0 && a.min_workers <= workers, InvalidArgument,
               "launch: --min-workers must be 0..(the " << workers << " workers), got " << a.min_workers);
  STRATA_CHECK(a.min_workers == 0 || a.ps == 0, InvalidArgument,
               "launch: --min-workers is for synchronous jobs (multi_worker_mirrored); a parameter-server job "
               "restarts its tasks alone with --max-restarts");
}

launch::TaskOptions task_options(const LaunchArgs& a) {
  return {.chief = a.chief,
          .ps = a.ps,
          .max_restarts = a.max_restarts,
          .min_workers = a.min_workers,
          .stop_timeout = a.stop_timeout,
          .command = a.command};
}

std::vector<std::string> names_of(const std::vector<launch::TaskId>& tasks) {
  std::vector<std::string> names;
  for (const auto& t : tasks) names.push_back(t.name());
  return names;
}

// After a failed run: whether to start the cluster again, counting the restart. A signal that came while the
// cluster was being stopped ends the job (in `outcome`).
bool restart_after(const LaunchArgs& a, launch::Outcome& outcome, int& restarts, const std::string& where) {
  if (!outcome.task_failed || outcome.interrupted != 0 || !outcome.node_lost.empty()) return false;
  if (restarts >= a.max_restarts) {
    if (a.max_restarts > 0) {
      say("giving up after " + std::to_string(a.max_restarts) + " restart" + (a.max_restarts == 1 ? "" : "s"));
    }
    return false;
  }
  for (const int sig : launch::SignalScope::take()) {
    if (sig != SIGCHLD && outcome.interrupted == 0) outcome.interrupted = sig;
  }
  if (outcome.interrupted != 0) {
    say("got " + signal_name(outcome.interrupted) + "; not restarting");
    outcome.exit_code = 128 + outcome.interrupted;
    return false;
  }
  ++restarts;
  say("restart " + std::to_string(restarts) + " of " + std::to_string(a.max_restarts) + where);
  return true;
}

// One machine: every task on 127.0.0.1.
int run_local(const LaunchArgs& a, const std::string& executable) {
  std::vector<launch::TaskId> tasks;
  if (a.chief) tasks.push_back({"chief", 0});
  for (int i = 0; i < a.workers; ++i) tasks.push_back({"worker", i});
  for (int i = 0; i < a.ps; ++i) tasks.push_back({"ps", i});
  const launch::TaskOptions options = task_options(a);
  launch::Outcome outcome;
  int restarts = 0;
  for (int attempt = 0;; ++attempt) {
    cluster::ClusterSpec spec;
    {
      launch::PortReservation ports("127.0.0.1", names_of(tasks), a.port_base);
      for (size_t i = 0; i < tasks.size(); ++i) {
        spec.jobs[tasks[i].type].push_back("127.0.0.1:" + std::to_string(ports.ports()[i]));
      }
    }  // released just before the tasks start
    outcome = launch::run_tasks(options, executable, tasks, spec, attempt, restarts, nullptr);
    if (!restart_after(a, outcome, restarts, "")) break;
  }
  return outcome.exit_code;
}

// Many machines: this node's tasks, in a cluster agreed on at node 0's rendezvous.
int run_node(const LaunchArgs& a, const std::string& executable) {
  const launch::NodeLayout layout = layout_of(a);
  const std::string node_addr = a.node_addr.empty() ? launch::route_address(a.master_addr, a.master_port) : a.node_addr;
  const std::string flags = "--nnodes " + std::to_string(a.nnodes) + " --workers-per-node " +
                            std::to_string(a.workers_per_node) + (a.chief ? " --chief" : "") + " --ps " +
                            std::to_string(a.ps) + " --max-restarts " + std::to_string(a.max_restarts);
  launch::Rendezvous rendezvous({.layout = layout,
                                 .node_rank = a.node_rank,
                                 .master_addr = a.master_addr,
                                 .master_port = a.master_port,
                                 .node_addr = node_addr,
                                 .rdzv_timeout = millis(a.rdzv_timeout),
                                 .node_timeout = millis(a.node_timeout),
                                 .stop_timeout = a.stop_timeout,
                                 .flags = flags});
  const std::vector<launch::TaskId> tasks = launch::node_tasks(layout, a.node_rank);
  const launch::TaskOptions options = task_options(a);
  launch::Outcome outcome;
  int restarts = 0;
  for (int attempt = 0;; ++attempt) {
    std::optional<cluster::ClusterSpec> spec;
    {
      launch::PortReservation ports(node_addr, names_of(tasks), a.port_base);  // held through the rendezvous
      int interrupt = 0;
      spec = rendezvous.join(attempt, ports.ports(), &interrupt);
      if (!spec) {
        say("got " + signal_name(interrupt) + " while waiting for the other nodes; leaving");
        outcome = {.exit_code = 128 + interrupt, .task_failed = false, .interrupted = interrupt, .node_lost = {}};
        break;
      }
    }
    std::string mine;
    for (const auto& t : tasks) mine += (mine.empty() ? "" : ", ") + t.name();
    say("node " + std::to_string(a.node_rank) + " of " + std::to_string(a.nnodes) + " at " + node_addr + ": " + mine +
        (attempt == 0 ? "" : " (restart " + std::to_string(attempt) + ")"));
    outcome = launch::run_tasks(options, executable, tasks, *spec, attempt, restarts, &rendezvous);
    if (!restart_after(a, outcome, restarts, " (every node)")) break;
  }
  const std::vector<std::string> troubles = rendezvous.leave(
      outcome.exit_code == 0 ? "its tasks ended well" : "exit status " + std::to_string(outcome.exit_code));
  STRATA_CHECK(outcome.node_lost.empty(), Unavailable,
               "launch: " << outcome.node_lost << "; this node's tasks were stopped");
  if (!troubles.empty()) {
    STRATA_CHECK(outcome.exit_code == 0, Unavailable, "launch: " << troubles.front());
    say(troubles.front() + " (after the job ended well)");
  }
  return outcome.exit_code;
}

// Runs the job, restarting it after a task's failure; returns the launcher's exit status.
int run_launch(LaunchArgs a) {
  check_args(a);
  const std::string executable = launch::find_executable(a.command.front());
  // One machine: a fresh secret for the job unless one was given. Many: every node's launcher needs the same one,
  // so it must be given (--job-secret-file; beyond loopback JobCredentials also asks for TLS or --insecure).
  const cluster::JobCredentials credentials = hand_credentials_to_tasks(a.security, /*generate=*/a.nnodes == 1);
  if (a.nnodes > 1) {  // refused now, not when node 0 starts the rendezvous service
    const std::string master = a.master_addr + ":" + std::to_string(a.master_port);
    credentials.check_address(master, "the rendezvous at " + master);
  }
  launch::SignalScope signals;
  // Orphans of a task's group are re-parented to us, so they are ours to reap (and to wait out).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  return a.nnodes > 1 ? run_node(a, executable) : run_local(a, executable);
}

}  // namespace

void add_launch_command(CLI::App& app) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* launch = app.add_subcommand(
      "launch",
      "Start a local cluster on 127.0.0.1: one process per task running COMMAND, each with its TF_CONFIG (every "
      "task's address, and its own task) and STRATA_LAUNCH_RESTART (the restart number, 0 first). Output lines are "
      "prefixed with the task ([worker:1] ...). When a task exits non-zero or by a signal, the others are stopped "
      "(SIGTERM, then SIGKILL after --stop-timeout) and the cluster starts again, up to --max-restarts times; the "
      "launcher then exits with that task's status (128 + signal). With --chief and --ps (a parameter-server job) a "
      "failed worker or ps is restarted alone while the others go on, and the job ends when the chief exits 0; so "
      "is a failed worker with --min-workers (elastic training). SIGINT/SIGTERM are passed to every task. "
      "Many machines: run it on each with --nnodes N --node-rank R --master-addr HOST --master-port P "
      "--workers-per-node K; node 0 serves the rendezvous on HOST:P, each node starts its own tasks on its address, "
      "and a task failing (or a node lost) on one node stops every node's. "
      "Example: strata launch --workers 2 -- strata train job.yaml --strategy multi_worker_mirrored");
  launch->add_option("--workers", args->workers, "Worker tasks (worker:0 .. worker:N-1); required on one machine");
  launch->add_flag("--chief", args->chief, "Add a chief task (chief:0); without one, worker:0 is the chief");
  launch->add_option("--ps", args->ps, "Parameter-server tasks (ps:0 .. ps:M-1)")->capture_default_str();
  launch
      ->add_option("--max-restarts", args->max_restarts,
                   "Restarts after a task fails: of the whole cluster, or of the failed worker or ps alone with "
                   "--chief and --ps")
      ->capture_default_str();
  launch
      ->add_option("--min-workers", args->min_workers,
                   "Elastic training: when a worker fails the others go on without it while at least this many "
                   "workers remain, and within --max-restarts it is restarted alone and rejoins at a step boundary; "
                   "the tasks see it as STRATA_ELASTIC_MIN_WORKERS (0: not elastic)")
      ->capture_default_str();
  launch->add_option("--port-base", args->port_base,
                     "Ports P, P+1, ... in task order (chief, workers, ps); default: free ports picked by the system");
  launch->add_option("--stop-timeout", args->stop_timeout, "Seconds between SIGTERM and SIGKILL when stopping tasks")
      ->capture_default_str();
  launch->add_option("--nnodes", args->nnodes, "Machines in the job, each running its own `strata launch`")
      ->capture_default_str();
  launch->add_option("--node-rank", args->node_rank, "This machine's rank, 0..nnodes-1; node 0 serves the rendezvous")
      ->capture_default_str();
  launch->add_option("--master-addr", args->master_addr,
                     "Node 0's address: its launcher serves the rendezvous there (needed with --nnodes > 1)");
  launch->add_option("--master-port", args->master_port, "The port of the rendezvous on --master-addr");
  launch->add_option("--workers-per-node", args->workers_per_node,
                     "Worker tasks on each machine: node R runs worker:R*K .. worker:R*K+K-1 (chief:0 runs on node 0, "
                     "ps:i on node i % nnodes)");
  launch->add_option("--node-addr", args->node_addr,
                     "This machine's address for its tasks (default: the local address of the route to --master-addr)");
  launch
      ->add_option("--rdzv-timeout", args->rdzv_timeout,
                   "Seconds to wait for every node at the rendezvous (at the start and at each restart)")
      ->capture_default_str();
  launch
      ->add_option("--node-timeout", args->node_timeout,
                   "Seconds without a heartbeat after which a node (or node 0's rendezvous) is declared lost")
      ->capture_default_str();
  add_security_options(launch, args->security);
  launch->add_option("command", args->command, "COMMAND ARGS... (after --)")->required();
  launch->callback([args] {
    const int code = run_launch(*args);
    std::fflush(stdout);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace strata::cli
