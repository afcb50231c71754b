// The parameter server's client (ParameterServerClient, strata/ps/server.h) over the gRPC service of
// proto/parameter_server.proto: each call with the client's deadline, retried with backoff when a ps was cut off and
// retrying does no harm, its failure the strata error of its status (cluster/rpc_status.h). Push and Pull carry their
// tensor's bytes without a copy (tensor_coding.h).
// Thread-safety: the stubs are thread-safe; a client may be used from many threads at once.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "cluster/rpc_credentials.h"
#include "cluster/rpc_status.h"
#include "ps/proto/parameter_server.grpc.pb.h"
#include "ps/replication.h"
#include "ps/tensor_coding.h"
#include "strata/error.h"
#include "strata/ps/server.h"
#include "strata/trace.h"

namespace strata::ps {
namespace pb = strata::ps::proto;

namespace {
// A call for a shard reached a ps that is not (or no longer) its primary, or found its primary gone and had another
// ps take over: the call goes to ps `primary`.
struct ShardMoved {
  int64_t primary;
};
}  // namespace

// The clients of every ps task of one job, linked (link_replicas): where each shard's primary is now.
struct ParameterServerClient::Replicas {
  std::vector<std::weak_ptr<ParameterServerClient>> clients;  // in task order
  std::mutex mu;
  std::unordered_map<std::string, int64_t> moved;  // shards whose primary is not where they were created

