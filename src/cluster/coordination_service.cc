// The coordination service's server side (strata/cluster/coordination.h): the store, barriers and the
// heartbeat monitor behind the gRPC service of proto/coordination.proto, served by a synchronous
// grpc::Server. Waiting RPCs (Get, Wait, Barrier) block their handler thread on one condition variable,
// in slices, so that a cancelled caller or stop() ends them promptly.
//
// Thread-safety: all state is guarded by State::mu; handlers run on gRPC's threads, the monitor on its own.
// start() and stop() are called from one thread.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "cluster/proto/coordination.grpc.pb.h"
#include "cluster/rpc_credentials.h"
#include "strata/cluster/cluster_resolver.h"
#include "strata/cluster/coordination.h"
#include "strata/error.h"

namespace strata::cluster {
namespace {

using Clock = std::chrono::steady_clock;
// The longest a waiting handler sleeps before it looks again at cancellation and shutdown.
constexpr auto kSlice = std::chrono::milliseconds(100);
// The longest wait a request may ask for (a day), so that a huge wait_ms cannot overflow a time point.
constexpr int64_t kMaxWaitMs = 24LL * 3600 * 1000;

std::chrono::milliseconds bounded_wait(int64_t ms) {
  return std::chrono::milliseconds(std::clamp<int64_t>(ms, 0, kMaxWaitMs));
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", std::chrono::duration<double>(d).count());
  return buf;
}

struct TaskState {
  Clock::time_point last_seen;
  uint64_t incarnation = 0;
  bool lost = false;
};

struct BarrierState {
  std::vector<std::string> participants;  // sorted; empty: any num_tasks tasks
  int num_tasks = 0;
  std::set<std::string> arrived;
  Clock::time_point deadline;
  int64_t timeout_ms = 0;
  bool done = false;
  BarrierResponse::Outcome outcome = BarrierResponse::PASSED;
  std::vector<std::string> missing;
  std::string message;
};

class ServiceImpl final : public Coordination::Service {
 public:
  explicit ServiceImpl(CoordinationService::Options options) : options_(std::move(options)) {}

  grpc::Status Set(grpc::ServerContext*, const SetRequest* req, SetResponse*) override {
    std::lock_guard lock(mu_);
    kv_[req->key()] = req->value();
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext* ctx, const GetRequest* req, GetResponse* resp) override {
    std::unique_lock lock(mu_);
    const auto deadline = Clock::now() + bounded_wait(req->wait_ms());
    for (;;) {
      if (auto it = kv_.find(req->key()); it != kv_.end()) {
        resp->set_found(true);
        resp->set_value(it->second);
        return grpc::Status::OK;
      }
      if (auto status = interrupted(ctx); !status.ok()) return status;
      if (Clock::now() >= deadline) return grpc::Status::OK;  // found = false
      cv_.wait_until(lock, std::min(deadline, Clock::now() + kSlice));
    }
  }

  grpc::Status Add(grpc::ServerContext*, const AddRequest* req, AddResponse* resp) override {
    std::lock_guard lock(mu_);
    int64_t value = 0;
    if (auto it = kv_.find(req->key()); it != kv_.end()) {
      const std::string& s = it->second;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
      if (ec != std::errc() || end != s.data() + s.size()) {
        return {grpc::StatusCode::INVALID_ARGUMENT,
                "add: the value at key '" + req->key() + "' is not a decimal int64: '" + s.substr(0, 64) + "'"};
      }
    }
    if (__builtin_add_overflow(value, req->delta(), &value)) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "add: the counter at key '" + req->key() + "' overflows int64"};
    }
    kv_[req->key()] = std::to_string(value);
    resp->set_value(value);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status CompareSet(grpc::ServerContext*, const CompareSetRequest* req, CompareSetResponse* resp) override {
    std::lock_guard lock(mu_);
    auto it = kv_.find(req->key());
    const bool matches = it == kv_.end() ? req->expected().empty() : it->second == req->expected();
    if (matches) {
      kv_[req->key()] = req->desired();
      cv_.notify_all();
      resp->set_value(req->desired());
    } else {
      resp->set_value(it == kv_.end() ? std::string() : it->second);
    }
    return grpc::Status::OK;
  }

  grpc::Status Check(grpc::ServerContext*, const CheckRequest* req, CheckResponse* resp) override {
    std::lock_guard lock(mu_);
    resp->set_all_present(missing_keys(req->keys()).empty());
    return grpc::Status::OK;
  }

