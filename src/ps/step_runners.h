// The step runners of a ParameterServerStrategy (strata/ps/parameter_server_strategy.h) under Model::fit. On the
// chief, CoordinatorStepRunner: the model's variables created on the ps tasks, each epoch's steps scheduled through
// the coordinator onto the workers, and their loss and metric states folded into the chief's trackers (the chief
// reads no input); each step carries the learning rate the chief's optimizer holds when it is scheduled (StepInput:
// ReduceLROnPlateau lowers it between epochs), at which the ps apply its pushes. Weights a callback changed on the
// chief after the last epoch (EarlyStopping's restore_best_weights) are written back to the ps when fit ends, and
// the ps checkpoint saved again. On a worker, WorkerStepRunner::serve: the training step (a RemoteTrainer on the worker's own
// input) served until the chief's fit ends, or until the chief is gone (no heartbeat from the worker group's service).
// Thread-safety: fit's driving thread; on a worker the step runs on the server's thread while that thread waits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
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
  // Refuses a resume from a model checkpoint (the ps shards keep their own); creates the variables on the ps tasks
  // and waits for the workers to come up. A job whose ps tasks restarted from its committed checkpoint (the whole
  // job restarted with its chief), or asked to (ParameterServerStrategyOptions::resume), continues from that
  // checkpoint: every ps rolled back to it and fit's position set to where it was written.
  void begin_fit(distribute::FitPosition& resume, bool requested) override;
  // Schedules the epoch's steps.
  void begin_epoch(int64_t epoch, int64_t steps_left) override;
  // Waits for the group's steps, in the order they were scheduled; the trackers hold the epoch's sums so far. A step
  // that failed because a ps lost the job's state (restarted) rolls the job back (roll_back) and is run again.
  void run_steps(const distribute::StepGroup& steps) override;
  // A ps checkpoint every checkpoint_every_steps steps (save_checkpoint_mid_epoch).
  void end_group() override;
  // The steps scheduled after a stop still run; the chief's model takes the trained values; a ps checkpoint.
  void end_epoch(bool stopped) override;
  // Writes back the weights a callback changed (write_back_changed_weights); ends the workers' fit.
  void end_fit() override;

 private:
  // Each ps that no longer holds the job's state, described ("ps:0 (127.0.0.1:2224) restarted from checkpoint 2"):
  // fenced after a restart from a checkpoint, or holding fewer shards than it was given (restarted empty). Empty
  // when every ps holds it, or when a ps cannot be asked (the caller's own error stands then).
  std::vector<std::string> ps_that_lost_state();
  // Records what each ps holds now (shards_given_): after the variables are made, and after a rollback.
  void remember_shards();
  // Rolls every ps back to the job's committed checkpoint (none: every variable made again from its initial value),
  // waiting first for every step still scheduled (they fail, or are undone), says so on stderr, and re-runs the steps
  // since that checkpoint, so that the job's step count stays exact. `lost` says who lost the state.
  void roll_back(const std::vector<std::string>& lost);
  // Runs `action`; when it fails because a ps lost the job's state, rolls back and runs it again.
  void with_rollback(const std::function<void()>& action);
  // Schedules `count` steps and waits for each, rolling back again when a ps loses the state meanwhile.
  void run_steps_now(int64_t count);
  // The argument bytes of a training step scheduled now: the learning rate of the chief's optimizer (StepInput).
  std::string step_input() const;
  // After on_train_end: the chief's variables that differ from the values the last epoch pulled (a callback assigned
  // them: EarlyStopping's restore_best_weights) are assigned on the ps (ShardedVariable::assign: each shard keeps its
  // optimizer's slots and step count, and its backup takes the value too), and, with a checkpoint directory, the ps
  // checkpoint is saved again, so the job's last checkpoint holds the weights the chief evaluates. Says so on stdout.
  void write_back_changed_weights();
  // A ps checkpoint between two steps of the epoch: the coordinator paused while the ps save, so that the checkpoint
  // holds whole steps (those back here, and those finished after them), which its manifest counts.
  void save_checkpoint_mid_epoch();

  ParameterServerStrategy& strategy_;
  distribute::TrainingProgram& program_;
  std::vector<ShardedVariable> variables_;
  std::vector<Tensor> initial_values_;  // of ps_variables_of(program_), for a rollback before any checkpoint
  std::vector<int64_t> shards_given_;   // per ps: the shards it held once the variables were made (or rolled back)
  std::vector<Tensor> trained_;         // of ps_variables_of(program_): the values the last end_epoch pulled
  int64_t epoch_ = 0;
  int64_t step_in_epoch_ = 0;
  PsJobPosition resumed_;                          // where fit began (a resumed job: its checkpoint's position)
  std::vector<RemoteValue> scheduled_;             // the epoch's steps
  size_t fetched_ = 0;                             // of scheduled_
  std::vector<std::vector<double>> epoch_states_;  // the tracker states of the steps fetched, summed
  int64_t steps_done_ = 0;       // over the job, for checkpoint_every_steps
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
