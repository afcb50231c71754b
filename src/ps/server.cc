// The parameter server's gRPC service (proto/parameter_server.proto) and its lifecycle (strata/ps/server.h): the
// handlers decode a request, find its shard and hand it to the shard's ShardState (shard_state.h: the duplicate-step
// window, synchronous rounds, the sparse buffer), then encode the answer; Save and Restore write and read the shard
// files of a numbered checkpoint under the ps's own directory (ps_checkpoint.h). The client is client.cc; the
// tensor codec tensor_coding.cc.
// Thread-safety: the shard registry is guarded by Service::mu_, each shard by its own (ShardState); gRPC runs
// handlers on its threads.
#include "strata/ps/server.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "cluster/rpc_credentials.h"
#include "cluster/rpc_status.h"
#include "ps/proto/parameter_server.grpc.pb.h"
#include "ps/ps_checkpoint.h"
#include "ps/replication.h"
#include "ps/shard_state.h"
#include "ps/tensor_coding.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/error.h"
#include "strata/io/safetensors.h"
#include "strata/optim/optimizers.h"  // optim::from_config

namespace strata::ps {
namespace pb = strata::ps::proto;
namespace {

// The optimizer `spec` names, made by optim's registry from the config the spec carries; null for a name the ps
// does not apply. InvalidArgument (from optim::from_config) for a hyperparameter the optimizer refuses.
std::shared_ptr<optim::Optimizer> make_optimizer(const pb::OptimizerSpec& s) {
  optim::OptimizerConfig config{.name = s.name(), .learning_rate = static_cast<float>(s.learning_rate())};
  if (s.name() == "sgd") {
    config.hyperparameters = {{"momentum", s.momentum()}};
  } else if (s.name() == "adam") {
    config.hyperparameters = {{"beta_1", s.beta_1()}, {"beta_2", s.beta_2()}, {"epsilon", s.epsilon()}};
  } else if (s.name() == "adagrad") {
    config.hyperparameters = {{"initial_accumulator_value", s.initial_accumulator()}, {"epsilon", s.epsilon()}};
  } else {
    return nullptr;
  }
  return optim::from_config(config);
}

// What makes two optimizer specs the same optimizer of a shard: every field but the learning rate, which pushes may
// change (PushRequest.learning_rate) and a shard file or copy records apart (ShardState::Saved::learning_rate).
std::string optimizer_key(const pb::OptimizerSpec& spec) {
  pb::OptimizerSpec key = spec;
  key.clear_learning_rate();
  return key.SerializeAsString();
}

// A shard's file name: its name with every byte outside [A-Za-z0-9_.-] as %XX, then ".safetensors".
std::string shard_file(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out + ".safetensors";
}


grpc::Status invalid(const std::string& message) { return {grpc::StatusCode::INVALID_ARGUMENT, message}; }

// "NaN" or "an infinity" (and how many such values) when the float32 gradient holds one; "" when all are finite.
std::string non_finite(const Tensor& gradient) {
  const float* g = gradient.data<float>();
  const int64_t n = gradient.numel();
  int64_t nans = 0, infinities = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(g[i])) ++nans;
    if (std::isinf(g[i])) ++infinities;
  }
  if (nans + infinities == 0) return "";
  const std::string first = nans > 0 ? "NaN" : "an infinity";
  return first + " (" + std::to_string(nans + infinities) + " of " + std::to_string(n) + " values non-finite)";
}

// A shard as a ps holds it: its state and its replication (a primary without a backup when the job has one ps).
struct Held {
  std::shared_ptr<ShardState> state;
  std::shared_ptr<detail::ShardReplica> replica;
};

// An optimizer slot of any dtype in a ShardCopy, and back ("" or what does not fit).
void to_slot(const std::string& name, const Tensor& t, pb::SlotTensor* out) {
  const Tensor dense = t.clone();  // contiguous, on the host
  out->set_name(name);
  out->set_dtype(dtype_name(dense.dtype()));
  for (int64_t d : dense.shape()) out->add_shape(d);
  out->set_data(static_cast<const char*>(dense.raw_data()), dense.nbytes());
}
std::string from_slot(const pb::SlotTensor& slot, Tensor* out) {
  for (DType dtype : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8, DType::kBFloat16}) {
    if (slot.dtype() != dtype_name(dtype)) continue;
    *out = Tensor::empty(Shape(std::vector<int64_t>(slot.shape().begin(), slot.shape().end())), dtype);
    if (out->nbytes() != slot.data().size()) {
      return "slot " + slot.name() + " of shape " + shape_str(out->shape()) + " holds " +
             std::to_string(slot.data().size()) + " bytes";
    }
    std::memcpy(out->raw_data(), slot.data().data(), slot.data().size());
    return "";
  }
  return "slot " + slot.name() + " has an unknown dtype '" + slot.dtype() + "'";
}

