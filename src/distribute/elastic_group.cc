// ElasticGroup (elastic_group.h): membership epochs agreed by compare-and-set on the coordination service, the
// members' barrier and Gloo communicator per epoch, and the per-step commit vote.
// Thread-safety: one driving thread.
#include "distribute/elastic_group.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <sstream>
#include <thread>

#include "strata/cluster/coordination.h"
#include "strata/comm/backends.h"
#include "strata/error.h"

namespace strata::distribute::detail {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// How often a waiting member looks again for a decision or a lost member.
constexpr auto kPoll = 50ms;
// A regroup waits the heartbeat timeout plus this for the failed member to be declared lost.
constexpr auto kDeclareMargin = 2s;
// Connecting a group's mesh may take at least this long before it fails (see connect()).
constexpr std::chrono::milliseconds kMinConnectTime = 10s;
// The job's current membership epoch (set by its rank 0), and a task's request to join.
const std::string kEpochKey = "elastic/epoch";
const std::string kJoinPrefix = "elastic/join/";
const std::string kRestartedPrefix = "elastic/restarted/";
constexpr const char* kCommit = "commit";
constexpr const char* kCommitJoin = "commit+join";

std::string joined(const std::vector<std::string>& names, const char* separator = ",") {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : separator) + n;
  return out;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    if (!name.empty()) out.push_back(name);
  }
  return out;
}

// The epoch number stored under kEpochKey. Any task of the job can write the key, so a value that is not a number (or
// one that would overflow the next epoch) is DataCorrupt naming it, not std::stoll's invalid_argument.
int64_t parse_epoch(const std::string& value) {
  int64_t epoch = -1;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), epoch);
  STRATA_CHECK(ec == std::errc() && end == value.data() + value.size() && epoch >= 0 &&
                   epoch < std::numeric_limits<int64_t>::max(),
               DataCorrupt,
               "elastic group: the coordination service's '" << kEpochKey << "' holds '" << value
                                                             << "', not a membership epoch");
  return epoch;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

ElasticGroup::ElasticGroup(std::shared_ptr<cluster::CoordinationClient> client, std::vector<std::string> tasks,
                           std::string self, Options options)
    : client_(std::move(client)), tasks_(std::move(tasks)), self_(std::move(self)), options_(std::move(options)) {
  STRATA_CHECK(contains(tasks_, self_), InvalidArgument,
               "elastic group: task " << self_ << " is not one of the job's workers (" << joined(tasks_, ", ") << ")");
  STRATA_CHECK(options_.min_workers >= 1 && options_.min_workers <= static_cast<int>(tasks_.size()), InvalidArgument,
               "elastic group: min_workers " << options_.min_workers << " must be in [1, " << tasks_.size()
                                             << "] (the job's workers)");
  STRATA_CHECK(comm::backend_traits(options_.backend).can_rebuild, InvalidArgument,
               "elastic group: backend '" << options_.backend << "' cannot make a new group after losing a member; "
                                          "elastic training needs one that can (gloo)");
}

ElasticGroup::~ElasticGroup() = default;

std::shared_ptr<comm::Communicator> ElasticGroup::start() {
  step_ = 0;
  join_pending_ = false;
  if (client_->check({kEpochKey})) {  // the job runs already: this task was restarted
    joining_ = true;
    members_.clear();
    client_->set(kRestartedPrefix + self_, "1");  // its old incarnation is gone, whatever the heartbeats say
    return nullptr;
  }
  epoch_ = 0;
  members_ = tasks_;
  rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), self_) - members_.begin());
  client_->barrier("elastic/e0/ready", members_, options_.timeout);  // every worker started (it may take a while)
  connect();
  publish_epoch();
  return comm_;
}

void ElasticGroup::publish_epoch() {
  if (rank_ == 0) client_->set(kEpochKey, std::to_string(epoch_));
}

std::vector<std::string> ElasticGroup::pending_joiners() const {
  std::vector<std::string> out;
  for (const std::string& t : tasks_) {
    if (!contains(members_, t) && client_->check({kJoinPrefix + t})) out.push_back(t);
  }
  return out;
}

