// The parameter server and its client (strata/ps/server.h) over the gRPC service of proto/parameter_server.proto.
// Each shard is a plain Variable with its own optimizer (so its slots live beside it) under its own mutex; a push
// applies the gradient at once (asynchronous training) unless its step id was applied before, or, when it belongs to
// a synchronous round, is summed into the round's pending gradient until the round is complete.
// Thread-safety: the shard registry is guarded by Service::mu_, each shard by its own mutex; gRPC runs handlers on
// its threads. The client's stub is thread-safe.
#include "strata/ps/server.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "cluster/rpc_status.h"
#include "kernels/kernels.h"
#include "ps/proto/parameter_server.grpc.pb.h"
#include "ps/tensor_coding.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/error.h"
#include "strata/io/safetensors.h"
#include "strata/optim/optimizers.h"
#include "strata/trace.h"
#include "strata/variable.h"

namespace strata::ps {
namespace pb = strata::ps::proto;
namespace {

Shape shape_of(const pb::TensorBytes& t) { return Shape(t.shape().begin(), t.shape().end()); }

void to_bytes(const Tensor& t, pb::TensorBytes* out) {
  out->clear_shape();
  for (int64_t d : t.shape()) out->add_shape(d);
  out->set_data(t.raw_data(), t.nbytes());
}

// The float32 tensor of shape `t.shape()` over `data` (t.data() unless given), or an error text when the bytes do
// not fit the shape. With `owner` (it keeps `data` alive) or `borrow` (the caller keeps it alive while the tensor is
// used), the tensor is `data`'s bytes themselves when they are float-aligned, not a copy.
std::string from_bytes(const pb::TensorBytes& t, Tensor* out, const std::string* data = nullptr,
                       std::shared_ptr<const void> owner = nullptr, bool borrow = false) {
  if (!data) data = &t.data();
  const Shape shape = shape_of(t);
  // The product of the nonzero dimensions, in 128 bits, must stay below 2^62: else shape_numel (which multiplies in
  // order) overflows int64, even when a zero dimension makes the count 0. [274177, 67280421310721] is 2^64 + 1
  // elements, which passed for the one the bytes held; [615348588053760000, 101, 0] overflowed before its 0.
  constexpr unsigned __int128 kTooMany = uint64_t{1} << 62;
  unsigned __int128 nonzero = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return "a negative dimension in " + shape_str(shape);
    if (d == 0) {
      empty = true;
    } else {
      nonzero = std::min(nonzero * static_cast<uint64_t>(d), kTooMany);
    }
  }
  if (nonzero >= kTooMany) return "shape " + shape_str(shape) + " has more elements than a tensor can hold";
  const uint64_t numel = empty ? 0 : static_cast<uint64_t>(nonzero);
  if (numel * sizeof(float) != data->size()) {
    return "shape " + shape_str(shape) + " needs " + std::to_string(numel * 4) + " bytes of float32, got " +
           std::to_string(data->size());
  }
  void* bytes = const_cast<char*>(data->data());
  if ((owner || borrow) && reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0) {
    *out = Tensor::wrap_host(bytes, shape, DType::kFloat32, std::move(owner));
    return "";
  }
  *out = Tensor::empty(shape);
  std::memcpy(out->raw_data(), data->data(), data->size());
  return "";
}

std::unique_ptr<optim::Optimizer> make_optimizer(const pb::OptimizerSpec& s) {
  const auto lr = static_cast<float>(s.learning_rate());
  if (s.name() == "sgd")
    return std::make_unique<optim::SGD>(
        optim::SGDOptions{.learning_rate = lr, .momentum = static_cast<float>(s.momentum())});
  if (s.name() == "adam") {
    return std::make_unique<optim::Adam>(optim::AdamOptions{.learning_rate = lr,
                                                            .beta_1 = static_cast<float>(s.beta_1()),
                                                            .beta_2 = static_cast<float>(s.beta_2()),
                                                            .epsilon = static_cast<float>(s.epsilon())});
  }
  if (s.name() == "adagrad") {
    return std::make_unique<optim::Adagrad>(
        optim::AdagradOptions{.learning_rate = lr,
                              .initial_accumulator_value = static_cast<float>(s.initial_accumulator()),
                              .epsilon = static_cast<float>(s.epsilon())});
  }
  return nullptr;
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

constexpr const char* kShardKey = "shard";  // the ShardRecord's JSON in a shard file's metadata

// The pushes of one synchronous round a shard has taken so far: their gradients summed, and their step ids.
struct PendingRound {
  int64_t size = 0;
  Tensor sum;
  std::unordered_set<std::string> steps;
};

struct Shard {
  std::mutex mu;
  Variable var;
  std::unique_ptr<optim::Optimizer> optimizer;
  std::string optimizer_spec;  // the serialized OptimizerSpec it was created with
  // The most recent `step_window` step ids applied, oldest first in `step_order` (the same ids as `applied_steps`):
  // an older id is forgotten, so a repeat of it would be applied again (see server.h).
  int64_t step_window = ParameterServer::kStepWindow;
  std::unordered_set<std::string> applied_steps;
  std::deque<std::string> step_order;
  std::map<int64_t, PendingRound> rounds;  // by round id; a round leaves once applied (not saved: see server.h)
  int64_t version = 0;
  // The dense gradient an asynchronous sparse push is scattered into, zero between pushes: made once, not per push
  // (a fresh shard-sized buffer per push, freed on the gRPC threads' many heaps, fragmented them until a ps of a
  // 64 MB shard held gigabytes).
  Tensor sparse_gradient;

  // Applies `gradient` as one update taking steps `steps`. REQUIRES: mu held.
  void apply(const Tensor& gradient, const std::unordered_set<std::string>& steps) {
    optimizer->apply_gradients({gradient}, {var});
    ++version;
    for (const std::string& step : steps) remember(step);
  }
  // Remembers `step` as applied, forgetting the oldest ids past the window. REQUIRES: mu held.
  void remember(const std::string& step) {
    if (step.empty() || !applied_steps.insert(step).second) return;
    step_order.push_back(step);
    while (static_cast<int64_t>(step_order.size()) > step_window) {
      applied_steps.erase(step_order.front());
      step_order.pop_front();
    }
  }
  // Whether `step` was applied or waits in `round`'s sum. REQUIRES: mu held.
  bool taken(const std::string& step, int64_t round) const {
    if (step.empty()) return false;
    if (applied_steps.count(step)) return true;
    const auto it = rounds.find(round);
    return it != rounds.end() && it->second.steps.count(step);
  }
};

grpc::Status invalid(const std::string& message) { return {grpc::StatusCode::INVALID_ARGUMENT, message}; }

// Sets rows `rows` (int64, each in range) of `t` [R, ...] back to zero.
void zero_rows(Tensor& t, const Tensor& rows) {
  const int64_t width = t.numel() / t.dim(0);
  float* data = t.data<float>();
  const int64_t* r = rows.data<int64_t>();
  for (int64_t i = 0; i < rows.numel(); ++i) std::fill_n(data + r[i] * width, width, 0.0f);
}

// A request's rows as an int64 index tensor for kernels::gather / scatter_add; INVALID_ARGUMENT naming the first
// row outside [0, rows), as `what` (e.g. "Pull emb/part_0").
grpc::Status row_indices(const google::protobuf::RepeatedField<int64_t>& requested, int64_t rows,
                         const std::string& what, Tensor* out) {
  *out = Tensor::empty({requested.size()}, DType::kInt64);
  int64_t* at = out->data<int64_t>();
  for (const int64_t r : requested) {
    if (r < 0 || r >= rows) {
      return invalid(what + ": row " + std::to_string(r) + " is outside [0, " + std::to_string(rows) + ")");
    }
    *at++ = r;
  }
  return grpc::Status::OK;
}

class Service final : public pb::ParameterServer::WithRawCallbackMethod_Push<
                          pb::ParameterServer::WithRawCallbackMethod_Pull<pb::ParameterServer::Service>> {
 public:
  explicit Service(int64_t step_window) : step_window_(step_window) {}
  // Step ids remembered for dropping repeats, over every shard.
  int64_t steps_remembered() {
    std::lock_guard lock(mu_);
    int64_t n = 0;
    for (auto& [name, shard] : shards_) {
      std::lock_guard shard_lock(shard->mu);
      n += static_cast<int64_t>(shard->applied_steps.size());
    }
    return n;
  }
  grpc::Status Create(grpc::ServerContext*, const pb::CreateRequest* req, pb::CreateResponse* resp) override {
    Tensor initial;
    if (const std::string bad = from_bytes(req->initial(), &initial); !bad.empty()) {
      return invalid("Create " + req->name() + ": " + bad);
    }
    if (initial.rank() == 0) return invalid("Create " + req->name() + ": a shard has at least one axis");
    const std::string spec = req->optimizer().SerializeAsString();
    std::lock_guard lock(mu_);
    if (auto it = shards_.find(req->name()); it != shards_.end()) {
      if (it->second->var.shape() != initial.shape() || it->second->optimizer_spec != spec) {
        return {grpc::StatusCode::ALREADY_EXISTS, "Create " + req->name() + ": it exists with shape " +
                                                      shape_str(it->second->var.shape()) + " (asked " +
                                                      shape_str(initial.shape()) + ") or another optimizer"};
      }
      resp->set_created(false);
      return grpc::Status::OK;
    }
    auto shard = std::make_unique<Shard>();
    shard->step_window = step_window_;
    shard->optimizer = make_optimizer(req->optimizer());
    if (!shard->optimizer) {
      return invalid("Create " + req->name() + ": unknown optimizer '" + req->optimizer().name() +
                     "'; the ps applies sgd, adam or adagrad");
    }
    shard->var = Variable(initial, /*trainable=*/true, req->name());
    shard->optimizer_spec = spec;
    shards_.emplace(req->name(), std::move(shard));
    resp->set_created(true);
    return grpc::Status::OK;
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
      grpc::Status status = push(req, &resp);
      bool own_buffer = false;
      if (status.ok()) status = grpc::SerializationTraits<pb::PushResponse>::Serialize(resp, response, &own_buffer);
      return status;
    });
  }

