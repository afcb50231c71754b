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
#include <filesystem>
#include <map>
#include <mutex>

#include "cluster/rpc_credentials.h"
#include "cluster/rpc_status.h"
#include "ps/proto/parameter_server.grpc.pb.h"
#include "ps/ps_checkpoint.h"
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

class Service final : public pb::ParameterServer::WithRawCallbackMethod_Push<
                          pb::ParameterServer::WithRawCallbackMethod_Pull<pb::ParameterServer::Service>> {
 public:
  Service(int64_t step_window, std::filesystem::path checkpoint_directory)
      : step_window_(step_window), checkpoint_directory_(std::move(checkpoint_directory)) {}
  // Step ids remembered for dropping repeats, over every shard.
  int64_t steps_remembered() {
    std::lock_guard lock(mu_);
    int64_t n = 0;
    for (auto& [name, shard] : shards_) n += shard->steps_remembered();
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
      if (it->second->shape() != initial.shape() || it->second->optimizer_key() != spec) {
        return {grpc::StatusCode::ALREADY_EXISTS, "Create " + req->name() + ": it exists with shape " +
                                                      shape_str(it->second->shape()) + " (asked " +
                                                      shape_str(initial.shape()) + ") or another optimizer"};
      }
      resp->set_created(false);
      return grpc::Status::OK;
    }
    std::shared_ptr<optim::Optimizer> optimizer;
    try {
      optimizer = make_optimizer(req->optimizer());
    } catch (const InvalidArgument& e) {
      return invalid("Create " + req->name() + ": " + e.what());
    }
    if (!optimizer) {
      return invalid("Create " + req->name() + ": unknown optimizer '" + req->optimizer().name() +
                     "'; the ps applies sgd, adam or adagrad");
    }
    shards_.emplace(req->name(),
                    std::make_shared<ShardState>(req->name(), initial, std::move(optimizer), spec, step_window_));
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
    const std::shared_ptr<ShardState> shard = find(req.name());
    if (!shard) return not_found("Push", req.name());
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
    ShardState::PushResult result;
    try {
      result = shard->push(grad, {req.rows().data(), static_cast<size_t>(req.rows_size())}, req.step_id(),
                           {.id = req.round(), .size = req.round_size()});
    } catch (const InvalidArgument& e) {
      return invalid(e.what());
    }
    if (!result.taken) {
      ++dropped_;
    } else {
      applied_ += result.applied;
      rows_pushed_ += req.rows().empty() ? shard->shape()[0] : req.rows_size();
    }
    resp->set_applied(result.taken);
    resp->set_version(result.version);
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
    if (grpc::Status refused = check_checkpoint_request("Save", req->checkpoint()); !refused.ok()) return refused;
    if (req->keep() < 0) return invalid("Save: keep must be >= 0, got " + std::to_string(req->keep()));
    std::lock_guard lock(mu_);  // no shard is created meanwhile
    try {
      detail::write_ps_checkpoint(checkpoint_directory_, req->checkpoint(), req->keep(), [&](const fs::path& into) {
        for (const auto& entry : shards_) save_shard(entry.first, *entry.second, into);
      });
    } catch (const Error& e) {
      return cluster::to_grpc_status(e.code(), std::string("Save: ") + e.what());
    }
    resp->set_shards(static_cast<int64_t>(shards_.size()));
    return grpc::Status::OK;
  }

  grpc::Status Restore(grpc::ServerContext*, const pb::RestoreRequest* req, pb::RestoreResponse* resp) override {
    namespace fs = std::filesystem;
    if (grpc::Status refused = check_checkpoint_request("Restore", req->checkpoint()); !refused.ok()) return refused;
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
    for (auto& [name, shard] : loaded) shards_[name] = std::move(shard);
    resp->set_shards(static_cast<int64_t>(loaded.size()));
    return grpc::Status::OK;
  }

  int64_t applied() const { return applied_.load(); }
  int64_t dropped() const { return dropped_.load(); }
  int64_t rows_pulled() const { return rows_pulled_.load(); }
  int64_t rows_pushed() const { return rows_pushed_.load(); }

 private:
  std::shared_ptr<ShardState> find(const std::string& name) {
    std::lock_guard lock(mu_);
    const auto it = shards_.find(name);
    return it == shards_.end() ? nullptr : it->second;
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
    const std::shared_ptr<ShardState> shard = find(req.name());
    if (!shard) return not_found("Pull", req.name());
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
      record.set_name(name);
      record.mutable_optimizer()->ParseFromString(shard.optimizer_key());
      record.set_version(saved.version);
      for (const std::string& step : saved.applied_steps) record.add_applied_steps(step);  // oldest first
      std::string json;
      STRATA_CHECK(google::protobuf::util::MessageToJsonString(record, &json).ok(), IoError,
                   "Save " << name << ": cannot encode");
      io::NamedTensors tensors = {{"value", saved.value}};
      for (const auto& [slot, t] : saved.optimizer_state) tensors.emplace_back("optimizer/" + slot, t);
      io::save_safetensors((directory / shard_file(name)).string(), tensors, {{kShardKey, json}});
    });
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
    if (!metadata.count(kShardKey) || !google::protobuf::util::JsonStringToMessage(metadata[kShardKey], &record).ok() ||
        tensors.empty() || tensors[0].first != "value") {
      return {grpc::StatusCode::DATA_LOSS, "Restore: " + path + " is not a shard file of a ps"};
    }
    std::shared_ptr<optim::Optimizer> optimizer;
    try {
      optimizer = make_optimizer(record.optimizer());
    } catch (const InvalidArgument& e) {
      return {grpc::StatusCode::DATA_LOSS, "Restore: " + path + ": " + e.what()};
    }
    if (!optimizer) return {grpc::StatusCode::DATA_LOSS, "Restore: " + path + " names an unknown optimizer"};
    auto shard = std::make_shared<ShardState>(record.name(), tensors[0].second, std::move(optimizer),
                                              record.optimizer().SerializeAsString(), step_window_);
    io::NamedTensors state;
    for (size_t i = 1; i < tensors.size(); ++i) {
      if (tensors[i].first.rfind("optimizer/", 0) == 0) state.emplace_back(tensors[i].first.substr(10), tensors[i].second);
    }
    try {
      shard->restore(record.version(), {record.applied_steps().begin(), record.applied_steps().end()}, state);
    } catch (const Error& e) {
      return {grpc::StatusCode::DATA_LOSS, "Restore: " + path + ": " + e.what()};
    }
    *out = {record.name(), std::move(shard)};
    return grpc::Status::OK;
  }

  static grpc::Status not_found(const char* what, const std::string& name) {
    return {grpc::StatusCode::NOT_FOUND, std::string(what) + ": no shard named '" + name + "' on this ps"};
  }

  const int64_t step_window_;
  const std::filesystem::path checkpoint_directory_;  // "": Save and Restore are refused
  std::mutex mu_;
  // Guarded by mu_; a handler holds its shard's reference while it runs, so a restore may replace the shard.
  std::map<std::string, std::shared_ptr<ShardState>> shards_;
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

