// ElasticGroup: the members of an elastic MultiWorkerMirroredStrategy's group of workers, agreed through the job's
// coordination service, with the per-step commit vote (torchft's should_commit) and the regrouping after a failure.
//
// Membership epochs: epoch 0 holds every worker; each regroup agrees on the next epoch's members (the last epoch's
// minus the tasks the service declared lost) with a compare-and-set on "elastic/e<E>/members", so every survivor
// takes the same list whoever proposes first; the members meet at a barrier (a member lost before it arrives makes
// the survivors go on to the next epoch without it), then connect a Gloo communicator under the fresh prefix
// "mwms/e<E>". A member's rank is its place in the list (the tasks keep their order: the chief stays rank 0).
//
// Joining: a restarted task finds the job's epoch on the service ("elastic/epoch"), asks to join
// ("elastic/join/<task>"), and waits; the member whose vote completes a step's count sees the request and decides
// "commit+join", so after that step every member admits the joiners into the next epoch (the tasks keep their
// order) and the joiner finds itself in that epoch's members.
//
// The commit vote: after its step's all-reduce every member votes (ok, or failed); the step's decision is one key,
// "elastic/e<E>/s<k>/decision", set once by compare-and-set: "commit" by the member whose ok completes the count,
// "abort" by a member that failed or that sees a member lost before the count completes. Every member reads the
// same decision, so a step is applied everywhere or nowhere, even when the all-reduce completed on some members
// and failed on others.
//
// Thread-safety: one thread (the strategy's driving thread) calls everything.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/comm/communicator.h"
#include "strata/distribute/multi_worker.h"

namespace strata::cluster {
class CoordinationClient;
}

namespace strata::distribute::detail {

class ElasticGroup {
 public:
  struct Options {
    int min_workers = 1;
    // Bounds the start, each regroup's rendezvous and each vote; each collective is bounded by the smaller of this
    // and heartbeat_timeout (a collective waiting on a dead peer cannot be interrupted, see connect()).
    std::chrono::milliseconds timeout{std::chrono::seconds(300)};
    // The service's: a regroup waits this long (plus a margin) for the failed member to be declared lost.
    std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(10)};
    std::string hostname = "127.0.0.1";  // where this task's communicator listens
    // The backend each membership epoch's communicator is made on: one of comm's registry that can rebuild groups
    // (comm::BackendTraits::can_rebuild; InvalidArgument otherwise).
    std::string backend = "gloo";
  };

  // `tasks`: every worker task of the job in rank order ("chief:0", "worker:0", ...); `self` is one of them.
  ElasticGroup(std::shared_ptr<cluster::CoordinationClient> client, std::vector<std::string> tasks, std::string self,
               Options options);
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // Epoch 0, every task: connects its communicator. A task that starts while the job already runs (a restarted
  // worker: the service says which epoch the job is in) joins instead: start returns null and joining() is true
  // until join().
  std::shared_ptr<comm::Communicator> start();
  bool joining() const { return joining_; }
  // A joining task: asks to join and waits (up to the timeout) until the members admit it at a step boundary; then
  // connects the new epoch's communicator.
  std::shared_ptr<comm::Communicator> join();
  // Whether the last committed step's decision asks the members to admit joiners (every member reads the same).
  bool join_pending() const { return join_pending_; }
  // The members, after that step: the next epoch with every task that asked to join, connected.
  std::shared_ptr<comm::Communicator> admit();
  // After a failed or aborted step: agrees on the next epoch with the other survivors and connects its
  // communicator (the old one is aborted first, which frees any member still blocked on it). Unavailable naming
  // the lost tasks when fewer than min_workers remain, or when this task is no longer a member (it was declared
  // lost: e.g. it was stopped longer than the heartbeat timeout).
  std::shared_ptr<comm::Communicator> regroup();
  // This member's vote on the current step; true when the step commits on every member. Each member calls it once
  // per step, in the same order. A member lost before the count completes makes it false.
  bool should_commit(bool ok);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  // The last regroup's change (its seconds: the regroup's own time).
  const MembershipChange& last_change() const { return last_change_; }

 private:
  std::shared_ptr<comm::Communicator> connect();
  // After the members of the next epoch were agreed as `next`: this task's place, the barrier, the communicator;
  // false when a member was lost before the barrier or the rendezvous (the caller moves on to the epoch after).
  bool enter_next_epoch(const std::vector<std::string>& next);
  // The tasks that asked to join and are not members.
  std::vector<std::string> pending_joiners() const;
  // Rank 0 records the epoch the job is in, for tasks that start later.
  void publish_epoch();
  // The members of the current epoch the service has declared lost.
  std::vector<std::string> lost_members() const;

  std::shared_ptr<cluster::CoordinationClient> client_;
  std::vector<std::string> tasks_;
  std::string self_;
  Options options_;
  int64_t epoch_ = 0;
  std::vector<std::string> members_;
  int rank_ = 0;
  int64_t step_ = 0;  // votes taken in this epoch
  bool joining_ = false;
  bool join_pending_ = false;
  std::shared_ptr<comm::Communicator> comm_;
  MembershipChange last_change_;
};

}  // namespace strata::distribute::detail
