// The pipeline executor (strata/parallel/pipeline.h): a stage runs its list of a checked schedule literally,
// keeping per (virtual stage, micro-batch) the tape, the input and the output of its forward until its backward.
// Thread-safety: a PipelineStage is one thread's; ThreadPipeline runs one thread per stage for each step and joins
// them before it returns.
#include "strata/parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <thread>

#include "kernels/kernels.h"
#include "strata/comm/local.h"
#include "strata/error.h"
#include "strata/gradient_tape.h"
#include "strata/ops.h"
#include "strata/random.h"
#include "strata/threading.h"
#include "strata/trace.h"

namespace strata::parallel {
namespace {

using Clock = std::chrono::steady_clock;

int64_t trainable_count(const nn::Layer& layer) {
  int64_t n = 0;
  for (const Variable& v : layer.trainable_variables()) n += v.value().numel();
  return n;
}

// Tags of the point-to-point messages: the activation of v for micro-batch m travels from v to v + 1 under
// tag(v, m, false), the gradient of that activation back under tag(v, m, true).
int message_tag(int virtual_stage, int micro_batch, int micro_batches, bool gradient) {
  return (virtual_stage * micro_batches + micro_batch) * 2 + (gradient ? 1 : 0);
}

// One optimizer step: the weights that take it, their gradients, and the step's loss.
struct StepUpdate {
  std::vector<Tensor> grads;
  std::vector<Variable> vars;
  double loss = 0;
};

// The step of `weights` from `grads` (one per weight, undefined where a weight has none) of a batch of `rows`
// examples whose mean loss is `loss`; with `replicas`, the rows-weighted mean over every replica's (see
// PipelineOptions::replicas) — one float32 collective holding each replica's gradients times its rows, which
// weights have one, its rows times its loss, and its rows. A weight takes the step if some replica has its gradient.
StepUpdate step_update(comm::Communicator* replicas, const std::vector<Variable>& weights,
                       const std::vector<Tensor>& grads, int64_t rows, double loss, std::chrono::milliseconds timeout) {
  StepUpdate out;
  out.loss = loss;
  if (!replicas) {
    for (size_t i = 0; i < weights.size(); ++i) {
      if (!grads[i].defined()) continue;
      out.grads.push_back(grads[i]);
      out.vars.push_back(weights[i]);
    }
    return out;
  }
  int64_t numel = 0;
  for (const Variable& w : weights) numel += w.value().numel();
  const auto n = static_cast<int64_t>(weights.size());
  Tensor flat = Tensor::zeros({numel + n + 2});
  float* at = flat.data<float>();
  float* flags = at + numel;
  float* tail = flags + n;
  const auto weight = static_cast<float>(rows);
  for (size_t i = 0; i < weights.size(); ++i) {
    const int64_t size = weights[i].value().numel();
    if (grads[i].defined()) {
      const float* src = grads[i].data<float>();
      for (int64_t k = 0; k < size; ++k) at[k] = src[k] * weight;
      flags[i] = 1;
    }
    at += size;
  }
  tail[0] = rows > 0 && std::isfinite(loss) ? static_cast<float>(loss) * weight : 0.0f;
  tail[1] = weight;
  replicas->all_reduce({flat}, comm::AllReduceOptions{.op = comm::ReduceOp::kSum, .timeout = timeout})->wait();
  const float total = tail[1];
  out.loss = total > 0 ? tail[0] / total : std::nan("");
  if (total <= 0) return out;  // no replica had an example: no step
  int64_t offset = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const int64_t size = weights[i].value().numel();
    if (flags[i] > 0) {
      out.grads.push_back(kernels::affine(flat.slice(offset, offset + size).reshape(weights[i].shape()), 1 / total, 0));
      out.vars.push_back(weights[i]);
    }
    offset += size;
  }
  return out;
}

}  // namespace

