// Model: compile and the Keras training, evaluation and prediction loops (see strata/train/model.h).
// Weights, checkpoints and the summary table live in model_io.cc.
#include "strata/train/model.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <typeinfo>

#include "strata/data/autoshard.h"
#include "strata/distribute/strategy.h"
#include "strata/error.h"
#include "strata/gradient_tape.h"
#include "strata/nn/core_layers.h"
#include "strata/nn/functional.h"
#include "strata/ops.h"
#include "strata/threading.h"
#include "strata/trace.h"
#include "strata/train/callbacks.h"
#include "train/run_callbacks.h"
#include "train/worker_state.h"

namespace strata {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Model::Model(std::string name) : nn::Layer(std::move(name)) { set_root_container(true); }

Model::Model(std::vector<nn::SymbolicTensor> inputs, nn::SymbolicTensor output, std::string name)
    : nn::Layer(std::move(name)) {
  set_root_container(true);
  graph_ = std::make_shared<nn::Graph>(std::move(inputs), std::vector<nn::SymbolicTensor>{std::move(output)});
  for (const auto& layer : graph_->layers()) add_layer(layer);
  // The graph's layers were built when they were called symbolically.
  std::vector<Shape> shapes;
  for (const auto& in : graph_->inputs()) shapes.push_back(in.shape());
  build(shapes);
}

Model::~Model() = default;
Model::Model(const Model&) = default;
Model& Model::operator=(const Model&) = default;

Variable Model::call(const Variable& input, bool training) {
  if (graph_) return graph_->run({input}, training)[0];
  STRATA_THROW(InvalidArgument, "model '" << name()
                                          << "' has no layers: use Sequential, Model(inputs, output), or a subclass "
                                             "that overrides call()");
}

Variable Model::call(const std::vector<Variable>& inputs, bool training) {
  if (graph_) return graph_->run(inputs, training)[0];
  STRATA_CHECK(inputs.size() == 1, InvalidArgument,
               "model '" << name() << "' takes one input, got " << inputs.size());
  return call(inputs[0], training);
}

void Model::build_for(const Shape& input_shape, DType dtype) {
  if (built()) return;
  STRATA_CHECK(!input_shape.empty(), ShapeError, "build_for needs an input shape with a batch dimension");
  Shape s = input_shape;
  s[0] = 1;
  NoGradGuard no_grad;
  // On the device the current strategy's replica 0 computes on (a GPU under OneDeviceStrategy("/gpu:N")), where
  // the variables this makes live.
  (*this)(Variable(Tensor::zeros(s, dtype, distribute::get_strategy().replica_device(0))), false);
}

// ---- compile

void Model::compile(const losses::Loss& loss, const optim::Optimizer& optimizer, std::vector<MetricSpec> metrics) {
  compile(loss.clone(), optimizer.clone(), std::move(metrics));
}

void Model::compile(const optim::Optimizer& optimizer, const losses::Loss& loss, std::vector<MetricSpec> metrics) {
  compile(loss.clone(), optimizer.clone(), std::move(metrics));
}

void Model::compile(std::shared_ptr<optim::Optimizer> optimizer, std::shared_ptr<losses::Loss> loss,
                    std::vector<MetricSpec> metrics) {
  compile(std::move(loss), std::move(optimizer), std::move(metrics));
}

namespace {
// What a compile() name is: "optimizer", "loss", or "" (neither).
std::string kind_of_name(const std::string& name) {
  const bool loss = !losses::canonical_name(name).empty();
  bool optimizer = false;
  try {
    optim::get(name);
    optimizer = true;
  } catch (const InvalidArgument&) {
  }
  if (loss && optimizer) return "both";  // no Keras name is; kept honest should one ever be
  return optimizer ? "optimizer" : loss ? "loss" : "";
}
}  // namespace

void Model::compile(const std::string& first, const std::string& second, std::vector<MetricSpec> metrics) {
  const std::string first_kind = kind_of_name(first), second_kind = kind_of_name(second);
  if (first_kind == "optimizer" && second_kind == "loss") {  // Keras's order
    compile(losses::get(second), optim::get(first), std::move(metrics));
    return;
  }
  if (first_kind == "loss" && second_kind == "optimizer") {
    compile(losses::get(first), optim::get(second), std::move(metrics));
    return;
  }
  auto describe = [](const std::string& name, const std::string& kind) {
    return "'" + name + "' is " +
           (kind.empty() ? "neither an optimizer nor a loss" : kind == "both" ? "both" : kind == "loss" ? "a loss" : "an optimizer");
  };
  STRATA_THROW(InvalidArgument, "compile('" << first << "', '" << second
                                            << "'): expected an optimizer and a loss (Keras's order: compile(optimizer, "
                                               "loss, metrics)), but "
                                            << describe(first, first_kind) << " and " << describe(second, second_kind));
}

void Model::compile(std::shared_ptr<losses::Loss> loss, std::shared_ptr<optim::Optimizer> optimizer,
                    std::vector<MetricSpec> metrics) {
  STRATA_CHECK(loss != nullptr, InvalidArgument, "compile: the loss is null");
  STRATA_CHECK(optimizer != nullptr, InvalidArgument, "compile: the optimizer is null");
  loss_ = std::move(loss);
  optimizer_ = std::move(optimizer);
  metrics_.clear();
  metric_names_.clear();
  for (const auto& spec : metrics) {
    std::shared_ptr<metrics::Metric> m = spec.metric() ? spec.metric()->clone() : metrics::get(spec.name(), loss_->name());
    metric_names_.push_back(spec.metric() ? m->name() : spec.name());
    metrics_.push_back(std::move(m));
  }
  loss_tracker_ = std::make_shared<metrics::Mean>();
  replica_trackers_.clear();
  warn_if_logits_into_probability_loss();
}

namespace {
// Whether the loss expects probabilities: a crossentropy with from_logits false.
bool loss_expects_probabilities(const losses::Loss& loss) {
  if (const auto* l = dynamic_cast<const losses::SparseCategoricalCrossentropy*>(&loss)) return !l->options().from_logits;
  if (const auto* l = dynamic_cast<const losses::CategoricalCrossentropy*>(&loss)) return !l->options().from_logits;
  if (const auto* l = dynamic_cast<const losses::BinaryCrossentropy*>(&loss)) return !l->options().from_logits;
  return false;
}

bool only_reshapes_or_drops(const nn::Layer& layer) {
  return dynamic_cast<const nn::Dropout*>(&layer) || dynamic_cast<const nn::Flatten*>(&layer) ||
         dynamic_cast<const nn::Reshape*>(&layer);
}

// The layer that gives a model's one output, looking past layers that only reshape or drop; null when it cannot
// tell (a subclass, several outputs, an output that is an input).
const nn::Layer* output_layer(const Model& model) {
  if (const auto* sequential = dynamic_cast<const Sequential*>(&model)) {
    const auto& layers = sequential->layers();
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      if (!only_reshapes_or_drops(**it)) return it->get();
    }
    return nullptr;
  }
  const nn::Graph* graph = model.graph();
  if (graph == nullptr || graph->outputs().size() != 1) return nullptr;
  for (const nn::detail::GraphNode* node = graph->outputs().front().node().get(); node != nullptr && node->layer;) {
    if (!only_reshapes_or_drops(*node->layer) || node->inputs.size() != 1) return node->layer.get();
    node = node->inputs.front().node().get();
  }
  return nullptr;
}

// The activation a layer ends with ("": cannot tell).
std::string activation_of(const nn::Layer& layer) {
  if (const auto* dense = dynamic_cast<const nn::Dense*>(&layer)) return dense->options().activation.name();
  if (const auto* activation = dynamic_cast<const nn::Activation*>(&layer)) return activation->activation().name();
  return "";
}
}  // namespace

