// WorkerGroup (strata/cluster/worker_group.h): the coordination service, client, heartbeats and a communicator from
// the backend registry, for a job's computing tasks.
// Thread-safety: see the header; the lost-task handler runs on the client's heartbeat thread.
#include "strata/cluster/worker_group.h"

#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "strata/comm/backends.h"
#include "strata/error.h"

namespace strata::cluster {

namespace {
// How long after a task is declared lost a process still blocked on it is reported blocked.
constexpr std::chrono::seconds kBlockedDelay{1};
// How long the tasks wait for each other after comparing fingerprints.
constexpr std::chrono::seconds kFingerprintBarrierTimeout{10};
// The rendezvous' bound when none is given (docs/cluster.md), unless the collectives' timeout is shorter.
constexpr std::chrono::seconds kDefaultRendezvousTimeout{60};

using Clock = std::chrono::steady_clock;

// "12 s", rounded to the nearest second ("1.5 s" under 10 s).
std::string seconds_text(Clock::duration d) {
  const double seconds = std::chrono::duration<double>(d).count();
  std::ostringstream out;
  out.precision(seconds < 10 ? 1 : 0);
  out << std::fixed << (seconds < 10 ? std::round(seconds * 10) / 10 : std::round(seconds)) << " s";
  return out.str();
}

// "worker:1" -> its address in the cluster ("" when the cluster does not list it).
std::string address_of(const TaskInfo& task, const std::string& name) {
  const size_t colon = name.find(':');
  const auto it = task.cluster.jobs.find(name.substr(0, colon));
  if (it == task.cluster.jobs.end()) return "";
  const size_t index = std::stoul(name.substr(colon + 1));
  return index < it->second.size() ? it->second[index] : "";
}
}  // namespace

std::unique_ptr<WorkerGroup> WorkerGroup::init(const TaskInfo& task, WorkerGroupOptions options) {
  return std::unique_ptr<WorkerGroup>(new WorkerGroup(task, std::move(options)));
}

WorkerGroup::WorkerGroup(const TaskInfo& task, WorkerGroupOptions options)
    : task_(task), options_(std::move(options)) {
  STRATA_CHECK(
      options_.timeout.count() > 0 && options_.heartbeat_timeout.count() > 0 && options_.heartbeat_interval.count() > 0,
      InvalidArgument, "worker group: timeouts and the heartbeat interval must be positive");
  STRATA_CHECK(task_.id_in_cluster.has_value() && task_.task_type != "evaluator", InvalidArgument,
               "worker group: its members are the chief and the workers; this process is task " << task_.name());
  STRATA_CHECK(task_.num_workers > 1, InvalidArgument,
               "worker group: the cluster of task " << task_.name() << " has one worker; nothing to group");
  rank_ = static_cast<int>(*task_.id_in_cluster);
  size_ = static_cast<int>(task_.num_workers);
  backend_ = options_.backend == "auto" ? (task_.source == Source::kMpi ? "mpi" : "gloo") : options_.backend;
  const comm::BackendTraits traits = comm::backend_traits(backend_);  // InvalidArgument naming the registered ones
  if (!traits.needs_store) {
    STRATA_CHECK(!options_.without_communicator, InvalidArgument,
                 "worker group: backend '" << backend_ << "' has no store to make further groups through");
    comm_ = comm::make_communicator(backend_, {.rank = rank_, .size = size_, .timeout = options_.timeout});
    return;
  }
  STRATA_CHECK(!task_.coordinator_address.empty(), InvalidArgument,
               "worker group: the cluster (" << source_name(task_.source) << ") names no coordinator address for the "
                                             << backend_ << " backend; under mpirun use backend 'mpi' or 'auto'");
  connect_through_service();
}

void WorkerGroup::connect_through_service() {
  if (task_.hosts_coordinator) {
    service_ = std::make_unique<CoordinationService>();
    service_->start(task_.coordinator_address,
                    {.heartbeat_timeout = options_.heartbeat_timeout, .tasks = member_tasks()});
  }
  const Clock::time_point deadline = Clock::now() + rendezvous_timeout();
  connect_client(deadline);
  client_->start_heartbeats(options_.heartbeat_interval);
  publish_fingerprint();
  if (options_.without_communicator) {  // the caller's groups rendezvous their own way (elastic epochs)
    compare_fingerprints(/*every_member_arrived=*/false);
    return;
  }
  wait_for_members(deadline);
  compare_fingerprints(/*every_member_arrived=*/true);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  comm_ = comm::make_communicator(backend_, {.store = client_,
                                             .rank = rank_,
                                             .size = size_,
                                             .timeout = options_.timeout,
                                             .connect_timeout = std::max(left, std::chrono::milliseconds(1000)),
                                             .hostname = hostname(),
                                             .prefix = options_.prefix,
                                             .device = options_.device});
  // A task declared lost ends the others' pending and later collectives at once, naming it; one already blocked on
  // the dead peer is reported after kBlockedDelay if the group still exists (see the header).
  std::weak_ptr<comm::Communicator> weak = comm_;
  client_->set_on_lost([weak, alive = alive_, blocked = options_.on_blocked_by_lost_task](const LostTask& lost) {
    const std::string reason = "task " + lost.task + " was lost (" + lost.reason + ")";
    if (auto comm = weak.lock()) comm->abort(reason);
    if (!blocked) return;
    std::thread([alive, reason, blocked] {
      std::this_thread::sleep_for(kBlockedDelay);
      if (alive->load()) blocked(reason);
    }).detach();
  });
}

std::chrono::milliseconds WorkerGroup::rendezvous_timeout() const {
  if (options_.rendezvous_timeout.count() > 0) return options_.rendezvous_timeout;
  return std::min<std::chrono::milliseconds>(kDefaultRendezvousTimeout, options_.timeout);
}

void WorkerGroup::report_waiting(const std::string& message) const {
  if (options_.on_waiting) {
    options_.on_waiting(message);
  } else {
    std::fprintf(stderr, "strata: %s: %s\n", task_.name().c_str(), message.c_str());
  }
}

void WorkerGroup::connect_client(Clock::time_point deadline) {
  const Clock::time_point start = Clock::now();
  const std::string host = member_tasks().front();  // the chief, or worker 0: the task that hosts the service
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      client_ = std::make_shared<CoordinationClient>(
          task_.coordinator_address, task_.name(),
          CoordinationClient::Options{.connect_timeout = std::max(std::min(left, options_.progress_every),
                                                                  std::chrono::milliseconds(1)),
                                      .store_timeout = options_.timeout,
                                      .service_timeout = options_.heartbeat_timeout});
      return;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnavailable && e.code() != ErrorCode::kDeadlineExceeded) throw;
      const std::string waiting = "waiting for the coordination service at " + task_.coordinator_address + " (" +
                                  host + "): no answer after " + seconds_text(Clock::now() - start) + " of " +
                                  seconds_text(rendezvous_timeout());
      STRATA_CHECK(Clock::now() < deadline, Timeout,
                   "worker group: " << waiting << " (rendezvous timeout); is " << host << " running?");
      report_waiting(waiting);
    }
  }
}