bool ElasticGroup::enter_next_epoch(const std::vector<std::string>& next) {
  members_ = next;
  rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), self_) - members_.begin());
  step_ = 0;
  join_pending_ = false;
  try {
    // A member lost before it arrives makes every survivor go on to the next epoch without it.
    client_->barrier("elastic/e" + std::to_string(epoch_) + "/ready", members_,
                     options_.timeout + options_.heartbeat_timeout);
    connect();
  } catch (const Unavailable&) {
    return false;
  } catch (const Timeout&) {  // a member died between the barrier and the rendezvous
    return false;
  }
  publish_epoch();
  return true;
}

std::shared_ptr<comm::Communicator> ElasticGroup::join() {
  STRATA_CHECK(joining_, InvalidArgument, "elastic group: " << self_ << " is a member already");
  const auto start = Clock::now();
  client_->set(kJoinPrefix + self_, "1");
  int64_t next = parse_epoch(client_->get(kEpochKey)) + 1;
  for (;;) {
    const std::string key = "elastic/e" + std::to_string(next) + "/members";
    client_->wait({key},
                  std::max<std::chrono::milliseconds>(
                      options_.timeout - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start),
                      std::chrono::milliseconds(1)));
    const std::vector<std::string> members = split(client_->get(key));
    epoch_ = next++;
    if (!contains(members, self_)) continue;  // an epoch formed without this task (e.g. after a loss): the next
    if (!enter_next_epoch(members)) continue;
    client_->delete_key(kJoinPrefix + self_);
    client_->delete_key(kRestartedPrefix + self_);
    joining_ = false;
    last_change_ = MembershipChange{.epoch = epoch_,
                                    .left = {},
                                    .joined = {self_},
                                    .members = members_,
                                    .seconds = std::chrono::duration<double>(Clock::now() - start).count()};
    return comm_;
  }
}

std::shared_ptr<comm::Communicator> ElasticGroup::admit() {
  STRATA_CHECK(join_pending_, InvalidArgument, "elastic group: no joiner to admit");
  const auto start = Clock::now();
  const std::vector<std::string> before = members_;
  if (comm_) comm_->abort("elastic group: admitting joiners after membership epoch " + std::to_string(epoch_));
  comm_.reset();
  std::vector<std::string> proposal;
  const std::vector<std::string> joiners = pending_joiners();
  for (const std::string& t : tasks_) {
    if (contains(members_, t) || contains(joiners, t)) proposal.push_back(t);
  }
  const std::string key = "elastic/e" + std::to_string(epoch_ + 1) + "/members";
  const std::vector<std::string> next = split(client_->compare_set(key, "", joined(proposal)));
  ++epoch_;
  if (!enter_next_epoch(next)) return regroup();  // a member or joiner was lost meanwhile
  std::vector<std::string> joined_now;
  for (const std::string& m : members_) {
    if (!contains(before, m)) joined_now.push_back(m);
  }
  last_change_ = MembershipChange{.epoch = epoch_,
                                  .left = {},
                                  .joined = joined_now,
                                  .members = members_,
                                  .seconds = std::chrono::duration<double>(Clock::now() - start).count()};
  return comm_;
}

std::shared_ptr<comm::Communicator> ElasticGroup::connect() {
  // Each collective is bounded by the time the service takes to declare a member lost: Gloo cannot
  // interrupt a collective waiting on a dead peer's part (a send waits for the peer's matching receive whether or
  // not its connection closed), so the survivors' collectives must end by themselves that soon.
  // Connecting is not bounded so tightly: a loaded machine may take more than a 1 s heartbeat timeout to form the
  // mesh, and a member lost meanwhile is declared within the heartbeat timeout anyway.
  const auto bound = std::min(options_.timeout, options_.heartbeat_timeout);
  const auto connect_bound = std::min(options_.timeout, std::max(options_.heartbeat_timeout, kMinConnectTime));
  comm_ = comm::make_communicator(options_.backend, {.store = client_,
                                                    .rank = rank_,
                                                    .size = size(),
                                                    .timeout = bound,
                                                    .connect_timeout = connect_bound,
                                                    .hostname = options_.hostname,
                                                    .prefix = "mwms/e" + std::to_string(epoch_)});
  return comm_;
}

