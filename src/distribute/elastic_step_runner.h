// The step runner of an elastic MultiWorkerMirroredStrategy (strata/distribute/multi_worker.h): every step commits on
// every worker or on none; a step that did not commit leaves the model and the metrics as they were, the survivors
// regroup (a new membership epoch and communicator), and the step runs again on the same global batch split over
// them, so every example of the epoch is trained on once and the mathematics do not change. A restarted worker joins
// at a step boundary: the members admit it and the chief sends it the weights, the optimizer state and the input
// position, from which its fit goes on as from a checkpoint.
// Thread-safety: fit's driving thread (one local replica per worker, run on it).
#pragma once

#include <vector>

#include "strata/distribute/multi_worker.h"
#include "strata/distribute/training_program.h"

namespace strata::distribute {

class ElasticStepRunner final : public StepRunner {
 public:
  ElasticStepRunner(MultiWorkerMirroredStrategy& strategy, TrainingProgram& program)
      : strategy_(strategy), program_(program) {}
  // A restarted worker joins the group and takes the chief's state and position.
  void begin_fit(FitPosition& resume, bool requested) override;
  void begin_epoch(int64_t epoch, int64_t steps_per_epoch) override;
  void run_steps(const StepGroup& steps) override;
  // Admits the workers waiting to join, when the last committed step asks for it.
  void end_group() override;
  bool collectives_between_steps() const override { return false; }

 private:
  MultiWorkerMirroredStrategy& strategy_;
  TrainingProgram& program_;
  // The job's tracker states after the last committed step of the epoch (what rode with its gradients), from which
  // the survivors of a lost worker go on counting.
  std::vector<double> committed_job_states_;
};

}  // namespace strata::distribute
