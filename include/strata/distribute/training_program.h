// The extension point between a model's training loop and a strategy (TensorFlow's StrategyExtended, Keras's
// make_train_function): a TrainingProgram is what a model offers (its steps, its variables, its trackers, where fit
// stands), and a StepRunner is what a strategy makes from it to run fit's steps its own way. Model::fit is one loop of
// epochs, callbacks and position over the runner its strategy makes; nothing in it names a strategy.
//
//   class MyStrategy : public distribute::Strategy {
//     std::unique_ptr<StepRunner> make_step_runner(TrainingProgram& program) override {
//       return std::make_unique<MyRunner>(*this, program);   // run_steps(group): its own way of stepping
//     }
//   };
//
// The runners: replicas in sync (ReplicaStepRunner: one device, mirrored, central storage, multi-worker) and elastic
// multi-worker training in distribute; the ps coordinator and the ps worker in ps. PipelineStrategy takes over a
// program's train_step itself (Strategy::run_train_step), so a custom loop's strategy.run pipelines as fit does.
//
// Thread-safety: a runner is driven by fit's thread; train_step and test_step run on replica threads (one each).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/data/dataset.h"
#include "strata/tensor.h"
#include "strata/variable.h"

namespace strata::nn {
class Layer;
}
namespace strata::losses {
class Loss;
}
namespace strata::optim {
class Optimizer;
}

namespace strata::distribute {

class Strategy;
struct StepGroup;

// Where fit stands between two steps: what a training checkpoint records so that a fit resumed from it continues
// exactly as the uninterrupted run would (the same batches in the same order, the same running metrics), not merely
// from the start of the epoch.
struct FitPosition {
  int64_t epochs_done = 0;    // epochs completed
  int64_t step_in_epoch = 0;  // steps done in the epoch after them
  // The training iterator's save_state() (empty: the checkpoint holds none, e.g. one written outside fit or by an
  // older strata; a resumed fit then starts the next epoch with a fresh pass).
  std::string input_state;
  // The iterator had ended (its pass completed): a resumed fit restores it only to carry the dataset's pass count
  // (so the next pass reshuffles as it would have), then opens the next pass.
  bool input_finished = false;
  // The loss tracker's state, then each compiled metric's (metrics::Metric::state), mid-epoch. Across workers: the
  // job's (summed over the workers); a resumed chief takes them, the other workers start from zero.
  std::vector<std::vector<double>> metric_states;
  // Across workers that each read their own share of the data (FILE or OFF auto-shard policy): every worker's
  // iterator state, in worker order (input_state is then unused). A resumed job needs as many workers.
  std::vector<std::string> worker_input_states;
};

// What a compiled model offers the strategy that trains it.
class TrainingProgram {
 public:
  // A training step's loss and the gradients of the trainable variables (in their order; zeros for one the loss
  // does not depend on), not applied.
  struct Gradients {
    double loss = 0;
    std::vector<Tensor> gradients;
  };

  virtual ~TrainingProgram() = default;

  // The model as a layer: its name, variables and sublayers (for the layers above nn; distribute uses the two below).
  virtual nn::Layer& program_layer() = 0;
  virtual const nn::Layer& program_layer() const = 0;
  // The model's name, whether it is built, and every variable it has (trainable and not).
  virtual std::string program_name() const = 0;
  virtual bool program_built() const = 0;
  virtual std::vector<Variable> program_variables() const = 0;
  // Whether the model is a plain stack: its sublayers, called one after another on x, are the whole model (a
  // Sequential itself, not a subclass that may override call). Pipeline stages and sparse ps pulls rely on it.
  virtual bool runs_layers_in_order() const = 0;
  // Whether a loss and an optimizer were compiled in.
  virtual bool compiled() const = 0;
  // The compiled loss and optimizer (what a runner that does the step its own way, a pipeline, applies).
  virtual std::shared_ptr<losses::Loss> compiled_loss() const = 0;
  virtual std::shared_ptr<optim::Optimizer> compiled_optimizer() const = 0;

  // One optimization step on this replica's part of a batch (x, y[, sample_weight]), the trackers updated; returns
  // the replica's share of the loss. Runs on a replica's thread under the strategy's replica context.
  virtual double train_step(const data::Element& batch) = 0;
  // One evaluation step: the trackers updated; returns the loss (share).
  virtual double test_step(const data::Element& batch) = 0;
  // A training step's loss and gradients, not applied (a ps worker pushes them); the trackers see the step.
  virtual Gradients compute_gradients(const data::Element& batch) = 0;

