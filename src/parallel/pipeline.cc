// The pipeline executor (strata/parallel/pipeline.h): a stage runs its list of a checked schedule literally,
// keeping per (virtual stage, micro-batch) the tape, the input and the output of its forward until its backward.
// With replicas, each weight's gradient goes to the replicas' gradient reducer right after the stage's last action that
// adds to it (known from the schedule), so its bucket's all-reduce overlaps the rest of the step's backward.
// Thread-safety: a PipelineStage is one thread's; ThreadPipeline runs one thread per stage for each step and joins
// them before it returns.
#include "strata/parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "distribute/gradient_reducer.h"
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

// The step of `weights` from `grads` (one per weight, undefined where a weight has none) of a batch whose mean loss
// is `loss`, without replicas.
StepUpdate local_update(const std::vector<Variable>& weights, const std::vector<Tensor>& grads, double loss) {
  StepUpdate out;
  out.loss = loss;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!grads[i].defined()) continue;
    out.grads.push_back(grads[i]);
    out.vars.push_back(weights[i]);
  }
  return out;
}

}  // namespace

// The replicas' sum of a pipeline's gradients (PipelineOptions::replicas) through the gradient reducer that
// MultiWorkerMirroredStrategy uses (distribute/gradient_reducer.h): each weight's gradient goes into its bucket as
// soon as its stage has run that weight's last backward action of the step, and a full bucket's all-reduce starts
// while the stages go on with the rest of the step. With replicas a micro-batch's loss is scaled by its rows (not by
// rows / batch), so a replica's gradients are those of its examples' summed loss; the side values are that summed
// loss and the rows, and the step divides the sums by the total rows: the rows-weighted mean over the replicas. A
// weight that no replica has a gradient for (every reducer flag 0) takes no step; no step at all when no replica had
// an example (the loss is then NaN).
// Thread-safety: add() and set_loss() from any stage thread (a ThreadPipeline's stages share one reduction);
// start() and finish() from one thread while no stage runs.
class ReplicaReduction {
 public:
  // `weights` in the order the update lists them; `final_time[i]`: when weight i's gradient is final in a step,
  // relative to the others (the simulated schedule's time, or the action's index on one stage). The buckets are
  // planned in that order, the weights final first in the first bucket, the same on every replica.
  ReplicaReduction(comm::Communicator& replicas, std::vector<Variable> weights, const std::vector<double>& final_time,
                   int64_t bytes_per_pack, std::chrono::milliseconds timeout)
      : weights_(std::move(weights)),
        source_of_(weights_.size()),
        reducer_(
            replicas, "pipeline", bytes_per_pack, [](const Variable&) { return true; }, comm::Compression::kNone,
            timeout) {
    std::vector<size_t> order(weights_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // The reducer plans from the back of its list: the latest final first.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return final_time[a] > final_time[b]; });
    for (size_t k = 0; k < order.size(); ++k) {
      source_of_[order[k]] = k;
      sources_.push_back(weights_[order[k]]);
    }
  }

  // A step begins on this replica, with `rows` examples (none: its loss is 0 already).
  void start(int64_t rows) {
    std::lock_guard<std::mutex> lock(mu_);
    rows_ = rows;
    loss_ = 0;
    loss_set_ = rows == 0;
    begun_ = false;
  }
  // The replica's summed loss, from the stage holding the loss once its last forward ran (0 where no stage of the
  // group holds it): before any weight's gradient is final, since every backward waits for the loss's forward.
  void set_loss(double summed_loss) {
    std::lock_guard<std::mutex> lock(mu_);
    loss_ = std::isfinite(summed_loss) ? summed_loss : 0.0;
    loss_set_ = true;
  }
  // weights[weight]'s gradient of this step, final (undefined: none on this replica); copied into its bucket.
  void add(size_t weight, const Tensor& grad) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!begun_) begin_locked();
    reducer_.add(source_of_[weight], grad);
  }
  // After every weight was added: the step, once the sums are in.
  StepUpdate finish() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!begun_) begin_locked();  // no weight here: the loss and rows still travel
    reducer_.end();
    {
      trace::Span span("comm", "gradient wait");
      reducer_.wait_all();
    }
    const std::vector<double> sums = reducer_.side_sums();
    const double total = sums[1];
    StepUpdate out;
    out.loss = total > 0 ? sums[0] / total : std::nan("");
    if (total <= 0) return out;  // no replica had an example: no step
    const auto scale = static_cast<float>(1.0 / total);
    for (size_t i = 0; i < weights_.size(); ++i) {
      const Tensor sum = reducer_.reduced(source_of_[i], weights_[i].shape());
      if (!sum.defined()) continue;
      out.grads.push_back(kernels::affine(sum, scale, 0));
      out.vars.push_back(weights_[i]);
    }
    return out;
  }

 private:
  void begin_locked() {
    STRATA_CHECK(loss_set_, Error, "pipeline: a gradient was final before the step's loss was known");
    reducer_.begin(sources_, 0, {loss_, static_cast<double>(rows_)});
    begun_ = true;
  }

  std::mutex mu_;
  const std::vector<Variable> weights_;  // in the update's order
  std::vector<size_t> source_of_;        // per weight: its index among the reducer's sources
  std::vector<Variable> sources_;        // the latest final first
  distribute::detail::GradientReducer reducer_;
  int64_t rows_ = 0;
  double loss_ = 0;
  bool loss_set_ = false, begun_ = false;
};

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
  std::shared_ptr<optim::Optimizer> optimizer;  // null: the gradients wait in `pending_*` (or go to `reduction`)
  std::shared_ptr<comm::Communicator> comm;
  PipelineOptions options;
  std::vector<Variable> weights;
  // Per own virtual stage, per layer: indices into `weights`.
  std::map<int, std::vector<std::vector<size_t>>> layer_weights_of;
  // From the schedule: per weight, the index of the stage's last action that adds to its gradient; per action, the
  // weights whose gradient is final after it; the last forward of the last virtual stage (-1: not on this stage).
  std::vector<size_t> final_action;
  std::vector<std::vector<size_t>> final_after;
  int last_loss_forward = -1;
  // With replicas: where each weight's final gradient goes, as weight reduction_offset + w of the reduction. The
  // stage's own (with its optimizer), or its ThreadPipeline's, shared by the stages.
  std::shared_ptr<ReplicaReduction> reduction;
  size_t reduction_offset = 0;
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
  // when there are any), or left for a ThreadPipeline's (in `pending_*`, or in its reduction).
  void finish_step() {
    if (!optimizer) {
      if (!reduction) {
        pending_grads = grads;  // one per weight, undefined where the step gave none
        pending_vars = weights;
      }
      return;
    }
    StepUpdate update = reduction ? reduction->finish() : local_update(weights, grads, step_loss);
    step_loss = update.loss;
    if (!update.vars.empty()) optimizer->apply_gradients(update.grads, update.vars);
  }

  // With replicas: weight w's gradient of this step is final; it goes into its bucket.
  void hand_over(size_t w) {
    reduction->add(reduction_offset + w, grads[w]);
    grads[w] = Tensor();
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
    // With replicas, the summed loss of the micro-batch's rows: the replicas' reduction weights them.
    f.loss_share = options.replicas
                       ? static_cast<float>(y_micro.dim(0))
                       : static_cast<float>(static_cast<double>(y_micro.dim(0)) / static_cast<double>(batch));
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
  // A weight's gradient is final after the last kBackward or kBackwardWeight of its virtual stage.
  const std::vector<Action>& actions = s.schedule.actions[stage];
  s.final_action.assign(s.weights.size(), 0);
  s.final_after.assign(actions.size(), {});
  for (const auto& [v, per_layer] : s.layer_weights_of) {
    size_t last = 0;
    for (size_t i = 0; i < actions.size(); ++i) {
      const ActionKind kind = actions[i].kind;
      if (actions[i].virtual_stage == v && (kind == ActionKind::kBackward || kind == ActionKind::kBackwardWeight))
        last = i;
    }
    for (const auto& layer : per_layer) {
      for (size_t w : layer) s.final_action[w] = last;
    }
  }
  for (size_t w = 0; w < s.weights.size(); ++w) s.final_after[s.final_action[w]].push_back(w);
  for (size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].kind == ActionKind::kForward && actions[i].virtual_stage == s.last_virtual_stage())
      s.last_loss_forward = static_cast<int>(i);
  }
  if (s.options.replicas) {  // the stage's own, until a ThreadPipeline gives it the pipeline's
    STRATA_CHECK(s.options.bytes_per_pack > 0, InvalidArgument,
                 "pipeline: bytes_per_pack must be > 0, got " << s.options.bytes_per_pack);
    s.reduction = std::make_shared<ReplicaReduction>(*s.options.replicas, s.weights,
                                                     std::vector<double>(s.final_action.begin(), s.final_action.end()),
                                                     s.options.bytes_per_pack, s.options.timeout);
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
  if (reduction && optimizer) {  // the stage's own reduction (a ThreadPipeline starts its own)
    reduction->start(batch);
    if (!holds(last_virtual_stage())) reduction->set_loss(0);
  }
  if (batch == 0 && options.replicas) {  // this replica's share is empty: it only takes the replicas' step
    timing = StageTiming{};
    for (size_t w = 0; w < weights.size(); ++w) hand_over(w);
    finish_step();
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
  const std::vector<Action>& actions = schedule.actions[stage];
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
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
    if (reduction) {
      if (static_cast<int>(i) == last_loss_forward) reduction->set_loss(step_loss);
      for (size_t w : final_after[i]) hand_over(w);
    }
  }
  for (const auto& w : sends) w->wait();
  timing.step_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  timing.compute_seconds = compute;
  timing.peak_activations = peak_activations;
  timing.peak_activation_bytes = peak_kept_bytes;
  finish_step();
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
  std::shared_ptr<ReplicaReduction> reduction;  // with PipelineOptions::replicas: every stage's gradients
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
  impl_->threads_per_stage = std::max(1, num_threads() / n);  // the constructing thread's cores, shared out
  for (int i = 0; i < n; ++i) {
    impl_->stages.push_back(
        std::make_unique<PipelineStage>(virtual_stages, i, schedule, loss, *impl_->optimizer, group[i], options));
    impl_->stages.back()->impl_->optimizer.reset();
    impl_->generators.push_back(default_generator().split(default_generator().state().stream + 1 + i));
  }
  if (options.replicas) {  // one reduction for every stage's weights, bucketed in the order they become final
    const Simulation simulated = simulate(schedule);
    std::vector<Variable> weights;
    std::vector<double> final_time;
    for (int i = 0; i < n; ++i) {
      PipelineStage::Impl& s = *impl_->stages[i]->impl_;
      s.reduction_offset = weights.size();
      weights.insert(weights.end(), s.weights.begin(), s.weights.end());
      for (size_t action : s.final_action) final_time.push_back(simulated.end[i][action]);
    }
    impl_->reduction = std::make_shared<ReplicaReduction>(*options.replicas, std::move(weights), final_time,
                                                          options.bytes_per_pack, options.timeout);
    for (auto& stage : impl_->stages) stage->impl_->reduction = impl_->reduction;
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
  if (impl_->reduction) impl_->reduction->start(y.dim(0));
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
  StepUpdate update;
  if (impl_->reduction) {
    update = impl_->reduction->finish();
  } else {
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
    update = local_update(vars, grads, loss);
  }
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