void ParameterServer::start(const std::string& address, const StartOptions& options) {
  STRATA_CHECK(options.max_message_bytes >= 0, InvalidArgument,
               "ps: max_message_bytes must be >= 0, got " << options.max_message_bytes);
  STRATA_CHECK(options.restore_checkpoint >= 0, InvalidArgument,
               "ps: restore_checkpoint must be >= 0, got " << options.restore_checkpoint);
  STRATA_CHECK(options.restore_checkpoint == 0 || !options.checkpoint_directory.empty(), InvalidArgument,
               "ps: restore_checkpoint " << options.restore_checkpoint << " needs a checkpoint_directory");
  STRATA_CHECK(!impl_->server, InvalidArgument, "ps: already serving on port " << impl_->port);
  const std::string where = cluster::listen_address(address);
  auto service = std::make_unique<Service>(impl_->step_window, options.checkpoint_directory);
  if (options.restore_checkpoint > 0) {  // before listening: no client ever sees the shards it replaces
    pb::RestoreRequest req;
    req.set_checkpoint(options.restore_checkpoint);
    pb::RestoreResponse resp;
    const grpc::Status status = service->Restore(nullptr, &req, &resp);
    if (!status.ok()) STRATA_THROW_CODE(cluster::error_code_of(status), "ps: " << status.error_message());
    impl_->restored = resp.shards();
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
int64_t ParameterServer::pushes_applied() const { return impl_->service ? impl_->service->applied() : 0; }
int64_t ParameterServer::pushes_dropped() const { return impl_->service ? impl_->service->dropped() : 0; }
int64_t ParameterServer::rows_pulled() const { return impl_->service ? impl_->service->rows_pulled() : 0; }
int64_t ParameterServer::steps_remembered() const { return impl_->service ? impl_->service->steps_remembered() : 0; }
int64_t ParameterServer::rows_pushed() const { return impl_->service ? impl_->service->rows_pushed() : 0; }

}  // namespace strata::ps
