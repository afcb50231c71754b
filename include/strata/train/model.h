// Model: a layer that trains — Keras's compile / fit / evaluate / predict / summary, plus weights and
// full training checkpoints.
//
//   Sequential model({nn::Conv2D(32, 3, "relu"), nn::MaxPool2D(2), nn::Flatten(),
//                     nn::Dense(64, "relu"), nn::Dense(10)});
//   model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::Adam(), {"accuracy"});
//   History h = model.fit(train, {.epochs = 10, .validation_data = test});
//   Logs test_logs = model.evaluate(test);
//
// Datasets give elements (x, y) or (x, y, sample_weight) by position (strata/data/dataset.h). A model is a
// stack (Sequential), a functional graph (Model(inputs, output), see strata/nn/functional.h), or a subclass
// that overrides `call` (Keras model subclassing). A custom loop needs no Model at all:
//   GradientTape tape; auto loss = loss_fn(y, model(x, true));
//   optimizer.apply_gradients(tape.gradient(loss, model.trainable_variables()), model.trainable_variables());
//
// A Model is the distribute::TrainingProgram its strategy's step runner trains (strata/distribute/training_program.h):
// fit is one loop of epochs, callbacks and position over that runner, whatever the strategy.
//
// Thread-safety: one thread drives fit/evaluate/predict of a model at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "strata/data/dataset.h"
#include "strata/distribute/strategy.h"
#include "strata/distribute/training_program.h"
#include "strata/nn/functional.h"
#include "strata/nn/layer.h"
#include "strata/optim/losses.h"
#include "strata/optim/metrics.h"
#include "strata/optim/optimizer.h"
#include "strata/optim/optimizers.h"
#include "strata/train/callbacks.h"

namespace strata {

// A metric for compile(): a Keras name ("accuracy", "mse", ...) or a metric object.
class MetricSpec {
 public:
  MetricSpec(const char* name) : name_(name) {}                      // NOLINT: implicit by design
  MetricSpec(std::string name) : name_(std::move(name)) {}           // NOLINT
  MetricSpec(const metrics::Metric& metric) : metric_(metric.clone()) {}  // NOLINT
  MetricSpec(std::shared_ptr<metrics::Metric> metric) : metric_(std::move(metric)) {}  // NOLINT
  const std::string& name() const { return name_; }
  const std::shared_ptr<metrics::Metric>& metric() const { return metric_; }

 private:
  std::string name_;
  std::shared_ptr<metrics::Metric> metric_;
};

struct FitOptions {
  int64_t epochs = 1;
  // The epoch to start at (epochs before it count as done), for resuming.
  int64_t initial_epoch = 0;
  // Steps per epoch; 0 runs each epoch until the dataset ends (an infinite dataset then is an error).
  int64_t steps_per_epoch = 0;
  std::optional<data::Dataset> validation_data;
  int64_t validation_steps = 0;
  std::vector<std::shared_ptr<Callback>> callbacks;
  // 0 silent, 1 progress bar (a line per epoch when not on a terminal), 2 a line per epoch.
  int verbose = 1;
  // Training steps run per hand-off to the replicas (Keras's compile(steps_per_execution=)): under a
  // strategy the replicas run this many steps back to back, so the driving thread's round trip (about
  // 0.4 ms on a 2-core machine) is paid once per group. Batch callbacks then run once per group: begin
  // with its first step, end with its last, and the logs after it. The weights are the same for any value.
  int64_t steps_per_execution = 1;
};

struct EvaluateOptions {
  int64_t steps = 0;  // 0: the whole dataset
  std::vector<std::shared_ptr<Callback>> callbacks;
  int verbose = 0;
};

// What fit returns: for each log name, one value per epoch run; `epochs` lists which epochs those were.
struct History {
  std::vector<int64_t> epochs;
  std::map<std::string, std::vector<double>> history;
  // The fraction of each epoch's time spent waiting for the input pipeline (0..1).
  std::vector<double> input_wait_fraction;
  // The examples each epoch trained on, over every worker (the loss tracker's count): every example of the data
  // once per epoch, whatever failed and was run again (elastic training) or resumed.
  std::vector<int64_t> examples;
  // On a task that serves steps another task's fit schedules (a parameter-server worker, whose fit has no
  // epochs of its own): the training steps it ran.
  int64_t steps_served = 0;
};

// Where fit stands between two steps (what a training checkpoint records): see distribute::FitPosition.
using FitPosition = distribute::FitPosition;

class Model : public nn::Layer, public distribute::TrainingProgram {
 public:
  explicit Model(std::string name = "");
  // A functional model: `output` computed from `inputs` (nn::Input) through layer calls.
  Model(std::vector<nn::SymbolicTensor> inputs, nn::SymbolicTensor output, std::string name = "");
  ~Model() override;
  Model(const Model&);
  Model& operator=(const Model&);

