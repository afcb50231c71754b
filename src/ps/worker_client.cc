// The coordinator's end of one worker (worker_client.h): a gRPC channel tuned to find a restarted worker quickly
// (short reconnect backoff, a local subchannel pool so no other channel's backoff is shared) and to notice a vanished
// one mid-call (keepalive pings).
// Thread-safety: Impl::mu guards the context of the call in flight and the cancelled flag.
#include "ps/worker_client.h"

#include <grpcpp/grpcpp.h>

#include <mutex>

#include "cluster/rpc_credentials.h"
#include "cluster/rpc_status.h"
#include "ps/proto/worker.grpc.pb.h"

namespace strata::ps::detail {
namespace pb = strata::ps::proto;

struct WorkerClient::Impl {
  std::string address;
  std::unique_ptr<pb::Worker::Stub> stub;
  std::mutex mu;
  grpc::ClientContext* in_flight = nullptr;  // GUARDED_BY(mu)
  bool cancelled = false;                    // GUARDED_BY(mu)

  // Registers `context` as the call in flight; false when cancelled already.
  bool begin(grpc::ClientContext* context) {
    std::lock_guard lock(mu);
    if (cancelled) return false;
    in_flight = context;
    return true;
  }
  void end() {
    std::lock_guard lock(mu);
    in_flight = nullptr;
  }
};

WorkerClient::WorkerClient(std::string address, std::chrono::milliseconds keepalive,
                           std::chrono::milliseconds reconnect_backoff)
    : impl_(std::make_unique<Impl>()) {
  impl_->address = std::move(address);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(reconnect_backoff.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(keepalive.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(keepalive.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // keep pinging through a long function call
  impl_->stub = pb::Worker::NewStub(grpc::CreateCustomChannel(
      impl_->address,
      cluster::channel_credentials(*cluster::process_job_credentials(), impl_->address, "the worker"),
      args));
}

WorkerClient::~WorkerClient() = default;

const std::string& WorkerClient::address() const { return impl_->address; }

namespace {
// A failed call's status as a lost worker's reason: "UNAVAILABLE: failed to connect to all addresses".
std::string status_text(const grpc::Status& status) {
  const bool unimplemented = status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
  return cluster::grpc_code_name(status.error_code()) + (unimplemented ? " (is it a strata worker?)" : "") + ": " +
         status.error_message();
}
}  // namespace

WorkerClient::Outcome WorkerClient::run(const std::string& function, int64_t step_id, const std::string& args,
                                        std::chrono::milliseconds timeout, const SyncRound& round) {
  grpc::ClientContext context;
  if (timeout.count() > 0) context.set_deadline(std::chrono::system_clock::now() + timeout);
  context.set_wait_for_ready(false);  // a worker that cannot be reached fails at once: another one takes the closure
  pb::RunFunctionRequest req;
  req.set_function(function);
  req.set_step_id(step_id);
  req.set_round(round.id);
  req.set_round_size(round.size);
  req.set_args(args);
  pb::RunFunctionResponse resp;
  Outcome out;
  if (!impl_->begin(&context)) {
    out.kind = Outcome::kLost;
    out.lost_reason = "the coordinator is shutting down";
    return out;
  }
  const grpc::Status status = impl_->stub->RunFunction(&context, req, &resp);
  impl_->end();
  if (status.ok()) {
    out.result = std::move(*resp.mutable_result());
    return out;
  }
  if (cluster::raised_by_server(status)) {  // the function's own error (or an unknown name), never the transport's
    out.kind = Outcome::kFunctionError;
    out.error = cluster::rpc_error(status, {.rpc = "function '" + function + "' (step " + std::to_string(step_id) + ")",
                                            .peer = "the worker at " + impl_->address,
                                            .deadline = timeout});
    return out;
  }
  out.kind = Outcome::kLost;
  out.lost_reason = status_text(status);
  return out;
}

bool WorkerClient::ping(std::chrono::milliseconds timeout, std::string* why) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  context.set_wait_for_ready(true);  // a worker coming up within the deadline counts
  pb::PingRequest req;
  pb::PingResponse resp;
  if (!impl_->begin(&context)) {
    *why = "the coordinator is shutting down";
    return false;
  }
  const grpc::Status status = impl_->stub->Ping(&context, req, &resp);
  impl_->end();
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    *why = "no answer within " + std::to_string(timeout.count()) + " ms";
  } else if (!status.ok()) {
    *why = status_text(status);
  } else if (resp.running()) {
    *why = "alive, but still running the function it was lost in";
    return false;
  }
  return status.ok();
}

void WorkerClient::cancel() {
  std::lock_guard lock(impl_->mu);
  impl_->cancelled = true;
  if (impl_->in_flight) impl_->in_flight->TryCancel();
}

}  // namespace strata::ps::detail