void Model::warn_if_logits_into_probability_loss() const {
  static std::atomic<bool> warned{false};
  if (loss_ == nullptr || warned.load() || !loss_expects_probabilities(*loss_)) return;
  const nn::Layer* last = output_layer(*this);
  if (last == nullptr) return;
  const std::string activation = activation_of(*last);
  if (activation.empty() || activation == "custom" || activation == "softmax" || activation == "sigmoid") return;
  if (warned.exchange(true)) return;
  std::fflush(stdout);
  std::fprintf(stderr,
               "strata: warning: model '%s' ends in layer '%s' with activation %s, so it outputs logits, but the loss "
               "%s has from_logits false and expects probabilities; give the loss from_logits true (in a job file: "
               "loss: {name: %s, from_logits: true}) or end the model with a softmax (sigmoid for binary)\n",
               name().c_str(), last->name().c_str(), activation.c_str(), loss_->name().c_str(), loss_->name().c_str());
}

optim::Optimizer& Model::optimizer() const {
  check_compiled("optimizer()");
  return *optimizer_;
}

const losses::Loss& Model::loss() const {
  check_compiled("loss()");
  return *loss_;
}

void Model::check_compiled(const char* what) const {
  STRATA_CHECK(loss_ != nullptr, InvalidArgument,
               "model '" << name() << "': call compile(loss, optimizer, metrics) before " << what);
}

void Model::check_built(const char* what) const {
  STRATA_CHECK(built(), InvalidArgument,
               "model '" << name() << "' is not built yet, so it has no weights for " << what
                         << ": run it on data, fit it, or call build_for(input_shape) first");
}

int64_t Model::step() const { return optimizer_ ? optimizer_->iterations() : 0; }

// ---- steps

namespace {
struct Batch {
  Tensor x, y, sample_weight;
};
// (x, y) or (x, y, sample_weight) by position.
Batch unpack(const data::Element& batch, const std::string& model) {
  STRATA_CHECK(batch.size() >= 2 && batch.size() <= 3, InvalidArgument,
               "model '" << model << "' trains on elements (x, y) or (x, y, sample_weight); got one of "
                         << batch.size() << " component(s)");
  return {batch[0], batch[1], batch.size() > 2 ? batch[2] : Tensor()};
}

using detail::run_callbacks;
}  // namespace

namespace {
// This thread's replica among this process's replicas (0 outside strategy.run), and the number in sync.
int replica_id() {
  const distribute::ReplicaContext* ctx = distribute::get_replica_context();
  return ctx ? ctx->local_replica_id() : 0;
}
int replicas_in_sync() {
  const distribute::ReplicaContext* ctx = distribute::get_replica_context();
  return ctx ? ctx->num_replicas_in_sync() : 1;
}
}  // namespace

