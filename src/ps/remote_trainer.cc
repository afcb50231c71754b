// Parameter-server training of a model (strata/ps/remote_trainer.h): the chief's variables on the ps, a worker's
// training step, and the bytes a step returns.
// Thread-safety: see the header; run_step holds the trainer's lock for the whole step.
#include "strata/ps/remote_trainer.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <typeinfo>

#include "kernels/kernels.h"
#include "ps/proto/step_output.pb.h"
#include "ps/ps_checkpoint.h"
#include "strata/error.h"
#include "strata/nn/core_layers.h"
#include "strata/nn/layer.h"
#include "strata/trace.h"

namespace strata::ps {

namespace {
void check_built(const distribute::TrainingProgram& program, const char* what) {
  const nn::Layer& model = program.program_layer();
  STRATA_CHECK(model.built(), InvalidArgument,
               what << ": model '" << model.name()
                    << "' is not built, so it has no variables yet: call build_for(input_shape) first");
}

// The model's trainable variables and their ps handles, pairwise.
void check_matches(const std::vector<Variable>& vars, const std::vector<ShardedVariable>& sharded,
                   const std::string& model) {
  STRATA_CHECK(vars.size() == sharded.size(), InvalidArgument,
               "model '" << model << "' has " << vars.size() << " trainable variables but the ps holds "
                         << sharded.size() << ": it is not the model the ps variables were made from");
  for (size_t i = 0; i < vars.size(); ++i) {
    STRATA_CHECK(vars[i].shape() == sharded[i].shape(), InvalidArgument,
                 "model '" << model << "': variable " << i << " ('" << vars[i].name() << "') has shape "
                           << shape_str(vars[i].shape()) << " but " << sharded[i].name() << " on the ps has "
                           << shape_str(sharded[i].shape()));
  }
}

// Pulls every ps variable (in parallel) into the model's variables.
void pull_into(const std::vector<Variable>& vars, const std::vector<ShardedVariable>& sharded) {
  const std::vector<Tensor> values = pull_all(sharded);
  for (size_t i = 0; i < vars.size(); ++i) {
    Variable v = vars[i];
    v.assign(values[i]);
  }
}

}  // namespace

namespace {
// The Embedding that reads a plain Sequential's input: its first layer, or the first layer of a Sequential there.
// (A subclass of Sequential may override call, so only Sequential itself is read.)
const nn::Embedding* input_embedding(const nn::Layer& layer) {
  const auto* stack = dynamic_cast<const distribute::TrainingProgram*>(&layer);
  if (stack == nullptr || !stack->runs_layers_in_order() || layer.layers().empty()) return nullptr;
  const nn::Layer& first = *layer.layers().front();
  if (const auto* embedding = dynamic_cast<const nn::Embedding*>(&first)) return embedding;
  return input_embedding(first);
}
}  // namespace

std::vector<int64_t> input_embedding_tables(const distribute::TrainingProgram& program) {
  const nn::Layer& model = program.program_layer();
  const nn::Embedding* embedding = input_embedding(model);
  if (embedding == nullptr || !embedding->built()) return {};
  const std::vector<Variable> vars = model.trainable_variables();
  for (size_t i = 0; i < vars.size(); ++i) {
    if (vars[i].same_as(embedding->embeddings())) return {static_cast<int64_t>(i)};
  }
  return {};  // a frozen table: not on the ps
}

// The servers as ps variable `index` sees them: rotated by `index`, so that its shard i lives on server
// (index + i) % servers (unsharded variables spread round-robin, as TensorFlow places them).
std::vector<std::shared_ptr<ParameterServerClient>> placed(
    const std::vector<std::shared_ptr<ParameterServerClient>>& servers, size_t index) {
  std::vector<std::shared_ptr<ParameterServerClient>> out = servers;
  if (!out.empty()) std::rotate(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(index % out.size()), out.end());
  return out;
}

std::string model_variable_name(const std::string& prefix, int64_t index) {
  return prefix + "/var_" + std::to_string(index);
}

std::string model_state_name(const std::string& prefix, int64_t index) {
  return prefix + "/state_" + std::to_string(index);
}

std::vector<Variable> model_states(const distribute::TrainingProgram& program) {
  const nn::Layer& model = program.program_layer();
  std::vector<Variable> out;
  for (const Variable& v : model.non_trainable_variables()) {
    if (v.dtype() == DType::kFloat32 && v.shape().size() >= 1 && v.shape()[0] >= 1) out.push_back(v);
  }
  return out;
}

std::vector<Variable> ps_variables_of(const distribute::TrainingProgram& program) {
  std::vector<Variable> vars = program.program_layer().trainable_variables();
  const std::vector<Variable> states = model_states(program);
  vars.insert(vars.end(), states.begin(), states.end());
  return vars;
}

std::vector<ShardedVariable> create_model_variables(const distribute::TrainingProgram& program,
                                                    const Partitioner& partitioner,
                                                    const std::vector<std::shared_ptr<ParameterServerClient>>& servers,
                                                    const OptimizerSpec& optimizer, const std::string& prefix) {
  check_built(program, "create_model_variables");
  std::vector<ShardedVariable> out;
  const std::vector<Variable> vars = program.program_layer().trainable_variables();
  for (size_t i = 0; i < vars.size(); ++i) {
    out.emplace_back(model_variable_name(prefix, static_cast<int64_t>(i)), vars[i].value(), partitioner,
                     placed(servers, i), optimizer);
  }
  const std::vector<Variable> states = model_states(program);
  for (size_t i = 0; i < states.size(); ++i) {
    out.emplace_back(model_state_name(prefix, static_cast<int64_t>(i)), states[i].value(), partitioner,
                     placed(servers, vars.size() + i), kStateUpdate);
  }
  return out;
}

void pull_model_variables(distribute::TrainingProgram& program, const std::vector<ShardedVariable>& variables) {
  check_built(program, "pull_model_variables");
  const std::vector<Variable> vars = ps_variables_of(program);
  check_matches(vars, variables, program.program_layer().name());
  pull_into(vars, variables);
}

PsCheckpointLoaded load_ps_checkpoint(distribute::TrainingProgram& program, const std::string& checkpoint_dir,
                                      const std::string& prefix) {
  check_built(program, "load_ps_checkpoint");
  const std::optional<detail::PsCheckpointManifest> manifest = detail::read_ps_manifest(checkpoint_dir);
  STRATA_CHECK(manifest.has_value(), InvalidArgument,
               "'" << checkpoint_dir << "' holds no committed parameter-server checkpoint (no ps_checkpoint.json)");
  const std::map<std::string, Tensor> values = detail::read_ps_checkpoint_values(checkpoint_dir, *manifest);
  const std::vector<Variable> vars = ps_variables_of(program);
  const size_t trainable = program.program_layer().trainable_variables().size();
  std::vector<Tensor> wholes;
  for (size_t k = 0; k < vars.size(); ++k) {
    const std::string name = k < trainable ? model_variable_name(prefix, static_cast<int64_t>(k))
                                           : model_state_name(prefix, static_cast<int64_t>(k - trainable));
    std::vector<Tensor> parts;
    for (int64_t i = 0;; ++i) {
      const auto it = values.find(name + "/part_" + std::to_string(i));
      if (it == values.end()) break;
      parts.push_back(it->second);
    }
    STRATA_CHECK(!parts.empty(), InvalidArgument,
                 "the parameter-server checkpoint " << manifest->checkpoint << " in '" << checkpoint_dir
                                                    << "' has no " << name << " for the model's " << vars[k].name());
    Tensor whole = parts.size() == 1 ? parts[0] : kernels::concat(parts, 0);
    STRATA_CHECK(whole.shape() == vars[k].shape(), InvalidArgument,
                 "the parameter-server checkpoint's " << name << " has shape " << shape_str(whole.shape())
                                                      << ", the model's " << vars[k].name() << " "
                                                      << shape_str(vars[k].shape()));
    wholes.push_back(std::move(whole));
  }
  for (size_t k = 0; k < vars.size(); ++k) {
    Variable v = vars[k];
    v.assign(wholes[k]);
  }
  return {.checkpoint = manifest->checkpoint, .step = manifest->step};
}

std::string StepOutput::serialize() const {
  proto::StepOutput message;
  message.set_loss(loss);
  for (const std::vector<double>& state : metric_states) {
    message.add_trackers()->mutable_values()->Add(state.begin(), state.end());
  }
  return message.SerializeAsString();
}

StepOutput StepOutput::parse(const std::string& bytes) {
  proto::StepOutput message;
  STRATA_CHECK(message.ParseFromString(bytes), DataCorrupt,
               "StepOutput: " << bytes.size() << " bytes that are not a step output message");
  StepOutput out;
  out.loss = message.loss();
  for (const proto::TrackerState& tracker : message.trackers()) {
    out.metric_states.emplace_back(tracker.values().begin(), tracker.values().end());
  }
  return out;
}

std::string StepInput::serialize() const {
  proto::StepInput message;
  message.set_learning_rate(learning_rate);
  return message.SerializeAsString();
}

StepInput StepInput::parse(const std::string& bytes) {
  proto::StepInput message;
  STRATA_CHECK(message.ParseFromString(bytes), DataCorrupt,
               "StepInput: " << bytes.size() << " bytes that are not a step input message");
  return {.learning_rate = message.learning_rate()};
}

std::vector<std::vector<double>> sum_metric_states(const std::vector<StepOutput>& steps) {
  std::vector<std::vector<double>> sum;
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto& states = steps[s].metric_states;
    if (s == 0) {
      sum = states;
      continue;
    }
    bool same = states.size() == sum.size();
    for (size_t t = 0; same && t < states.size(); ++t) same = states[t].size() == sum[t].size();
    STRATA_CHECK(same, InvalidArgument,
                 "sum_metric_states: step " << s
                                            << " carries another layout of metric states than step 0 (workers "
                                               "compiled with different metrics?)");
    for (size_t t = 0; t < states.size(); ++t) {
      for (size_t k = 0; k < states[t].size(); ++k) sum[t][k] += states[t][k];
    }
  }
  return sum;
}

