// The worker service (strata/ps/worker_server.h) over proto/worker.proto: RunFunction looks the function up by name
// and runs it under a per-worker lock, answering its exception as the status of its strata error
// (cluster/rpc_status.h, which names the class, so the coordinator tells it from a lost worker); Ping answers at
// once, saying whether a function is running.
// Thread-safety: the function registry is guarded by Service::mu_; run_mu_ lets one function run at a time; gRPC runs
// handlers on its threads.
#include "strata/ps/worker_server.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <mutex>

#include "cluster/rpc_credentials.h"
#include "cluster/rpc_status.h"
#include "ps/proto/worker.grpc.pb.h"
#include "ps/tensor_coding.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/error.h"

namespace strata::ps {
namespace pb = strata::ps::proto;
namespace {

// Sets a flag for its lifetime.
class RunningFlag {
 public:
  explicit RunningFlag(std::atomic<bool>& flag) : flag_(flag) { flag_ = true; }
  ~RunningFlag() { flag_ = false; }
  RunningFlag(const RunningFlag&) = delete;
  RunningFlag& operator=(const RunningFlag&) = delete;

 private:
  std::atomic<bool>& flag_;
};

class Service final : public pb::Worker::Service {
 public:
  void add(const std::string& name, WorkerServer::StepFunction function) {
    std::lock_guard lock(mu_);
    functions_[name] = std::move(function);
  }

  grpc::Status RunFunction(grpc::ServerContext* context, const pb::RunFunctionRequest* req,
                           pb::RunFunctionResponse* resp) override {
    WorkerServer::StepFunction function;
    {
      std::lock_guard lock(mu_);
      if (const auto it = functions_.find(req->function()); it != functions_.end()) function = it->second;
    }
    if (!function) {
      return cluster::to_grpc_status(
          ErrorCode::kInvalidArgument,
          "no function named '" + req->function() + "' is registered on this worker (it has: " + names() + ")");
    }
    std::lock_guard run_lock(run_mu_);
    if (context->IsCancelled()) {  // the caller gave up while the function before ran: it re-runs this one elsewhere
      return {grpc::StatusCode::CANCELLED, "the caller gave up before '" + req->function() + "' started"};
    }
    const RunningFlag running(running_);
    try {
      const StepContext step{.step_id = req->step_id(), .round = {.id = req->round(), .size = req->round_size()}};
      resp->set_result(function(step, req->args()));
      ++functions_run_;
      return grpc::Status::OK;
    } catch (...) {
      ++functions_run_;
      return cluster::to_grpc_status(std::current_exception());
    }
  }

  grpc::Status Ping(grpc::ServerContext*, const pb::PingRequest*, pb::PingResponse* resp) override {
    resp->set_functions_run(functions_run_.load());
    resp->set_running(running_.load());
    return grpc::Status::OK;
  }

  int64_t functions_run() const { return functions_run_.load(); }

 private:
  std::string names() {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& [name, function] : functions_) out += (out.empty() ? "" : ", ") + name;
    return out.empty() ? "none" : out;
  }

  std::mutex mu_;
  std::map<std::string, WorkerServer::StepFunction> functions_;  // GUARDED_BY(mu_)
  std::mutex run_mu_;                                            // held while a function runs
  std::atomic<int64_t> functions_run_{0};
  std::atomic<bool> running_{false};  // a function runs (under run_mu_)
};

}  // namespace

struct WorkerServer::Impl {
  std::mutex mu;                                                   // serialises start / stop
  std::shared_ptr<Service> service = std::make_shared<Service>();  // outlives servers: functions survive a restart
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

WorkerServer::WorkerServer() : impl_(std::make_unique<Impl>()) {}
WorkerServer::~WorkerServer() { stop(); }

void WorkerServer::register_function(const std::string& name, Function function) {
  STRATA_CHECK(function, InvalidArgument, "worker: register_function('" << name << "') with an empty function");
  impl_->service->add(name, [function = std::move(function)](const StepContext& step, const std::string& args) {
    return function(step.step_id, args);
  });
}

void WorkerServer::register_function(const std::string& name, StepFunction function) {
  STRATA_CHECK(function, InvalidArgument, "worker: register_function('" << name << "') with an empty function");
  impl_->service->add(name, std::move(function));
}

void WorkerServer::start(const std::string& address, int64_t max_message_bytes) {
  STRATA_CHECK(max_message_bytes >= 0, InvalidArgument,
               "worker: max_message_bytes must be >= 0, got " << max_message_bytes);
  std::lock_guard lock(impl_->mu);
  STRATA_CHECK(!impl_->server, InvalidArgument, "worker: already serving on port " << impl_->port);
  const std::string where = cluster::listen_address(address);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(
      where, cluster::server_credentials(*cluster::process_job_credentials(), where, "the worker"), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is an error, not a shared port
  // The coordinator's keepalive pings (how it notices a worker machine that vanished mid-call) are welcome.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.SetMaxReceiveMessageSize(grpc_message_cap(max_message_bytes));
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(impl_->service.get());
  auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    if (server) server->Shutdown();
    STRATA_THROW(Unavailable, "worker: cannot listen on " << where << " (is the address local and the port free?)");
  }
  impl_->server = std::move(server);
  impl_->port = port;
}

int WorkerServer::port() const {
  std::lock_guard lock(impl_->mu);
  STRATA_CHECK(impl_->server, InvalidArgument, "worker: port() before start()");
  return impl_->port;
}

void WorkerServer::stop(std::chrono::milliseconds grace) {
  std::lock_guard lock(impl_->mu);
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
  impl_->server->Wait();
  impl_->server.reset();
  impl_->port = 0;
}

int64_t WorkerServer::functions_run() const { return impl_->service->functions_run(); }

}  // namespace strata::ps