void WorkerGroup::wait_for_members(Clock::time_point deadline) {
  const Clock::time_point start = Clock::now();
  const std::string prefix = options_.prefix + "/arrived/";
  client_->set(prefix + task_.name(), task_.address);
  std::vector<std::string> keys;
  for (const std::string& member : member_tasks()) keys.push_back(prefix + member);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      client_->wait(keys, std::max(std::min(left, options_.progress_every), std::chrono::milliseconds(1)));
      return;
    } catch (const Timeout&) {
      std::string missing;
      const std::vector<std::string> members = member_tasks();
      for (size_t rank = 0; rank < members.size(); ++rank) {
        if (client_->check({prefix + members[rank]})) continue;
        const std::string address = address_of(task_, members[rank]);
        missing += (missing.empty() ? "" : ", ") + members[rank] + " (rank " + std::to_string(rank) + ")" +
                   (address.empty() ? "" : " at " + address);
      }
      const std::string waiting =
          "waiting for " + missing + ": not here after " + seconds_text(Clock::now() - start) + " of " +
          seconds_text(rendezvous_timeout());
      STRATA_CHECK(Clock::now() < deadline, Timeout, "worker group: " << waiting << " (rendezvous timeout)");
      report_waiting(waiting);
    }
  }
}

void WorkerGroup::publish_fingerprint() {
  if (options_.fingerprint.empty()) return;
  client_->set(options_.prefix + "/fingerprint/" + task_.name(), nlohmann::json(options_.fingerprint).dump());
}