  grpc::Status push(const pb::PushRequest& req, pb::PushResponse* resp) {
    Shard* shard = find(req.name());
    if (!shard) return not_found("Push", req.name());
    Tensor grad;
    // Borrows the request's bytes when aligned (no copy): the request outlives this handler's use of `grad`, and
    // a round that keeps the gradient keeps a copy.
    if (const std::string bad = from_bytes(req.gradient(), &grad, nullptr, nullptr, /*borrow=*/true); !bad.empty()) {
      return invalid("Push " + req.name() + ": " + bad);
    }
    const bool in_round = req.round_size() > 0;
    if (req.round_size() < 0 || (in_round && req.step_id().empty())) {
      return invalid("Push " + req.name() + ": a push of round " + std::to_string(req.round()) +
                     " needs a step id and a positive round size (got " + std::to_string(req.round_size()) + ")");
    }
    std::lock_guard lock(shard->mu);
    const Shape& shape = shard->var.shape();
    if (shard->taken(req.step_id(), req.round())) {
      ++dropped_;
      resp->set_applied(false);
      resp->set_version(shard->version);
      return grpc::Status::OK;
    }
    Tensor rows;
    if (!req.rows().empty()) {  // sparse: scatter the rows' gradient into a dense one (repeated rows add up)
      Shape want = shape;
      want[0] = req.rows_size();
      if (grad.shape() != want) {
        return invalid("Push " + req.name() + ": the gradient of " + std::to_string(req.rows_size()) + " rows is " +
                       shape_str(grad.shape()) + ", wants " + shape_str(want));
      }
      if (grpc::Status bad = row_indices(req.rows(), shape[0], "Push " + req.name(), &rows); !bad.ok()) return bad;
      if (in_round) grad = kernels::scatter_add(rows, grad, shape[0]);  // the round's sum keeps it
    } else if (grad.shape() != shape) {
      return invalid("Push " + req.name() + ": the gradient is " + shape_str(grad.shape()) + ", the shard " +
                     shape_str(shape));
    }
    if (!in_round && rows.defined()) {
      if (!shard->sparse_gradient.defined()) shard->sparse_gradient = Tensor::zeros(shape);
      kernels::scatter_add_into(shard->sparse_gradient, rows, grad);
      shard->apply(shard->sparse_gradient, {req.step_id()});
      zero_rows(shard->sparse_gradient, rows);
      ++applied_;
    } else if (!in_round) {
      shard->apply(grad, {req.step_id()});
      ++applied_;
    } else if (grpc::Status bad = add_to_round(*shard, req, std::move(grad)); !bad.ok()) {
      return bad;
    }
    rows_pushed_ += req.rows().empty() ? shape[0] : req.rows_size();
    resp->set_applied(true);
    resp->set_version(shard->version);
    return grpc::Status::OK;
  }

