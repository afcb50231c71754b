// WorkerGroup (strata/cluster/worker_group.h): the coordination service, client, heartbeats and a communicator from
// the backend registry, for a job's computing tasks.
// Thread-safety: see the header; the lost-task handler runs on the client's heartbeat thread.
#include "strata/cluster/worker_group.h"

#include <exception>
#include <thread>

#include "strata/comm/backends.h"
#include "strata/error.h"

namespace strata::cluster {

namespace {
// How long after a task is declared lost a process still blocked on it is reported blocked.
constexpr std::chrono::seconds kBlockedDelay{1};
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
  client_ = std::make_shared<CoordinationClient>(
      task_.coordinator_address, task_.name(),
      CoordinationClient::Options{.connect_timeout = options_.timeout,
                                  .store_timeout = options_.timeout,
                                  .service_timeout = options_.heartbeat_timeout});
  client_->start_heartbeats(options_.heartbeat_interval);
  if (options_.without_communicator) return;
  comm_ = comm::make_communicator(backend_, {.store = client_,
                                             .rank = rank_,
                                             .size = size_,
                                             .timeout = options_.timeout,
                                             .hostname = hostname(),
                                             .prefix = options_.prefix});
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