  grpc::Status Wait(grpc::ServerContext* ctx, const WaitRequest* req, WaitResponse* resp) override {
    std::unique_lock lock(mu_);
    const auto deadline = Clock::now() + bounded_wait(req->wait_ms());
    for (;;) {
      auto missing = missing_keys(req->keys());
      if (missing.empty()) return grpc::Status::OK;
      if (auto status = interrupted(ctx); !status.ok()) return status;
      if (Clock::now() >= deadline) {
        for (auto& k : missing) resp->add_missing(std::move(k));
        return grpc::Status::OK;
      }
      cv_.wait_until(lock, std::min(deadline, Clock::now() + kSlice));
    }
  }

  grpc::Status Delete(grpc::ServerContext*, const DeleteRequest* req, DeleteResponse* resp) override {
    std::lock_guard lock(mu_);
    resp->set_existed(kv_.erase(req->key()) > 0);
    return grpc::Status::OK;
  }

  grpc::Status NumKeys(grpc::ServerContext*, const NumKeysRequest* req, NumKeysResponse* resp) override {
    std::lock_guard lock(mu_);
    const std::string& prefix = req->prefix();
    int64_t n = 0;
    for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      ++n;
    }
    resp->set_num_keys(n);
    return grpc::Status::OK;
  }

  grpc::Status Barrier(grpc::ServerContext* ctx, const BarrierRequest* req, BarrierResponse* resp) override {
    if (req->task().empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "barrier: the arriving task has no name"};
    if (grpc::Status unknown = check_member("barrier", req->task()); !unknown.ok()) return unknown;
    std::vector<std::string> participants(req->tasks().begin(), req->tasks().end());
    std::sort(participants.begin(), participants.end());
    participants.erase(std::unique(participants.begin(), participants.end()), participants.end());
    int num_tasks = req->num_tasks();
    if (participants.empty() && num_tasks <= 0) {
      participants = options_.tasks;
      std::sort(participants.begin(), participants.end());
      if (participants.empty()) {
        return {grpc::StatusCode::INVALID_ARGUMENT,
                "barrier '" + req->barrier_id() + "': no participants (give tasks or num_tasks)"};
      }
    }
    if (!participants.empty()) num_tasks = static_cast<int>(participants.size());

    std::unique_lock lock(mu_);
    auto [it, created] = barriers_.try_emplace(req->barrier_id());
    BarrierState& b = it->second;
    if (created) {
      b.participants = participants;
      b.num_tasks = num_tasks;
      b.timeout_ms = bounded_wait(req->timeout_ms()).count();
      b.deadline = Clock::now() + bounded_wait(b.timeout_ms);
    } else if (b.participants != participants || b.num_tasks != num_tasks) {
      resp->set_outcome(BarrierResponse::MISMATCH);
      resp->set_message("barrier '" + req->barrier_id() + "': task " + req->task() + " arrived for " +
                        describe(participants, num_tasks) + " but the barrier is for " +
                        describe(b.participants, b.num_tasks));
      return grpc::Status::OK;
    }
    if (!b.participants.empty() && !std::binary_search(b.participants.begin(), b.participants.end(), req->task())) {
      resp->set_outcome(BarrierResponse::MISMATCH);
      resp->set_message("barrier '" + req->barrier_id() + "': task " + req->task() + " is not one of its tasks (" +
                        join(b.participants) + ")");
      return grpc::Status::OK;
    }
    if (!b.done) {
      b.arrived.insert(req->task());
      if (static_cast<int>(b.arrived.size()) >= b.num_tasks) {
        b.done = true;
        cv_.notify_all();
      } else {
        fail_if_participant_lost(req->barrier_id(), b);
      }
    }
    while (!b.done) {
      if (auto status = interrupted(ctx); !status.ok()) return status;
      if (Clock::now() >= b.deadline) {
        fail_timed_out(req->barrier_id(), b);
        break;
      }
      cv_.wait_until(lock, std::min(b.deadline, Clock::now() + kSlice));
    }
    resp->set_outcome(b.outcome);
    for (const auto& m : b.missing) resp->add_missing(m);
    resp->set_message(b.message);
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest* req, HeartbeatResponse* resp) override {
    if (req->task().empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "heartbeat: the task has no name"};
    if (grpc::Status unknown = check_member("heartbeat", req->task()); !unknown.ok()) return unknown;
    std::lock_guard lock(mu_);
    auto [it, created] = tasks_.try_emplace(req->task());
    TaskState& t = it->second;
    if (t.lost && t.incarnation != req->incarnation()) {  // a restarted task joins again
      t.lost = false;
      std::erase_if(lost_, [&](const LostTask& l) { return l.task == req->task(); });
    }
    if (!t.lost) {
      t.last_seen = Clock::now();
      t.incarnation = req->incarnation();
    }
    for (const auto& l : lost_) *resp->add_lost() = to_proto(l);
    return grpc::Status::OK;
  }