RemoteTrainer::RemoteTrainer(std::shared_ptr<distribute::TrainingProgram> model, const DatasetFn& dataset_fn, int64_t worker_index,
                             const Partitioner& partitioner,
                             std::vector<std::shared_ptr<ParameterServerClient>> servers, RemoteTrainerOptions options)
    : model_(std::move(model)), worker_index_(worker_index), dataset_([&] {
        STRATA_CHECK(dataset_fn, InvalidArgument, "RemoteTrainer: no dataset function");
        return dataset_fn(worker_index);
      }()) {
  STRATA_CHECK(model_ != nullptr, InvalidArgument, "RemoteTrainer: no model");
  STRATA_CHECK(model_->compiled(), InvalidArgument,
               "RemoteTrainer: model '" << model_->program_layer().name() << "' is not compiled: compile it with the chief's loss "
                                        << "and metrics");
  check_built(*model_, "RemoteTrainer");
  const std::vector<Variable> vars = model_->program_layer().trainable_variables();
  for (size_t i = 0; i < vars.size(); ++i) {
    variables_.push_back(ShardedVariable::existing(model_variable_name(options.prefix, static_cast<int64_t>(i)),
                                                   vars[i].shape(), partitioner, placed(servers, i)));
  }
  const std::vector<Variable> states = model_states(*model_);
  for (size_t i = 0; i < states.size(); ++i) {
    states_.push_back(ShardedVariable::existing(model_state_name(options.prefix, static_cast<int64_t>(i)),
                                                states[i].shape(), partitioner, placed(servers, vars.size() + i)));
  }
  if (options.sparse_embeddings) {
    const std::vector<int64_t> tables = input_embedding_tables(*model_);
    if (!tables.empty()) sparse_ = tables.front();
  }
  for (size_t i = 0; i < variables_.size(); ++i) {
    if (static_cast<int64_t>(i) == sparse_) continue;
    dense_variables_.push_back(variables_[i]);
    dense_index_.push_back(i);
  }
}