Model::StepResult Model::forward_and_loss(const data::Element& batch, bool training) {
  const auto [x, y, sample_weight] = unpack(batch, name());
  Variable y_pred = (*this)(Variable(x), training);
  Variable total = (*loss_)(y, y_pred, sample_weight);
  // On one of several replicas the loss is this replica's share of the global batch's: summed over the
  // replicas (as the gradients are) it is what one replica would compute on the whole batch.
  const auto [rows, global_rows] = step_rows(x);
  if (global_rows != rows && loss_->reduction() == losses::Reduction::kSumOverBatchSize)
    total = affine(total, static_cast<float>(static_cast<double>(rows) / static_cast<double>(global_rows)));
  if (Variable reg = regularization_loss(); reg.defined())
    total = total + (replicas_in_sync() > 1 ? distribute::scale_regularization_loss(reg) : reg);
  return {total, y_pred};
}

double Model::update_trackers(const data::Element& batch, const StepResult& step) {
  const auto [x, y, sample_weight] = unpack(batch, name());
  const double share = step.loss.value().item<float>();
  const auto [rows, global_rows] = step_rows(x);
  const TrackerView mine = replica_trackers();
  // Summed over replicas: total = (global loss) * global rows, count = global rows.
  mine.loss->update(share * static_cast<double>(global_rows) / static_cast<double>(rows), static_cast<double>(rows));
  for (const auto& m : *mine.metrics) m->update_state(y, step.y_pred.value(), sample_weight);
  return share;
}

std::pair<int64_t, int64_t> Model::step_rows(const Tensor& x) const {
  const int64_t rows = x.rank() >= 1 ? x.dim(0) : 1;
  const int64_t global_rows = distribute::step_global_rows();
  return {rows, global_rows > 0 ? global_rows : rows};
}

namespace {
bool empty_batch(const data::Element& batch) { return batch.size() >= 1 && batch[0].rank() >= 1 && batch[0].dim(0) == 0; }
}  // namespace

double Model::train_step(const data::Element& batch) {
  if (const distribute::ReplicaContext* ctx = distribute::get_replica_context()) {
    if (const std::optional<double> loss = ctx->strategy().run_train_step(*this, batch)) return *loss;
  }
  const std::vector<Variable> vars = trainable_variables();
  if (empty_batch(batch)) {
    // A replica that got no rows of an uneven last batch still takes part: zero gradients, reduced as usual.
    GradientTape tape;
    const auto job = sum_states_with_gradients();
    optimizer_->minimize(Variable(Tensor::scalar(0.0f)), vars, tape, UnconnectedGradients::kZero);
    keep_job_states(job.get());
    return 0;
  }
  GradientTape tape;
  const StepResult step = [&] {
    trace::Span span("compute", "forward");
    return forward_and_loss(batch, /*training=*/true);
  }();
  // The trackers see the step's loss and predictions before the update (they do not depend on it), so that
  // across workers their states can ride with the gradients.
  // On a GPU (OneDeviceStrategy("/gpu:N")) this is where the step waits for the device: the loss's value (the
  // progress bar's), and the metrics' copies of y and y_pred; the sparse loss has already waited for its label
  // check, and the batch's copy to the device waited before the step. The backward and the optimizer's update are
  // then queued without waiting: the next step's batch copy waits for them.
  const double share = update_trackers(batch, step);
  const auto job = sum_states_with_gradients();
  optimizer_->minimize(step.loss, vars, tape);
  keep_job_states(job.get());
  return share;
}

Model::Gradients Model::compute_gradients(const data::Element& batch) {
  check_compiled("compute_gradients");
  GradientTape tape;
  const StepResult step = [&] {
    trace::Span span("compute", "forward");
    return forward_and_loss(batch, /*training=*/true);
  }();
  Gradients out;
  out.loss = update_trackers(batch, step);
  trace::Span span("compute", "backward");
  out.gradients = tape.gradient(step.loss, trainable_variables(), UnconnectedGradients::kZero);
  return out;
}

std::unique_ptr<distribute::SumWithGradients> Model::sum_states_with_gradients() const {
  if (!loss_tracker_ || distribute::get_strategy().num_workers() == 1) return nullptr;
  const TrackerView mine = replica_trackers();
  std::vector<double> states = mine.loss->state();
  for (const auto& m : *mine.metrics) {
    const std::vector<double> s = m->state();
    states.insert(states.end(), s.begin(), s.end());
  }
  return std::make_unique<distribute::SumWithGradients>(std::move(states));
}

void Model::keep_job_states(const distribute::SumWithGradients* job) {
  // Every replica got the same sums; replica 0 keeps them (the others' threads must not write the model).
  if (job == nullptr || replica_id() > 0) return;
  job_states_ = job->sums();  // empty when they could not ride: metric_logs then sums across workers itself
}

Model::TrackerView Model::replica_trackers() const {
  // Replica 0 (and a step outside any strategy) updates the model's own trackers; replica r > 0 its own set.
  const int r = replica_id();
  if (r == 0) return {loss_tracker_.get(), &metrics_};
  STRATA_CHECK(static_cast<size_t>(r) <= replica_trackers_.size(), Error,
               "model '" << name() << "': no metrics for replica " << r << " (run steps through fit/evaluate)");
  const Trackers& t = replica_trackers_[static_cast<size_t>(r) - 1];
  return {t.loss.get(), &t.metrics};
}

double Model::test_step(const data::Element& batch) {
  if (empty_batch(batch)) return 0;
  NoGradGuard no_grad;
  return update_trackers(batch, forward_and_loss(batch, /*training=*/false));
}