  std::string class_name() const override { return graph_ ? "Functional" : "Model"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Model>(*this); }
  // A functional model's graph (for exporters that walk it); null for a Sequential or subclassed model.
  const nn::Graph* graph() const { return graph_.get(); }

  // Builds the model for inputs of this shape (batch dimension first; its value does not matter) by
  // running it once on zeros, so summary() and load_weights() work before training.
  void build_for(const Shape& input_shape, DType dtype = DType::kFloat32);

  // ---- compile: the loss, the optimizer and the metrics that fit and evaluate use. Keras's order (optimizer, loss,
  // metrics) and strata's first one (loss, optimizer, metrics) both work, typed or by name. Compiling a Sequential
  // whose last layer gives logits (no softmax or sigmoid) with a crossentropy of from_logits false prints one
  // warning on stderr (once per process): Keras trains such a model badly without a word.
  void compile(const optim::Optimizer& optimizer, const losses::Loss& loss, std::vector<MetricSpec> metrics = {});
  void compile(std::shared_ptr<optim::Optimizer> optimizer, std::shared_ptr<losses::Loss> loss,
               std::vector<MetricSpec> metrics = {});
  void compile(const losses::Loss& loss, const optim::Optimizer& optimizer, std::vector<MetricSpec> metrics = {});
  void compile(std::shared_ptr<losses::Loss> loss, std::shared_ptr<optim::Optimizer> optimizer,
               std::vector<MetricSpec> metrics = {});
  // By Keras names, in Keras's order, compile("adam", "sparse_categorical_crossentropy", {"accuracy"}), or the loss
  // first. Which is which is read from the names: unless one names an optimizer and the other a loss, it is an
  // InvalidArgument naming both (compile("adam", "adam")), raised here rather than at the first step.
  void compile(const std::string& first, const std::string& second, std::vector<MetricSpec> metrics = {});
  void compile(const char* first, const char* second, std::vector<MetricSpec> metrics = {}) {
    compile(std::string(first), std::string(second), std::move(metrics));
  }
  bool compiled() const override { return loss_ != nullptr; }
  optim::Optimizer& optimizer() const;
  const losses::Loss& loss() const;

  // ---- the Keras loop.
  History fit(const data::Dataset& dataset, const FitOptions& options = {});
  Logs evaluate(const data::Dataset& dataset, const EvaluateOptions& options = {});
  // The model's outputs for every element's x, concatenated along the batch axis.
  Tensor predict(const data::Dataset& dataset, int64_t steps = 0);

  // One optimization step on a batch (x, y[, sample_weight]); returns the batch's loss. fit calls it on
  // every replica of the model's strategy with that replica's part of the global batch (then the loss is
  // the replica's share: the shares sum to the global batch's loss), and subclasses may override it
  // (Keras's train_step). The loss tracker and metrics (the replica's own, under a strategy) are updated.
  // A strategy that runs steps its own way (a pipeline of stages) takes the step over (Strategy::run_train_step).
  double train_step(const data::Element& batch) override;
  // One evaluation step: updates the loss tracker and metrics; returns the loss (share), like train_step.
  double test_step(const data::Element& batch) override;
  // A training step's loss and the gradients of trainable_variables() (in that order; zeros for a variable the
  // loss does not depend on) on a batch, without applying them: a parameter-server worker pushes them to the ps
  // instead. The loss tracker and metrics see the step as in train_step.
  Gradients compute_gradients(const data::Element& batch) override;

  // Current values of the loss tracker and the metrics ("loss", then each metric by its compile name).
  Logs metric_logs() const;
  // The strategy whose scope made the model's variables, or nullptr (plain variables, or none yet).
  const distribute::Strategy* owning_strategy() const;
  void reset_metrics() override;
  // The compiled metrics (not the loss tracker), in compile order, for strategies to merge.
  const std::vector<std::shared_ptr<metrics::Metric>>& metrics() const { return metrics_; }
  // The loss tracker's state, then each compiled metric's (metrics::Metric::state; additive across batches and
  // workers), and setting them back (InvalidArgument when the count differs from the compiled trackers').
  std::vector<std::vector<double>> tracker_states() const override;
  void set_tracker_states(const std::vector<std::vector<double>>& states) override;

