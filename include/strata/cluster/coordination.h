// The coordination service (TensorFlow's CoordinationService, in gRPC): the chief of a job serves it, and
// every task talks to it through a CoordinationClient, which is also a comm::Store, so communicators
// rendezvous through it (Gloo writes each rank's address under a key and waits for the others').
//
//   // on the chief
//   cluster::CoordinationService service;
//   service.start("127.0.0.1:0", {.heartbeat_timeout = std::chrono::seconds(10)});   // port 0: the OS picks
//   int port = service.port();
//
//   // on every task (the chief included)
//   cluster::CoordinationClient client("127.0.0.1:" + std::to_string(port), "worker:1");
//   client.start_heartbeats();                         // every 1 s, on a background thread
//   client.set("worker:1/addr", "10.0.0.2:4711");
//   client.wait({"worker:0/addr"}, std::chrono::seconds(30));   // Timeout naming the keys still missing
//   client.barrier("init", 3, std::chrono::seconds(60));        // Timeout naming the tasks that did not come
//   client.check_peers();                              // Unavailable naming a task declared lost
//
// With a job secret (job_credentials.h), a client's keys and barrier ids live under "job-<job id>/" in the service's
// store: the client adds it on the way in and strips it from what it reports, so two jobs that reach one service
// never read each other's keys (calls without the job's secret are refused before that).
//
// A task silent for heartbeat_timeout is declared lost; every task learns it from its next heartbeat
// reply (on_lost callback, lost_tasks(), check_peers()). A lost task that beats again with the same
// client stays lost (the others were told); a restarted task (a new client) is registered afresh.
//
// Every RPC has a deadline. A failed RPC becomes the strata error of its gRPC status (one table for every RPC of
// strata), naming the RPC, the keys and the address: DEADLINE_EXCEEDED is strata::Timeout (with the deadline waited
// for), UNAVAILABLE and CANCELLED (a service shutting down) strata::Unavailable, INVALID_ARGUMENT InvalidArgument.
//
// Thread-safety: a CoordinationService is started and stopped from one thread; it serves any number of
// clients at once. A CoordinationClient may be used from many threads at once (as every Store).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/cluster/job_credentials.h"
#include "strata/comm/store.h"

namespace strata::cluster {

// A task the service declared lost, and why ("no heartbeat for 1.20 s (heartbeat timeout 1.00 s)").
struct LostTask {
  std::string task;
  std::string reason;
};

class CoordinationService {
 public:
  struct Options {
    // A registered task silent this long is declared lost (TensorFlow's default).
    std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(10)};
    // The job's tasks ("chief:0", "worker:1", ...), if known: a barrier that names no participants and
    // no count waits for all of them, and a barrier that names only a count can name who is missing.
    std::vector<std::string> tasks;
    // Who may call it (null: the process's, process_job_credentials()).
    std::shared_ptr<const JobCredentials> credentials;
  };

  CoordinationService();
  ~CoordinationService();  // stops
  CoordinationService(const CoordinationService&) = delete;
  CoordinationService& operator=(const CoordinationService&) = delete;

  // Serves on `address` ("host:port"; port 0 lets the OS pick; an empty host or a bare port binds
  // 127.0.0.1). Unavailable naming the address if it cannot listen there (e.g. the port is in use).
  // REQUIRES: not started.
  void start(const std::string& address, Options options);
  void start(const std::string& address) { start(address, Options{}); }
  // The port it listens on (the one the OS picked for port 0). REQUIRES: started.
  int port() const;
  // Ends every pending wait and barrier (their callers get Unavailable) and stops serving. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class CoordinationClient : public comm::Store {
 public:
  struct Options {
    // How long the constructor tries to reach the service before Unavailable naming the address.
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
    // Deadline of an RPC that does not wait (set, add, ...), and the margin added to a waiting one's.
    std::chrono::milliseconds rpc_timeout{std::chrono::seconds(10)};
    // The store's timeout: how long get() and wait(keys) wait for keys.
    std::chrono::milliseconds store_timeout{comm::Store::kDefaultTimeout};
    // When no heartbeat has been answered for this long, on_lost is told that the service itself is
    // gone (task "coordination service at <address>"): the chief died or the network failed.
    std::chrono::milliseconds service_timeout{std::chrono::seconds(10)};
    // How its calls prove they come from the job (null: the process's, process_job_credentials()).
    std::shared_ptr<const JobCredentials> credentials;
  };

  // Connects to the service at `address` ("host:port") as `task` (e.g. "worker:1"): the name it has in
  // barriers and heartbeats. Unavailable naming the address and how long it tried when the service does
  // not answer within options.connect_timeout.
  CoordinationClient(const std::string& address, const std::string& task, Options options);
  CoordinationClient(const std::string& address, const std::string& task)
      : CoordinationClient(address, task, Options{}) {}
  ~CoordinationClient() override;  // stops heartbeats

  // comm::Store.
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  using comm::Store::wait;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  // How many keys start with `prefix`.
  int64_t num_keys_with_prefix(const std::string& prefix);

  // Blocks until every participant arrived at barrier `id` (ids are single-use: arriving again returns
  // its first outcome). Timeout naming the tasks that did not arrive when the deadline (set by the first
  // arrival's timeout) passes; Unavailable naming a participant declared lost before it arrived.
  void barrier(const std::string& id, const std::vector<std::string>& tasks, std::chrono::milliseconds timeout);
  // The same with `num_tasks` participants whatever their names.
  void barrier(const std::string& id, int num_tasks, std::chrono::milliseconds timeout);

  // Sends a heartbeat as task() now and every `interval` on a background thread, which records the lost
  // tasks each reply names and calls on_lost (on that thread) once for each newly lost task, and once
  // with "coordination service at <address>" when no heartbeat was answered for service_timeout.
  // REQUIRES: heartbeats not running.
  void start_heartbeats(std::chrono::milliseconds interval = std::chrono::seconds(1));
  // Stops the heartbeat thread (the service will declare this task lost after its heartbeat timeout).
  void stop_heartbeats();
  // Stops heartbeats and tells the service this task is done: it is no longer watched, so its silence is
  // not reported as a loss. A task that ends normally calls this; a crashed one never does. The
  // destructor does not (an exception unwinding a failed task must not hide its loss).
  void disconnect();
  // REQUIRES: on_lost does not call stop_heartbeats() (it runs on the thread that would be joined).
  void set_on_lost(std::function<void(const LostTask&)> on_lost);

  // The tasks the service has declared lost (asks the service now).
  std::vector<LostTask> lost_tasks();
  // Unavailable naming every lost task and why; returns when none is lost.
  void check_peers();

  const std::string& address() const;
  const std::string& task() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::cluster