std::vector<int64_t> RemoteTrainer::batch_rows(const data::Element& batch) const {
  if (sparse_ < 0) return {};
  STRATA_CHECK(batch.size() >= 1, InvalidArgument, "RemoteTrainer: worker " << worker_index_ << "'s batch is empty");
  Tensor ids = batch[0];
  if (ids.dtype() != DType::kInt64) ids = ids.to(DType::kInt64);  // int32, or floats truncated as Embedding does
  const int64_t* p = ids.data<int64_t>();
  std::vector<int64_t> rows(p, p + ids.numel());
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const int64_t table_rows = variables_[static_cast<size_t>(sparse_)].shape()[0];
  STRATA_CHECK(rows.empty() || (rows.front() >= 0 && rows.back() < table_rows), InvalidArgument,
               "RemoteTrainer: worker " << worker_index_ << "'s batch holds id "
                                        << (rows.front() < 0 ? rows.front() : rows.back())
                                        << ", outside the embedding table's [0, " << table_rows << ") ("
                                        << variables_[static_cast<size_t>(sparse_)].name() << ")");
  return rows;
}

void RemoteTrainer::pull_step(const std::vector<Variable>& vars, const std::vector<int64_t>& rows) {
  if (sparse_ < 0) return pull_into(vars, variables_);
  // The table's rows and the other variables, all at once.
  std::future<Tensor> table =
      std::async(std::launch::async, [&] { return variables_[static_cast<size_t>(sparse_)].lookup(rows); });
  const std::vector<Tensor> values = pull_all(dense_variables_);
  for (size_t k = 0; k < values.size(); ++k) {
    Variable v = vars[dense_index_[k]];
    v.assign(values[k]);
  }
  const Tensor looked_up = table.get();
  // Into the worker's copy of the table, in place: its other rows are stale, and this batch does not read them.
  Tensor local = vars[static_cast<size_t>(sparse_)].value();
  const int64_t width = local.numel() / local.dim(0);
  for (size_t j = 0; j < rows.size(); ++j) {
    std::memcpy(local.data<float>() + rows[j] * width, looked_up.data<float>() + static_cast<int64_t>(j) * width,
                static_cast<size_t>(width) * sizeof(float));
  }
}

