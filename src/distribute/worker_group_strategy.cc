// WorkerGroupStrategy (strata/distribute/worker_group_strategy.h): one replica per worker over a WorkerGroup.
// Thread-safety: one driving thread.
#include "strata/distribute/worker_group_strategy.h"

#include "distribute/replica_collectives.h"

namespace strata::distribute {

WorkerGroupStrategy::WorkerGroupStrategy() : Strategy({"/cpu:0"}) {}

WorkerGroupStrategy::WorkerGroupStrategy(const cluster::TaskInfo& task, CommunicationOptions communication,
                                         std::string prefix, const std::string& strategy)
    : Strategy({"/cpu:0"}), communication_(std::move(communication)) {
  // (Its replica is on the host, and nccl all-reduces GPU tensors only: GPU workers are MultiWorkerMirrored's.)
  STRATA_CHECK(communication_.implementation != "nccl" && communication_.device == "cpu", InvalidArgument,
               strategy << ": runs one CPU replica per worker; communication '" << communication_.implementation
                        << "' on device '" << communication_.device
                        << "' is for MultiWorkerMirroredStrategy's GPU workers (use 'auto', 'ring' or 'mpi')");
  if (task.num_workers > 1) {
    group_ = cluster::WorkerGroup::init(task, worker_group_options(communication_, std::move(prefix), strategy));
  }
}

WorkerGroupStrategy::~WorkerGroupStrategy() = default;

Variable WorkerGroupStrategy::create_variable(const Tensor& initial_value, const VariableOptions& options) {
  Tensor value = initial_value.clone();
  broadcast_from_chief({value});
  return make_distributed_variable({value}, options, id());
}

std::vector<double> WorkerGroupStrategy::sum_across_workers(const std::vector<double>& values) const {
  return group_ ? detail::all_reduce_numbers(group_->communicator(), values) : values;
}

void WorkerGroupStrategy::broadcast_from_chief(const std::vector<Tensor>& tensors) const {
  if (group_ && !tensors.empty()) group_->communicator().broadcast(tensors, 0)->wait();
}

std::vector<std::string> WorkerGroupStrategy::all_gather_across_workers(const std::string& bytes) const {
  return group_ ? detail::all_gather_bytes(group_->communicator(), bytes) : std::vector<std::string>{bytes};
}

}  // namespace strata::distribute