  // The Keras table: layer (type), output shape, params; then the totals. Also printed by print_summary.
  std::string summary() const;
  void print_summary() const;

  // ---- weights and checkpoints (names are the variables' names: "conv2d/kernel", ...).
  std::vector<std::pair<std::string, Tensor>> named_weights() const;
  // REQUIRES: built, a Sequential. The architecture and the weights in one safetensors file (Keras's model.save):
  // save_model(*this, path) of strata/train/saved_model.h, which load_model reads back.
  void save(const std::string& path) const;
  // REQUIRES: built. Writes every variable (trainable and not) to a safetensors file, atomically.
  void save_weights(const std::string& path) const;
  // REQUIRES: built. Reads a safetensors file; names, shapes and dtypes must match exactly (the error names
  // the first that differs).
  void load_weights(const std::string& path);
  // Full training state (weights, optimizer slots, step, RNG) into a CheckpointManager directory as
  // ckpt-<number>. Called from a fit callback it also records where fit stands (FitPosition: epoch, step
  // in the epoch, the training iterator's state, the running metrics); outside fit the checkpoint says
  // `number` epochs are done. During fit across workers it is collective: every worker calls it at the same
  // point (the job's position is gathered from all of them) and the chief alone writes; the others return "".
  std::string save_checkpoint(const std::string& directory, int64_t number, int max_to_keep = 5) const;
  // Restores from a ckpt-<n> directory or a directory holding them (the latest); returns the epochs
  // completed. A restore made while fit starts (a callback's on_train_begin, as BackupAndRestore does)
  // makes that fit continue from the checkpoint's FitPosition.
  int64_t restore_checkpoint(const std::string& path);
  // The position the last restore_checkpoint read.
  const FitPosition& restored_position() const { return restored_position_; }

  // ---- state for callbacks.
  bool stop_training = false;
  // Set during on_train_begin: fit starts from this epoch (with a fresh pass over the data).
  void set_resume_epoch(int64_t epoch) {
    resume_ = FitPosition();
    resume_->epochs_done = epoch;
  }
  // Set during on_train_begin: fit continues from this position (BackupAndRestore passes the restored one).
  void set_resume_position(FitPosition position) { resume_ = std::move(position); }
  // Where the fit in progress stands on this worker. REQUIRES: called from a fit callback.
  FitPosition fit_position() const override;
  // Where the job's fit stands, as save_checkpoint records it: fit_position() with, across workers, the metric
  // states summed and (when each reads its own share) every worker's iterator state. Collective across workers.
  FitPosition job_fit_position() const;
  // Whether a fit is running (callbacks may be asked to save outside one).
  bool in_fit() const { return fit_state_.active; }
  // Global step: optimizer iterations.
  int64_t step() const;
  // The fraction of the last epoch's time that fit spent waiting for the next batch from the dataset.
  double input_wait_fraction() const { return input_wait_fraction_; }
  // The examples the whole job (every worker) had trained in the epoch when it ended (History::examples' entry),
  // for a callback's on_epoch_end; counted before the callbacks run, so reading it runs no collective.
  int64_t epoch_examples() const { return epoch_examples_; }

 protected:
  // A model has no weights of its own: its layers build themselves on their first call.
  void build_impl(const std::vector<Shape>&) override {}
  Variable call(const std::vector<Variable>& inputs, bool training) override;
  Variable call(const Variable& input, bool training) override;

  // ---- distribute::TrainingProgram: what the strategy's step runner uses.
  nn::Layer& program_layer() override { return *this; }
  const nn::Layer& program_layer() const override { return *this; }
  std::string program_name() const override { return name(); }
  bool program_built() const override { return built(); }
  std::vector<Variable> program_variables() const override { return variables(); }
  bool runs_layers_in_order() const override { return false; }
  std::shared_ptr<losses::Loss> compiled_loss() const override;
  std::shared_ptr<optim::Optimizer> compiled_optimizer() const override;
  // Folds replicas 1..N-1's metric states into the model's (and resets theirs).
  void merge_replica_trackers() override;
  void track_step_loss(double loss, int64_t rows) override;
  void track_predictions(const Tensor& y_true, const Tensor& y_pred) override;
  const std::vector<double>& job_tracker_states() const override { return job_states_; }
  void set_job_tracker_states(std::vector<double> states) override { job_states_ = std::move(states); }
  int64_t broadcast_state_from_chief() override;