class Service final : public pb::ParameterServer::WithRawCallbackMethod_Push<
                          pb::ParameterServer::WithRawCallbackMethod_Pull<pb::ParameterServer::Service>> {
 public:
  // `peers`: the job's other ps tasks when shards are replicated (2 or more ps); null: no replication.
  Service(int64_t step_window, std::filesystem::path checkpoint_directory, std::unique_ptr<detail::PeerLinks> peers)
      : step_window_(step_window), checkpoint_directory_(std::move(checkpoint_directory)), peers_(std::move(peers)) {}
  // Step ids remembered for dropping repeats, over every shard.
  int64_t steps_remembered() {
    std::lock_guard lock(mu_);
    int64_t n = 0;
    for (auto& [name, shard] : shards_) n += shard.state->steps_remembered();
    return n;
  }
  grpc::Status Create(grpc::ServerContext*, const pb::CreateRequest* req, pb::CreateResponse* resp) override {
    if (req->replace() && req->keep_state()) {
      if (std::optional<grpc::Status> assigned = assign_shard(*req, /*forwarded=*/false)) {
        resp->set_created(false);
        return *assigned;
      }
    }
    Held held;
    std::unique_lock<std::timed_mutex> replica_lock;  // held until the backup has the shard: pushes wait for it
    if (grpc::Status status = create_shard(*req, detail::ReplicaRole::kPrimary,
                                           peers_ ? peers_->backup_for_new_shard() : -1, &held, &replica_lock);
        !status.ok() || !replica_lock.owns_lock()) {
      resp->set_created(false);
      return status;
    }
    resp->set_created(true);
    if (!peers_) return grpc::Status::OK;
    pb::ReplicateCreateRequest forward;
    *forward.mutable_shard() = *req;
    forward.set_primary(peers_->self());
    // A backup that cannot be reached leaves the shard with one copy until that ps is back and resyncs.
    held.replica->peer_attached = peers_->replicate_create(held.replica->peer, forward).ok();
    return grpc::Status::OK;
  }

  grpc::Status ReplicateCreate(grpc::ServerContext*, const pb::ReplicateCreateRequest* req,
                               pb::CreateResponse* resp) override {
    if (!peers_) return {grpc::StatusCode::FAILED_PRECONDITION, "ReplicateCreate: this ps replicates nothing"};
    if (req->shard().replace() && req->shard().keep_state()) {
      if (std::optional<grpc::Status> assigned = assign_shard(req->shard(), /*forwarded=*/true)) {
        resp->set_created(false);
        return *assigned;
      }
    }
    Held held;
    std::unique_lock<std::timed_mutex> replica_lock;
    grpc::Status status = create_shard(req->shard(), detail::ReplicaRole::kBackup, req->primary(), &held, &replica_lock);
    resp->set_created(status.ok() && replica_lock.owns_lock());
    return status;
  }

  // Pull and Push are raw callback methods. Pull's response is encoded by hand so that the value's bytes are copied
  // once, from the shard under its lock into the snapshot the response's slice points at (a generated response would
  // copy them twice); Push is raw too so that both calls of a step run on gRPC's callback executor (a sync method
  // would hand each push to the sync server's threads).
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    return serve_raw<pb::PullRequest>(context, *request, "Pull",
                                      [&](const pb::PullRequest& req) { return pull(req, response); });
  }

  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    return serve_raw<pb::PushRequest>(context, *request, "Push", [&](const pb::PushRequest& req) {
      pb::PushResponse resp;
      grpc::Status status = push(req, request, &resp);
      bool own_buffer = false;
      if (status.ok()) status = grpc::SerializationTraits<pb::PushResponse>::Serialize(resp, response, &own_buffer);
      return status;
    });
  }

  // A push the shard's primary applied and forwarded: applied here as there. A sync method, so it runs on the sync
  // server's threads: a primary's forward blocks one of its callback threads, and must never wait for a callback
  // thread here (two ps forwarding to each other, or both in one process, would wait for each other).
  grpc::Status ReplicatePush(grpc::ServerContext*, const pb::PushRequest* req, pb::PushResponse* resp) override {
    return push(*req, nullptr, resp);
  }

  // A push from a client (`raw`: the request as it came, which the primary forwards as it is to its backup before
  // answering) or forwarded by the primary (`raw` null: this is the backup).
  grpc::Status push(const pb::PushRequest& req, const grpc::ByteBuffer* raw, pb::PushResponse* resp) {
    const bool forwarded = raw == nullptr;
    if (grpc::Status fenced = check_not_fenced(forwarded ? "ReplicatePush" : "Push"); !fenced.ok()) return fenced;
    const Held held = find(req.name());
    if (!held.state) return not_found(forwarded ? "ReplicatePush" : "Push", req.name());
    const std::shared_ptr<ShardState>& shard = held.state;
    Tensor grad;
    // Borrows the request's bytes when aligned (no copy): the request outlives this handler's use of `grad`, and
    // a round that keeps the gradient keeps a copy.
    if (const std::string bad = from_bytes(req.gradient(), &grad, nullptr, nullptr, /*borrow=*/true); !bad.empty()) {
      return invalid("Push " + req.name() + ": " + bad);
    }
    if (const std::string what = non_finite(grad); !what.empty()) {
      return invalid((req.caller().empty() ? std::string("a task") : req.caller()) + " pushed " + what + " into " +
                     req.name() + (req.step_id().empty() ? "" : " (push " + req.step_id() + ")") +
                     ": refused, the shard keeps its value (a step that diverged: lower the learning rate or check "
                     "the data; or a worker computing wrong)");
    }
    detail::ShardReplica& replica = *held.replica;
    std::lock_guard replica_lock(replica.mu);  // through the forward: the backup applies pushes in this order
    if (forwarded && replica.role != detail::ReplicaRole::kBackup) {
      return {grpc::StatusCode::FAILED_PRECONDITION,
              "ReplicatePush " + req.name() + ": this ps took the shard over; it is no longer a backup"};
    }
    if (!forwarded && replica.role != detail::ReplicaRole::kPrimary) return detail::moved(req.name(), replica.peer);
    ShardState::PushResult result;
    try {
      result = shard->push(grad, {req.rows().data(), static_cast<size_t>(req.rows_size())}, req.step_id(),
                           {.id = req.round(), .size = req.round_size()}, req.learning_rate());
    } catch (const InvalidArgument& e) {
      return invalid(e.what());
    }
    if (result.taken && !forwarded && replica.peer_attached) {
      const grpc::Status sent = peers_->forward_push(replica.peer, *raw, /*wait=*/replica.peer_syncing);
      if (sent.ok()) {
        replica.peer_syncing = false;
      } else if (sent.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        // The backup took over (a client found this ps unreachable): this copy, with this push, is stale. The client
        // makes the push again at the new primary, which has not applied it.
        replica.role = detail::ReplicaRole::kStale;
        return detail::moved(req.name(), replica.peer);
      } else {
        replica.peer_attached = false;  // the backup is lost: one copy until its task is back and resyncs
      }
    }
    if (!result.taken) {
      ++dropped_;
    } else if (forwarded) {
      replicated_ += result.applied;
    } else {
      applied_ += result.applied;
      rows_pushed_ += req.rows().empty() ? shard->shape()[0] : req.rows_size();
    }
    resp->set_applied(result.taken);
    resp->set_version(result.version);
    return grpc::Status::OK;
  }

  grpc::Status Promote(grpc::ServerContext*, const pb::PromoteRequest* req, pb::PromoteResponse* resp) override {
    const Held held = find(req->name());
    if (!held.state) return not_found("Promote", req->name());
    std::lock_guard replica_lock(held.replica->mu);
    switch (held.replica->role) {
      case detail::ReplicaRole::kPrimary:
        resp->set_took_over(false);
        return grpc::Status::OK;
      case detail::ReplicaRole::kStale:
        return detail::moved(req->name(), held.replica->peer);
      case detail::ReplicaRole::kBackup:
        break;
    }
    // The old primary stays the peer, detached: when its task is back, its resync makes it this shard's backup.
    held.replica->role = detail::ReplicaRole::kPrimary;
    held.replica->peer_attached = false;
    ++held.replica->takeovers;
    ++takeovers_;
    resp->set_took_over(true);
    return grpc::Status::OK;
  }

  grpc::Status Resync(grpc::ServerContext*, const pb::ResyncRequest* req, grpc::ServerWriter<pb::ShardCopy>* writer) override {
    if (!peers_ || req->requester() < 0 || req->requester() >= peers_->size() || req->requester() == peers_->self()) {
      return invalid("Resync: no such peer ps " + std::to_string(req->requester()));
    }
    std::vector<std::pair<std::string, Held>> all = snapshot();
    // Every copy is taken (and its backup attached) before any is sent: a push forwarded meanwhile waits at the
    // restarted ps until it listens, which it does once it has all of them.
    std::vector<pb::ShardCopy> copies;
    for (const auto& entry : all) {
      const std::string& name = entry.first;  // not a structured binding: the lambda below captures it
      const Held& held = entry.second;
      // A shard being created holds its lock while it forwards the create to its backup, which may be the requester,
      // not listening until this resync ends: skipped, the create reaches the requester once it listens.
      std::unique_lock replica_lock(held.replica->mu, std::chrono::seconds(1));
      if (!replica_lock.owns_lock()) continue;
      detail::ShardReplica& replica = *held.replica;
      if (replica.peer != req->requester() || replica.role == detail::ReplicaRole::kStale) continue;
      if (replica.role == detail::ReplicaRole::kBackup) {
        if (req->primaries_only()) continue;  // its primary still serves it
        ++replica.takeovers;                  // its primary came back empty
        ++takeovers_;
      }
      replica.role = detail::ReplicaRole::kPrimary;
      replica.peer_attached = true;
      replica.peer_syncing = true;
      pb::ShardCopy& copy = copies.emplace_back();
      copy.set_primary(peers_->self());
      held.state->save([&](const ShardState::Saved& saved) {
        fill_record(name, *held.state, saved, copy.mutable_record());
        to_bytes(saved.value.clone(), copy.mutable_value());
        for (const auto& [slot, t] : saved.optimizer_state) to_slot(slot, t, copy.add_slots());
      });
    }
    for (const pb::ShardCopy& copy : copies) {
      if (!writer->Write(copy)) return {grpc::StatusCode::UNAVAILABLE, "Resync: the restarted ps went away"};
    }
    return grpc::Status::OK;
  }

  grpc::Status Rebackup(grpc::ServerContext*, const pb::RebackupRequest*, pb::RebackupResponse* resp) override {
    if (!peers_) return {grpc::StatusCode::FAILED_PRECONDITION, "Rebackup: this ps replicates nothing"};
    if (grpc::Status fenced = check_not_fenced("Rebackup"); !fenced.ok()) return fenced;
    int64_t backups = 0;
    const grpc::Status status = take_backups_from_peers(/*primaries_only=*/true, &backups);
    resp->set_backups(backups);
    return status;
  }

  // Asks every other ps for the shards this ps backs up (Resync; `primaries_only`: this ps serves its own primaries
  // still, so only the others' primaries) and installs them; `taken` counts them. A peer that does not answer (down,
  // or not started yet) has nothing to hand over: skipped. DATA_LOSS when a copy cannot be read.
  grpc::Status take_backups_from_peers(bool primaries_only, int64_t* taken) {
    grpc::Status installed;
    for (int64_t k = 0; k < peers_->size(); ++k) {
      if (k == peers_->self()) continue;
      (void)peers_->resync(k, primaries_only, [&](pb::ShardCopy& copy) {
        if (installed.ok()) installed = install_backup(copy);
        ++*taken;
      });
    }
    return installed;
  }

  // Installs `copy` (from a Resync) as a backup whose primary is copy.primary(). DATA_LOSS when it cannot be read.
  grpc::Status install_backup(pb::ShardCopy& copy) {
    Tensor value;
    if (const std::string bad = from_bytes(copy.value(), &value); !bad.empty()) {
      return {grpc::StatusCode::DATA_LOSS, "Resync " + copy.record().name() + ": " + bad};
    }
    io::NamedTensors slots;
    for (const pb::SlotTensor& slot : copy.slots()) {
      Tensor t;
      if (const std::string bad = from_slot(slot, &t); !bad.empty()) {
        return {grpc::StatusCode::DATA_LOSS, "Resync " + copy.record().name() + ": " + bad};
      }
      slots.emplace_back(slot.name(), t);
    }
    std::pair<std::string, std::shared_ptr<ShardState>> shard;
    if (grpc::Status bad = make_shard(copy.record(), value, slots, "Resync", &shard); !bad.ok()) return bad;
    Held held{.state = std::move(shard.second), .replica = std::make_shared<detail::ShardReplica>()};
    held.replica->role = detail::ReplicaRole::kBackup;
    held.replica->peer = copy.primary();
    held.replica->peer_attached = true;
    std::lock_guard lock(mu_);
    shards_[shard.first] = std::move(held);
    return grpc::Status::OK;
  }

  grpc::Status Stats(grpc::ServerContext*, const pb::StatsRequest*, pb::StatsResponse* resp) override {
    int64_t backups = 0;
    for (const auto& [name, held] : snapshot()) {
      std::lock_guard replica_lock(held.replica->mu);
      if (held.replica->role == detail::ReplicaRole::kStale) continue;
      resp->set_shards(resp->shards() + 1);
      const bool backup = held.replica->role == detail::ReplicaRole::kBackup;
      if (backup) ++backups;
      pb::ShardStatus* status = resp->add_shard_status();
      status->set_name(name);
      status->set_updates(held.state->version());
      status->set_backup(backup);
      status->set_takeovers(held.replica->takeovers);
    }
    resp->set_fenced_at(fenced_at_.load());
    resp->set_backups(backups);
    resp->set_pushes_applied(applied());
    resp->set_pushes_dropped(dropped());
    resp->set_takeovers(takeovers());
    resp->set_pushes_replicated(replicated());
    return grpc::Status::OK;
  }

  grpc::Status Save(grpc::ServerContext*, const pb::SaveRequest* req, pb::SaveResponse* resp) override {
    namespace fs = std::filesystem;
    if (grpc::Status refused = check_checkpoint_request("Save", req->checkpoint()); !refused.ok()) return refused;
    if (req->keep() < 0) return invalid("Save: keep must be >= 0, got " + std::to_string(req->keep()));
    // Its shards are an older checkpoint's: saved as a newer one, they would roll part of the job back.
    if (grpc::Status fenced = check_not_fenced("Save"); !fenced.ok()) return fenced;
    std::lock_guard lock(mu_);  // no shard is created meanwhile
    int64_t saved = 0;
    try {
      detail::write_ps_checkpoint(checkpoint_directory_, req->checkpoint(), req->keep(), [&](const fs::path& into) {
        for (const auto& [name, held] : shards_) {
          {
            std::lock_guard replica_lock(held.replica->mu);
            // A backup is saved by its primary; a stale copy, by the ps that serves it now.
            if (held.replica->role != detail::ReplicaRole::kPrimary) continue;
          }
          save_shard(name, *held.state, into);
          ++saved;
        }
      });
    } catch (const Error& e) {
      return cluster::to_grpc_status(e.code(), std::string("Save: ") + e.what());
    }
    resp->set_shards(saved);
    return grpc::Status::OK;
  }

  grpc::Status Restore(grpc::ServerContext*, const pb::RestoreRequest* req, pb::RestoreResponse* resp) override {
    namespace fs = std::filesystem;
    if (grpc::Status refused = check_checkpoint_request("Restore", req->checkpoint()); !refused.ok()) return refused;
    // Restarted from this very checkpoint and fenced since: its shards are that checkpoint already, and the chief's
    // rollback only lets it serve.
    if (int64_t at = req->checkpoint(); fenced_at_.compare_exchange_strong(at, 0)) {
      // Backups taken since the restart are of shards the other ps now restore: they go (see below).
      std::lock_guard lock(mu_);
      std::erase_if(shards_, [](auto& entry) {
        std::lock_guard replica_lock(entry.second.replica->mu);
        return entry.second.replica->role != detail::ReplicaRole::kPrimary;
      });
      resp->set_shards(static_cast<int64_t>(shards_.size()));
      return grpc::Status::OK;
    }
    const fs::path directory = checkpoint_directory_ / detail::checkpoint_name(req->checkpoint());
    std::error_code ec;
    if (!fs::is_directory(directory, ec)) {
      return {grpc::StatusCode::NOT_FOUND, "Restore: this ps has no " + directory.string()};
    }
    std::vector<std::pair<std::string, std::shared_ptr<ShardState>>> loaded;
    for (const auto& entry : fs::directory_iterator(directory, ec)) {
      if (entry.path().extension() != ".safetensors") continue;
      std::pair<std::string, std::shared_ptr<ShardState>> shard;
      if (grpc::Status damaged = load_shard(entry.path().string(), &shard); !damaged.ok()) return damaged;
      loaded.push_back(std::move(shard));
    }
    std::lock_guard lock(mu_);
    // A shard being read or updated right now stays alive (its handler holds a reference) until the handler returns.
    // A restored shard is this ps's primary; with replication its backup is attached when that ps resyncs. Every
    // other shard goes: a backup held for another ps is of a newer state than that ps restores, and must never be
    // promoted.
    shards_.clear();
    for (auto& [name, shard] : loaded) {
      Held held{.state = std::move(shard), .replica = std::make_shared<detail::ShardReplica>()};
      held.replica->peer = peers_ ? peers_->backup_for_new_shard() : -1;
      shards_[name] = std::move(held);
    }
    resp->set_shards(static_cast<int64_t>(loaded.size()));
    return grpc::Status::OK;
  }

  // Fences this ps after it restarted from `checkpoint` (check_not_fenced).
  void fence(int64_t checkpoint) { fenced_at_ = checkpoint; }
  int64_t applied() const { return applied_.load(); }
  int64_t dropped() const { return dropped_.load(); }
  int64_t rows_pulled() const { return rows_pulled_.load(); }
  int64_t rows_pushed() const { return rows_pushed_.load(); }
  int64_t takeovers() const { return takeovers_.load(); }
  int64_t replicated() const { return replicated_.load(); }
  detail::PeerLinks* peers() const { return peers_.get(); }

 private:
  // The shard `name`; a null state when this ps holds none.
  Held find(const std::string& name) {
    std::lock_guard lock(mu_);
    const auto it = shards_.find(name);
    return it == shards_.end() ? Held{} : it->second;
  }

  // CreateRequest.keep_state: the value of shard req.name() written over, its optimizer state, version and step ids
  // kept; from a client (the primary forwards it to the backup as it does a push, under the replica lock) or
  // `forwarded` by the primary (this is the backup). nullopt when this ps holds no such shard: it is created then.
  std::optional<grpc::Status> assign_shard(const pb::CreateRequest& req, bool forwarded) {
    const std::string what = forwarded ? "ReplicateCreate " + req.name() : "Create " + req.name();
    if (grpc::Status fenced = check_not_fenced(forwarded ? "ReplicateCreate" : "Create"); !fenced.ok()) return fenced;
    const Held held = find(req.name());
    if (!held.state) return std::nullopt;
    Tensor value;
    if (const std::string bad = from_bytes(req.initial(), &value); !bad.empty()) return invalid(what + ": " + bad);
    if (held.state->shape() != value.shape() || held.state->optimizer_key() != optimizer_key(req.optimizer())) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, what + ": it exists with shape " +
                                                                shape_str(held.state->shape()) + " (asked " +
                                                                shape_str(value.shape()) + ") or another optimizer");
    }
    detail::ShardReplica& replica = *held.replica;
    std::lock_guard replica_lock(replica.mu);  // through the forward: the backup takes it in the pushes' order
    if (forwarded && replica.role != detail::ReplicaRole::kBackup) {
      return grpc::Status{grpc::StatusCode::FAILED_PRECONDITION,
                          what + ": this ps took the shard over; it is no longer a backup"};
    }
    if (!forwarded && replica.role != detail::ReplicaRole::kPrimary) return detail::moved(req.name(), replica.peer);
    try {
      held.state->assign(value);
    } catch (const InvalidArgument& e) {
      return invalid(e.what());
    }
    if (forwarded || !replica.peer_attached) return grpc::Status::OK;
    pb::ReplicateCreateRequest forward;
    *forward.mutable_shard() = req;
    forward.set_primary(peers_->self());
    const grpc::Status sent = peers_->replicate_create(replica.peer, forward);
    if (sent.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      // The backup took over (as for a push): this copy is stale, and the client writes the value there again.
      replica.role = detail::ReplicaRole::kStale;
      return detail::moved(req.name(), replica.peer);
    }
    if (!sent.ok()) replica.peer_attached = false;  // the backup is lost: it takes the value when it resyncs
    return grpc::Status::OK;
  }

  // Creates shard req.name() in `role` with replica peer `peer`, its replica lock taken into `replica_lock` (so no
  // push reaches it before the caller lets go). An existing shard of the same shape and optimizer is OK, with
  // `replica_lock` left empty; one of another shape or optimizer is ALREADY_EXISTS.
  grpc::Status create_shard(const pb::CreateRequest& req, detail::ReplicaRole role, int64_t peer, Held* held,
                            std::unique_lock<std::timed_mutex>* replica_lock) {
    Tensor initial;
    if (const std::string bad = from_bytes(req.initial(), &initial); !bad.empty()) {
      return invalid("Create " + req.name() + ": " + bad);
    }
    if (initial.rank() == 0) return invalid("Create " + req.name() + ": a shard has at least one axis");
    const std::string spec = optimizer_key(req.optimizer());
    std::lock_guard lock(mu_);
    if (req.replace()) shards_.erase(req.name());  // a handler still holding the old one finishes on it
    if (auto it = shards_.find(req.name()); it != shards_.end()) {
      if (it->second.state->shape() != initial.shape() || it->second.state->optimizer_key() != spec) {
        return {grpc::StatusCode::ALREADY_EXISTS, "Create " + req.name() + ": it exists with shape " +
                                                      shape_str(it->second.state->shape()) + " (asked " +
                                                      shape_str(initial.shape()) + ") or another optimizer"};
      }
      *held = it->second;
      return grpc::Status::OK;
    }
    std::shared_ptr<optim::Optimizer> optimizer;
    try {
      optimizer = make_optimizer(req.optimizer());
    } catch (const InvalidArgument& e) {
      return invalid("Create " + req.name() + ": " + e.what());
    }
    if (!optimizer) {
      return invalid("Create " + req.name() + ": unknown optimizer '" + req.optimizer().name() +
                     "'; the ps applies sgd, adam or adagrad");
    }
    held->state = std::make_shared<ShardState>(req.name(), initial, std::move(optimizer), spec, step_window_);
    held->replica = std::make_shared<detail::ShardReplica>();
    *replica_lock = std::unique_lock(held->replica->mu);
    held->replica->role = role;
    held->replica->peer = peer;
    held->replica->peer_attached = role == detail::ReplicaRole::kBackup;  // a backup's primary forwards to it
    shards_.emplace(req.name(), *held);
    return grpc::Status::OK;
  }
  // A raw unary call: the request parsed as `Request` (INVALID_ARGUMENT when it is not one), then handle(request)'s
  // status.
  template <class Request, class Handle>
  static grpc::ServerUnaryReactor* serve_raw(grpc::CallbackServerContext* context, const grpc::ByteBuffer& request,
                                             const char* what, Handle handle) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    Request req;
    grpc::ByteBuffer bytes(request);  // shares the slices; Deserialize consumes its argument
    if (!grpc::SerializationTraits<Request>::Deserialize(&bytes, &req).ok()) {
      reactor->Finish(invalid(std::string(what) + ": a malformed request"));
    } else {
      reactor->Finish(handle(req));
    }
    return reactor;
  }
  // The shard (or its requested rows) with its version as a PullResponse in `response`.
  grpc::Status pull(const pb::PullRequest& req, grpc::ByteBuffer* response) {
    if (grpc::Status fenced = check_not_fenced("Pull"); !fenced.ok()) return fenced;
    const Held held = find(req.name());
    if (!held.state) return not_found("Pull", req.name());
    {
      std::lock_guard replica_lock(held.replica->mu);
      if (held.replica->role != detail::ReplicaRole::kPrimary) return detail::moved(req.name(), held.replica->peer);
    }
    const std::shared_ptr<ShardState>& shard = held.state;
    ShardState::Pulled pulled;
    try {
      pulled = shard->pull({req.rows().data(), static_cast<size_t>(req.rows_size())});
    } catch (const InvalidArgument& e) {
      return invalid(e.what());
    }
    rows_pulled_ += req.rows().empty() ? pulled.value.dim(0) : req.rows_size();
    pb::PullResponse head;
    head.set_version(pulled.version);
    for (int64_t d : pulled.value.shape()) head.mutable_value()->add_shape(d);
    *response = encode_with_tensor_bytes(head, pb::PullResponse::kValueFieldNumber, pulled.value);
    return grpc::Status::OK;
  }

  // FAILED_PRECONDITION while fenced: a ps restarted from a checkpoint holds an older state than the job
  // acknowledged, which must not be served (nor saved) until the chief rolls every ps back to it.
  grpc::Status check_not_fenced(const char* what) const {
    const int64_t at = fenced_at_.load();
    if (at == 0) return grpc::Status::OK;
    return {grpc::StatusCode::FAILED_PRECONDITION,
            std::string(what) + ": this ps restarted from checkpoint " + std::to_string(at) +
                " and serves again once the chief rolls the job back to it"};
  }

  // OK when this ps keeps checkpoints and `number` can name one.
  grpc::Status check_checkpoint_request(const char* what, int64_t number) const {
    if (checkpoint_directory_.empty()) {
      return {grpc::StatusCode::FAILED_PRECONDITION,
              std::string(what) + ": this ps was started without a checkpoint directory"};
    }
    if (number < 1) return invalid(std::string(what) + ": checkpoint numbers start at 1, got " + std::to_string(number));
    return grpc::Status::OK;
  }

  // Writes shard `name` (value, optimizer slots and step count, the step ids applied) into `directory` as one file.
  static void save_shard(const std::string& name, const ShardState& shard, const std::filesystem::path& directory) {
    shard.save([&](const ShardState::Saved& saved) {
      pb::ShardRecord record;
      fill_record(name, shard, saved, &record);
      std::string json;
      STRATA_CHECK(google::protobuf::util::MessageToJsonString(record, &json).ok(), IoError,
                   "Save " << name << ": cannot encode");
      io::NamedTensors tensors = {{"value", saved.value}};
      for (const auto& [slot, t] : saved.optimizer_state) tensors.emplace_back("optimizer/" + slot, t);
      io::save_safetensors((directory / shard_file(name)).string(), tensors, {{detail::kShardMetadataKey, json}});
    });
  }

  // What a shard file or copy records beside the tensors.
  static void fill_record(const std::string& name, const ShardState& shard, const ShardState::Saved& saved,
                          pb::ShardRecord* record) {
    record->set_name(name);
    record->mutable_optimizer()->ParseFromString(shard.optimizer_key());
    record->mutable_optimizer()->set_learning_rate(saved.learning_rate);  // the rate last applied
    record->set_version(saved.version);
    for (const std::string& step : saved.applied_steps) record->add_applied_steps(step);  // oldest first
  }

  // The shard `record` describes with `value` and optimizer `slots`, as (name, state) in `out`; DATA_LOSS naming
  // `what` when it does not fit.
  grpc::Status make_shard(const pb::ShardRecord& record, const Tensor& value, const io::NamedTensors& slots,
                          const std::string& what, std::pair<std::string, std::shared_ptr<ShardState>>* out) const {
    std::shared_ptr<optim::Optimizer> optimizer;
    try {
      optimizer = make_optimizer(record.optimizer());
    } catch (const InvalidArgument& e) {
      return {grpc::StatusCode::DATA_LOSS, what + ": " + e.what()};
    }
    if (!optimizer) return {grpc::StatusCode::DATA_LOSS, what + " names an unknown optimizer"};
    auto shard = std::make_shared<ShardState>(record.name(), value, std::move(optimizer),
                                              optimizer_key(record.optimizer()), step_window_);
    try {
      shard->restore(record.version(), {record.applied_steps().begin(), record.applied_steps().end()}, slots);
    } catch (const Error& e) {
      return {grpc::StatusCode::DATA_LOSS, what + ": " + e.what()};
    }
    *out = {record.name(), std::move(shard)};
    return grpc::Status::OK;
  }

  // The shard a file of save_shard holds, as (name, state) in `out`; DATA_LOSS naming the file when it is damaged.
  grpc::Status load_shard(const std::string& path, std::pair<std::string, std::shared_ptr<ShardState>>* out) const {
    std::map<std::string, std::string> metadata;
    io::NamedTensors tensors;
    try {
      tensors = io::load_safetensors(path, &metadata);
    } catch (const Error& e) {
      return {grpc::StatusCode::DATA_LOSS, std::string("Restore: ") + e.what()};
    }
    pb::ShardRecord record;
    if (!metadata.count(detail::kShardMetadataKey) || !google::protobuf::util::JsonStringToMessage(metadata[detail::kShardMetadataKey], &record).ok() ||
        tensors.empty() || tensors[0].first != "value") {
      return {grpc::StatusCode::DATA_LOSS, "Restore: " + path + " is not a shard file of a ps"};
    }
    io::NamedTensors state;
    for (size_t i = 1; i < tensors.size(); ++i) {
      if (tensors[i].first.rfind("optimizer/", 0) == 0) state.emplace_back(tensors[i].first.substr(10), tensors[i].second);
    }
    return make_shard(record, tensors[0].second, state, "Restore: " + path, out);
  }

  static grpc::Status not_found(const char* what, const std::string& name) {
    return {grpc::StatusCode::NOT_FOUND, std::string(what) + ": no shard named '" + name + "' on this ps"};
  }

  // Every shard held, as they are now.
  std::vector<std::pair<std::string, Held>> snapshot() {
    std::lock_guard lock(mu_);
    return {shards_.begin(), shards_.end()};
  }

  const int64_t step_window_;
  const std::filesystem::path checkpoint_directory_;  // "": Save and Restore are refused
  const std::unique_ptr<detail::PeerLinks> peers_;     // null: no replication
  std::mutex mu_;
  // Guarded by mu_; a handler holds its shard's reference while it runs, so a restore may replace the shard.
  std::map<std::string, Held> shards_;
  std::atomic<int64_t> applied_{0}, dropped_{0}, replicated_{0}, takeovers_{0};
  std::atomic<int64_t> rows_pulled_{0}, rows_pushed_{0};
  std::atomic<int64_t> fenced_at_{0};  // > 0: restarted from that checkpoint, not rolled back to it yet
};

}  // namespace