std::vector<std::string> ElasticGroup::lost_members() const {
  std::vector<std::string> lost;
  for (const cluster::LostTask& t : client_->lost_tasks()) {
    if (contains(members_, t.task) && !contains(lost, t.task)) lost.push_back(t.task);
  }
  // A member restarted before the service declared it lost (its new incarnation's heartbeats replace the old one's)
  // said so itself.
  for (const std::string& m : members_) {
    if (!contains(lost, m) && client_->check({kRestartedPrefix + m})) lost.push_back(m);
  }
  return lost;
}

std::shared_ptr<comm::Communicator> ElasticGroup::regroup() {
  const auto start = Clock::now();
  const std::vector<std::string> before = members_;
  if (comm_) comm_->abort("elastic regroup after membership epoch " + std::to_string(epoch_));
  comm_.reset();
  for (;;) {
    // Every survivor proposes the members not declared lost; the first proposal stored is the next epoch's. A
    // survivor that comes late (its collective was still blocked on the failed member) finds it made already.
    const std::string key = "elastic/e" + std::to_string(epoch_ + 1) + "/members";
    const auto declared_by = Clock::now() + options_.heartbeat_timeout + kDeclareMargin;
    std::vector<std::string> lost = lost_members();
    while (lost.empty() && !client_->check({key}) && Clock::now() < declared_by) {
      std::this_thread::sleep_for(kPoll);
      lost = lost_members();
    }
    std::vector<std::string> proposal;
    for (const std::string& m : members_) {
      if (!contains(lost, m)) proposal.push_back(m);
    }
    const std::vector<std::string> next = split(client_->compare_set(key, "", joined(proposal)));
    ++epoch_;
    std::vector<std::string> gone;
    for (const std::string& m : before) {
      if (!contains(next, m)) gone.push_back(m);
    }
    STRATA_CHECK(contains(next, self_), Unavailable,
                 "elastic training: this task (" << self_ << ") is no longer a member of the group (membership epoch "
                                                 << epoch_ << ": " << joined(next, ", ")
                                                 << "): the others declared it lost; it stops");
    STRATA_CHECK(static_cast<int>(next.size()) >= options_.min_workers, Unavailable,
                 "elastic training: " << next.size() << " of " << tasks_.size() << " workers remain, fewer than "
                                      << "min_workers " << options_.min_workers << "; lost: " << joined(gone, ", ")
                                      << " (a relaunch resumes from the last backup)");
    if (!enter_next_epoch(next)) continue;
    last_change_ = MembershipChange{.epoch = epoch_,
                                    .left = gone,
                                    .joined = {},
                                    .members = members_,
                                    .seconds = std::chrono::duration<double>(Clock::now() - start).count()};
    return comm_;
  }
}

bool ElasticGroup::should_commit(bool ok) {
  const std::string base = "elastic/e" + std::to_string(epoch_) + "/s";
  const std::string step = base + std::to_string(step_);
  const std::string decision = step + "/decision";
  if (rank_ == 0 && step_ >= 2) {  // every member read decision k - 2 before it voted on k - 1
    const std::string old = base + std::to_string(step_ - 2);
    client_->delete_key(old + "/ok");
    client_->delete_key(old + "/decision");
  }
  ++step_;
  // "commit", "commit+join" (commit, then admit the tasks waiting to join) or "abort".
  const auto commits = [this](const std::string& value) {
    join_pending_ = value == kCommitJoin;
    return value == kCommit || value == kCommitJoin;
  };
  if (!ok) return commits(client_->compare_set(decision, "", "abort"));
  if (client_->add(step + "/ok", 1) == size()) {
    return commits(client_->compare_set(decision, "", pending_joiners().empty() ? kCommit : kCommitJoin));
  }
  const auto deadline = Clock::now() + options_.timeout;
  for (;;) {
    try {
      client_->wait({decision}, kPoll);
      return commits(client_->get(decision));
    } catch (const Timeout&) {
    }
    if (!lost_members().empty() || Clock::now() >= deadline) {
      return commits(client_->compare_set(decision, "", "abort"));
    }
  }
}

}  // namespace strata::distribute::detail