namespace {
// `states` (one vector per tracker) summed element-wise over the workers, in place: from `ready` when it holds
// them already flattened (they rode with the gradients), else by one collective.
void sum_states_across_workers(const distribute::Strategy& strategy, std::vector<std::vector<double>>& states,
                               const std::vector<double>& ready = {}) {
  std::vector<double> flat;
  for (const auto& s : states) flat.insert(flat.end(), s.begin(), s.end());
  const std::vector<double> summed = ready.size() == flat.size() && !flat.empty() ? ready
                                                                                  : strategy.sum_across_workers(flat);
  auto at = summed.begin();
  for (auto& s : states) {
    std::copy(at, at + static_cast<std::ptrdiff_t>(s.size()), s.begin());
    at += static_cast<std::ptrdiff_t>(s.size());
  }
}
}  // namespace

int64_t Model::job_examples() const {
  if (!loss_tracker_) return 0;
  const std::vector<double> mine = loss_tracker_->state();  // {sum, count}
  const distribute::Strategy* strategy = owning_strategy();
  if (strategy == nullptr || strategy->num_workers() == 1) return static_cast<int64_t>(mine[1]);
  // The job's states rode with the last step's gradients (the loss tracker's first); else one collective.
  if (job_states_.size() >= mine.size()) return static_cast<int64_t>(std::llround(job_states_[1]));
  return static_cast<int64_t>(std::llround(strategy->sum_across_workers(mine)[1]));
}

Logs Model::metric_logs() const {
  Logs logs;
  if (!loss_tracker_) return logs;
  std::vector<const metrics::Metric*> trackers = {loss_tracker_.get()};
  for (const auto& m : metrics_) trackers.push_back(m.get());
  std::vector<std::string> names = {"loss"};
  names.insert(names.end(), metric_names_.begin(), metric_names_.end());
  // Across workers each tracker saw this worker's share: the job's result comes from the states summed over the
  // workers (every metric's state is additive, see strata/optim/metrics.h) — the sums that rode with the last
  // step's gradients, else a collective of their own (every worker decides alike: the same steps ran everywhere).
  const distribute::Strategy* strategy = owning_strategy();
  if (strategy != nullptr && strategy->num_workers() > 1) {
    std::vector<std::vector<double>> states = tracker_states();
    sum_states_across_workers(*strategy, states, job_states_);
    for (size_t i = 0; i < trackers.size(); ++i) {
      const std::shared_ptr<metrics::Metric> job = trackers[i]->clone();
      job->set_state(states[i]);
      logs.set(names[i], job->result());
    }
    return logs;
  }
  for (size_t i = 0; i < trackers.size(); ++i) logs.set(names[i], trackers[i]->result());
  return logs;
}

const distribute::Strategy* Model::owning_strategy() const {
  const std::vector<Variable> vars = variables();  // strategy_for checks they all have one owner
  if (vars.empty() || vars.front().owner() == 0) return nullptr;
  return distribute::find_strategy(vars.front().owner());
}

void Model::reset_metrics() {
  job_states_.clear();
  if (loss_tracker_) loss_tracker_->reset_state();
  for (const auto& m : metrics_) m->reset_state();
  for (Trackers& t : replica_trackers_) {
    t.loss->reset_state();
    for (const auto& m : t.metrics) m->reset_state();
  }
}

std::vector<std::vector<double>> Model::tracker_states() const {
  std::vector<std::vector<double>> states;
  if (loss_tracker_) states.push_back(loss_tracker_->state());
  for (const auto& m : metrics_) states.push_back(m->state());
  return states;
}

void Model::set_tracker_states(const std::vector<std::vector<double>>& states) {
  const size_t expected = (loss_tracker_ ? 1 : 0) + metrics_.size();
  STRATA_CHECK(states.size() == expected, InvalidArgument,
               "model '" << name() << "': the checkpoint holds " << states.size() << " metric states but the model has "
                         << expected << " (the loss and each compiled metric); compile it as it was when saved");
  job_states_.clear();
  size_t i = 0;
  if (loss_tracker_) loss_tracker_->set_state(states[i++]);
  for (const auto& m : metrics_) m->set_state(states[i++]);
}

FitPosition Model::fit_position() const {
  STRATA_CHECK(fit_state_.active, InvalidArgument, "model '" << name() << "': fit_position() outside fit");
  FitPosition p;
  p.epochs_done = fit_state_.epochs_done;
  p.step_in_epoch = fit_state_.step_in_epoch;
  if (fit_state_.iterator != nullptr) p.input_state = fit_state_.iterator->save_state();
  p.input_finished = fit_state_.iterator_finished;
  if (p.step_in_epoch > 0) p.metric_states = tracker_states();
  return p;
}

FitPosition Model::job_fit_position() const {
  FitPosition p = fit_position();
  const distribute::Strategy* strategy = owning_strategy();
  if (strategy == nullptr || strategy->num_workers() == 1) return p;
  // Every worker is at the same step, so all hold metric states or none. Summed exactly (not the float32 sums
  // that rode with the gradients): a resume continues from them. Except in elastic training, where a collective
  // between steps would be a place a lost worker ends the job (its runner says so): there the sums that rode with
  // the last step serve.
  const bool ride = fit_state_.runner != nullptr && !fit_state_.runner->collectives_between_steps();
  if (!p.metric_states.empty()) {
    sum_states_across_workers(*strategy, p.metric_states, ride ? job_states_ : std::vector<double>{});
  }
  if (fit_state_.own_input) {
    p.worker_input_states = strategy->all_gather_across_workers(p.input_state);
    p.input_state.clear();
  }
  return p;
}