  grpc::Status GetLostTasks(grpc::ServerContext*, const GetLostTasksRequest*, GetLostTasksResponse* resp) override {
    std::lock_guard lock(mu_);
    for (const auto& l : lost_) *resp->add_lost() = to_proto(l);
    return grpc::Status::OK;
  }

  grpc::Status Disconnect(grpc::ServerContext*, const DisconnectRequest* req, DisconnectResponse*) override {
    std::lock_guard lock(mu_);
    auto it = tasks_.find(req->task());
    if (it != tasks_.end() && !it->second.lost && it->second.incarnation == req->incarnation()) tasks_.erase(it);
    return grpc::Status::OK;
  }

  // Declares lost every registered task silent for longer than the heartbeat timeout.
  void check_heartbeats() {
    std::lock_guard lock(mu_);
    const auto now = Clock::now();
    for (auto& [name, t] : tasks_) {
      if (t.lost || now - t.last_seen <= options_.heartbeat_timeout) continue;
      t.lost = true;
      LostTask l{name, "no heartbeat for " + seconds(now - t.last_seen) + " (heartbeat timeout " +
                           seconds(options_.heartbeat_timeout) + ")"};
      std::fprintf(stderr, "strata: coordination service: task %s lost: %s\n", name.c_str(), l.reason.c_str());
      lost_.push_back(std::move(l));
    }
    for (auto& [id, b] : barriers_) {
      if (!b.done) fail_if_participant_lost(id, b);
    }
    cv_.notify_all();
  }

  void begin_stop() {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }

 private:
  // REQUIRES: mu_ held.
  std::vector<std::string> missing_keys(const google::protobuf::RepeatedPtrField<std::string>& keys) const {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!kv_.count(k)) missing.push_back(k);
    }
    return missing;
  }

  // Why a waiting handler must return now, if it must. REQUIRES: mu_ held.
  grpc::Status interrupted(grpc::ServerContext* ctx) const {
    if (stopping_) return {grpc::StatusCode::UNAVAILABLE, "the coordination service is shutting down"};
    if (ctx->IsCancelled()) return {grpc::StatusCode::CANCELLED, "the caller cancelled"};
    return grpc::Status::OK;
  }

  // A service that knows the job's tasks takes heartbeats and barrier arrivals from them only: a name outside the
  // cluster ("worker:7") would otherwise be registered, then declared lost, and stop the job.
  grpc::Status check_member(const char* rpc, const std::string& task) const {
    if (options_.tasks.empty() ||
        std::find(options_.tasks.begin(), options_.tasks.end(), task) != options_.tasks.end()) {
      return grpc::Status::OK;
    }
    return {grpc::StatusCode::INVALID_ARGUMENT,
            std::string(rpc) + ": task " + task + " is not in this job's cluster (" + join(options_.tasks) + ")"};
  }

  static std::string describe(const std::vector<std::string>& participants, int num_tasks) {
    return participants.empty() ? std::to_string(num_tasks) + " tasks" : "tasks (" + join(participants) + ")";
  }

  static LostTaskInfo to_proto(const LostTask& l) {
    LostTaskInfo p;
    p.set_task(l.task);
    p.set_reason(l.reason);
    return p;
  }

  // REQUIRES: mu_ held, !b.done.
  void fail_timed_out(const std::string& id, BarrierState& b) {
    std::vector<std::string> arrived(b.arrived.begin(), b.arrived.end());
    std::ostringstream msg;
    msg << "barrier '" << id << "' timed out after " << b.timeout_ms << " ms: " << arrived.size() << " of "
        << b.num_tasks << " tasks arrived (" << join(arrived) << "); ";
    if (!b.participants.empty()) {
      for (const auto& p : b.participants) {
        if (!b.arrived.count(p)) b.missing.push_back(p);
      }
      msg << "did not arrive: " << join(b.missing);
    } else {
      // Only a count was given: name the tasks known to the service (configured or heartbeating) that
      // did not arrive, which may be more or fewer than the count missing.
      std::set<std::string> known(options_.tasks.begin(), options_.tasks.end());
      for (const auto& [name, t] : tasks_) known.insert(name);
      for (const auto& k : known) {
        if (!b.arrived.count(k)) b.missing.push_back(k);
      }
      msg << b.num_tasks - static_cast<int>(arrived.size()) << " missing";
      if (!b.missing.empty()) msg << "; known tasks that did not arrive: " << join(b.missing);
    }
    finish(b, BarrierResponse::TIMED_OUT, msg.str());
  }

  // Fails `b` if one of its named participants that has not arrived was declared lost. REQUIRES: mu_ held.
  void fail_if_participant_lost(const std::string& id, BarrierState& b) {
    std::vector<std::string> lost;
    std::string reasons;
    for (const auto& l : lost_) {
      if (std::binary_search(b.participants.begin(), b.participants.end(), l.task) && !b.arrived.count(l.task)) {
        lost.push_back(l.task);
        reasons += "; " + l.task + ": " + l.reason;
      }
    }
    if (lost.empty()) return;
    b.missing = lost;
    finish(b, BarrierResponse::TASK_LOST,
           "barrier '" + id + "' cannot pass: task(s) " + join(lost) + " were declared lost before arriving" + reasons);
  }

  void finish(BarrierState& b, BarrierResponse::Outcome outcome, std::string message) {
    b.done = true;
    b.outcome = outcome;
    b.message = std::move(message);
    cv_.notify_all();
  }

  const CoordinationService::Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                         // GUARDED_BY(mu_)
  std::map<std::string, std::string> kv_;         // GUARDED_BY(mu_)
  std::map<std::string, BarrierState> barriers_;  // GUARDED_BY(mu_)
  std::map<std::string, TaskState> tasks_;        // GUARDED_BY(mu_)
  std::vector<LostTask> lost_;                    // GUARDED_BY(mu_), in the order they were declared lost
};

}  // namespace

