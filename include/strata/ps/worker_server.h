// A worker of asynchronous parameter-server training: a gRPC service (src/ps/proto/worker.proto) that runs functions
// registered by name when the chief's ClusterCoordinator asks. C++ closures cannot travel between processes, so every
// process of a job registers the same functions under the same names; a call carries the name, the closure's step id
// (the same when a closure is re-run after a lost worker: pass it on with every ps push, so the ps drops the repeat)
// and argument bytes, and returns result bytes.
//
//   ps::WorkerServer worker;
//   worker.register_function("train_step", [&](int64_t step_id, const std::string& args) {
//     ... pull from the ps, compute, ps.push(name, grad, "step:" + std::to_string(step_id)) ...
//     return serialized_loss;
//   });
//   worker.start("0.0.0.0:2223");                  // port 0: the OS picks; worker.port() says which
//
// A function that takes a StepContext also gets the closure's synchronous round (max_staleness = 0; see
// strata/ps/sync_round.h) to pass on with its pushes:
//   worker.register_function("train_step", [&](const ps::StepContext& step, const std::string& args) {
//     ... ps.push(name, grad, "step:" + std::to_string(step.step_id), step.round) ...
//   });
//
// A function that throws fails the call with the exception's message and strata type (an InvalidArgument arrives at
// the coordinator as an InvalidArgument); such an error is the closure's own and is not retried. An unknown function
// name is an InvalidArgument naming it and the names registered.
// Thread-safety: all methods may be called from any thread. The worker runs one function at a time (a call waits for
// the one before it, and is not run when its caller gave up meanwhile); liveness calls are answered meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "strata/ps/sync_round.h"

namespace strata::ps {

// What a call tells a function about its closure.
struct StepContext {
  int64_t step_id = 0;  // unique per closure, the same when it is re-run
  SyncRound round{};    // under max_staleness = 0: the closure's round (kept when it is re-run); else undefined
};

class WorkerServer {
 public:
  using Function = std::function<std::string(int64_t step_id, const std::string& args)>;
  using StepFunction = std::function<std::string(const StepContext& step, const std::string& args)>;

  WorkerServer();
  ~WorkerServer();  // stops
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  // Registers (or replaces) the function `name`; allowed before and while serving.
  void register_function(const std::string& name, Function function);
  void register_function(const std::string& name, StepFunction function);
  // Serves on `address` ("host:port"; port 0: the OS picks; an empty host binds 127.0.0.1). Unavailable naming the
  // address when it cannot listen there.
  // `max_message_bytes` caps every request as ParameterServer::start does (0: any size).
  void start(const std::string& address, int64_t max_message_bytes = 0);
  int port() const;
  // Stops serving: calls in flight get `grace` to finish, then their callers see them cancelled (the coordinator
  // treats the worker as lost and re-runs the closure elsewhere). Returns once every running function has returned.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(2));
  // Calls of registered functions finished (returned or threw) by this object, for tests and reports.
  int64_t functions_run() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::ps