std::vector<StageLayers> split_at(const std::vector<std::shared_ptr<nn::Layer>>& layers,
                                  const std::vector<int>& bounds) {
  std::vector<StageLayers> pieces;
  int begin = 0;
  for (size_t i = 0; i <= bounds.size(); ++i) {
    const int end = i < bounds.size() ? bounds[i] : static_cast<int>(layers.size());
    STRATA_CHECK(
        end > begin && end <= static_cast<int>(layers.size()), InvalidArgument,
        "pipeline: stage bounds must rise strictly inside (0, " << layers.size() << "); bound " << i << " is " << end);
    pieces.emplace_back(layers.begin() + begin, layers.begin() + end);
    begin = end;
  }
  return pieces;
}

namespace {

// Where to cut `costs` (one per layer) into `pieces` consecutive non-empty ranges so that the costliest range costs
// least: the start of ranges 1 .. pieces-1.
std::vector<int> balanced_bounds(const std::vector<double>& costs, int pieces) {
  const int n = static_cast<int>(costs.size());
  STRATA_CHECK(pieces >= 1 && pieces <= n, InvalidArgument,
               "pipeline: cannot cut " << n << " layers into " << pieces << " stages");
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  // best[k][i]: the smallest possible largest piece when the first i layers form k pieces; cut[k][i] its last cut.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(pieces + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(pieces + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= pieces; ++k) {
    for (int i = k; i <= n; ++i) {
      for (int j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == inf) continue;
        const double largest = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (largest < best[k][i]) {
          best[k][i] = largest;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<int> bounds(pieces - 1);
  for (int k = pieces, i = n; k > 1; --k) {
    i = cut[k][i];
    bounds[k - 2] = i;
  }
  return bounds;
}

}  // namespace

std::vector<StageLayers> split_by_parameters(const std::vector<std::shared_ptr<nn::Layer>>& layers, int pieces) {
  std::vector<double> costs;
  for (const auto& layer : layers) {
    // An unbuilt layer has no weights yet: its count would be 0 and the cut lopsided.
    STRATA_CHECK(layer->built(), InvalidArgument,
                 "pipeline: layer '" << layer->name()
                                     << "' is not built, so its parameters cannot be counted; "
                                        "build the model (call it once) before cutting it");
    costs.push_back(static_cast<double>(trainable_count(*layer)));
  }
  return split_at(layers, balanced_bounds(costs, pieces));
}

std::vector<StageLayers> split_by_time(const std::vector<std::shared_ptr<nn::Layer>>& layers, int pieces,
                                       const Tensor& sample, int repeats) {
  STRATA_CHECK(repeats >= 1, InvalidArgument, "pipeline: split_by_time needs at least one repeat");
  std::vector<double> costs(layers.size(), std::numeric_limits<double>::infinity());
  for (int r = 0; r < repeats; ++r) {
    Tensor x = sample;
    for (size_t i = 0; i < layers.size(); ++i) {
      const auto start = Clock::now();
      GradientTape tape;
      Variable in(x, /*trainable=*/false);
      tape.watch(in);
      Variable out = (*layers[i])(in, /*training=*/false);  // no state changes (BatchNormalization's statistics)
      std::vector<Variable> sources = layers[i]->trainable_variables();
      sources.push_back(in);
      tape.gradient(out, sources, Tensor::ones(out.shape()), UnconnectedGradients::kZero);
      costs[i] = std::min(costs[i], std::chrono::duration<double>(Clock::now() - start).count());
      x = out.value();
    }
  }
  return split_at(layers, balanced_bounds(costs, pieces));
}

// ---- one stage

struct PipelineStage::Impl {
  // What a forward leaves for its backward.
  struct InFlight {
    std::unique_ptr<GradientTape> tape;
    Variable input;   // watched when the virtual stage receives it (v > 0)
    Variable output;  // the activation, or the scaled loss on the last virtual stage
    // Each layer's output, and (after a kBackwardInput) the gradient reaching it: a kBackwardWeight then runs each
    // layer's weight gradient from there, without redoing the backward through the layers after it.
    std::vector<Variable> layer_outputs;
    std::vector<Tensor> layer_output_grads;
    // For a stage that recomputes: what the rerun needs (the graph above is then made just before the backward).
    Tensor y_micro;
    float loss_share = 1;
    Generator::State rng;
    bool tape_rerun = false;  // the forward has run once already (predictions shown, loss counted)
    int64_t kept_bytes = 0;   // the activations this entry holds
  };
  using Key = std::pair<int, int>;  // (virtual stage, micro-batch)

  Schedule schedule;
  int stage = 0;
  std::map<int, StageLayers> chunks;  // this stage's virtual stages
  std::map<int, Shape> input_shapes;  // every virtual stage v > 0: v's input for one example (no batch axis)
  std::shared_ptr<losses::Loss> loss;
  std::shared_ptr<optim::Optimizer> optimizer;  // null: the gradients wait in `pending_*`
  std::shared_ptr<comm::Communicator> comm;
  PipelineOptions options;
  std::vector<Variable> weights;
  // Per own virtual stage, per layer: indices into `weights`.
  std::map<int, std::vector<std::vector<size_t>>> layer_weights_of;
  StageTiming timing;

  // Per step.
  std::map<Key, InFlight> in_flight;
  std::map<Key, Tensor> inputs;           // v's input activations, received, not used yet
  std::map<Key, Tensor> output_grads;     // gradients of v's output, received, not used yet
  std::map<Key, Tensor> activations_out;  // v's output, to send to v + 1
  std::map<Key, Tensor> input_grads_out;  // the gradient of v's input, to send to v - 1
  std::vector<Tensor> grads;              // summed over micro-batches, per weight
  std::vector<std::shared_ptr<comm::Work>> sends;
  double step_loss = 0;
  int peak_activations = 0;
  int64_t kept_bytes = 0, peak_kept_bytes = 0;
  bool recomputes = false;      // options.recompute_stages names this stage
  Clock::time_point failed_at;  // of the last failed step, taken before this stage aborted the others
  // Without an optimizer (a ThreadPipeline's stage), the step's summed gradients wait here for the pipeline's one.
  std::vector<Tensor> pending_grads;
  std::vector<Variable> pending_vars;

  // After the schedule: the step's gradients applied with the stage's optimizer (reduced over the replicas first,
  // when there are any), or left in `pending_*` for a ThreadPipeline's.
  void finish_step(int64_t batch) {
    if (!optimizer) {
      pending_grads = grads;  // one per weight, undefined where the step gave none
      pending_vars = weights;
      return;
    }
    StepUpdate update = step_update(options.replicas, weights, grads, batch, step_loss, options.timeout);
    step_loss = update.loss;
    if (!update.vars.empty()) optimizer->apply_gradients(update.grads, update.vars);
  }

  int last_virtual_stage() const { return schedule.virtual_stages() - 1; }
  bool holds(int v) const { return v >= 0 && v <= last_virtual_stage() && schedule.stage_of(v) == stage; }

  static Shape batched(const Shape& example, int64_t rows) {
    Shape s = {rows};
    s.insert(s.end(), example.begin(), example.end());
    return s;
  }

  static Tensor take(std::map<Key, Tensor>& from, int v, int m) {
    auto it = from.find({v, m});
    if (it == from.end()) return Tensor();
    Tensor t = std::move(it->second);
    from.erase(it);
    return t;
  }

  void accumulate(size_t weight, const Tensor& g) {
    if (!g.defined()) return;
    if (!grads[weight].defined()) {
      grads[weight] = g.clone();
    } else {
      kernels::axpy_(grads[weight], 1.0f, g);
    }
  }

  void forward(int v, int m, const Tensor& x_micro, const Tensor& y_micro, int64_t batch) {
    trace::Span span("compute", "forward");  // one micro-batch on one (virtual) stage
    InFlight f;
    if (v == 0) {
      f.input = Variable(x_micro, /*trainable=*/false);
    } else {
      const Tensor in = take(inputs, v, m);
      STRATA_CHECK(in.defined(), Error, "pipeline stage " << stage << ": no input for F v" << v << " m" << m);
      f.input = Variable(in, /*trainable=*/false);
    }
    f.y_micro = y_micro;
    f.loss_share = static_cast<float>(static_cast<double>(y_micro.dim(0)) / static_cast<double>(batch));
    f.rng = default_generator().state();
    Tensor out;
    if (recomputes) {  // the values only; the graph is made again before the backward
      NoGradGuard no_graph;
      out = run_layers(f, v, /*keep_graph=*/false);
      f.kept_bytes = static_cast<int64_t>(f.input.value().nbytes());
    } else {
      out = run_layers(f, v, /*keep_graph=*/true);
      f.kept_bytes = static_cast<int64_t>(f.input.value().nbytes());
      for (const Variable& o : f.layer_outputs) f.kept_bytes += static_cast<int64_t>(o.value().nbytes());
    }
    if (v == last_virtual_stage()) {
      step_loss += static_cast<double>(out.item<float>());
    } else if (holds(v + 1)) {  // the next virtual stage is here too (a one-stage pipeline): no message
      inputs[{v + 1, m}] = out;
    } else {
      activations_out[{v, m}] = out;
    }
    kept_bytes += f.kept_bytes;
    peak_kept_bytes = std::max(peak_kept_bytes, kept_bytes);
    in_flight[{v, m}] = std::move(f);
    peak_activations = std::max(peak_activations, static_cast<int>(in_flight.size()));
  }

  // v's layers on f.input (then the scaled loss on the last virtual stage): the output's value. With `keep_graph`,
  // recorded on a new tape, with each layer's output and the output kept in `f`.
  Tensor run_layers(InFlight& f, int v, bool keep_graph) {
    if (keep_graph) {
      f.tape = std::make_unique<GradientTape>(GradientTapeOptions{.persistent = true});
      if (v > 0) f.tape->watch(f.input);
    }
    Variable out = f.input;
    for (const auto& layer : chunks.at(v)) {
      out = (*layer)(out, /*training=*/true);
      if (keep_graph) f.layer_outputs.push_back(out);
    }
    if (v == last_virtual_stage()) {
      if (options.on_predictions && !f.tape_rerun) options.on_predictions(f.y_micro, out.value());
      out = (*loss)(Variable(f.y_micro, /*trainable=*/false), out) * f.loss_share;
    }
    if (keep_graph) f.output = out;
    return out.value();
  }

  // A recomputing stage's forward again, recorded, before the first backward action of (v, m): the same random
  // numbers as the first time, and the layers' state (e.g. moving statistics) left as the first forward left it.
  void rerun_forward(InFlight& f, int v) {
    std::vector<std::pair<Variable, Tensor>> state;
    for (const auto& layer : chunks.at(v)) {
      for (Variable s : layer->non_trainable_variables()) state.emplace_back(s, s.value().clone());
    }
    const Generator::State now = default_generator().state();
    default_generator().set_state(f.rng);
    f.tape_rerun = true;
    run_layers(f, v, /*keep_graph=*/true);
    default_generator().set_state(now);
    for (auto& [s, value] : state) s.assign(value);
  }

  // kBackward (input and weights), kBackwardInput (input only) or kBackwardWeight (weights only).
  void backward(ActionKind kind, int v, int m) {
    trace::Span span("compute", kind == ActionKind::kBackwardWeight  ? "backward (weights)"
                                : kind == ActionKind::kBackwardInput ? "backward (input)"
                                                                     : "backward");
    auto it = in_flight.find({v, m});
    STRATA_CHECK(it != in_flight.end(), Error,
                 "pipeline stage " << stage << ": backward of v" << v << " m" << m << " before its forward");
    InFlight& f = it->second;
    if (!f.tape) rerun_forward(f, v);
    const bool last_action = kind != ActionKind::kBackwardInput;
    Tensor seed;
    if (v == last_virtual_stage()) {
      seed = Tensor::ones(f.output.shape());
    } else {
      auto g = output_grads.find({v, m});
      STRATA_CHECK(g != output_grads.end(), Error,
                   "pipeline stage " << stage << ": no output gradient for the backward of v" << v << " m" << m);
      seed = g->second;
      if (last_action) output_grads.erase(g);
    }
    switch (kind) {
      case ActionKind::kBackward: {  // one pass for the input's gradient and every weight's
        std::vector<size_t> own;
        for (const auto& layer : layer_weights_of[v]) own.insert(own.end(), layer.begin(), layer.end());
        std::vector<Variable> sources;
        if (v > 0) sources.push_back(f.input);
        for (size_t w : own) sources.push_back(weights[w]);
        if (sources.empty()) break;
        const std::vector<Tensor> g = f.tape->gradient(f.output, sources, seed, UnconnectedGradients::kZero);
        size_t next = 0;
        if (v > 0) pass_input_grad(v, m, g[next++]);
        for (size_t w : own) accumulate(w, g[next++]);
        break;
      }
      case ActionKind::kBackwardInput: {  // the input's gradient, keeping the gradient at every layer's output
        std::vector<Variable> sources = f.layer_outputs;
        if (v > 0) sources.push_back(f.input);
        std::vector<Tensor> g = f.tape->gradient(f.output, sources, seed, UnconnectedGradients::kZero);
        if (v > 0) {
          pass_input_grad(v, m, g.back());
          g.pop_back();
        }
        f.layer_output_grads = std::move(g);
        break;
      }
      default: {  // kBackwardWeight: each layer's weights from the gradient at its output
        STRATA_CHECK(f.layer_output_grads.size() == f.layer_outputs.size(), Error,
                     "pipeline stage " << stage << ": BW v" << v << " m" << m << " before its BI");
        const auto& per_layer = layer_weights_of[v];
        for (size_t l = 0; l < per_layer.size(); ++l) {
          if (per_layer[l].empty() || !f.layer_output_grads[l].defined()) continue;
          std::vector<Variable> sources;
          for (size_t w : per_layer[l]) sources.push_back(weights[w]);
          const std::vector<Tensor> g =
              f.tape->gradient(f.layer_outputs[l], sources, f.layer_output_grads[l], UnconnectedGradients::kZero);
          for (size_t i = 0; i < per_layer[l].size(); ++i) accumulate(per_layer[l][i], g[i]);
        }
        break;
      }
    }
    if (last_action) {  // the activations live until the last backward action of (v, m)
      kept_bytes -= f.kept_bytes;
      in_flight.erase(it);
    }
  }

  // The gradient of v's input goes to v - 1: here when v - 1 is on this stage, else to be sent (SG v m).
  void pass_input_grad(int v, int m, Tensor grad) {
    if (holds(v - 1)) {
      output_grads[{v - 1, m}] = std::move(grad);
    } else {
      input_grads_out[{v, m}] = std::move(grad);
    }
  }

  // SA v m: v's output to v + 1; SG v m: the gradient of v's input to v - 1.
  void send(int v, int m, bool gradient) {
    Tensor t = take(gradient ? input_grads_out : activations_out, v, m);
    STRATA_CHECK(
        t.defined(), Error,
        "pipeline stage " << stage << ": nothing to send for " << (gradient ? "SG" : "SA") << " v" << v << " m" << m);
    const int edge = gradient ? v - 1 : v;  // a message is tagged by the lower virtual stage of its edge
    sends.push_back(
        comm->send({t}, schedule.stage_of(gradient ? v - 1 : v + 1),
                   {.tag = message_tag(edge, m, schedule.micro_batches, gradient), .timeout = options.timeout}));
  }

  // RA v m: v's input from v - 1; RG v m: the gradient of v's output (v + 1's input) from v + 1.
  void recv(int v, int m, bool gradient, int64_t rows) {
    const int edge = gradient ? v : v - 1;
    Tensor t = Tensor::empty(batched(input_shapes.at(edge + 1), rows));
    comm->recv({t}, schedule.stage_of(gradient ? v + 1 : v - 1),
               {.tag = message_tag(edge, m, schedule.micro_batches, gradient), .timeout = options.timeout})
        ->wait();
    (gradient ? output_grads : inputs)[{v, m}] = std::move(t);
  }

  void clear_step() {
    in_flight.clear();
    inputs.clear();
    output_grads.clear();
    activations_out.clear();
    input_grads_out.clear();
    sends.clear();
    grads.clear();
  }

  void run_step(const Tensor& x, const Tensor& y);
};

PipelineStage::PipelineStage(const std::vector<StageLayers>& virtual_stages, int stage, Schedule schedule,
                             std::shared_ptr<losses::Loss> loss, const optim::Optimizer& optimizer,
                             std::shared_ptr<comm::Communicator> comm, PipelineOptions options)
    : impl_(std::make_unique<Impl>()) {
  check(schedule);
  STRATA_CHECK(static_cast<int>(virtual_stages.size()) == schedule.virtual_stages(), InvalidArgument,
               "pipeline: schedule '" << schedule.name << "' runs " << schedule.virtual_stages()
                                      << " virtual stages, the model is cut into " << virtual_stages.size());
  STRATA_CHECK(stage >= 0 && stage < schedule.stages, InvalidArgument,
               "pipeline: stage " << stage << " of " << schedule.stages);
  STRATA_CHECK(comm && comm->size() == schedule.stages && comm->rank() == stage, InvalidArgument,
               "pipeline: stage " << stage << " needs rank " << stage << " of a communicator of " << schedule.stages
                                  << " ranks");
  STRATA_CHECK(loss, InvalidArgument, "pipeline: no loss");
  Impl& s = *impl_;
  s.schedule = std::move(schedule);
  s.stage = stage;
  s.loss = std::move(loss);
  s.optimizer = optimizer.clone();
  s.comm = std::move(comm);
  s.options = std::move(options);
  s.recomputes = std::find(s.options.recompute_stages.begin(), s.options.recompute_stages.end(), stage) !=
                 s.options.recompute_stages.end();
  // Every virtual stage's input shape, from one example through the whole model (no weight changes).
  {
    NoGradGuard no_grad;
    Variable x(Tensor::zeros(Impl::batched(s.options.example_shape, 1)), /*trainable=*/false);
    for (int v = 0; v < static_cast<int>(virtual_stages.size()); ++v) {
      STRATA_CHECK(!virtual_stages[v].empty(), InvalidArgument, "pipeline: virtual stage " << v << " has no layers");
      if (v > 0) s.input_shapes[v] = Shape(x.shape().begin() + 1, x.shape().end());
      for (const auto& layer : virtual_stages[v]) x = (*layer)(x, /*training=*/false);
    }
  }
  for (int v = 0; v < static_cast<int>(virtual_stages.size()); ++v) {
    if (s.schedule.stage_of(v) != stage) continue;
    s.chunks[v] = virtual_stages[v];
    for (const auto& layer : virtual_stages[v]) {
      s.layer_weights_of[v].emplace_back();
      // A penalty's gradient would be this stage's alone and its value missing from the loss the last stage
      // reports; until the stages exchange it, say so rather than train something else.
      STRATA_CHECK(!layer->regularization_loss().defined(), InvalidArgument,
                   "pipeline: layer '" << layer->name()
                                       << "' has a weight regularizer, which pipeline stages do not "
                                          "apply yet");
      for (const Variable& w : layer->trainable_variables()) {
        s.layer_weights_of[v].back().push_back(s.weights.size());
        s.weights.push_back(w);
      }
    }
  }
}

PipelineStage::~PipelineStage() = default;

int PipelineStage::stage() const { return impl_->stage; }
bool PipelineStage::holds_loss() const { return impl_->holds(impl_->last_virtual_stage()); }
std::vector<Variable> PipelineStage::trainable_variables() const { return impl_->weights; }
const StageTiming& PipelineStage::last_timing() const { return impl_->timing; }

void PipelineStage::Impl::run_step(const Tensor& x, const Tensor& y) {
  const int micro_batches = schedule.micro_batches;
  const int64_t batch = y.dim(0);
  grads.assign(weights.size(), Tensor());
  step_loss = 0;
  if (batch == 0 && options.replicas) {  // this replica's share is empty: it only takes the replicas' step
    timing = StageTiming{};
    finish_step(batch);
    return;
  }
  STRATA_CHECK(batch >= micro_batches, InvalidArgument,
               "pipeline: a batch of " << batch << " examples cannot make " << micro_batches << " micro-batches");
  STRATA_CHECK(stage != 0 || (x.defined() && x.dim(0) == batch), InvalidArgument,
               "pipeline: stage 0 needs the batch's inputs, " << batch << " of them");
  const auto rows = [&](int m) { return batch / micro_batches + (m < batch % micro_batches ? 1 : 0); };
  const auto first_row = [&](int m) {
    return static_cast<int64_t>(m) * (batch / micro_batches) + std::min<int64_t>(m, batch % micro_batches);
  };
  peak_activations = 0;
  kept_bytes = peak_kept_bytes = 0;
  const auto start = Clock::now();
  double compute = 0;
  for (const Action& a : schedule.actions[stage]) {
    const int v = a.virtual_stage, m = a.micro_batch;
    const auto t0 = Clock::now();
    switch (a.kind) {
      case ActionKind::kForward: {
        const int64_t begin = first_row(m), end = begin + rows(m);
        forward(v, m, v == 0 ? x.slice(begin, end) : Tensor(), y.slice(begin, end), batch);
        compute += std::chrono::duration<double>(Clock::now() - t0).count();
        break;
      }
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
      case ActionKind::kBackwardWeight:
        backward(a.kind, v, m);
        compute += std::chrono::duration<double>(Clock::now() - t0).count();
        break;
      case ActionKind::kSendActivation:
        send(v, m, /*gradient=*/false);
        break;
      case ActionKind::kSendGradient:
        send(v, m, /*gradient=*/true);
        break;
      case ActionKind::kRecvActivation:
        recv(v, m, /*gradient=*/false, rows(m));
        break;
      case ActionKind::kRecvGradient:
        recv(v, m, /*gradient=*/true, rows(m));
        break;
    }
  }
  for (const auto& w : sends) w->wait();
  timing.step_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  timing.compute_seconds = compute;
  timing.peak_activations = peak_activations;
  timing.peak_activation_bytes = peak_kept_bytes;
  finish_step(batch);
}

float PipelineStage::train_step(const Tensor& x, const Tensor& y) {
  Impl& s = *impl_;
  try {
    s.run_step(x, y);
  } catch (const std::exception& e) {
    s.failed_at = Clock::now();
    // The other stages would wait for this one's messages until their timeout: end their waits now.
    s.comm->abort("pipeline stage " + std::to_string(s.stage) + " failed: " + e.what());
    s.clear_step();
    throw;
  }
  s.clear_step();
  return holds_loss() ? static_cast<float>(s.step_loss) : std::nanf("");
}

// ---- stages as threads

struct ThreadPipeline::Impl {
  std::vector<std::unique_ptr<PipelineStage>> stages;
  std::shared_ptr<optim::Optimizer> optimizer;
  comm::Communicator* replicas = nullptr;  // PipelineOptions::replicas
  std::chrono::milliseconds timeout{0};
  int threads_per_stage = 1;
  // Each stage thread's random numbers (e.g. Dropout's), carried from step to step: a fresh thread's default
  // generator would start over every step.
  std::vector<Generator> generators;
};

ThreadPipeline::ThreadPipeline(const std::vector<StageLayers>& virtual_stages, Schedule schedule,
                               std::shared_ptr<losses::Loss> loss, std::shared_ptr<optim::Optimizer> optimizer,
                               PipelineOptions options)
    : impl_(std::make_unique<Impl>()) {
  check(schedule);
  STRATA_CHECK(optimizer, InvalidArgument, "pipeline: no optimizer");
  const int n = schedule.stages;
  auto group = comm::make_local_group(n);
  impl_->optimizer = std::move(optimizer);
  impl_->replicas = options.replicas;
  impl_->timeout = options.timeout;
  impl_->threads_per_stage = std::max(1, num_threads() / n);  // the constructing thread's cores, shared out
  for (int i = 0; i < n; ++i) {
    impl_->stages.push_back(
        std::make_unique<PipelineStage>(virtual_stages, i, schedule, loss, *impl_->optimizer, group[i], options));
    impl_->stages.back()->impl_->optimizer.reset();
    impl_->generators.push_back(default_generator().split(default_generator().state().stream + 1 + i));
  }
}

ThreadPipeline::ThreadPipeline(const std::vector<StageLayers>& virtual_stages, Schedule schedule,
                               std::shared_ptr<losses::Loss> loss, const optim::Optimizer& optimizer,
                               PipelineOptions options)
    : ThreadPipeline(virtual_stages, std::move(schedule), std::move(loss), optimizer.clone(), std::move(options)) {}

ThreadPipeline::~ThreadPipeline() = default;

float ThreadPipeline::train_step(const Tensor& x, const Tensor& y) {
  const int n = static_cast<int>(impl_->stages.size());
  std::vector<std::exception_ptr> errors(n);
  std::vector<float> losses(n, std::nanf(""));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      trace::name_thread("stage " + std::to_string(i));
      ScopedNumThreads cores(impl_->threads_per_stage);
      default_generator() = impl_->generators[i];
      try {
        losses[i] = impl_->stages[i]->train_step(x, y);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      impl_->generators[i] = default_generator();
    });
  }
  for (auto& t : threads) t.join();
  // The stage that failed first has the cause; the others failed on the abort it sent them.
  int first = -1;
  for (int i = 0; i < n; ++i) {
    if (errors[i] && (first < 0 || impl_->stages[i]->impl_->failed_at < impl_->stages[first]->impl_->failed_at))
      first = i;
  }
  if (first >= 0) std::rethrow_exception(errors[first]);
  std::vector<Tensor> grads;
  std::vector<Variable> vars;
  double loss = std::nan("");
  for (const auto& stage : impl_->stages) {
    PipelineStage::Impl& s = *stage->impl_;
    grads.insert(grads.end(), s.pending_grads.begin(), s.pending_grads.end());
    vars.insert(vars.end(), s.pending_vars.begin(), s.pending_vars.end());
    s.pending_grads.clear();
    s.pending_vars.clear();
    if (stage->holds_loss()) loss = s.step_loss;
  }
  StepUpdate update = step_update(impl_->replicas, vars, grads, y.dim(0), loss, impl_->timeout);
  if (!update.vars.empty()) impl_->optimizer->apply_gradients(update.grads, update.vars);
  return static_cast<float>(update.loss);
}

std::vector<StageTiming> ThreadPipeline::last_timings() const {
  std::vector<StageTiming> out;
  for (const auto& s : impl_->stages) out.push_back(s->last_timing());
  return out;
}

double ThreadPipeline::last_bubble_fraction() const {
  double longest = 0, compute = 0;
  for (const auto& s : impl_->stages) {
    longest = std::max(longest, s->last_timing().step_seconds);
    compute += s->last_timing().compute_seconds;
  }
  return longest > 0 ? 1.0 - compute / (longest * static_cast<double>(impl_->stages.size())) : 0.0;
}

}  // namespace strata::parallel
