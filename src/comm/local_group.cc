// new_group of the local backend (torch.distributed.new_group): a sub-group of some of a group's ranks, with
// its own barrier, queues and workers, sharing nothing else with its parent, so sub-groups nest.
//
// The members find each other through the parent's registry: a member's k-th call for a set of ranks joins
// the k-th sub-group of those ranks, created by whichever member comes first. Non-members get nullptr and
// leave no trace, so they may call it or not.
// Thread-safety: the registry is guarded by LocalGroup::subgroups_mu; new_group_calls_ belongs to the rank's
// issuing thread.
#include <algorithm>
#include <sstream>

#include "comm/local_internal.h"

namespace strata::comm::local_detail {

std::shared_ptr<Communicator> LocalCommunicator::new_group(std::vector<int> ranks) {
  auto list = [&] {
    std::ostringstream out;
    out << "[";
    for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
    return out.str() + "]";
  };
  std::sort(ranks.begin(), ranks.end());
  STRATA_CHECK(!ranks.empty(), InvalidArgument, "new_group on rank " << rank_ << ": no ranks given");
  STRATA_CHECK(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), InvalidArgument,
               "new_group on rank " << rank_ << ": ranks " << list() << " name a rank twice");
  STRATA_CHECK(ranks.front() >= 0 && ranks.back() < group_->size, InvalidArgument,
               "new_group on rank " << rank_ << ": ranks " << list() << " are not all ranks of " << group_->name);
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end()) return nullptr;
  const int k = new_group_calls_[ranks]++;
  std::shared_ptr<LocalGroup> sub;
  {
    std::lock_guard<std::mutex> lock(group_->subgroups_mu);
    std::shared_ptr<LocalGroup>& entry = group_->subgroups[{ranks, k}];
    if (!entry) {
      std::ostringstream name;
      name << "local group of " << ranks.size() << " (ranks";
      for (size_t i = 0; i < ranks.size(); ++i) name << (i ? ", " : " ") << ranks[i];
      name << " of " << group_->name << ")";
      entry = std::make_shared<LocalGroup>(static_cast<int>(ranks.size()), group_->options, name.str());
    }
    sub = entry;
  }
  return std::make_shared<LocalCommunicator>(std::move(sub), static_cast<int>(me - ranks.begin()));
}

}  // namespace strata::comm::local_detail
