// WorkerGroup: the processes of a job that compute together (the chief and the workers of a resolved cluster) as one
// group, made the way c10d's init_process_group makes one: the coordination service on the task that hosts it, a
// client with heartbeats on every task, and a communicator from the backend registry (strata/comm/backends.h). The
// strategies that span processes (MultiWorkerMirrored, pipeline replicas, LocalSGD) build on it.
//
//   cluster::TaskInfo task = cluster::resolve_cluster_from_environment();
//   auto group = cluster::WorkerGroup::init(task, {.backend = "auto"});   // blocks until every worker connected
//   group->communicator().all_reduce({grads}, comm::ReduceOp::kMean)->wait();
//
// The rendezvous talks: while it waits it reports, every progress_every, what it waits for and where ("waiting for
// worker:1 at 127.0.0.1:2223: not here after 10 s of 60"; "waiting for the coordination service at
// 127.0.0.1:2222 (chief:0): no answer after 10 s of 60"), and it gives up after rendezvous_timeout with a Timeout
// saying the same, apart from the collectives' timeout.
//
// A lost task (its heartbeats stopped) aborts the communicator: every pending and later collective fails naming it.
// A collective already blocked inside Gloo on the dead peer cannot be interrupted (Gloo cannot cancel a receive);
// when the group is still alive a second later, options.on_blocked_by_lost_task is called and the program decides
// (the library never ends the process). On destruction at a normal end every task waits briefly at an exit barrier,
// so the task serving the coordination service outlives the others' last use of it.
//
// Thread-safety: made and destroyed by one thread; the communicator as every Communicator (one thread at a time);
// the client may be used from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strata/cluster/cluster_resolver.h"
#include "strata/cluster/coordination.h"
#include "strata/comm/communicator.h"

namespace strata::cluster {

struct WorkerGroupOptions {
  // A backend of comm's registry, or "auto": mpi for a job started by mpirun, else gloo.
  std::string backend = "auto";
  // Bound on every collective.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Bound on the rendezvous: every task reaching the service and the group (0: 60 s, or `timeout` if shorter).
  std::chrono::milliseconds rendezvous_timeout{0};
  // How often a waiting rendezvous reports what it waits for, through on_waiting (default: a line on stderr).
  std::chrono::milliseconds progress_every{std::chrono::seconds(10)};
  std::function<void(const std::string& message)> on_waiting;
  // A task silent this long is declared lost; heartbeats go every interval.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(1)};
  // The communicator's keys in the service's store.
  std::string prefix = "group";
  // The GPU of a GPU backend (nccl): this task's rank uses cuda:<device>; -1: the backend's choice.
  int device = -1;
  // No communicator is made: the caller makes its own groups over client() (an elastic group makes one per
  // membership epoch). Lost tasks then abort nothing.
  bool without_communicator = false;
  // See above. Called on a background thread; never once the group is destroyed.
  std::function<void(const std::string& reason)> on_blocked_by_lost_task;
  // What must agree across the group's tasks ("batch_size" -> "64", "model" -> its layers, ...): each task publishes
  // its own at the rendezvous and compares it with every other task's; a difference is InvalidArgument naming the
  // keys and the tasks ("worker:1 has batch_size 128, worker:0 has 64"), on every task at once, before any
  // collective can mismatch. (Without a communicator, e.g. elastic, a task compares with the tasks that arrived
  // before it.) Empty: nothing is compared.
  std::map<std::string, std::string> fingerprint;
};

class WorkerGroup {
 public:
  // The group of `task`'s cluster (REQUIRES: a chief or worker task of a cluster of more than one). Blocks until the
  // group is connected: Timeout naming the tasks that did not come, InvalidArgument for a backend that is not
  // registered, that the launch cannot use (a store-based backend with no coordinator address), or whose ranks
  // disagree with the cluster.
  static std::unique_ptr<WorkerGroup> init(const TaskInfo& task, WorkerGroupOptions options);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The backend chosen ("gloo", "mpi", ...: "auto" resolved).
  const std::string& backend() const { return backend_; }
  const TaskInfo& task() const { return task_; }
  const WorkerGroupOptions& options() const { return options_; }
  // REQUIRES: made with a communicator.
  comm::Communicator& communicator() const;
  const std::shared_ptr<comm::Communicator>& shared_communicator() const { return comm_; }
  // The coordination client (null under mpi, whose launcher placed the ranks).
  const std::shared_ptr<CoordinationClient>& client() const { return client_; }
  // "chief:0", "worker:0", ...: the group's tasks in rank order, as the coordination service names them.
  std::vector<std::string> member_tasks() const;
  // The address this task listens on for its peers.
  std::string hostname() const;
  // Compares this task's fingerprint with those the other members published so far (InvalidArgument as at the
  // rendezvous): for a group without a communicator, whose members arrive at different times.
  void check_fingerprints() { compare_fingerprints(/*every_member_arrived=*/false); }

 private:
  WorkerGroup(const TaskInfo& task, WorkerGroupOptions options);
  void connect_through_service();
  // The rendezvous' steps: a client of the service, then every member's arrival; each reports while it waits and
  // throws Timeout at `deadline`.
  void connect_client(std::chrono::steady_clock::time_point deadline);
  void wait_for_members(std::chrono::steady_clock::time_point deadline);
  // Publishes this task's fingerprint; compare_fingerprints checks it against the other members' published ones.
  void publish_fingerprint();
  void compare_fingerprints(bool every_member_arrived);
  void report_waiting(const std::string& message) const;
  std::chrono::milliseconds rendezvous_timeout() const;

  TaskInfo task_;
  WorkerGroupOptions options_;
  std::string backend_;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<CoordinationService> service_;  // on the task that hosts it
  std::shared_ptr<CoordinationClient> client_;
  std::shared_ptr<comm::Communicator> comm_;
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);  // false once destroyed
};

}  // namespace strata::cluster