  int64_t primary_of(const std::string& name, int64_t placed) {
    std::lock_guard lock(mu);
    const auto it = moved.find(name);
    return it == moved.end() ? placed : it->second;
  }
  void set_primary(const std::string& name, int64_t index) {
    std::lock_guard lock(mu);
    moved[name] = index;
  }
  std::shared_ptr<ParameterServerClient> client(int64_t index) {
    std::shared_ptr<ParameterServerClient> c =
        index >= 0 && index < static_cast<int64_t>(clients.size()) ? clients[static_cast<size_t>(index)].lock() : nullptr;
    STRATA_CHECK(c != nullptr, Unavailable, "ps client: no client of ps:" << index << " any more");
    return c;
  }
  // The primary of `name` was found gone: asks every other ps to take the shard over. The ps that did (or that is
  // its primary already, or the one another ps names), or none.
  std::optional<int64_t> promote(const std::string& name, int64_t lost);
};

struct ParameterServerClient::Impl {
  std::string address;
  std::string caller;
  std::chrono::milliseconds timeout;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::ParameterServer::Stub> stub;
  std::unique_ptr<grpc::GenericStub> raw;  // the same channel, for requests encoded by hand (tensor_coding.h)
  // Linked to the clients of the job's other ps tasks (replication): null when not. This client's ps index.
  std::shared_ptr<Replicas> replicas;
  int64_t index = -1;
  // Makes one call (`attempt(context)`) with the deadline; a failed status is the strata error for it
  // (cluster/rpc_status.h) naming the call and the address. `shard`: the shard a routed call is for (what a cut-off
  // call asks the other ps to take over); null for a call to this ps as a whole.
  template <class Attempt>
  void run(const char* what, bool retry, const std::string* shard_of_call, Attempt attempt) {
    const auto deadline = std::chrono::system_clock::now() + timeout;
    std::chrono::milliseconds backoff(20);
    grpc::Status status;
    // Linked to the other ps tasks, a call fails fast on a ps that does not listen, so that its shard's backup takes
    // over at once; otherwise a ps still starting is waited for, within the deadline.
    const std::string* shard = replicas ? shard_of_call : nullptr;  // unlinked: no other ps to turn to
    for (;;) {
      grpc::ClientContext context;
      context.set_deadline(deadline);
      context.set_wait_for_ready(shard == nullptr);
      status = attempt(context);
      if (shard) {
        if (const std::optional<int64_t> primary = detail::moved_to(status)) throw ShardMoved{*primary};
      }
      // A call cut off by a ps that died or shut down (UNAVAILABLE, or CANCELLED by its server, at once rather than
      // at the deadline) is made again, within the deadline, when making it twice does no harm: the ps may be
      // restarting from its checkpoint.
      const bool cut_off =
          status.error_code() == grpc::StatusCode::UNAVAILABLE || status.error_code() == grpc::StatusCode::CANCELLED;
      if (cut_off && shard) {
        if (const std::optional<int64_t> primary = replicas->promote(*shard, index)) throw ShardMoved{*primary};
      }
      if (!cut_off || !retry) break;
      if (std::chrono::system_clock::now() + backoff >= deadline) break;
      std::this_thread::sleep_for(backoff);
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(1));
    }
    if (status.ok()) return;
    // A deadline that passed while the ps could not be reached (down, restarting: the call waits for it, and gRPC
    // reports the wait's end as DEADLINE_EXCEEDED) is an unavailable ps; one that passed while a reachable ps did not
    // answer is a Timeout, as for every strata RPC.
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && channel->GetState(false) != GRPC_CHANNEL_READY) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "not reached within " + std::to_string(timeout.count()) +
                                                               " ms (" + status.error_message() + ")");
    }
    cluster::throw_rpc_error(status,
                             {.rpc = std::string("ps ") + what, .peer = "the ps at " + address, .deadline = timeout});
  }

  template <class Request, class Response>
  Response call(grpc::Status (pb::ParameterServer::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                const char* what, const Request& request, const std::string* shard = nullptr, bool retry = true) {
    Response response;
    run(what, retry, shard,
        [&](grpc::ClientContext& context) { return (stub.get()->*method)(&context, request, &response); });
    return response;
  }

  // `call` for a request encoded by hand, to method `what` of the ParameterServer service.
  template <class Response>
  Response call_raw(const char* what, const grpc::ByteBuffer& request, const std::string* shard, bool retry) {
    const std::string method = std::string("/") + pb::ParameterServer::service_full_name() + "/" + what;
    Response response;
    run(what, retry, shard, [&](grpc::ClientContext& context) {
      grpc::ByteBuffer reply;
      const grpc::Status status = call_with_raw_bytes(*raw, context, method, request, &reply);
      if (status.ok() && !grpc::SerializationTraits<Response>::Deserialize(&reply, &response).ok()) {
        return grpc::Status(grpc::StatusCode::DATA_LOSS, std::string(what) + ": a malformed response");
      }
      return status;
    });
    return response;
  }

  // `call(impl, shard)` on the client of the shard's primary: this one unless linked replicas moved it; a call that
  // finds the shard moved (or its primary gone and another ps taking over) goes to the new primary. `shard`: the
  // shard's name, for the calls `call` makes (null without linked replicas: nothing to take over).
  template <class Call>
  auto routed(const std::string& name, Call call) -> decltype(call(*this, nullptr)) {
    if (!replicas) return call(*this, nullptr);
    int64_t target = replicas->primary_of(name, index);
    for (int hops = 0;; ++hops) {
      const std::shared_ptr<ParameterServerClient> owner = target == index ? nullptr : replicas->client(target);
      Impl& impl = owner ? *owner->impl_ : *this;
      try {
        return call(impl, &name);
      } catch (const ShardMoved& moved) {
        STRATA_CHECK(hops < 2 * static_cast<int64_t>(replicas->clients.size()), Unavailable,
                     "ps client: shard '" << name << "' moved " << hops + 1 << " times in one call (last to ps:"
                                          << moved.primary << ")");
        replicas->set_primary(name, moved.primary);
        target = moved.primary;
      }
    }
  }
};

std::optional<int64_t> ParameterServerClient::Replicas::promote(const std::string& name, int64_t lost) {
  for (int64_t k = 0; k < static_cast<int64_t>(clients.size()); ++k) {
    if (k == lost) continue;
    const std::shared_ptr<ParameterServerClient> c = clients[static_cast<size_t>(k)].lock();
    if (!c) continue;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::min(c->impl_->timeout, std::chrono::milliseconds(2000)));
    pb::PromoteRequest request;
    request.set_name(name);
    pb::PromoteResponse response;
    const grpc::Status status = c->impl_->stub->Promote(&context, request, &response);
    if (status.ok()) return k;
    if (const std::optional<int64_t> primary = detail::moved_to(status)) return *primary;
  }
  return std::nullopt;
}