 private:
  // The loss (plus regularization) of a batch (x, y[, sample_weight]) and the predictions it came from.
  struct StepResult {
    Variable loss, y_pred;
  };
  StepResult forward_and_loss(const data::Element& batch, bool training);
  // The loss tracker and metrics of replicas 1..N-1 (replica 0 updates loss_tracker_ and metrics_).
  struct Trackers {
    std::shared_ptr<metrics::Mean> loss;
    std::vector<std::shared_ptr<metrics::Metric>> metrics;
  };
  // Rows of the batch `x` and of the global batch of the step in progress (the same outside a strategy).
  std::pair<int64_t, int64_t> step_rows(const Tensor& x) const;
  // The strategy fit/evaluate/predict run under: the open scope's, else the one that made the model's
  // variables, else the default. Builds the model (inside that scope) from `sample` if needed, and refuses
  // a model made outside the strategy's scope.
  distribute::Strategy& strategy_for(const char* what, const data::Element& sample);
  // The strategy strategy_for will choose, before any batch is read (how the input is split depends on it).
  distribute::Strategy& input_strategy() const;
  // Feeds a step's loss and predictions to the loss tracker and the metrics; returns the loss.
  double update_trackers(const data::Element& batch, const StepResult& step);
  // The loss tracker and metrics this replica's thread updates (the model's own on replica 0).
  struct TrackerView {
    metrics::Mean* loss;
    const std::vector<std::shared_ptr<metrics::Metric>>* metrics;
  };
  TrackerView replica_trackers() const;
  // Across workers: a request to sum this replica's tracker states over the job with the step's gradients (null
  // with one worker); keep_job_states keeps what it got for metric_logs.
  std::unique_ptr<distribute::SumWithGradients> sum_states_with_gradients() const;
  void keep_job_states(const distribute::SumWithGradients* job);
  void check_compiled(const char* what) const;
  // The warning about a logits output into a probability loss (see compile), if it applies; once per process.
  void warn_if_logits_into_probability_loss() const;
  void check_built(const char* what) const;
  // fit's callbacks: a progress bar (verbose > 0) of `steps_per_epoch` steps, then the caller's; each told the model.
  std::vector<std::shared_ptr<Callback>> fit_callbacks(const FitOptions& options, int64_t steps_per_epoch);
  // The examples the job's loss tracker has counted since the epoch began, over every worker.
  int64_t job_examples() const;

  std::shared_ptr<nn::Graph> graph_;
  std::shared_ptr<losses::Loss> loss_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::vector<std::shared_ptr<metrics::Metric>> metrics_;
  std::vector<std::string> metric_names_;
  std::shared_ptr<metrics::Mean> loss_tracker_;
  std::vector<Trackers> replica_trackers_;  // replicas 1..N-1 of the current strategy
  // Across workers, the job's tracker states as the last training step of the group summed them with its gradients
  // (every state of every tracker, in order); empty when they did not ride, and metric_logs sums them itself.
  std::vector<double> job_states_;

  std::optional<FitPosition> resume_;   // set by a callback during on_train_begin
  FitPosition restored_position_;        // what the last restore_checkpoint read
  // What fit_position() reads while fit runs: the epoch's training iterator and how far it has got.
  struct FitState {
    bool active = false;
    const data::Iterator* iterator = nullptr;
    bool iterator_finished = false;
    bool own_input = false;  // each worker reads its own share (distribute::WorkerInput::own_batches)
    const distribute::StepRunner* runner = nullptr;  // what runs the steps
    int64_t epochs_done = 0, step_in_epoch = 0;
  } fit_state_;
  // Marks a fit active (fit_position answers) until the guard goes, whatever way fit leaves; clears stop_training and
  // any resume request left from before.
  struct ActiveFit {
    FitState& state;
    ~ActiveFit() { state = FitState{}; }
  };
  [[nodiscard]] ActiveFit start_fit();
  double input_wait_fraction_ = 0;
  int64_t epoch_examples_ = 0;
};

// A plain stack of layers, each taking the previous one's output.
class Sequential : public Model {
 public:
  explicit Sequential(std::vector<nn::LayerRef> layers = {}, std::string name = "");
  // Adds a layer at the end (a copy of it; get it back with layers()). REQUIRES: the model is not built.
  void add(nn::LayerRef layer);
  std::string class_name() const override { return "Sequential"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Sequential>(*this); }

 protected:
  Variable call(const Variable& input, bool training) override;
  // Sequential itself (a subclass may override call).
  bool runs_layers_in_order() const override;
};

}  // namespace strata