// ---- strategies

distribute::Strategy& Model::strategy_for(const char* what, const data::Element& sample) {
  distribute::Strategy* strategy = &distribute::get_strategy();
  if (!built()) {
    STRATA_CHECK(sample.size() >= 1, InvalidArgument, what << ": an element has no components");
    if (strategy == &distribute::default_strategy()) {
      build_for(sample[0].shape(), sample[0].dtype());
    } else {
      auto scope = strategy->scope();
      build_for(sample[0].shape(), sample[0].dtype());
    }
  }
  // The model belongs to the strategy that made its variables (like Keras's model._distribution_strategy).
  uint64_t owner = 0;
  std::string first_name;
  for (const Variable& v : variables()) {
    if (first_name.empty()) {
      owner = v.owner();
      first_name = v.name();
    } else {
      STRATA_CHECK(v.owner() == owner, InvalidArgument,
                   "model '" << name() << "': variables '" << first_name << "' and '" << v.name()
                             << "' were created under different strategies");
    }
  }
  if (strategy == &distribute::default_strategy() && owner != 0) {
    strategy = distribute::find_strategy(owner);
    STRATA_CHECK(strategy != nullptr, InvalidArgument,
                 "model '" << name() << "' was created in the scope of a strategy that no longer exists");
  }
  const uint64_t expected = strategy == &distribute::default_strategy() ? 0 : strategy->id();
  if (owner != expected && !first_name.empty()) {
    STRATA_THROW(InvalidArgument, what << ": model '" << name() << "' was created outside " << strategy->name()
                                       << ".scope() (variable '" << first_name
                                       << "'); create and build the model inside `auto scope = strategy.scope();`");
  }
  // Replicas 1..N-1 keep their own metric states; merge_replica_trackers folds them into the model's.
  const size_t extra = static_cast<size_t>(strategy->num_local_replicas() - 1);
  if (loss_tracker_ && replica_trackers_.size() != extra) {
    replica_trackers_.clear();
    for (size_t r = 0; r < extra; ++r) {
      Trackers t{std::make_shared<metrics::Mean>(), {}};
      for (const auto& m : metrics_) t.metrics.push_back(m->clone());
      replica_trackers_.push_back(std::move(t));
    }
  }
  return *strategy;
}

void Model::merge_replica_trackers() {
  for (Trackers& t : replica_trackers_) {
    loss_tracker_->merge_state(*t.loss);
    t.loss->reset_state();
    for (size_t i = 0; i < metrics_.size(); ++i) {
      metrics_[i]->merge_state(*t.metrics[i]);
      t.metrics[i]->reset_state();
    }
  }
}

std::shared_ptr<losses::Loss> Model::compiled_loss() const {
  check_compiled("a training step");
  return loss_;
}

std::shared_ptr<optim::Optimizer> Model::compiled_optimizer() const {
  check_compiled("a training step");
  return optimizer_;
}

void Model::track_step_loss(double loss, int64_t rows) { loss_tracker_->update(loss, static_cast<double>(rows)); }

void Model::track_predictions(const Tensor& y_true, const Tensor& y_pred) {
  for (const auto& m : metrics_) m->update_state(y_true, y_pred, Tensor());
}

int64_t Model::broadcast_state_from_chief() { return detail::broadcast_state_from_chief(*this); }

bool Sequential::runs_layers_in_order() const { return typeid(*this) == typeid(Sequential); }

distribute::Strategy& Model::input_strategy() const {
  distribute::Strategy& current = distribute::get_strategy();
  if (&current != &distribute::default_strategy()) return current;
  const std::vector<Variable> vars = variables();
  if (vars.empty() || vars.front().owner() == 0) return current;
  distribute::Strategy* owner = distribute::find_strategy(vars.front().owner());
  return owner != nullptr ? *owner : current;  // a strategy gone: strategy_for says so at the first batch
}

// ---- the loops

namespace {
// This worker's part of a resumed position: across workers that each read their own share, its own iterator
// state; and the job's metric states on the chief only (the others' trackers start from zero, so the job's sum
// goes on from where it stood).
void take_worker_share(FitPosition& p, const distribute::WorkerInput& input, const distribute::Strategy& strategy) {
  const char* policy = data::auto_shard_policy_name(input.policy());
  if (!p.worker_input_states.empty()) {
    const auto saved = static_cast<int>(p.worker_input_states.size());
    STRATA_CHECK(input.own_batches(), InvalidArgument,
                 "fit: the checkpoint holds the input positions of " << saved << " workers that each read their own "
                 "share of the data, but this job's " << strategy.num_workers() << " worker(s) read the same batches "
                 "(auto-shard policy " << policy << "); resume with the data settings it was saved with");
    STRATA_CHECK(saved == strategy.num_workers(), InvalidArgument,
                 "fit: the checkpoint holds the input positions of " << saved << " workers that each read their own "
                 "files; resume it with " << saved << " workers, not " << strategy.num_workers());
    p.input_state = p.worker_input_states[static_cast<size_t>(strategy.worker_index())];
  } else if (input.own_batches() && !p.input_state.empty()) {
    STRATA_THROW(InvalidArgument, "fit: the checkpoint's input position is that of a pipeline read whole (one "
                                  "process, or workers under the DATA policy), but this job's workers each read their "
                                  "own share (auto-shard policy "
                                      << policy << "); resume with the data settings it was saved with");
  }
  if (strategy.num_workers() > 1 && !strategy.is_chief()) {
    for (auto& state : p.metric_states) std::fill(state.begin(), state.end(), 0.0);
  }
}
}  // namespace