void WorkerGroup::compare_fingerprints(bool every_member_arrived) {
  if (options_.fingerprint.empty()) return;
  // "value" shortened to what fits in a line.
  const auto shown = [](const std::string& value) {
    constexpr size_t kMax = 120;
    return value.size() <= kMax ? value : value.substr(0, kMax) + "...";
  };
  std::vector<std::string> differences;
  for (const std::string& member : member_tasks()) {
    const std::string key = options_.prefix + "/fingerprint/" + member;
    if (member == task_.name() || (!every_member_arrived && !client_->check({key}))) continue;
    std::map<std::string, std::string> theirs;
    try {
      theirs = nlohmann::json::parse(client_->get(key)).get<std::map<std::string, std::string>>();
    } catch (const nlohmann::json::exception&) {
      STRATA_THROW(DataCorrupt, "worker group: the fingerprint " << member << " published is not a JSON object");
    }
    std::set<std::string> keys;
    for (const auto& [k, v] : options_.fingerprint) keys.insert(k);
    for (const auto& [k, v] : theirs) keys.insert(k);
    for (const std::string& k : keys) {
      const auto mine = options_.fingerprint.find(k), other = theirs.find(k);
      const bool i_have = mine != options_.fingerprint.end(), they_have = other != theirs.end();
      if (i_have && they_have && mine->second == other->second) continue;  // whole values compared, shown shortened
      differences.push_back(member + " has " + (they_have ? k + " " + shown(other->second) : "no " + k) + ", " +
                            task_.name() + " has " + (i_have ? shown(mine->second) : "none"));
    }
  }
  if (every_member_arrived) {
    // Every task has read the others' before any leaves (the task serving the store would take it along, and the
    // others would see the service gone instead of the difference).
    try {
      client_->barrier(options_.prefix + "/fingerprints-compared", size_, kFingerprintBarrierTimeout);
    } catch (const Error&) {
      // A task is gone already: it compared (or failed) on its own.
    }
  }
  if (differences.empty()) return;
  std::string text;
  for (const std::string& d : differences) text += (text.empty() ? "" : "; ") + d;
  STRATA_THROW(InvalidArgument, "worker group: the tasks were not given the same job: "
                                    << text << ". Every task of a job must run the same model, optimizer, loss, "
                                               "batch size, data and strategy");
}

WorkerGroup::~WorkerGroup() {
  alive_->store(false);
  if (!client_) return;
  // The task serving the coordination service: at a normal end every task waits (briefly) until all are done with
  // it. Not while an error unwinds: a failed peer would hold this one for the heartbeat timeout.
  if (std::uncaught_exceptions() == 0) {
    try {
      client_->barrier(options_.prefix + "/exit", size_, options_.heartbeat_timeout);
    } catch (const Error&) {
      // A task failed or is gone: nothing to wait for.
    }
  }
  client_->set_on_lost(nullptr);
  try {
    client_->disconnect();
  } catch (const Error&) {
    // The service is gone (the chief ended the job, or died): nobody is left to tell.
  }
}

comm::Communicator& WorkerGroup::communicator() const {
  STRATA_CHECK(comm_ != nullptr, InvalidArgument, "worker group: made without a communicator");
  return *comm_;
}

std::vector<std::string> WorkerGroup::member_tasks() const {
  std::vector<std::string> tasks;
  for (const char* type : {"chief", "worker"}) {
    const int64_t n = task_.cluster.num_tasks(type);
    for (int64_t i = 0; i < n; ++i) tasks.push_back(std::string(type) + ":" + std::to_string(i));
  }
  return tasks;
}

std::string WorkerGroup::hostname() const {
  return task_.address.empty() ? std::string("127.0.0.1") : parse_address(task_.address, task_.name()).host;
}

}  // namespace strata::cluster
