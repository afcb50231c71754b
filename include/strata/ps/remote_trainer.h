// Asynchronous parameter-server training of a model (a distribute::TrainingProgram, e.g. a Model), the piece between
// the ps services (strata/ps/*) and a ParameterServerStrategy under Model::fit. The chief puts every trainable
// variable of its model on the ps servers as a ShardedVariable; each worker holds its own copy of the model (same
// architecture, compiled with the same loss and metrics) and its own input (TensorFlow's create_per_worker_dataset: a dataset made from the worker's index),
// and serves the training step as a function of its WorkerServer. A step pulls every variable, takes the worker's
// next batch, computes the loss and gradients with a GradientTape, and pushes every gradient under the step's id: the
// ps applies it at once with the job's optimizer, at the learning rate the chief sent with the step (StepInput), and
// drops it when that step was applied before (a step re-run after
// a lost worker is applied once). Under a coordinator with max_staleness = 0 a step pushes in its synchronous round
// and the ps applies the round's mean gradient once: synchronous training on the workers' batches together.
//
//   // The chief (its model built and compiled as the workers'):
//   auto vars = ps::create_model_variables(model, ps::FixedShardsPartitioner(2), servers,
//                                          {.name = "sgd", .learning_rate = 0.1});
//   ps::ClusterCoordinator coordinator(worker_addresses);
//   std::vector<ps::RemoteValue> steps;
//   for (int i = 0; i < 100; ++i) steps.push_back(coordinator.schedule(ps::kTrainStep));
//   coordinator.join();
//   std::vector<ps::StepOutput> outputs;                 // each step's loss and metric states
//   for (const auto& s : steps) outputs.push_back(ps::StepOutput::parse(s.fetch()));
//   model.set_tracker_states(ps::sum_metric_states(outputs));
//   Logs logs = model.metric_logs();                     // the job's loss and metrics over those steps
//   ps::pull_model_variables(model, vars);               // the chief's copy takes the trained values
//
//   // Worker i (the same program):
//   auto trainer = std::make_shared<ps::RemoteTrainer>(worker_model, [](int64_t w) { return dataset_of(w); }, i,
//                                                      ps::FixedShardsPartitioner(2), servers);
//   ps::WorkerServer server;
//   trainer->register_on(server);                        // as ps::kTrainStep
//   server.start("0.0.0.0:2223");
//
// The ps variables are named by position, "<prefix>/var_<i>" for trainable_variables()[i], so the chief's and the
// workers' copies match whatever names their layers got. A re-run step takes the next batch of the worker it runs on
// (as in TensorFlow, the batch is not part of the closure). A worker's input restarts at its end (a ps worker has no
// epochs of its own). The model's states (BatchNormalization's moving statistics, "<prefix>/state_<i>") live on the
// ps too: a step pulls them with the variables and pushes what it changed in them (model_states).
//
// Sparse rows. An nn::Embedding fed by the model's input (the first layer of a Sequential) reads only the rows of
// its batch's ids, so a step pulls only those rows of its table (ShardedVariable::lookup: each shard asked for its
// rows, in parallel) into the worker's copy, and pushes only their gradient rows (push_rows); the other variables
// move whole. A table shard that holds none of the batch's ids still takes its step (one row of zero gradient), so
// the ps's update is the dense one's whatever the optimizer (Adam's slots decay on every row, as TensorFlow's
// non-lazy sparse update): sparse and dense steps give the same ps values. RemoteTrainerOptions::sparse_embeddings =
// false moves every variable whole.
//
// It holds the model as a TrainingProgram (strata/distribute/training_program.h), so ps needs nothing of train.
// Thread-safety: a RemoteTrainer runs one step at a time (run_step serialises its callers); the free functions may be
// called from any thread, not while the model is being trained.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "strata/data/dataset.h"
#include "strata/ps/partitioner.h"
#include "strata/ps/server.h"
#include "strata/ps/sharded_variable.h"
#include "strata/ps/worker_server.h"
#include "strata/distribute/training_program.h"