void ParameterServerClient::link_replicas(const std::vector<std::shared_ptr<ParameterServerClient>>& clients) {
  if (clients.size() < 2) return;
  auto replicas = std::make_shared<Replicas>();
  for (const auto& c : clients) replicas->clients.push_back(c);
  for (size_t i = 0; i < clients.size(); ++i) {
    clients[i]->impl_->replicas = replicas;
    clients[i]->impl_->index = static_cast<int64_t>(i);
  }
}

ParameterServerClient::ParameterServerClient(const std::string& address, std::chrono::milliseconds timeout,
                                             const std::string& caller)
    : impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(timeout.count() > 0, InvalidArgument, "ps client: timeout must be positive");
  impl_->address = address;
  impl_->caller = caller;
  impl_->timeout = timeout;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  impl_->channel = grpc::CreateCustomChannel(
      address, cluster::channel_credentials(*cluster::process_job_credentials(), address, "the ps"),
      args);
  impl_->stub = pb::ParameterServer::NewStub(impl_->channel);
  impl_->raw = std::make_unique<grpc::GenericStub>(impl_->channel);
}

ParameterServerClient::~ParameterServerClient() = default;

const std::string& ParameterServerClient::address() const { return impl_->address; }

namespace {
void check_float(const char* what, const Tensor& t) {
  STRATA_CHECK(t.defined() && t.dtype() == DType::kFloat32 && t.device().is_cpu(), InvalidArgument,
               "ps client: " << what << " takes a float32 host tensor");
}
// Takes the response's bytes over without copying them: the string's buffer moves into the tensor's owner.
Tensor tensor_of(pb::TensorBytes* bytes, const std::string& address) {
  auto owner = std::make_shared<std::string>();
  owner->swap(*bytes->mutable_data());
  Tensor out;
  const std::string* data = owner.get();
  const std::string bad = from_bytes(*bytes, &out, data, std::move(owner));
  STRATA_CHECK(bad.empty(), DataCorrupt, "ps at " << address << " sent a malformed tensor: " << bad);
  return out;
}
}  // namespace

bool ParameterServerClient::create(const std::string& name, const Tensor& initial, const OptimizerSpec& optimizer,
                                  bool replace) {
  return create_request(name, initial, optimizer, replace, /*keep_state=*/false);
}

void ParameterServerClient::assign(const std::string& name, const Tensor& value, const OptimizerSpec& optimizer) {
  create_request(name, value, optimizer, /*replace=*/true, /*keep_state=*/true);
}

bool ParameterServerClient::create_request(const std::string& name, const Tensor& initial,
                                           const OptimizerSpec& optimizer, bool replace, bool keep_state) {
  check_float(keep_state ? "assign" : "create", initial);
  pb::CreateRequest req;
  req.set_name(name);
  req.set_replace(replace);
  req.set_keep_state(keep_state);
  to_bytes(initial.clone(), req.mutable_initial());
  auto* spec = req.mutable_optimizer();
  spec->set_name(optimizer.name);
  spec->set_learning_rate(optimizer.learning_rate);
  spec->set_momentum(optimizer.momentum);
  spec->set_beta_1(optimizer.beta_1);
  spec->set_beta_2(optimizer.beta_2);
  spec->set_epsilon(optimizer.epsilon);
  spec->set_initial_accumulator(optimizer.initial_accumulator);
  return impl_->routed(name, [&](Impl& impl, const std::string* shard) {
    return impl.call(&pb::ParameterServer::Stub::Create, "Create", req, shard).created();
  });
}

Tensor ParameterServerClient::pull(const std::string& name) {
  trace::Span span("comm", "ps pull");
  pb::PullRequest req;
  req.set_name(name);
  return impl_->routed(name, [&](Impl& impl, const std::string* shard) {
    pb::PullResponse resp = impl.call(&pb::ParameterServer::Stub::Pull, "Pull", req, shard);
    return tensor_of(resp.mutable_value(), impl.address);
  });
}