Model::ActiveFit Model::start_fit() {
  stop_training = false;
  resume_.reset();
  fit_state_ = FitState{.active = true};
  return ActiveFit{fit_state_};
}

std::vector<std::shared_ptr<Callback>> Model::fit_callbacks(const FitOptions& options, int64_t steps_per_epoch) {
  std::vector<std::shared_ptr<Callback>> callbacks;
  if (options.verbose > 0) {
    auto bar = std::make_shared<callbacks::ProgressBar>(callbacks::ProgressBar::Options{.verbose = options.verbose});
    bar->set_epochs(options.epochs);
    bar->set_steps(steps_per_epoch);
    callbacks.push_back(bar);
  }
  callbacks.insert(callbacks.end(), options.callbacks.begin(), options.callbacks.end());
  for (const auto& cb : callbacks) cb->set_model(this);
  return callbacks;
}

History Model::fit(const data::Dataset& dataset, const FitOptions& options) {
  check_compiled("fit");
  warn_if_logits_into_probability_loss();  // a Sequential given its layers after compile
  STRATA_CHECK(options.epochs >= 0 && options.initial_epoch >= 0 && options.steps_per_epoch >= 0, InvalidArgument,
               "fit: epochs, initial_epoch and steps_per_epoch must not be negative");
  STRATA_CHECK(options.steps_per_execution >= 1, InvalidArgument,
               "fit: steps_per_execution must be at least 1, got " << options.steps_per_execution);
  // The strategy's runner runs the steps (strata/distribute/training_program.h); a task that only serves steps
  // another task schedules (a ps worker) serves them here until that fit ends.
  distribute::Strategy& strategy_of_input = input_strategy();
  const std::unique_ptr<distribute::StepRunner> runner = strategy_of_input.make_step_runner(*this);
  if (const std::optional<int64_t> served = runner->serve(dataset)) {
    History history;
    history.steps_served = *served;
    return history;
  }
  const bool reads_input = runner->reads_input();
  const int64_t cardinality = dataset.cardinality();
  int64_t steps_per_epoch = options.steps_per_epoch;
  if (!reads_input) {  // the steps run elsewhere, on other tasks' input: as many as asked, or the dataset's size
    STRATA_CHECK(built(), InvalidArgument,
                 "fit: under " << strategy_of_input.name() << " this task reads no batch to build model '" << name()
                               << "' from: build it (build_for) before fit");
    if (steps_per_epoch == 0) {
      STRATA_CHECK(cardinality > 0, InvalidArgument,
                   "fit: under " << strategy_of_input.name()
                                 << " give steps_per_epoch (as TensorFlow requires): the dataset's size is "
                                 << (cardinality == data::Dataset::kInfinite ? "infinite" : "unknown"));
      steps_per_epoch = cardinality;
    }
  }
  STRATA_CHECK(steps_per_epoch > 0 || cardinality != data::Dataset::kInfinite, InvalidArgument,
               "fit: the dataset repeats forever, so give steps_per_epoch");
  const std::vector<std::shared_ptr<Callback>> callbacks =
      fit_callbacks(options, steps_per_epoch > 0 ? steps_per_epoch : std::max<int64_t>(cardinality, 0));

  const ActiveFit active = start_fit();
  fit_state_.runner = runner.get();
  History history;
  run_callbacks(callbacks, [](Callback& cb) { cb.on_train_begin(Logs()); });
  FitPosition resume;
  resume.epochs_done = options.initial_epoch;
  const bool resume_requested = resume_.has_value();
  if (resume_) resume = std::move(*resume_);
  resume_.reset();
  runner->begin_fit(resume, resume_requested);  // may refuse it, or replace it (an elastic joiner: the chief's)
  // Across workers each reads its share of the dataset (strata/distribute/input.h); with one, the dataset itself.
  distribute::WorkerInput input(strategy_of_input, dataset);
  const data::Dataset& mine = input.dataset();
  fit_state_.own_input = input.own_batches();
  take_worker_share(resume, input, strategy_of_input);

  // With steps_per_epoch an iterator lives across epochs (Keras); otherwise each epoch is one pass, and
  // the next epoch's pass is opened while this one trains: its first batch (a full shuffle buffer, for
  // one) is ready when the epoch starts instead of showing up as input wait. (A cache() stage is complete
  // only once a pass ends, so the second pass, opened during the first, still reads the source.)
  std::optional<data::Iterator> iterator;
  std::optional<data::Element> first_batch;
  std::future<std::pair<data::Iterator, std::optional<data::Element>>> next_pass;
  auto open_pass = [&mine] {
    ScopedNumThreads one_thread(1);  // beside the training step: never oversubscribe its cores
    data::Iterator it = mine.make_iterator();
    std::optional<data::Element> first = it.next();
    return std::make_pair(std::move(it), std::move(first));
  };
  // A resumed position with the iterator's state: continue that iterator where it stood, or, when its
  // pass had ended, restore it only so that the dataset counts the passes made (a reshuffling shuffle
  // then orders the next pass as the uninterrupted run did).
  if (!resume.input_state.empty()) {
    data::Iterator restored = mine.make_iterator();
    try {
      restored.restore_state(resume.input_state);
    } catch (const Error& e) {
      STRATA_THROW(InvalidArgument, "fit: the checkpoint's input position does not fit this dataset, which is "
                                    "not the one it was saved with (resume with the same data settings): "
                                        << e.what());
    }
    if (!resume.input_finished) iterator.emplace(std::move(restored));
  }
  int64_t resume_steps = resume.input_finished ? 0 : resume.step_in_epoch;
  bool exhausted = false;
  distribute::Strategy* strategy = nullptr;  // chosen at the first batch (which may build the model)
  for (int64_t epoch = resume.epochs_done; epoch < options.epochs && !stop_training && !exhausted; ++epoch) {
    reset_metrics();
    int64_t steps = 0;
    if (resume_steps > 0) {  // the epoch a mid-epoch checkpoint stood in: its running metrics go on
      set_tracker_states(resume.metric_states);  // across workers: the job's on the chief, zeros elsewhere
      steps = resume_steps;
      resume_steps = 0;
    }
    fit_state_.epochs_done = epoch;
    fit_state_.step_in_epoch = steps;
    fit_state_.iterator_finished = false;
    run_callbacks(callbacks, [&](Callback& cb) { cb.on_epoch_begin(epoch, Logs()); });
    const double epoch_start = now_seconds();
    double waited = 0;
    if (!reads_input) {
      // no input here: the steps run on other tasks' batches
    } else if (steps_per_epoch == 0) {
      if (!iterator) {
        auto pass = next_pass.valid() ? next_pass.get() : open_pass();
        iterator.emplace(std::move(pass.first));
        first_batch = std::move(pass.second);
        waited = now_seconds() - epoch_start;
      }
      if (epoch + 1 < options.epochs) next_pass = std::async(std::launch::async, open_pass);
    } else if (!iterator) {
      iterator.emplace(mine.make_iterator());
    }
    fit_state_.iterator = iterator ? &*iterator : nullptr;
    runner->begin_epoch(epoch, steps_per_epoch > 0 ? steps_per_epoch - steps : 0);
    bool ran_out = false;
    while (!ran_out && (steps_per_epoch == 0 || steps < steps_per_epoch)) {
      // The next group of steps: up to steps_per_execution batches, no more than the epoch has left.
      const int64_t want = steps_per_epoch == 0 ? options.steps_per_execution
                                                : std::min(options.steps_per_execution, steps_per_epoch - steps);
      std::vector<data::Element> batches;
      while (reads_input && static_cast<int64_t>(batches.size()) < want) {
        const double t0 = now_seconds();
        trace::set_step(step());  // the next step's spans, from its input wait on
        std::optional<data::Element> batch = [&] {
          trace::Span span("input", "input wait");
          return first_batch ? std::move(first_batch) : iterator->next();
        }();
        first_batch.reset();
        waited += now_seconds() - t0;
        if (!batch) break;
        batches.push_back(std::move(*batch));
      }
      // When workers read their own batches, the group has the steps any of them has data for.
      if (strategy == nullptr && !batches.empty()) strategy = &strategy_for("fit", batches.front());
      distribute::StepGroup steps_of_group;
      if (reads_input) {
        steps_of_group = input.group(std::move(batches), want);
      } else {  // steps without batches: they run on other tasks' input
        trace::set_step(step());
        steps_of_group.batches.resize(static_cast<size_t>(want));
        steps_of_group.global_rows.resize(static_cast<size_t>(want));
      }
      const int64_t group = static_cast<int64_t>(steps_of_group.size());
      ran_out = group < want;
      if (ran_out && steps_per_epoch > 0) {
        std::fprintf(stderr, "fit: the dataset ran out after %lld of %lld steps in epoch %lld; stopping\n",
                     static_cast<long long>(steps + group), static_cast<long long>(steps_per_epoch),
                     static_cast<long long>(epoch + 1));
        exhausted = true;
      }
      if (group == 0) break;
      if (reads_input && strategy == nullptr) {  // this worker's own share ended before the others': nothing to build the model from
        STRATA_CHECK(built(), InvalidArgument,
                     "fit: this worker's share of the dataset is empty, so the model cannot be built from its first "
                     "batch; build it (build_for) before fit");
        strategy = &strategy_for("fit", steps_of_group.batches.front()[0]);
      }
      run_callbacks(callbacks, [&](Callback& cb) { cb.on_train_batch_begin(steps, Logs()); });
      job_states_.clear();  // the group's last training step may bring the job's states with its gradients
      runner->run_steps(steps_of_group);
      steps += group;
      fit_state_.step_in_epoch = steps;
      runner->end_group();
      const Logs logs = metric_logs();
      run_callbacks(callbacks, [&](Callback& cb) { cb.on_train_batch_end(steps - 1, logs); });
      if (stop_training) break;
    }
    runner->end_epoch(stop_training);
    const double elapsed = now_seconds() - epoch_start;
    input_wait_fraction_ = elapsed > 0 ? waited / elapsed : 0;
    Logs logs = metric_logs();
    epoch_examples_ = job_examples();  // before validation, whose evaluate resets the trackers
    if (options.validation_data && !stop_training) {
      const Logs val = evaluate(*options.validation_data, {.steps = options.validation_steps});
      for (const auto& [k, v] : val.items()) logs.set("val_" + k, v);
    }
    history.epochs.push_back(epoch);
    for (const auto& [k, v] : logs.items()) history.history[k].push_back(v);
    history.input_wait_fraction.push_back(input_wait_fraction_);
    history.examples.push_back(epoch_examples_);
    // The epoch is done: a checkpoint from on_epoch_end resumes at the next one.
    fit_state_.epochs_done = epoch + 1;
    fit_state_.step_in_epoch = 0;
    fit_state_.iterator_finished = steps_per_epoch == 0;
    run_callbacks(callbacks, [&](Callback& cb) { cb.on_epoch_end(epoch, logs); });
    if (steps_per_epoch == 0) {
      fit_state_.iterator = nullptr;
      iterator.reset();  // each epoch is a pass of its own
    }
  }
  trace::set_step(trace::kNoStep);
  run_callbacks(callbacks, [](Callback& cb) { cb.on_train_end(Logs()); });
  runner->end_fit();
  return history;
}