namespace strata::ps {

// The name RemoteTrainer::register_on gives the training step by default.
inline constexpr const char* kTrainStep = "train_step";
// The function a worker's Model::fit (under ParameterServerStrategy) serves for the chief to end it.
inline constexpr const char* kEndFit = "strata/end_fit";

// The ps name of trainable variable `index` of a model: "<prefix>/var_<index>".
std::string model_variable_name(const std::string& prefix, int64_t index);
// The ps name of state `index` of a model (model_states): "<prefix>/state_<index>".
std::string model_state_name(const std::string& prefix, int64_t index);
// A model's states: its non-trainable float32 variables of rank >= 1 (BatchNormalization's moving mean and
// variance), which live on the ps beside the trainable ones. A step sends what it changed in them as `before - after`
// to an update of learning rate 1 (kStateUpdate), so the ps adds each step's change to what the states hold by then.
std::vector<Variable> model_states(const distribute::TrainingProgram& model);
inline const OptimizerSpec kStateUpdate{.name = "sgd", .learning_rate = 1.0};
// What a model keeps on the ps: its trainable variables, then its states.
std::vector<Variable> ps_variables_of(const distribute::TrainingProgram& model);

// Creates every trainable variable of `model` (REQUIRES: built) on `servers` as a ShardedVariable holding the model's
// current values, updated there with `optimizer`, in trainable_variables() order; then the model's states (updated
// with kStateUpdate): ps_variables_of's order. Variable k's shard i lives on servers[(k + i) % servers.size()], so
// variables of one shard spread round-robin over the servers, as TensorFlow places them. Creating them again with the same layout and optimizer changes nothing
// (a restarted chief may call it again).
std::vector<ShardedVariable> create_model_variables(const distribute::TrainingProgram& model, const Partitioner& partitioner,
                                                    const std::vector<std::shared_ptr<ParameterServerClient>>& servers,
                                                    const OptimizerSpec& optimizer, const std::string& prefix = "model");

// Assigns the current ps values of `variables` (create_model_variables': one per variable of ps_variables_of(model),
// in order) to the model's variables, pulled in parallel. InvalidArgument when the counts or shapes differ (naming the
// variable): the model is not the one the variables were made from.
void pull_model_variables(distribute::TrainingProgram& model, const std::vector<ShardedVariable>& variables);

// What load_ps_checkpoint read: the checkpoint's number and the training steps done when it was written.
struct PsCheckpointLoaded {
  int64_t checkpoint = 0;
  int64_t step = 0;
};
// Assigns the values of the parameter-server checkpoint the job under `checkpoint_dir` last committed (its
// ps_checkpoint.json) to `model`'s variables, as create_model_variables named them with `prefix`: each variable's
// shards, read from whichever ps holds them, concatenated along axis 0 in part order. InvalidArgument when the
// directory holds no committed checkpoint, or one that does not fit the model (naming the variable); DataCorrupt when
// a shard is missing or damaged.
PsCheckpointLoaded load_ps_checkpoint(distribute::TrainingProgram& model, const std::string& checkpoint_dir,
                                      const std::string& prefix = "model");

// What a training step returns to the chief: the batch's loss and the tracker states of that batch alone
// (Model::tracker_states: the loss tracker's, then each compiled metric's), which add up across steps and workers.
struct StepOutput {
  double loss = 0;
  std::vector<std::vector<double>> metric_states;

  // As the protobuf message strata.ps.proto.StepOutput (src/ps/proto/step_output.proto).
  std::string serialize() const;
  // DataCorrupt when `bytes` are not such a message.
  static StepOutput parse(const std::string& bytes);
};

// What the chief sends with a training step (the closure's argument bytes): the learning rate its optimizer holds
// now, which the step's pushes of trainable variables carry (the ps applies them at it and keeps it); 0: each shard's
// own rate. The model's states (model_states) are always updated at rate 1.
struct StepInput {
  double learning_rate = 0;

