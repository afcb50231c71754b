// WorkerGroupStrategy: the base of strategies that run one replica per worker process over a cluster::WorkerGroup
// (PipelineStrategy's pipeline replicas, LocalSGDStrategy): the group made from the cluster and CommunicationOptions,
// variables starting from the chief's values, and the cross-worker exchanges fit needs (metric sums, the chief's
// state, every worker's bytes). With a cluster of one worker there is no group and each exchange is the value itself.
// Thread-safety: as every strategy, driven by one thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/cluster/cluster_resolver.h"
#include "strata/cluster/worker_group.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/strategy.h"

namespace strata::distribute {

class WorkerGroupStrategy : public Strategy {
 public:
  ~WorkerGroupStrategy() override;
  int num_workers() const override { return group_ ? group_->size() : 1; }
  int worker_index() const override { return group_ ? group_->rank() : 0; }
  // On several workers: the chief's initial value on every worker.
  Variable create_variable(const Tensor& initial_value, const VariableOptions& options) override;
  std::vector<double> sum_across_workers(const std::vector<double>& values) const override;
  void broadcast_from_chief(const std::vector<Tensor>& tensors) const override;
  std::vector<std::string> all_gather_across_workers(const std::string& bytes) const override;

  // The group across the workers; null on one worker.
  cluster::WorkerGroup* worker_group() const { return group_.get(); }
  const CommunicationOptions& communication_options() const { return communication_; }

 protected:
  // One worker, no group.
  WorkerGroupStrategy();
  // The group of `task`'s cluster when it has more than one worker (blocks until every worker connected), its
  // communicator's keys under `prefix`; `strategy` names it in a blocked-by-lost-task report.
  WorkerGroupStrategy(const cluster::TaskInfo& task, CommunicationOptions communication, std::string prefix,
                      const std::string& strategy);

 private:
  CommunicationOptions communication_;
  std::unique_ptr<cluster::WorkerGroup> group_;
};

}  // namespace strata::distribute