  grpc::Status Stats(grpc::ServerContext*, const pb::StatsRequest*, pb::StatsResponse* resp) override {
    {
      std::lock_guard lock(mu_);
      resp->set_shards(static_cast<int64_t>(shards_.size()));
    }
    resp->set_pushes_applied(applied());
    resp->set_pushes_dropped(dropped());
    return grpc::Status::OK;
  }

  grpc::Status Save(grpc::ServerContext*, const pb::SaveRequest* req, pb::SaveResponse* resp) override {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(req->directory(), ec);
    if (ec) return invalid("Save: cannot create directory '" + req->directory() + "': " + ec.message());
    std::lock_guard lock(mu_);  // no shard is created meanwhile
    for (auto& [name, shard] : shards_) {
      std::lock_guard shard_lock(shard->mu);
      pb::ShardRecord record;
      record.set_name(name);
      record.mutable_optimizer()->ParseFromString(shard->optimizer_spec);
      record.set_version(shard->version);
      for (const std::string& step : shard->step_order) record.add_applied_steps(step);  // oldest first
      std::string json;
      if (!google::protobuf::util::MessageToJsonString(record, &json).ok())
        return invalid("Save " + name + ": cannot encode");
      io::NamedTensors tensors = {{"value", shard->var.value()}};
      for (auto& [slot, t] : shard->optimizer->state({shard->var})) tensors.emplace_back("optimizer/" + slot, t);
      try {
        io::save_safetensors((fs::path(req->directory()) / shard_file(name)).string(), tensors, {{kShardKey, json}});
      } catch (const Error& e) {
        return cluster::to_grpc_status(e.code(), "Save " + name + ": " + e.what());
      }
    }
    resp->set_shards(static_cast<int64_t>(shards_.size()));
    return grpc::Status::OK;
  }