Logs Model::evaluate(const data::Dataset& dataset, const EvaluateOptions& options) {
  check_compiled("evaluate");
  STRATA_CHECK(options.steps > 0 || dataset.cardinality() != data::Dataset::kInfinite, InvalidArgument,
               "evaluate: the dataset repeats forever, so give steps");
  std::vector<std::shared_ptr<Callback>> callbacks;
  if (options.verbose > 0) {
    auto bar = std::make_shared<callbacks::ProgressBar>(callbacks::ProgressBar::Options{.verbose = options.verbose});
    bar->set_mode_evaluate(true);
    bar->set_steps(options.steps > 0 ? options.steps : std::max<int64_t>(dataset.cardinality(), 0));
    callbacks.push_back(bar);
  }
  callbacks.insert(callbacks.end(), options.callbacks.begin(), options.callbacks.end());
  for (const auto& cb : callbacks) cb->set_model(this);
  reset_metrics();
  run_callbacks(callbacks, [](Callback& cb) { cb.on_test_begin(Logs()); });
  distribute::WorkerInput input(input_strategy(), dataset);
  data::Iterator it = input.dataset().make_iterator();
  int64_t steps = 0;
  distribute::Strategy* strategy = nullptr;
  while (options.steps == 0 || steps < options.steps) {
    std::vector<data::Element> batch;
    if (std::optional<data::Element> b = it.next()) batch.push_back(std::move(*b));
    if (strategy == nullptr && !batch.empty()) strategy = &strategy_for("evaluate", batch.front());
    const distribute::StepGroup step = input.group(std::move(batch), 1);
    if (step.size() == 0) break;
    if (strategy == nullptr) {  // this worker's own share ended before the others': nothing to build the model from
      STRATA_CHECK(built(), InvalidArgument,
                   "evaluate: this worker's share of the dataset is empty, so the model cannot be built from its first "
                   "batch; build it (build_for) before evaluate");
      strategy = &strategy_for("evaluate", step.batches.front()[0]);
    }
    job_states_.clear();
    distribute::run_steps_on_replicas(*strategy, *this, step, /*training=*/false);
    const Logs logs = metric_logs();
    run_callbacks(callbacks, [&](Callback& cb) { cb.on_test_batch_end(steps, logs); });
    ++steps;
  }
  STRATA_CHECK(steps > 0, InvalidArgument, "evaluate: the dataset gave no batches");
  Logs logs = metric_logs();
  run_callbacks(callbacks, [&](Callback& cb) { cb.on_test_end(logs); });
  return logs;
}