  // As the protobuf message strata.ps.proto.StepInput (src/ps/proto/step_output.proto); "" parses as the default.
  std::string serialize() const;
  // DataCorrupt when `bytes` are not such a message.
  static StepInput parse(const std::string& bytes);
};

// The metric states of `steps` summed, state by state (for Model::set_tracker_states). InvalidArgument when the steps
// carry different layouts (workers compiled with different metrics).
std::vector<std::vector<double>> sum_metric_states(const std::vector<StepOutput>& steps);

// The trainable variables of `model` (indices into trainable_variables()) that are the table of an nn::Embedding
// fed by the model's input x: the first layer of a Sequential (looking into a Sequential that is the first layer).
// Empty for other models: a functional or subclassed model's wiring is not read, and its variables move whole.
std::vector<int64_t> input_embedding_tables(const distribute::TrainingProgram& model);

struct RemoteTrainerOptions {
  std::string prefix = "model";  // as create_model_variables
  // Pull and push only the batch's rows of an embedding table fed by the input (input_embedding_tables); false:
  // every variable whole (the same ps values, more bytes: for comparison).
  bool sparse_embeddings = true;
};

class RemoteTrainer {
 public:
  using DatasetFn = std::function<data::Dataset(int64_t worker_index)>;

  // `model`: this worker's copy, built and compiled with the chief's loss and metrics (its optimizer is not used: the
  // ps applies the updates). `dataset_fn(worker_index)` makes this worker's input, batched; it is called once, here.
  // The variables are the chief's (by name, with the partitioner's layout); none is created here.
  RemoteTrainer(std::shared_ptr<distribute::TrainingProgram> model, const DatasetFn& dataset_fn, int64_t worker_index,
                const Partitioner& partitioner, std::vector<std::shared_ptr<ParameterServerClient>> servers,
                RemoteTrainerOptions options = {});

  // One training step under `step_id` (the coordinator's, kept when a step is re-run): takes the next batch, pulls
  // every variable (an input embedding's table: the batch's rows), computes the loss and gradients, pushes them as
  // "step:<step_id>" (the table: the batch's rows). An id outside the table is InvalidArgument naming it. A ps
  // error (a variable missing: InvalidArgument; a ps unreachable: Unavailable) passes through (the coordinator's
  // RemoteValue names the step).
  StepOutput run_step(int64_t step_id);
  // The same, with the pushes in the step's synchronous round when it has one (max_staleness = 0): the ps applies the
  // mean of the round's gradients, each the gradient of its batch's mean loss, so with equal batches the update is
  // that of the mean loss over the round's batches together. The trainable variables' pushes carry `input`'s
  // learning rate.
  StepOutput run_step(const StepContext& step, const StepInput& input = {});
  // Registers run_step on `server` as `name` (with the call's StepContext and its arguments as a StepInput): the
  // function returns StepOutput::serialize(). The server holds a reference to this trainer: keep it alive while the
  // server serves.
  void register_on(WorkerServer& server, const std::string& name = kTrainStep);

  int64_t steps_run() const;
  int64_t worker_index() const { return worker_index_; }
  distribute::TrainingProgram& model() const { return *model_; }

 private:
  // The next batch, restarting the input at its end. REQUIRES: mu_ held.
  data::Element next_batch();
  // The rows of the sparse table that `batch` reads (sorted, unique); empty when every variable moves whole.
  std::vector<int64_t> batch_rows(const data::Element& batch) const;
  // Pulls every variable into the model's, the sparse table's `rows` alone (all of it when sparse_ is -1).
  void pull_step(const std::vector<Variable>& vars, const std::vector<int64_t>& rows);
  // Pushes `gradients` (one per variable), the sparse table's `rows` alone plus one zero row of each table shard
  // holding none of them; in synchronous `round` when it is defined; at `learning_rate` (0: the shards' own).
  void push_step(const std::vector<Tensor>& gradients, const std::vector<int64_t>& rows, const std::string& step_id,
                 const SyncRound& round, double learning_rate);

  std::shared_ptr<distribute::TrainingProgram> model_;
  int64_t worker_index_;
  data::Dataset dataset_;
  std::vector<ShardedVariable> variables_;
  std::vector<ShardedVariable> states_;  // model_states' on the ps
  // The sparse table's index in variables_ (-1: none, every variable moves whole), and the other variables with
  // their indices.
  int64_t sparse_ = -1;
  std::vector<ShardedVariable> dense_variables_;
  std::vector<size_t> dense_index_;
  mutable std::mutex mu_;
  std::optional<data::Iterator> iterator_;  // GUARDED_BY(mu_)
  int64_t steps_run_ = 0;                    // GUARDED_BY(mu_)
};

}  // namespace strata::ps