  grpc::Status Restore(grpc::ServerContext*, const pb::RestoreRequest* req, pb::RestoreResponse* resp) override {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(req->directory(), ec)) return invalid("Restore: no directory '" + req->directory() + "'");
    std::vector<std::pair<std::string, std::unique_ptr<Shard>>> loaded;
    for (const auto& entry : fs::directory_iterator(req->directory(), ec)) {
      if (entry.path().extension() != ".safetensors") continue;
      const std::string path = entry.path().string();
      std::map<std::string, std::string> metadata;
      io::NamedTensors tensors;
      try {
        tensors = io::load_safetensors(path, &metadata);
      } catch (const Error& e) {
        return {grpc::StatusCode::DATA_LOSS, std::string("Restore: ") + e.what()};
      }
      pb::ShardRecord record;
      if (!metadata.count(kShardKey) ||
          !google::protobuf::util::JsonStringToMessage(metadata[kShardKey], &record).ok() || tensors.empty() ||
          tensors[0].first != "value") {
        return {grpc::StatusCode::DATA_LOSS, "Restore: " + path + " is not a shard file of a ps"};
      }
      auto shard = std::make_unique<Shard>();
      shard->optimizer = make_optimizer(record.optimizer());
      if (!shard->optimizer) return {grpc::StatusCode::DATA_LOSS, "Restore: " + path + " names an unknown optimizer"};
      shard->var = Variable(tensors[0].second, /*trainable=*/true, record.name());
      shard->optimizer_spec = record.optimizer().SerializeAsString();
      shard->version = record.version();
      shard->step_window = step_window_;
      for (const std::string& step : record.applied_steps()) shard->remember(step);  // oldest first, as saved
      io::NamedTensors state;
      for (size_t i = 1; i < tensors.size(); ++i) {
        if (tensors[i].first.rfind("optimizer/", 0) == 0)
          state.emplace_back(tensors[i].first.substr(10), tensors[i].second);
      }
      try {
        shard->optimizer->load_state(state, {shard->var});
      } catch (const Error& e) {
        return {grpc::StatusCode::DATA_LOSS, "Restore: " + path + ": " + e.what()};
      }
      loaded.emplace_back(record.name(), std::move(shard));
    }
    std::lock_guard lock(mu_);
    for (auto& [name, shard] : loaded) {
      // A shard being read or updated right now keeps its old object alive until the handler returns.
      retired_.push_back(std::move(shards_[name]));
      shards_[name] = std::move(shard);
    }
    resp->set_shards(static_cast<int64_t>(loaded.size()));
    return grpc::Status::OK;
  }

  int64_t applied() const { return applied_.load(); }
  int64_t dropped() const { return dropped_.load(); }
  int64_t rows_pulled() const { return rows_pulled_.load(); }
  int64_t rows_pushed() const { return rows_pushed_.load(); }

 private:
  Shard* find(const std::string& name) {
    std::lock_guard lock(mu_);
    const auto it = shards_.find(name);
    return it == shards_.end() ? nullptr : it->second.get();
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
    Shard* shard = find(req.name());
    if (!shard) return not_found("Pull", req.name());
    Tensor snapshot;
    pb::PullResponse head;
    {
      std::lock_guard lock(shard->mu);
      const Tensor& value = shard->var.value();
      if (req.rows().empty()) {
        snapshot = value.clone();
      } else {
        Tensor rows;
        if (grpc::Status bad = row_indices(req.rows(), value.dim(0), "Pull " + req.name(), &rows); !bad.ok())
          return bad;
        snapshot = kernels::gather(value, rows);
      }
      head.set_version(shard->version);
      rows_pulled_ += req.rows().empty() ? value.dim(0) : req.rows_size();
    }
    for (int64_t d : snapshot.shape()) head.mutable_value()->add_shape(d);
    *response = encode_with_tensor_bytes(head, pb::PullResponse::kValueFieldNumber, snapshot);
    return grpc::Status::OK;
  }

  // Sums the gradient of `req` (a push of a round, not taken before) into its round on `shard`; the push that brings
  // the round to its size applies the round's mean. REQUIRES: shard.mu held.
  grpc::Status add_to_round(Shard& shard, const pb::PushRequest& req, Tensor grad) {
    PendingRound& round = shard.rounds[req.round()];
    if (round.size == 0) {
      round.size = req.round_size();
      round.sum = req.rows().empty() ? grad.clone() : std::move(grad);  // a dense grad borrows the request
    } else if (round.size != req.round_size()) {
      return invalid("Push " + req.name() + ": round " + std::to_string(req.round()) + " has size " +
                     std::to_string(round.size) + " but step '" + req.step_id() + "' says " +
                     std::to_string(req.round_size()) + " (pushes of one round must agree)");
    } else {
      kernels::axpy_(round.sum, 1.0f, grad);
    }
    round.steps.insert(req.step_id());
    if (static_cast<int64_t>(round.steps.size()) < round.size) return grpc::Status::OK;
    shard.apply(kernels::affine(round.sum, 1.0f / static_cast<float>(round.size), 0.0f), round.steps);
    applied_ += round.size;
    shard.rounds.erase(req.round());
    return grpc::Status::OK;
  }
  static grpc::Status not_found(const char* what, const std::string& name) {
    return {grpc::StatusCode::NOT_FOUND, std::string(what) + ": no shard named '" + name + "' on this ps"};
  }

  const int64_t step_window_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Shard>> shards_;  // guarded by mu_; a shard lives as long as the service
  std::vector<std::unique_ptr<Shard>> retired_;           // guarded by mu_: shards a restore replaced
  std::atomic<int64_t> applied_{0}, dropped_{0};
  std::atomic<int64_t> rows_pulled_{0}, rows_pushed_{0};
};

}  // namespace

