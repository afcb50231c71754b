// The rendezvous of a multi-node `strata launch` (torchrun's static rendezvous): where each node's tasks go,
// and how the nodes' launchers meet and watch each other, through the project's coordination service
// (strata/cluster/coordination.h) that node 0's launcher serves on --master-addr:--master-port.
//
// Every launcher connects as task "node:R" and sends heartbeats. Round k of the job (k = STRATA_LAUNCH_RESTART)
// keeps its keys under "launch/r<k>/": each node announces "node/R" = "<address> <port>,<port>,..." (the
// ports it reserved for its tasks on its address), waits for all N nodes' announcements, and builds the same
// ClusterSpec (layout_cluster). While the tasks run, the first task failure or launcher signal of any node is
// written once to "stop" (first one wins), a node whose chief and workers all exited 0 writes "done/R", and
// a parameter-server job's chief writes "chief_done"; a background thread polls these every 100 ms. The
// service declares a silent node lost after --node-timeout; the others learn it from their heartbeats, and a
// node whose heartbeats go unanswered that long learns that node 0 is gone. At the end each node writes
// "launch/left/R" and disconnects (so that its silence is no loss); node 0 serves until every node has left
// or was lost, so that no node misses why the job ended.
//
// Thread-safety: a Rendezvous is used from the launcher's main thread; its own watcher thread and the
// coordination client's heartbeat thread share the state behind `mu_`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/launch_tasks.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/cluster/coordination.h"

namespace strata::cli::launch {

// The shape of a multi-node job.
struct NodeLayout {
  int nnodes = 1;
  int workers_per_node = 1;
  bool chief = false;
  int ps = 0;
};

// The tasks of node `node`, in the order of its ports: chief:0 (node 0, when the job has a chief), then its
// workers worker:node*K .. worker:node*K+K-1, then ps:i for each i with i % nnodes == node (round-robin).
std::vector<TaskId> node_tasks(const NodeLayout& layout, int node);

// A node as it announced itself: its address and its tasks' ports (node_tasks order).
struct NodeAddress {
  std::string host;
  std::vector<int> ports;
};

// The job's cluster: every task at its node's host and port. REQUIRES: one NodeAddress per node, each with
// node_tasks(layout, node).size() ports.
cluster::ClusterSpec layout_cluster(const NodeLayout& layout, const std::vector<NodeAddress>& nodes);

// The address of this machine on the route to `host`: the source address of a UDP socket connect()ed to
// host:port (which sends nothing); 127.0.0.1 when `host` is this machine's loopback. InvalidArgument when
// the name does not resolve, Unavailable when there is no route.
std::string route_address(const std::string& host, int port);

class Rendezvous final : public Peers {
 public:
  struct Options {
    NodeLayout layout;
    int node_rank = 0;
    std::string master_addr;
    int master_port = 0;
    std::string node_addr;  // this node's address: its tasks listen on it
    std::chrono::milliseconds rdzv_timeout{std::chrono::seconds(60)};
    std::chrono::milliseconds node_timeout{std::chrono::seconds(10)};
    double stop_timeout = 5.0;  // the tasks' --stop-timeout: part of how long node 0 waits for the others to leave
    std::string flags;          // the flags every node must share, as text ("--nnodes 2 --workers-per-node 2 ...")
  };

  // Node 0 starts serving the rendezvous (Unavailable naming the address when it cannot listen there). No
  // node connects yet: join() does, so that a signal can end the wait.
  explicit Rendezvous(Options options);
  // Stops the watcher and heartbeats (without leaving: to the others this node is lost) and node 0's service.
  ~Rendezvous() override;
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Round `round` (0, then one per restart): connects first (round 0: checks that every node has the same
  // flags and a rank of its own), announces `ports` on this node's address, waits for every node, and returns
  // the job's cluster. nullopt with *interrupt set when the launcher got SIGINT or SIGTERM meanwhile. Timeout
  // naming the ranks that did not join within --rdzv-timeout ("node 1 of 2 did not join the rendezvous at
  // 10.0.0.1:29400 within 60 s"); Unavailable naming a node that was lost or left.
  std::optional<cluster::ClusterSpec> join(int round, const std::vector<int>& ports, int* interrupt);

  // The launcher is done (`how`: "exit status 0"). A node other than 0 tells node 0 and disconnects; node 0
  // waits until every other node has left or was lost (at most stop timeout + node timeout + 5 s), then
  // stops serving. Returns what went wrong meanwhile or before: the nodes lost ("node 1 of 2 (10.0.0.2) was
  // lost: ..."), node 0 gone or unreachable.
  std::vector<std::string> leave(const std::string& how);

  // Peers.
  std::optional<Stop> stop() override;
  void publish_stop(const std::string& why, int exit_code, bool restartable) override;
  void publish_workers_done() override;
  bool all_workers_done() override;
  void publish_chief_done() override;
  bool chief_done() override;

 private:
  struct Publish {
    std::string key, value;
    bool first_wins = false;  // compare_set against absent: the first writer's value stays
  };

  std::string master() const;                      // "HOST:P"
  std::string node_name(int rank) const;           // "node 1 of 2 (10.0.0.2)"
  std::string key(const std::string& name) const;  // "launch/r<round>/<name>"
  bool connect(std::chrono::steady_clock::time_point deadline, int* interrupt);
  void on_lost(const cluster::LostTask& lost);
  void check_not_lost_or_left(int round);
  void watch();
  void stop_watcher();

  Options options_;
  std::unique_ptr<cluster::CoordinationService> service_;  // node 0
  std::unique_ptr<cluster::CoordinationClient> client_;

  std::mutex mu_;
  std::condition_variable cv_;
  int round_ = -1;                   // GUARDED_BY(mu_): the round whose tasks run (the watcher polls it)
  std::vector<std::string> hosts_;   // GUARDED_BY(mu_): each node's address, once known
  std::deque<Publish> publish_;      // GUARDED_BY(mu_)
  std::optional<Stop> remote_stop_;  // GUARDED_BY(mu_): the round's stop, written by another node
  int nodes_done_ = 0;               // GUARDED_BY(mu_)
  bool chief_done_ = false;          // GUARDED_BY(mu_)
  std::vector<std::string> lost_;    // GUARDED_BY(mu_): "node 1 of 2 (10.0.0.2) was lost: ..."
  bool master_gone_ = false;         // GUARDED_BY(mu_): node 0's service stopped answering heartbeats
  bool quit_ = false;                // GUARDED_BY(mu_)
  std::thread watcher_;
};

}  // namespace strata::cli::launch