void RemoteTrainer::push_step(const std::vector<Tensor>& gradients, const std::vector<int64_t>& rows,
                              const std::string& step_id, const SyncRound& round, double learning_rate) {
  if (sparse_ < 0) return push_all(variables_, gradients, step_id, round, learning_rate);
  const ShardedVariable& table = variables_[static_cast<size_t>(sparse_)];
  // Each shard of the table with none of the rows gets its first row (whose gradient is zero), so that it takes its
  // step as under a dense push.
  std::vector<int64_t> pushed = rows;
  int64_t first = 0;
  for (const int64_t shard_rows : table.shard_rows()) {
    const auto at = std::lower_bound(rows.begin(), rows.end(), first);
    if (at == rows.end() || *at >= first + shard_rows) pushed.push_back(first);
    first += shard_rows;
  }
  Tensor index = Tensor::from_vector(pushed);
  const Tensor table_gradient = kernels::gather(gradients[static_cast<size_t>(sparse_)], index);
  std::future<void> sparse =
      std::async(std::launch::async, [&] { table.push_rows(pushed, table_gradient, step_id, round, learning_rate); });
  std::vector<Tensor> dense;
  for (const size_t i : dense_index_) dense.push_back(gradients[i]);
  std::exception_ptr error;
  try {
    push_all(dense_variables_, dense, step_id, round, learning_rate);
  } catch (...) {
    error = std::current_exception();
  }
  sparse.get();  // waits (it refers to locals) and rethrows its own error first
  if (error) std::rethrow_exception(error);
}

data::Element RemoteTrainer::next_batch() {
  if (iterator_) {
    if (std::optional<data::Element> batch = iterator_->next()) return std::move(*batch);
  }
  iterator_ = dataset_.make_iterator();  // the first step, or the input ended: its next pass
  std::optional<data::Element> batch = iterator_->next();
  STRATA_CHECK(batch.has_value(), InvalidArgument,
               "RemoteTrainer: worker " << worker_index_ << "'s dataset is empty: it has no batch to train on");
  return std::move(*batch);
}

StepOutput RemoteTrainer::run_step(int64_t step_id) { return run_step(StepContext{.step_id = step_id}); }

StepOutput RemoteTrainer::run_step(const StepContext& step_context, const StepInput& input) {
  const int64_t step_id = step_context.step_id;
  std::lock_guard lock(mu_);
  trace::set_step(steps_run_);  // a worker's trace window counts the steps it ran
  const std::vector<Variable> vars = model_->program_layer().trainable_variables();
  const data::Element batch = [&] {
    trace::Span span("input", "input wait");
    return next_batch();
  }();
  const std::vector<int64_t> rows = batch_rows(batch);  // of the sparse table (none: every variable whole)
  // A model without states (most) starts no thread for them.
  const std::launch policy = states_.empty() ? std::launch::deferred : std::launch::async;
  std::future<std::vector<Tensor>> pulled_states = std::async(policy, [&] { return pull_all(states_); });
  pull_step(vars, rows);
  const std::vector<Variable> states = model_states(*model_);
  const std::vector<Tensor> before = pulled_states.get();
  for (size_t i = 0; i < states.size(); ++i) Variable(states[i]).assign(before[i]);
  model_->reset_metrics();  // the output holds this step's batch alone: the chief sums the steps it gets back
  distribute::TrainingProgram::Gradients step = model_->compute_gradients(batch);
  const std::string id = "step:" + std::to_string(step_id);
  // What the step did to the states (BatchNormalization's moving statistics), sent as `before - after` to an update
  // of learning rate 1: the ps adds the step's change to whatever the states hold by then (TensorFlow's
  // assign_sub of a moving average on a ps variable).
  std::future<void> pushed_states = std::async(policy, [&] {
    std::vector<Tensor> change;
    for (size_t i = 0; i < states.size(); ++i) change.push_back(kernels::sub(before[i], states[i].value()));
    push_all(states_, change, id, step_context.round);
  });
  std::exception_ptr error;
  try {
    push_step(step.gradients, rows, id, step_context.round, input.learning_rate);
  } catch (...) {
    error = std::current_exception();
  }
  pushed_states.get();  // waits (it refers to locals) and rethrows its own error first
  if (error) std::rethrow_exception(error);
  ++steps_run_;
  return {step.loss, model_->tracker_states()};
}

void RemoteTrainer::register_on(WorkerServer& server, const std::string& name) {
  server.register_function(name,
                           [this](const StepContext& step, const std::string& args) {
                             return run_step(step, StepInput::parse(args)).serialize();
                           });
}

int64_t RemoteTrainer::steps_run() const {
  std::lock_guard lock(mu_);
  return steps_run_;
}

}  // namespace strata::ps
