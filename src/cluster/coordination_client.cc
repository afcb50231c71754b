// The coordination service's client (strata/cluster/coordination.h): a comm::Store over gRPC, barriers,
// and a heartbeat thread. Every RPC carries a deadline (rpc_timeout, plus the wait for a waiting RPC),
// and every failed status becomes a strata error that names the RPC, its keys and the service's address.
//
// Thread-safety: the gRPC stub is thread-safe; the heartbeat state and the lost tasks seen are guarded by
// Impl::mu. on_lost runs on the heartbeat thread, outside the lock.
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "cluster/proto/coordination.grpc.pb.h"
#include "cluster/rpc_credentials.h"
#include "cluster/rpc_status.h"
#include "strata/cluster/coordination.h"
#include "strata/error.h"

namespace strata::cluster {
namespace {

using std::chrono::milliseconds;
using namespace std::chrono_literals;

// The longest a wait may ask for: the service caps waits at a day too.
constexpr milliseconds kMaxWait = 24h;

std::string seconds(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", std::chrono::duration<double>(d).count());
  return buf;
}

std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

std::string describe(const std::vector<LostTask>& lost) {
  std::string out;
  for (const auto& l : lost) out += (out.empty() ? "" : "; ") + l.task + " (" + l.reason + ")";
  return out;
}

template <class Proto>
std::vector<LostTask> from_proto(const Proto& list) {
  std::vector<LostTask> out;
  for (const auto& l : list) out.push_back({l.task(), l.reason()});
  return out;
}

}  // namespace

struct CoordinationClient::Impl {
  std::string address;
  std::string task;
  // "job-<id>/" for a job with a secret ("" without one): every key and barrier id this client names lives under it,
  // so two jobs that reach one service (a restarted chief's port taken by another job's) never read each other's.
  std::string key_prefix;
  Options options;
  uint64_t incarnation = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<Coordination::Stub> stub;

  std::mutex mu;
  std::condition_variable cv;
  std::function<void(const LostTask&)> on_lost;  // GUARDED_BY(mu)
  std::set<std::string> lost_seen;               // GUARDED_BY(mu): tasks already passed to on_lost
  bool heartbeat_stop = false;                   // GUARDED_BY(mu)
  // GUARDED_BY(mu): when the first of the heartbeats failing since the last answered one was sent (none:
  // the last one was answered). Counted from a sent beat, so a starved client does not blame the service.
  std::optional<std::chrono::steady_clock::time_point> failing_since;
  bool service_reported = false;  // GUARDED_BY(mu): on_lost told the service is gone
  std::thread heartbeat;

  // Calls `method` with a deadline of `deadline` from now; a failed status becomes the strata error for
  // it (rpc_status.h), naming `rpc`, `what` (the keys or the barrier) and the address.
  template <class Request, class Response>
  Response call(grpc::Status (Coordination::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                const char* rpc, const std::string& what, const Request& request, milliseconds deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::min(deadline, 2 * kMaxWait));
    Response response;
    const grpc::Status status = (stub.get()->*method)(&ctx, request, &response);
    if (status.ok()) return response;
    throw_rpc_error(status, {.rpc = std::string("coordination ") + rpc + (what.empty() ? "" : " of " + what),
                             .peer = "the coordination service at " + address,
                             .deadline = deadline});
  }

  // The deadline of an RPC that waits up to `wait` on the service.
  milliseconds waiting_deadline(milliseconds wait) const {
    return std::clamp<milliseconds>(wait, 0ms, kMaxWait) + std::clamp<milliseconds>(options.rpc_timeout, 0ms, kMaxWait);
  }

  // One heartbeat; passes newly lost tasks to on_lost. Throws what call() throws.
  void beat() {
    HeartbeatRequest request;
    request.set_task(task);
    request.set_incarnation(incarnation);
    const auto deadline = std::min(options.rpc_timeout, milliseconds(2000));
    const auto response = call(&Coordination::Stub::Heartbeat, "Heartbeat", "task " + task, request, deadline);
    std::vector<LostTask> fresh;
    std::function<void(const LostTask&)> callback;
    {
      std::lock_guard lock(mu);
      failing_since.reset();
      service_reported = false;
      for (auto& l : from_proto(response.lost())) {
        if (lost_seen.insert(l.task).second) fresh.push_back(std::move(l));
      }
      callback = on_lost;
    }
    if (callback) {
      for (const auto& l : fresh) callback(l);
    }
  }

