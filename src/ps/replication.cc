// The ps-to-ps calls of shard replication (replication.h): forwarded creates and pushes, resyncs of a restarted ps,
// and the Moved status that sends a client to a shard's primary.
// Thread-safety: see replication.h.
#include "ps/replication.h"

#include "cluster/rpc_credentials.h"
#include "ps/tensor_coding.h"
#include "strata/error.h"

namespace strata::ps::detail {
namespace pb = strata::ps::proto;

PeerLinks::PeerLinks(std::vector<std::string> addresses, int64_t self, std::chrono::milliseconds timeout)
    : self_(self), timeout_(timeout) {
  STRATA_CHECK(addresses.size() >= 2 && self >= 0 && self < static_cast<int64_t>(addresses.size()), InvalidArgument,
               "ps replication needs 2 or more ps tasks and this ps among them; got " << addresses.size()
                                                                                     << " and index " << self);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A peer not listening yet (a job's start) or restarting is found again within 100-500 ms: gRPC's default backoff
  // (1 s growing to 2 min) would outlast a forwarded create's deadline, leaving a shard without its backup.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  for (size_t i = 0; i < addresses.size(); ++i) {
    Peer p{.address = addresses[i]};
    if (static_cast<int64_t>(i) != self) {
      p.channel = grpc::CreateCustomChannel(
          p.address, cluster::channel_credentials(*cluster::process_job_credentials(), p.address, "a peer ps"), args);
      p.stub = pb::ParameterServer::NewStub(p.channel);
      p.raw = std::make_unique<grpc::GenericStub>(p.channel);
    }
    peers_.push_back(std::move(p));
  }
}

const std::string& PeerLinks::address(int64_t index) const { return peers_.at(static_cast<size_t>(index)).address; }

const PeerLinks::Peer& PeerLinks::peer(int64_t index) const {
  STRATA_CHECK(index >= 0 && index < size() && index != self_, InvalidArgument,
               "ps replication: no peer ps " << index << " (this is ps " << self_ << " of " << size() << ")");
  return peers_[static_cast<size_t>(index)];
}

grpc::Status PeerLinks::forward_push(int64_t index, const grpc::ByteBuffer& request, bool wait) {
  const Peer& p = peer(index);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout_);
  context.set_wait_for_ready(wait);
  grpc::ByteBuffer reply;
  return call_with_raw_bytes(*p.raw, context,
                             std::string("/") + pb::ParameterServer::service_full_name() + "/ReplicatePush", request,
                             &reply);
}

grpc::Status PeerLinks::replicate_create(int64_t index, const pb::ReplicateCreateRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout_);
  context.set_wait_for_ready(true);  // at a job's start the backup may still be starting
  pb::CreateResponse response;
  return peer(index).stub->ReplicateCreate(&context, request, &response);
}

grpc::Status PeerLinks::resync(int64_t index, bool primaries_only, const std::function<void(pb::ShardCopy&)>& take) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout_);
  // A Rebackup's peers are all up: wait for one whose channel still backs off from a start-up resync that found it
  // not listening. A restarting ps asks peers that may be down: they fail at once.
  context.set_wait_for_ready(primaries_only);
  pb::ResyncRequest request;
  request.set_requester(self_);
  request.set_primaries_only(primaries_only);
  auto reader = peer(index).stub->Resync(&context, request);
  pb::ShardCopy copy;
  while (reader->Read(&copy)) take(copy);
  return reader->Finish();
}

grpc::Status moved(const std::string& name, int64_t primary) {
  pb::Moved details;
  details.set_name(name);
  details.set_primary(primary);
  return {grpc::StatusCode::FAILED_PRECONDITION,
          "shard '" + name + "' is served by ps:" + std::to_string(primary) + " now", details.SerializeAsString()};
}

std::optional<int64_t> moved_to(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return std::nullopt;
  pb::Moved details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) return std::nullopt;
  return details.primary();
}

}  // namespace strata::ps::detail
