// LocalSGDStrategy: for workers joined by a slow link. Each worker takes `sync_every` (H) optimizer steps on its own
// share of the global batches with its own optimizer state, sending nothing; then the workers average their weights
// (one all-reduce of every float32 variable, not one per step). H = 1 with SGD (momentum included: it is linear)
// trains exactly as MultiWorkerMirroredStrategy does. With `outer_nesterov` the average is not taken as it is:
// DiLoCo's outer step treats (weights at the last sync - the average) as a gradient, applied to the weights at the
// last sync by SGD with Nesterov momentum (Douillard et al. 2023, "DiLoCo"). tf.distribute has nothing like it.
//
//   distribute::LocalSGDStrategy strategy({.sync_every = 8});          // the cluster from TF_CONFIG
//   auto scope = strategy.scope();
//   Sequential model({...});
//   model.compile(...);
//   model.fit(train, {.epochs = 2});   // weights averaged every 8 steps and at the end of every epoch
//
// The workers connect as a worker group (strata/cluster/worker_group.h: the coordination service, Gloo or MPI,
// heartbeats), as MultiWorkerMirroredStrategy's do;
// variables start from the chief's values; each worker reads its share of every global batch; the logs are the
// job's (the workers' tracker states summed). Optimizer slots stay each worker's own (as DiLoCo's inner AdamW's).
// A lost worker ends the job as under MultiWorkerMirroredStrategy (no elastic membership here).
//
// Thread-safety: as every strategy, driven by one thread; its step runner trains on fit's thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/cluster/cluster_resolver.h"
#include "strata/distribute/multi_worker.h"
#include "strata/distribute/worker_group_strategy.h"

namespace strata::distribute {

struct LocalSGDOptions {
  // H: local steps between two weight averages (at least 1). The weights are averaged at every epoch's end too.
  int sync_every = 8;
  // DiLoCo's outer optimizer in place of the plain average: SGD with Nesterov momentum on the outer gradient.
  bool outer_nesterov = false;
  float outer_learning_rate = 0.7f;  // DiLoCo's 0.7; 1 with momentum 0 is the plain average
  float outer_momentum = 0.9f;
};

class LocalSGDStrategy final : public WorkerGroupStrategy {
 public:
  // The cluster from the environment (TF_CONFIG, mpirun or torchrun; none: one worker, which never averages).
  explicit LocalSGDStrategy(LocalSGDOptions options = {}, CommunicationOptions communication = {});
  // The cluster as given; blocks until every worker has connected, as MultiWorkerMirroredStrategy's.
  LocalSGDStrategy(LocalSGDOptions options, const cluster::TaskInfo& task, CommunicationOptions communication = {});
  ~LocalSGDStrategy() override;

  std::string name() const override { return "LocalSGDStrategy"; }
  // Local steps on fit's thread, the weights averaged every sync_every steps (src/distribute/local_sgd.cc).
  std::unique_ptr<StepRunner> make_step_runner(TrainingProgram& program) override;

  const LocalSGDOptions& options() const { return options_; }
  // "gloo" or "mpi" across workers, "local" on one.
  std::string backend() const;
  // Weight averages run so far (by every fit under this strategy), and the bytes each worker sent for them.
  int64_t syncs() const { return syncs_; }
  int64_t sync_bytes() const { return sync_bytes_; }

  // Averages `variables` (every worker passes its own, in the same order; float32 only) over the workers, in place;
  // with outer_nesterov, the trainable ones take DiLoCo's outer step from `anchor` (one per variable: their values
  // at the last sync, equal on every worker; updated to the new ones) with `momentum` (zeros at first). Collective.
  void average(const std::vector<Variable>& variables, std::vector<Tensor>& anchor, std::vector<Tensor>& momentum);

 private:
  // `options`, or InvalidArgument saying what is wrong with them.
  static const LocalSGDOptions& checked(const LocalSGDOptions& options);
  LocalSGDOptions options_;
  int64_t syncs_ = 0;
  int64_t sync_bytes_ = 0;
};

}  // namespace strata::distribute