  // The heartbeat sent at `sent` failed with `error`: once heartbeats have gone unanswered for
  // service_timeout, tells on_lost that the service itself is gone (once, until it answers again).
  void beat_failed(std::chrono::steady_clock::time_point sent, const std::string& error) {
    std::function<void(const LostTask&)> callback;
    LostTask lost;
    {
      std::lock_guard lock(mu);
      if (!failing_since) failing_since = sent;
      const auto silent = std::chrono::steady_clock::now() - *failing_since;
      if (service_reported || silent <= options.service_timeout) return;
      service_reported = true;
      lost = {"coordination service at " + address, "no heartbeat answered for " + seconds(silent) +
                                                        " (service timeout " + seconds(options.service_timeout) +
                                                        "): " + error};
      callback = on_lost;
    }
    if (callback) callback(lost);
  }

  void barrier(BarrierRequest request, milliseconds timeout) {
    request.set_task(task);
    request.set_timeout_ms(std::min(timeout, kMaxWait).count());
    const auto response = call(&Coordination::Stub::Barrier, "Barrier",
                               "barrier '" + request.barrier_id() + "' as " + task, request, waiting_deadline(timeout));
    switch (response.outcome()) {
      case BarrierResponse::PASSED:
        return;
      case BarrierResponse::TIMED_OUT:
        STRATA_THROW(Timeout, response.message() << " (coordination service at " << address << ")");
      case BarrierResponse::TASK_LOST:
        STRATA_THROW(Unavailable, response.message() << " (coordination service at " << address << ")");
      default:
        STRATA_THROW(InvalidArgument, response.message() << " (coordination service at " << address << ")");
    }
  }
};

CoordinationClient::CoordinationClient(const std::string& address, const std::string& task, Options options)
    : comm::Store(options.store_timeout), impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(!task.empty(), InvalidArgument, "coordination client for " << address << ": the task has no name");
  impl_->address = address;
  impl_->task = task;
  impl_->options = options;
  impl_->incarnation = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);               // talk to the chief directly, whatever http_proxy says
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);  // find a service that comes up late quickly
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  const std::shared_ptr<const JobCredentials> credentials =
      options.credentials ? options.credentials : process_job_credentials();
  impl_->channel = grpc::CreateCustomChannel(
      address, channel_credentials(*credentials, address, "the coordination service"), args);
  const std::string job_id = credentials->job_id();
  impl_->key_prefix = job_id.empty() ? "" : "job-" + job_id + "/";
  const auto start = std::chrono::steady_clock::now();
  if (!impl_->channel->WaitForConnected(std::chrono::system_clock::now() + options.connect_timeout)) {
    const auto tried = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    STRATA_THROW(Unavailable, "coordination client " << task << ": no coordination service answered at " << address
                                                     << " within " << tried.count() << " ms (connect timeout "
                                                     << options.connect_timeout.count()
                                                     << " ms); is the chief up and is that its address?");
  }
  impl_->stub = Coordination::NewStub(impl_->channel);
}

CoordinationClient::~CoordinationClient() { stop_heartbeats(); }

void CoordinationClient::set(const std::string& key, const std::string& value) {
  SetRequest request;
  request.set_key(impl_->key_prefix + key);
  request.set_value(value);
  impl_->call(&Coordination::Stub::Set, "Set", "key '" + key + "'", request, impl_->options.rpc_timeout);
}

std::string CoordinationClient::get(const std::string& key) {
  GetRequest request;
  request.set_key(impl_->key_prefix + key);
  request.set_wait_ms(std::min(timeout(), kMaxWait).count());
  auto response =
      impl_->call(&Coordination::Stub::Get, "Get", "key '" + key + "'", request, impl_->waiting_deadline(timeout()));
  STRATA_CHECK(response.found(), Timeout,
               "coordination Get of key '" << key << "' timed out: the key was not set within " << timeout().count()
                                           << " ms at the coordination service at " << impl_->address);
  return std::move(*response.mutable_value());
}

int64_t CoordinationClient::add(const std::string& key, int64_t delta) {
  AddRequest request;
  request.set_key(impl_->key_prefix + key);
  request.set_delta(delta);
  return impl_->call(&Coordination::Stub::Add, "Add", "key '" + key + "'", request, impl_->options.rpc_timeout).value();
}

std::string CoordinationClient::compare_set(const std::string& key, const std::string& expected,
                                            const std::string& desired) {
  CompareSetRequest request;
  request.set_key(impl_->key_prefix + key);
  request.set_expected(expected);
  request.set_desired(desired);
  auto response = impl_->call(&Coordination::Stub::CompareSet, "CompareSet", "key '" + key + "'", request,
                              impl_->options.rpc_timeout);
  return std::move(*response.mutable_value());
}

bool CoordinationClient::check(const std::vector<std::string>& keys) {
  CheckRequest request;
  for (const auto& k : keys) request.add_keys(impl_->key_prefix + k);
  return impl_->call(&Coordination::Stub::Check, "Check", "keys " + quoted(keys), request, impl_->options.rpc_timeout)
      .all_present();
}

void CoordinationClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  WaitRequest request;
  for (const auto& k : keys) request.add_keys(impl_->key_prefix + k);
  request.set_wait_ms(std::min(timeout, kMaxWait).count());
  const auto response =
      impl_->call(&Coordination::Stub::Wait, "Wait", "keys " + quoted(keys), request, impl_->waiting_deadline(timeout));
  if (response.missing().empty()) return;
  std::vector<std::string> missing;
  for (const std::string& k : response.missing()) missing.push_back(k.substr(impl_->key_prefix.size()));
  STRATA_THROW(Timeout, "coordination Wait timed out after " << timeout.count() << " ms: keys " << quoted(missing)
                                                             << " not set at the coordination service at "
                                                             << impl_->address);
}

bool CoordinationClient::delete_key(const std::string& key) {
  DeleteRequest request;
  request.set_key(impl_->key_prefix + key);
  return impl_->call(&Coordination::Stub::Delete, "Delete", "key '" + key + "'", request, impl_->options.rpc_timeout)
      .existed();
}

int64_t CoordinationClient::num_keys() { return num_keys_with_prefix(""); }

int64_t CoordinationClient::num_keys_with_prefix(const std::string& prefix) {
  NumKeysRequest request;
  request.set_prefix(impl_->key_prefix + prefix);
  return impl_
      ->call(&Coordination::Stub::NumKeys, "NumKeys", prefix.empty() ? "" : "prefix '" + prefix + "'", request,
             impl_->options.rpc_timeout)
      .num_keys();
}

void CoordinationClient::barrier(const std::string& id, const std::vector<std::string>& tasks, milliseconds timeout) {
  STRATA_CHECK(!tasks.empty(), InvalidArgument, "barrier '" << id << "': no participating tasks");
  BarrierRequest request;
  request.set_barrier_id(impl_->key_prefix + id);
  for (const auto& t : tasks) request.add_tasks(t);
  impl_->barrier(std::move(request), timeout);
}

void CoordinationClient::barrier(const std::string& id, int num_tasks, milliseconds timeout) {
  STRATA_CHECK(num_tasks > 0, InvalidArgument, "barrier '" << id << "': num_tasks must be positive, got " << num_tasks);
  BarrierRequest request;
  request.set_barrier_id(impl_->key_prefix + id);
  request.set_num_tasks(num_tasks);
  impl_->barrier(std::move(request), timeout);
}

void CoordinationClient::start_heartbeats(milliseconds interval) {
  STRATA_CHECK(!impl_->heartbeat.joinable(), InvalidArgument,
               "coordination client " << impl_->task << ": heartbeats already running");
  STRATA_CHECK(interval > milliseconds(0), InvalidArgument,
               "coordination client " << impl_->task << ": heartbeat interval must be positive");
  impl_->beat();  // registers the task now; an unreachable service is an error here, not later
  {
    std::lock_guard lock(impl_->mu);
    impl_->heartbeat_stop = false;
    impl_->service_reported = false;
  }
  impl_->heartbeat = std::thread([impl = impl_.get(), interval] {
    std::unique_lock lock(impl->mu);
    while (!impl->cv.wait_for(lock, interval, [impl] { return impl->heartbeat_stop; })) {
      lock.unlock();
      const auto sent = std::chrono::steady_clock::now();
      try {
        impl->beat();
      } catch (const Error& e) {
        impl->beat_failed(sent, e.what());  // keep beating: the service may come back
      }
      lock.lock();
    }
  });
}

void CoordinationClient::stop_heartbeats() {
  if (!impl_->heartbeat.joinable()) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->heartbeat_stop = true;
  }
  impl_->cv.notify_all();
  impl_->heartbeat.join();
}

void CoordinationClient::disconnect() {
  stop_heartbeats();
  DisconnectRequest request;
  request.set_task(impl_->task);
  request.set_incarnation(impl_->incarnation);
  impl_->call(&Coordination::Stub::Disconnect, "Disconnect", "task " + impl_->task, request,
              impl_->options.rpc_timeout);
}

void CoordinationClient::set_on_lost(std::function<void(const LostTask&)> on_lost) {
  std::lock_guard lock(impl_->mu);
  impl_->on_lost = std::move(on_lost);
}

std::vector<LostTask> CoordinationClient::lost_tasks() {
  return from_proto(impl_
                        ->call(&Coordination::Stub::GetLostTasks, "GetLostTasks", "", GetLostTasksRequest(),
                               impl_->options.rpc_timeout)
                        .lost());
}

void CoordinationClient::check_peers() {
  const auto lost = lost_tasks();
  STRATA_CHECK(lost.empty(), Unavailable,
               "the coordination service at " << impl_->address << " declared task(s) lost: " << describe(lost));
}

const std::string& CoordinationClient::address() const { return impl_->address; }
const std::string& CoordinationClient::task() const { return impl_->task; }

}  // namespace strata::cluster