  // The trackers: the loss tracker's state, then each compiled metric's; additive across steps and workers.
  virtual std::vector<std::vector<double>> tracker_states() const = 0;
  virtual void set_tracker_states(const std::vector<std::vector<double>>& states) = 0;
  virtual void reset_metrics() = 0;
  // Folds the states of local replicas 1..N-1 into the model's (after steps ran on several local replicas).
  virtual void merge_replica_trackers() = 0;
  // A step run outside train_step (a pipeline's): its mean loss over `rows` rows, and predictions of a part of it.
  virtual void track_step_loss(double loss, int64_t rows) = 0;
  virtual void track_predictions(const Tensor& y_true, const Tensor& y_pred) = 0;
  // Across workers, the job's tracker states (flattened) as the last training step summed them with its gradients;
  // empty when they did not ride (the logs then sum them by a collective of their own).
  virtual const std::vector<double>& job_tracker_states() const = 0;
  virtual void set_job_tracker_states(std::vector<double> states) = 0;

  // Where the fit in progress stands on this worker. REQUIRES: called during fit.
  virtual FitPosition fit_position() const = 0;
  // The weights (every local copy) and the optimizer's state become the chief's on every worker; a collective over
  // the model's strategy. Returns the bytes broadcast (0 with one worker).
  virtual int64_t broadcast_state_from_chief() = 0;
};

// Runs fit's training steps for a strategy; made once per fit by Strategy::make_step_runner. The hooks run on fit's
// thread, in this order: begin_fit; then per epoch begin_epoch, run_steps and end_group per group of steps,
// end_epoch; then end_fit after on_train_end.
class StepRunner {
 public:
  virtual ~StepRunner() = default;

  // A task that trains nothing itself but serves steps another task's fit schedules onto it (a ps worker): serves
  // them on `dataset` (its own input) until that fit ends, and returns the steps served. nullopt: this task runs the
  // loop.
  virtual std::optional<int64_t> serve(const data::Dataset& /*dataset*/) { return std::nullopt; }
  // Whether this task reads the training input. When not (a ps chief schedules steps that workers run on their own
  // input), fit hands run_steps groups of steps without batches, as many as steps_per_epoch (or the dataset's size).
  virtual bool reads_input() const { return true; }
  // Before the first epoch, after on_train_begin: `resume` is where fit will start (a callback's restore, or
  // initial_epoch); `requested` says a callback asked for it. A runner may refuse it or replace it (an elastic
  // worker that joins mid-job takes the chief's).
  virtual void begin_fit(FitPosition& /*resume*/, bool /*requested*/) {}
  virtual void begin_epoch(int64_t /*epoch*/, int64_t /*steps_per_epoch*/) {}
  // The group's training steps, in order; the trackers updated.
  virtual void run_steps(const StepGroup& steps) = 0;
  // After a group's steps, before its logs are read.
  virtual void end_group() {}
  // After the epoch's last group (`stopped`: a callback stopped training), before validation.
  virtual void end_epoch(bool /*stopped*/) {}
  virtual void end_fit() {}
  // Whether a collective between two steps is safe (a checkpoint's metric sums). An elastic group says no: a lost
  // worker there would end the job; the sums that rode with the last step serve instead.
  virtual bool collectives_between_steps() const { return true; }
};

// Rows of the global batch of the training step this replica thread runs (0: none set, the batch is the global
// one): a program scales its share of the loss by it. Each replica thread keeps its own (with several steps per
// hand-off, replicas may be on different steps); ScopedStepRows sets it for a step's duration.
int64_t step_global_rows();
class ScopedStepRows {
 public:
  explicit ScopedStepRows(int64_t rows);
  ~ScopedStepRows();
  ScopedStepRows(const ScopedStepRows&) = delete;
  ScopedStepRows& operator=(const ScopedStepRows&) = delete;
};

// The steps of a group on every local replica of `strategy` (on the calling thread for the default strategy), then
// the replicas' trackers folded into the model's: how every data-parallel strategy steps, and how evaluate does. A
// replica on a GPU gets its batches staged there ahead of its steps (src/distribute/device_prefetch.h).
void run_steps_on_replicas(Strategy& strategy, TrainingProgram& program, const StepGroup& steps, bool training);
// `batch` with every component on `device` (copies of those elsewhere, each waited for; the batch itself for the
// host): what predict and a custom loop's DistributedIterator give a GPU replica. (run_steps_on_replicas stages a GPU
// replica's batches through pinned blocks instead, without the host waiting.)
data::Element batch_on_device(const data::Element& batch, Device device);

// The runner of strategies whose replicas step in sync: run_steps_on_replicas.
class ReplicaStepRunner final : public StepRunner {
 public:
  ReplicaStepRunner(Strategy& strategy, TrainingProgram& program) : strategy_(strategy), program_(program) {}
  void run_steps(const StepGroup& steps) override;

 private:
  Strategy& strategy_;
  TrainingProgram& program_;
};

}  // namespace strata::distribute