Tensor ParameterServerClient::pull_rows(const std::string& name, const std::vector<int64_t>& rows) {
  trace::Span span("comm", "ps pull rows");
  pb::PullRequest req;
  req.set_name(name);
  for (int64_t r : rows) req.add_rows(r);
  return impl_->routed(name, [&](Impl& impl, const std::string* shard) {
    pb::PullResponse resp = impl.call(&pb::ParameterServer::Stub::Pull, "Pull", req, shard);
    return tensor_of(resp.mutable_value(), impl.address);
  });
}

bool ParameterServerClient::push(const std::string& name, const Tensor& gradient, const std::string& step_id,
                                 const SyncRound& round, double learning_rate) {
  check_float("push", gradient);
  return push_request(name, nullptr, gradient, step_id, round, learning_rate);
}

ParameterServerClient::Stats ParameterServerClient::stats() {
  const pb::StatsResponse r = impl_->call(&pb::ParameterServer::Stub::Stats, "Stats", pb::StatsRequest());
  Stats stats{.shards = r.shards(),
              .backups = r.backups(),
              .pushes_applied = r.pushes_applied(),
              .pushes_dropped = r.pushes_dropped(),
              .takeovers = r.takeovers(),
              .pushes_replicated = r.pushes_replicated(),
              .fenced_at = r.fenced_at()};
  for (const pb::ShardStatus& s : r.shard_status()) {
    stats.shard_status.push_back(
        {.name = s.name(), .updates = s.updates(), .backup = s.backup(), .takeovers = s.takeovers()});
  }
  return stats;
}

int64_t ParameterServerClient::save(int64_t checkpoint, int64_t keep) {
  pb::SaveRequest req;
  req.set_checkpoint(checkpoint);
  req.set_keep(keep);
  return impl_->call(&pb::ParameterServer::Stub::Save, "Save", req).shards();
}

int64_t ParameterServerClient::rebackup() {
  return impl_->call(&pb::ParameterServer::Stub::Rebackup, "Rebackup", pb::RebackupRequest()).backups();
}

int64_t ParameterServerClient::restore(int64_t checkpoint) {
  pb::RestoreRequest req;
  req.set_checkpoint(checkpoint);
  return impl_->call(&pb::ParameterServer::Stub::Restore, "Restore", req).shards();
}

bool ParameterServerClient::push_rows(const std::string& name, const std::vector<int64_t>& rows, const Tensor& gradient,
                                      const std::string& step_id, const SyncRound& round, double learning_rate) {
  check_float("push_rows", gradient);
  return push_request(name, &rows, gradient, step_id, round, learning_rate);
}

bool ParameterServerClient::push_request(const std::string& name, const std::vector<int64_t>* rows,
                                         const Tensor& gradient, const std::string& step_id, const SyncRound& round,
                                         double learning_rate) {
  trace::Span span("comm", rows ? "ps push rows" : "ps push", gradient.numel() * 4);  // float32
  // The gradient's bytes go out from its own memory (tensor_coding.h): the request holds only its shape.
  pb::PushRequest head;
  head.set_name(name);
  for (int64_t d : gradient.shape()) head.mutable_gradient()->add_shape(d);
  if (rows) head.mutable_rows()->Add(rows->begin(), rows->end());
  head.set_step_id(step_id);
  head.set_round(round.id);
  head.set_round_size(round.size);
  head.set_caller(impl_->caller);
  head.set_learning_rate(learning_rate);
  const grpc::ByteBuffer request = encode_with_tensor_bytes(head, pb::PushRequest::kGradientFieldNumber, gradient);
  return impl_->routed(name, [&](Impl& impl, const std::string* shard) {
    return impl.call_raw<pb::PushResponse>("Push", request, shard, /*retry=*/!step_id.empty()).applied();
  });
}

}  // namespace strata::ps
