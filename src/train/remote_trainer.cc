// Parameter-server training of a Model (strata/train/remote_trainer.h): the chief's variables on the ps, a worker's
// training step, and the bytes a step returns.
// Thread-safety: see the header; run_step holds the trainer's lock for the whole step.
#include "strata/train/remote_trainer.h"

#include "ps/proto/step_output.pb.h"
#include "strata/error.h"

namespace strata::ps {

namespace {
void check_built(const Model& model, const char* what) {
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

std::string model_variable_name(const std::string& prefix, int64_t index) {
  return prefix + "/var_" + std::to_string(index);
}

std::vector<ShardedVariable> create_model_variables(const Model& model, const Partitioner& partitioner,
                                                    const std::vector<std::shared_ptr<ParameterServerClient>>& servers,
                                                    const OptimizerSpec& optimizer, const std::string& prefix) {
  check_built(model, "create_model_variables");
  std::vector<ShardedVariable> out;
  const std::vector<Variable> vars = model.trainable_variables();
  for (size_t i = 0; i < vars.size(); ++i) {
    out.emplace_back(model_variable_name(prefix, static_cast<int64_t>(i)), vars[i].value(), partitioner, servers,
                     optimizer);
  }
  return out;
}

void pull_model_variables(Model& model, const std::vector<ShardedVariable>& variables) {
  check_built(model, "pull_model_variables");
  const std::vector<Variable> vars = model.trainable_variables();
  check_matches(vars, variables, model.name());
  pull_into(vars, variables);
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
                 "sum_metric_states: step " << s << " carries another layout of metric states than step 0 (workers "
                                               "compiled with different metrics?)");
    for (size_t t = 0; t < states.size(); ++t) {
      for (size_t k = 0; k < states[t].size(); ++k) sum[t][k] += states[t][k];
    }
  }
  return sum;
}

RemoteTrainer::RemoteTrainer(std::shared_ptr<Model> model, const DatasetFn& dataset_fn, int64_t worker_index,
                             const Partitioner& partitioner, std::vector<std::shared_ptr<ParameterServerClient>> servers,
                             RemoteTrainerOptions options)
    : model_(std::move(model)), worker_index_(worker_index), dataset_([&] {
        STRATA_CHECK(dataset_fn, InvalidArgument, "RemoteTrainer: no dataset function");
        return dataset_fn(worker_index);
      }()) {
  STRATA_CHECK(model_ != nullptr, InvalidArgument, "RemoteTrainer: no model");
  STRATA_CHECK(model_->compiled(), InvalidArgument,
               "RemoteTrainer: model '" << model_->name() << "' is not compiled: compile it with the chief's loss "
                                        << "and metrics");
  check_built(*model_, "RemoteTrainer");
  const std::vector<Variable> vars = model_->trainable_variables();
  for (size_t i = 0; i < vars.size(); ++i) {
    variables_.push_back(ShardedVariable::existing(model_variable_name(options.prefix, static_cast<int64_t>(i)),
                                                   vars[i].shape(), partitioner, servers));
  }
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

StepOutput RemoteTrainer::run_step(int64_t step_id) {
  std::lock_guard lock(mu_);
  const std::vector<Variable> vars = model_->trainable_variables();
  pull_into(vars, variables_);
  const data::Element batch = next_batch();
  model_->reset_metrics();  // the output holds this step's batch alone: the chief sums the steps it gets back
  Model::Gradients step = model_->compute_gradients(batch);
  push_all(variables_, step.gradients, "step:" + std::to_string(step_id));
  ++steps_run_;
  return {step.loss, model_->tracker_states()};
}

void RemoteTrainer::register_on(WorkerServer& server, const std::string& name) {
  server.register_function(name, [this](int64_t step_id, const std::string&) { return run_step(step_id).serialize(); });
}

int64_t RemoteTrainer::steps_run() const {
  std::lock_guard lock(mu_);
  return steps_run_;
}

}  // namespace strata::ps