Tensor Model::predict(const data::Dataset& dataset, int64_t steps) {
  NoGradGuard no_grad;
  std::vector<Variable> outputs;
  data::Iterator it = dataset.make_iterator();
  distribute::Strategy* strategy = nullptr;
  for (int64_t step = 0; steps == 0 || step < steps; ++step) {
    std::optional<data::Element> batch = it.next();
    if (!batch) break;
    STRATA_CHECK(batch->size() >= 1, InvalidArgument, "predict: an element has no components");
    if (strategy == nullptr) strategy = &strategy_for("predict", *batch);
    const auto parts = distribute::split_batch(data::Element({(*batch)[0]}), strategy->num_local_replicas());
    const auto out = strategy->run(
        [&](const data::Element& b) {
          NoGradGuard no_grad_in_replica;
          if (empty_batch(b)) return Tensor();
          const distribute::ReplicaContext* ctx = distribute::get_replica_context();
          const Device device = strategy->replica_device(ctx ? ctx->local_replica_id() : 0);
          const Tensor y = (*this)(Variable(distribute::batch_on_device(b, device)[0]), /*training=*/false).value();
          return y.device().is_cpu() ? y : y.to(Device::cpu());  // predictions come back to the host
        },
        parts);
    for (const Tensor& t : out)
      if (t.defined()) outputs.push_back(Variable(t));
  }
  STRATA_CHECK(!outputs.empty(), InvalidArgument, "predict: the dataset gave no batches");
  if (outputs.size() == 1) return outputs[0].value();
  return concat(outputs, 0).value();
}

// ---- Sequential

Sequential::Sequential(std::vector<nn::LayerRef> layers, std::string name) : Model(std::move(name)) {
  for (auto& layer : layers) add(std::move(layer));
}

void Sequential::add(nn::LayerRef layer) {
  STRATA_CHECK(!built(), InvalidArgument,
               "Sequential '" << this->name() << "' is built; add layers before its first call");
  add_layer(layer.get());
}

Variable Sequential::call(const Variable& input, bool training) {
  STRATA_CHECK(!layers().empty(), InvalidArgument, "Sequential '" << name() << "' has no layers");
  Variable x = input;
  for (const auto& layer : layers()) x = (*layer)(x, training);
  return x;
}

}  // namespace strata
