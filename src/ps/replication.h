// Shard replication between the ps tasks of a job (2 or more): each shard has a primary, which serves it, and a
// backup on the next ps ((primary + 1) mod tasks, when it is created). The primary forwards every push it applied to
// the backup before it answers, under the shard's replica lock, so the backup applies the same pushes in the same
// order and an acknowledged update is on two tasks; the duplicate-step window travels with them, so a step re-sent
// after a takeover is still dropped.
//
// - A client whose call finds a primary gone asks the other ps tasks to Promote the shard: its backup becomes the
//   primary, and the client's next calls go there (ParameterServerClient::link_replicas).
// - A ps task that restarts asks every other ps to Resync before it listens: each sends the shards they share, whole,
//   and stays (or becomes) their primary; the restarted ps becomes their backup. The forwards that follow wait for
//   it to listen.
// - A primary whose backup cannot be reached goes on alone (one copy) until the backup's task is back and resyncs.
// - A ps restored from a checkpoint holds its primaries alone (a checkpoint holds each shard once): once every ps is
//   restored, the chief has each Rebackup, a Resync of the others' primaries only.
// - A call for a shard to a ps that is not its primary is FAILED_PRECONDITION carrying a Moved (the primary's
//   index) in its details: the client goes there.
// Thread-safety: a ShardReplica is guarded by its mutex; PeerLinks may be used from many threads at once.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ps/proto/parameter_server.grpc.pb.h"

namespace strata::ps::detail {

enum class ReplicaRole {
  kPrimary,  // serves the shard
  kBackup,   // takes the primary's forwarded pushes; serves nothing
  kStale,    // was the primary, but another ps took over: neither served nor saved
};

// What a ps knows of one shard's replication. A push holds `mu` from its role check through the forward to the
// backup; a promotion or resync takes it to change the role.
struct ShardReplica {
  std::timed_mutex mu;  // timed: a resync does not wait on a shard whose create waits for the resyncing ps
  ReplicaRole role = ReplicaRole::kPrimary;  // guarded by mu
  // The other replica's ps index: a primary's backup, a backup's primary; -1 none. Guarded by mu.
  int64_t peer = -1;
  bool peer_attached = false;  // a primary forwards pushes to `peer`. Guarded by mu.
  bool peer_syncing = false;   // `peer` is a restarted ps that is not listening yet: forwards wait. Guarded by mu.
  int64_t takeovers = 0;       // times this copy became the primary because its primary was lost. Guarded by mu.
};

// The other ps tasks of a job, as one ps calls them (with the job's credentials).
class PeerLinks {
 public:
  // `addresses`: every ps task's, in task order; `self`: this ps's index. `timeout` bounds each call.
  PeerLinks(std::vector<std::string> addresses, int64_t self, std::chrono::milliseconds timeout);
  int64_t size() const { return static_cast<int64_t>(peers_.size()); }
  int64_t self() const { return self_; }
  // The backup a new primary shard of this ps gets: the next ps.
  int64_t backup_for_new_shard() const { return (self_ + 1) % size(); }
  const std::string& address(int64_t index) const;

  // Forwards the push `request` (a PushRequest as the client sent it) to ps `index`'s ReplicatePush. `wait`: wait for
  // the peer to listen (within the timeout), for a peer that is resyncing.
  grpc::Status forward_push(int64_t index, const grpc::ByteBuffer& request, bool wait);
  grpc::Status replicate_create(int64_t index, const proto::ReplicateCreateRequest& request);
  // Ps `index`'s shards shared with this ps (`primaries_only`: only those it serves, for a ps that serves its own
  // still), each handed to `take` as it arrives. Fails fast (UNAVAILABLE) when the peer does not listen, except with
  // `primaries_only` (every peer is up then), which waits for it within the timeout.
  grpc::Status resync(int64_t index, bool primaries_only, const std::function<void(proto::ShardCopy&)>& take);

 private:
  struct Peer {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<proto::ParameterServer::Stub> stub;
    std::unique_ptr<grpc::GenericStub> raw;
  };
  const Peer& peer(int64_t index) const;

  std::vector<Peer> peers_;  // index self_ has no channel
  int64_t self_;
  std::chrono::milliseconds timeout_;
};

// The status a ps answers for a call about shard `name`, whose primary is ps `primary`.
grpc::Status moved(const std::string& name, int64_t primary);
// The primary a `moved` status names; none for any other status.
std::optional<int64_t> moved_to(const grpc::Status& status);

}  // namespace strata::ps::detail