struct ParameterServer::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  int64_t restored = 0;
  int64_t step_window = ParameterServer::kStepWindow;
};

ParameterServer::ParameterServer(int64_t step_window) : impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(step_window >= 1, InvalidArgument, "ps: step_window must be at least 1, got " << step_window);
  impl_->step_window = step_window;
}
ParameterServer::~ParameterServer() { stop(); }

void ParameterServer::start(const std::string& address, const std::string& restore_directory) {
  STRATA_CHECK(!impl_->server, InvalidArgument, "ps: already serving on port " << impl_->port);
  const std::string where = cluster::listen_address(address);
  auto service = std::make_unique<Service>(impl_->step_window);
  if (!restore_directory.empty()) {  // before listening: no client ever sees the shards it replaces
    pb::RestoreRequest req;
    req.set_directory(restore_directory);
    pb::RestoreResponse resp;
    const grpc::Status status = service->Restore(nullptr, &req, &resp);
    if (!status.ok()) STRATA_THROW_CODE(cluster::error_code_of(status), "ps: " << status.error_message());
    impl_->restored = resp.shards();
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(where, grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is an error, not a shared port
  builder.SetMaxReceiveMessageSize(-1);                     // shards and gradients of any size
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
int64_t ParameterServer::pushes_applied() const { return impl_->service ? impl_->service->applied() : 0; }
int64_t ParameterServer::pushes_dropped() const { return impl_->service ? impl_->service->dropped() : 0; }
int64_t ParameterServer::rows_pulled() const { return impl_->service ? impl_->service->rows_pulled() : 0; }
int64_t ParameterServer::steps_remembered() const { return impl_->service ? impl_->service->steps_remembered() : 0; }
int64_t ParameterServer::rows_pushed() const { return impl_->service ? impl_->service->rows_pushed() : 0; }

// ---- client

struct ParameterServerClient::Impl {
  std::string address;
  std::chrono::milliseconds timeout;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::ParameterServer::Stub> stub;
  std::unique_ptr<grpc::GenericStub> raw;  // the same channel, for requests encoded by hand (tensor_coding.h)

  // Makes one call (`attempt(context)`) with the deadline; a failed status is the strata error for it
  // (cluster/rpc_status.h) naming the call and the address.
  template <class Attempt>
  void run(const char* what, bool retry, Attempt attempt) {
    const auto deadline = std::chrono::system_clock::now() + timeout;
    std::chrono::milliseconds backoff(20);
    grpc::Status status;
    for (;;) {
      grpc::ClientContext context;
      context.set_deadline(deadline);
      context.set_wait_for_ready(true);  // a ps still starting is waited for, within the deadline
      status = attempt(context);
      // A call cut off by a ps that died or shut down (UNAVAILABLE, or CANCELLED by its server, at once rather than
      // at the deadline) is made again, within the deadline, when making it twice does no harm: the ps may be
      // restarting from its checkpoint.
      const bool cut_off =
          status.error_code() == grpc::StatusCode::UNAVAILABLE || status.error_code() == grpc::StatusCode::CANCELLED;
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
                const char* what, const Request& request, bool retry = true) {
    Response response;
    run(what, retry, [&](grpc::ClientContext& context) { return (stub.get()->*method)(&context, request, &response); });
    return response;
  }

  // `call` for a request encoded by hand, to method `what` of the ParameterServer service.
  template <class Response>
  Response call_raw(const char* what, const grpc::ByteBuffer& request, bool retry) {
    const std::string method = std::string("/") + pb::ParameterServer::service_full_name() + "/" + what;
    Response response;
    run(what, retry, [&](grpc::ClientContext& context) {
      grpc::CompletionQueue queue;
      auto rpc = raw->PrepareUnaryCall(&context, method, request, &queue);
      rpc->StartCall();
      grpc::ByteBuffer reply;
      grpc::Status status;
      rpc->Finish(&reply, &status, nullptr);
      void* tag = nullptr;
      bool ok = false;
      queue.Next(&tag, &ok);
      queue.Shutdown();
      while (queue.Next(&tag, &ok)) {
      }
      if (status.ok() && !grpc::SerializationTraits<Response>::Deserialize(&reply, &response).ok()) {
        return grpc::Status(grpc::StatusCode::DATA_LOSS, std::string(what) + ": a malformed response");
      }
      return status;
    });
    return response;
  }
};

ParameterServerClient::ParameterServerClient(const std::string& address, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(timeout.count() > 0, InvalidArgument, "ps client: timeout must be positive");
  impl_->address = address;
  impl_->timeout = timeout;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  impl_->channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
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

bool ParameterServerClient::create(const std::string& name, const Tensor& initial, const OptimizerSpec& optimizer) {
  check_float("create", initial);
  pb::CreateRequest req;
  req.set_name(name);
  to_bytes(initial.clone(), req.mutable_initial());
  auto* spec = req.mutable_optimizer();
  spec->set_name(optimizer.name);
  spec->set_learning_rate(optimizer.learning_rate);
  spec->set_momentum(optimizer.momentum);
  spec->set_beta_1(optimizer.beta_1);
  spec->set_beta_2(optimizer.beta_2);
  spec->set_epsilon(optimizer.epsilon);
  spec->set_initial_accumulator(optimizer.initial_accumulator);
  return impl_->call(&pb::ParameterServer::Stub::Create, "Create", req).created();
}

Tensor ParameterServerClient::pull(const std::string& name) {
  trace::Span span("comm", "ps pull");
  pb::PullRequest req;
  req.set_name(name);
  pb::PullResponse resp = impl_->call(&pb::ParameterServer::Stub::Pull, "Pull", req);
  return tensor_of(resp.mutable_value(), impl_->address);
}

Tensor ParameterServerClient::pull_rows(const std::string& name, const std::vector<int64_t>& rows) {
  trace::Span span("comm", "ps pull rows");
  pb::PullRequest req;
  req.set_name(name);
  for (int64_t r : rows) req.add_rows(r);
  pb::PullResponse resp = impl_->call(&pb::ParameterServer::Stub::Pull, "Pull", req);
  return tensor_of(resp.mutable_value(), impl_->address);
}

bool ParameterServerClient::push(const std::string& name, const Tensor& gradient, const std::string& step_id,
                                 const SyncRound& round) {
  check_float("push", gradient);
  return push_request(name, nullptr, gradient, step_id, round);
}

ParameterServerClient::Stats ParameterServerClient::stats() {
  const pb::StatsResponse r = impl_->call(&pb::ParameterServer::Stub::Stats, "Stats", pb::StatsRequest());
  return {.shards = r.shards(), .pushes_applied = r.pushes_applied(), .pushes_dropped = r.pushes_dropped()};
}

int64_t ParameterServerClient::save(const std::string& directory) {
  pb::SaveRequest req;
  req.set_directory(directory);
  return impl_->call(&pb::ParameterServer::Stub::Save, "Save", req).shards();
}

int64_t ParameterServerClient::restore(const std::string& directory) {
  pb::RestoreRequest req;
  req.set_directory(directory);
  return impl_->call(&pb::ParameterServer::Stub::Restore, "Restore", req).shards();
}

bool ParameterServerClient::push_rows(const std::string& name, const std::vector<int64_t>& rows, const Tensor& gradient,
                                      const std::string& step_id, const SyncRound& round) {
  check_float("push_rows", gradient);
  return push_request(name, &rows, gradient, step_id, round);
}

bool ParameterServerClient::push_request(const std::string& name, const std::vector<int64_t>* rows,
                                         const Tensor& gradient, const std::string& step_id, const SyncRound& round) {
  trace::Span span("comm", rows ? "ps push rows" : "ps push", gradient.numel() * 4);  // float32
  // The gradient's bytes go out from its own memory (tensor_coding.h): the request holds only its shape.
  pb::PushRequest head;
  head.set_name(name);
  for (int64_t d : gradient.shape()) head.mutable_gradient()->add_shape(d);
  if (rows) head.mutable_rows()->Add(rows->begin(), rows->end());
  head.set_step_id(step_id);
  head.set_round(round.id);
  head.set_round_size(round.size);
  const grpc::ByteBuffer request = encode_with_tensor_bytes(head, pb::PushRequest::kGradientFieldNumber, gradient);
  return impl_->call_raw<pb::PushResponse>("Push", request, /*retry=*/!step_id.empty()).applied();
}

}  // namespace strata::ps