struct CoordinationService::Impl {
  std::unique_ptr<ServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::mutex monitor_mu;
  std::condition_variable monitor_cv;
  bool monitor_stop = false;  // GUARDED_BY(monitor_mu)
  std::thread monitor;
};

CoordinationService::CoordinationService() : impl_(std::make_unique<Impl>()) {}
CoordinationService::~CoordinationService() { stop(); }

void CoordinationService::start(const std::string& address, Options options) {
  STRATA_CHECK(!impl_->server, InvalidArgument, "coordination service: already started on port " << impl_->port);
  STRATA_CHECK(
      options.heartbeat_timeout > std::chrono::milliseconds(0), InvalidArgument,
      "coordination service: heartbeat_timeout must be positive, got " << options.heartbeat_timeout.count() << " ms");
  const std::string where = listen_address(address);
  const auto heartbeat_timeout = options.heartbeat_timeout;
  const std::shared_ptr<const JobCredentials> credentials =
      options.credentials ? options.credentials : process_job_credentials();
  auto service = std::make_unique<ServiceImpl>(std::move(options));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(where, server_credentials(*credentials, where, "the coordination service"), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is an error, not a shared port
  builder.RegisterService(service.get());
  auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    if (server) server->Shutdown();
    STRATA_THROW(Unavailable,
                 "coordination service: cannot listen on " << where << " (is the address local and the port free?)");
  }
  impl_->service = std::move(service);
  impl_->server = std::move(server);
  impl_->port = port;
  impl_->monitor_stop = false;
  const auto period = std::clamp<std::chrono::milliseconds>(heartbeat_timeout / 10, std::chrono::milliseconds(10),
                                                            std::chrono::milliseconds(500));
  impl_->monitor = std::thread([impl = impl_.get(), period] {
    std::unique_lock lock(impl->monitor_mu);
    while (!impl->monitor_cv.wait_for(lock, period, [impl] { return impl->monitor_stop; })) {
      impl->service->check_heartbeats();
    }
  });
}

int CoordinationService::port() const {
  STRATA_CHECK(impl_->server, InvalidArgument, "coordination service: port() before start()");
  return impl_->port;
}

void CoordinationService::stop() {
  if (!impl_->server) return;
  {
    std::lock_guard lock(impl_->monitor_mu);
    impl_->monitor_stop = true;
  }
  impl_->monitor_cv.notify_all();
  impl_->monitor.join();
  impl_->service->begin_stop();  // pending waits and barriers return UNAVAILABLE
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
  impl_->server.reset();
  impl_->service.reset();
  impl_->port = 0;
}

}  // namespace strata::cluster
