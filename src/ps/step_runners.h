// The step runners of a ParameterServerStrategy (strata/ps/parameter_server_strategy.h) under Model::fit. On the
// chief, CoordinatorStepRunner: the model's variables created on the ps tasks, each epoch's steps scheduled through
// the coordinator onto the workers, and their loss and metric states folded into the chief's trackers (the chief
// reads no input). On a worker, WorkerStepRunner::serve: the training step (a RemoteTrainer on the worker's own
// input) served until the chief's fit ends, or until the chief is gone (no heartbeat from the worker group's service).
// Thread-safety: fit's driving thread; on a worker the step runs on the server's thread while that thread waits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "strata/distribute/training_program.h"
#include "strata/ps/parameter_server_strategy.h"
#include "strata/ps/remote_value.h"
#include "strata/ps/sharded_variable.h"

namespace strata::ps {

class CoordinatorStepRunner final : public distribute::StepRunner {
 public:
  CoordinatorStepRunner(ParameterServerStrategy& strategy, distribute::TrainingProgram& program)
      : strategy_(strategy), program_(program) {}
  bool reads_input() const override { return false; }
  // Refuses a resume (the ps shards keep their own checkpoints); creates the variables on the ps tasks and waits for
  // the workers to come up.
  void begin_fit(distribute::FitPosition& resume, bool requested) override;
  // Schedules the epoch's steps.
  void begin_epoch(int64_t epoch, int64_t steps_left) override;
  // Waits for the group's steps, in the order they were scheduled; the trackers hold the epoch's sums so far.
  void run_steps(const distribute::StepGroup& steps) override;
  // A ps checkpoint every checkpoint_every_steps steps.
  void end_group() override;
  // The steps scheduled after a stop still run; the chief's model takes the trained values; a ps checkpoint.
  void end_epoch(bool stopped) override;
  // Ends the workers' fit.
  void end_fit() override;

 private:
  ParameterServerStrategy& strategy_;
  distribute::TrainingProgram& program_;
  std::vector<ShardedVariable> variables_;
  int64_t epoch_ = 0;
  std::vector<RemoteValue> scheduled_;             // the epoch's steps
  size_t fetched_ = 0;                             // of scheduled_
  std::vector<std::vector<double>> epoch_states_;  // the tracker states of the steps fetched, summed
  int64_t steps_done_ = 0;       // over the fit, for checkpoint_every_steps
  int64_t checkpointed_at_ = 0;  // steps_done_ at the last of those checkpoints
  std::unique_ptr<cluster::WorkerGroup> group_;  // during fit (ParameterServerStrategy::join_worker_group)
};

class WorkerStepRunner final : public distribute::StepRunner {
 public:
  WorkerStepRunner(ParameterServerStrategy& strategy, distribute::TrainingProgram& program)
      : strategy_(strategy), program_(program) {}
  // Serves the training step on `dataset` until the chief's fit ends; the steps served.
  std::optional<int64_t> serve(const data::Dataset& dataset) override;
  void run_steps(const distribute::StepGroup& steps) override;  // never called: serve ran the fit

 private:
  ParameterServerStrategy& strategy_;
  distribute::TrainingProgram& program_;
};

}  // namespace strata::ps