struct ParameterServer::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  int64_t restored = 0;
  int64_t resynced = 0;
  int64_t step_window = ParameterServer::kStepWindow;
};

ParameterServer::ParameterServer(int64_t step_window) : impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(step_window >= 1, InvalidArgument, "ps: step_window must be at least 1, got " << step_window);
  impl_->step_window = step_window;
}
ParameterServer::~ParameterServer() { stop(); }

void ParameterServer::start(const std::string& address, const StartOptions& options) {
  STRATA_CHECK(options.max_message_bytes >= 0, InvalidArgument,
               "ps: max_message_bytes must be >= 0, got " << options.max_message_bytes);
  STRATA_CHECK(options.restore_checkpoint >= 0, InvalidArgument,
               "ps: restore_checkpoint must be >= 0, got " << options.restore_checkpoint);
  STRATA_CHECK(options.restore_checkpoint == 0 || !options.checkpoint_directory.empty(), InvalidArgument,
               "ps: restore_checkpoint " << options.restore_checkpoint << " needs a checkpoint_directory");
  STRATA_CHECK(!impl_->server, InvalidArgument, "ps: already serving on port " << impl_->port);
  const std::string where = cluster::listen_address(address);
  std::unique_ptr<detail::PeerLinks> peers;
  if (!options.replicas.empty()) {
    peers = std::make_unique<detail::PeerLinks>(options.replicas, options.replica_index, options.replica_timeout);
  }
  auto service = std::make_unique<Service>(impl_->step_window, options.checkpoint_directory, std::move(peers));
  impl_->resynced = 0;
  // Before listening: a restarted ps takes the shards it shares with the others back as their backup (at a job's
  // start the others hold nothing, or do not listen yet).
  if (service->peers()) {
    const grpc::Status installed = service->take_backups_from_peers(/*primaries_only=*/false, &impl_->resynced);
    if (!installed.ok()) STRATA_THROW_CODE(cluster::error_code_of(installed), "ps: " << installed.error_message());
  }
  // The checkpoint only when no live copy came (a whole job restarted; one ps): the live copies are newer.
  if (options.restore_checkpoint > 0 && impl_->resynced == 0) {  // before listening: no client sees what it replaces
    pb::RestoreRequest req;
    req.set_checkpoint(options.restore_checkpoint);
    pb::RestoreResponse resp;
    const grpc::Status status = service->Restore(nullptr, &req, &resp);
    if (!status.ok()) STRATA_THROW_CODE(cluster::error_code_of(status), "ps: " << status.error_message());
    impl_->restored = resp.shards();
    service->fence(options.restore_checkpoint);
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(
      where, cluster::server_credentials(*cluster::process_job_credentials(), where, "the ps"), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is an error, not a shared port
  builder.SetMaxReceiveMessageSize(grpc_message_cap(options.max_message_bytes));  // the job's largest shard, or any size
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(service.get());
  auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    if (server) server->Shutdown();
    STRATA_THROW(Unavailable, "ps: cannot listen on " << where << " (is the address local and the port free?)");
  }
  impl_->service = std::move(service);
  impl_->server = std::move(server);
  impl_->port = port;
}

int ParameterServer::port() const {
  STRATA_CHECK(impl_->server, InvalidArgument, "ps: port() before start()");
  return impl_->port;
}

void ParameterServer::stop() {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
  impl_->server.reset();
  impl_->service.reset();
  impl_->port = 0;
}

int64_t ParameterServer::shards_restored() const { return impl_->restored; }
int64_t ParameterServer::shards_resynced() const { return impl_->resynced; }
int64_t ParameterServer::takeovers() const { return impl_->service ? impl_->service->takeovers() : 0; }
int64_t ParameterServer::pushes_replicated() const { return impl_->service ? impl_->service->replicated() : 0; }
int64_t ParameterServer::pushes_applied() const { return impl_->service ? impl_->service->applied() : 0; }
int64_t ParameterServer::pushes_dropped() const { return impl_->service ? impl_->service->dropped() : 0; }
int64_t ParameterServer::rows_pulled() const { return impl_->service ? impl_->service->rows_pulled() : 0; }
int64_t ParameterServer::steps_remembered() const { return impl_->service ? impl_->service->steps_remembered() : 0; }
int64_t ParameterServer::rows_pushed() const { return impl_->service ? impl_->service->rows_pushed() : 0; }

}  // namespace strata::ps
