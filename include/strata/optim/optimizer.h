// Optimizer: the base of every optimizer (see strata/optim/optimizers.h), like keras.optimizers.Optimizer.
//
//   optim::Adam adam({.learning_rate = 1e-3, .global_clipnorm = 1.0f});
//   auto grads = tape.gradient(loss, vars);
//   adam.apply_gradients(grads, vars);
//
// apply_gradients does, like Keras: skip variables whose gradient is undefined; clip (clipnorm per
// variable, or global_clipnorm over all, or clipvalue per element: at most one may be set); decay
// weights (var -= var * weight_decay * lr, decoupled as in AdamW); then one update pass per variable
// that reads the gradient, the variable and its slots once and writes them in place (large variables
// are split over parallel_for). Slots ("m", "v", ...) are made the first time a variable is seen, on its
// device, and reused; a step allocates no tensors. A variable on a GPU (OneDeviceStrategy("/gpu:N")) is updated
// there by one kernel over it, its gradient and its slots, queued on the device's stream (the step does not wait
// for it); only clipping by norm reads a value (the norm) back to the host. The learning rate of a step is
// schedule(iterations()), and iterations() counts the apply_gradients calls.
//
// Checkpoints: state(vars) lists every slot as "<variable name>/<slot>" plus "iterations" (int64
// scalar); load_state restores them. Variable names must be unique among `vars` (unnamed variables
// are called "variable_<index>").
//
// minimize(loss, vars, tape) is tape.gradient then apply_gradients (Keras's minimize). On a replica it
// also tells the strategy first that the gradients go to this optimizer unchanged, so MirroredStrategy
// can update each variable as soon as its gradient is summed, during backward (Model::fit uses it).
//
// Distribution: on a replica thread (a strategy's GradientAggregator installed, see strata/aggregation.h)
// apply_gradients hands the gradients to the aggregator, which reduces them across replicas and runs
// this optimizer's update once per step: it writes every component of a mirrored variable (the copies
// stay equal), so each variable has one set of slots whatever the number of replicas.
//
// Thread-safety: not synchronised. One thread at a time may call the non-const methods, except that
// the replicas of a strategy may call apply_gradients together (the aggregator orders the shared parts).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "strata/aggregation.h"
#include "strata/gradient_tape.h"
#include "strata/optim/schedules.h"
#include "strata/variable.h"

namespace strata::optim {

// An optimizer's configuration, as Keras's get_config(): its name, the options every optimizer shares (each
// optimizer's Options struct carries the same fields so that designated initialisers can name them), and its own
// hyperparameters by Keras's names. Optimizer::config() returns it and optim::from_config (optimizers.h) makes the
// same optimizer from it, so one config describes an optimizer to the job file, the ps and the strategy alike.
struct OptimizerConfig {
  std::string name;  // "sgd", "adam", "adamw", "rmsprop", "adagrad" (Optimizer::name())
  LearningRate learning_rate = 0.001;
  std::optional<float> clipnorm{};         // clip each variable's gradient to this L2 norm
  std::optional<float> clipvalue{};        // clip each gradient element to [-clipvalue, clipvalue]
  std::optional<float> global_clipnorm{};  // clip all gradients together to this global L2 norm
  std::optional<float> weight_decay{};     // decoupled: var -= var * weight_decay * lr before the update
  // The optimizer's own hyperparameters, flags as 0 or 1: sgd {momentum, nesterov}; adam and adamw {beta_1, beta_2,
  // epsilon, amsgrad} (adamw's weight_decay is the field above); rmsprop {rho, momentum, epsilon, centered}; adagrad
  // {initial_accumulator_value, epsilon}. from_config gives a missing one the optimizer's default.
  std::map<std::string, double> hyperparameters;
};

class Optimizer {
 public:
  // A per-variable slot and the value it starts from.
  struct SlotSpec {
    std::string name;
    float initial_value = 0.0f;
  };

  virtual ~Optimizer();

  // Updates each variable with its gradient (Keras order: gradient first). Undefined gradients are
  // skipped; all undefined throws InvalidArgument. Gradients must be float32 tensors shaped like their
  // variables, on the variable's device.
  void apply_gradients(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars);
  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);
  // tape.gradient(loss, vars, unconnected), then apply_gradients (see above).
  void minimize(const Variable& loss, const std::vector<Variable>& vars, GradientTape& tape,
                UnconnectedGradients unconnected = UnconnectedGradients::kNone);
  // Makes the slots of `vars` now (apply_gradients does it on first sight).
  void build(const std::vector<Variable>& vars);

  int64_t iterations() const { return iterations_; }
  // The learning rate the next update will use: the schedule at iterations().
  float learning_rate() const { return config_.learning_rate(iterations_); }
  // Replaces the schedule by a constant (what a LearningRateScheduler callback does).
  void set_learning_rate(float lr) { config_.learning_rate = LearningRate(lr); }
  void set_learning_rate(LearningRate lr) { config_.learning_rate = std::move(lr); }
  // Its configuration (Keras's get_config): optim::from_config(config()) makes the same optimizer with fresh state.
  const OptimizerConfig& config() const { return config_; }

  // The slot names of this optimizer ("m", "v", ...), in state() order.
  std::vector<std::string> slot_names() const;
  // Host copies of every slot of `vars` (zeros-like initial values for variables not yet seen) and
  // "iterations".
  std::vector<std::pair<std::string, Tensor>> state(const std::vector<Variable>& vars) const;
  // Restores what state(vars) returned. Checks everything before changing anything: throws
  // InvalidArgument naming a missing or unexpected name, or a slot whose shape or dtype differs.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, const std::vector<Variable>& vars);
  // The slot tensor of `var` (creating it), for tests and tools.
  Tensor slot(const Variable& var, const std::string& slot_name);

  virtual std::string name() const = 0;
  // The same configuration (the current learning rate or schedule) with fresh state.
  virtual std::shared_ptr<Optimizer> clone() const = 0;

 protected:
  static constexpr int kMaxSlots = 4;
  // What one update needs besides the tensors.
  struct StepContext {
    float lr = 0;          // learning rate of this step
    int64_t step = 1;      // 1-based: iterations() + 1
    float grad_scale = 1;  // multiply every gradient element first (clipping by norm)
    float clip_value = std::numeric_limits<float>::infinity();  // then clamp it to [-clip_value, clip_value]
    float decay = 0;  // weight_decay * lr: var -= var * decay before the update
  };

  Optimizer(OptimizerConfig config, std::vector<SlotSpec> slots);
  // Updates n elements in place. `slots` holds one pointer per SlotSpec, aligned with var/grad.
  // Must only touch [0, n) of each array: the base calls it on disjoint chunks concurrently.
  virtual void update(float* var, const float* grad, const std::array<float*, kMaxSlots>& slots, int64_t n,
                      const StepContext& ctx) const = 0;
  // The same rule on a variable on GPU `device` (every pointer into its memory, n elements), queued on that
  // device's stream without waiting for it: one pass of optim/cuda. The default throws Unavailable naming the
  // optimizer; each optimizer of optimizers.h overrides it (in a build without CUDA, with Unavailable too).
  virtual void update_on_gpu(int device, float* var, const float* grad, const std::array<float*, kMaxSlots>& slots,
                             int64_t n, const StepContext& ctx) const;

  // The gradient element as the update should see it: scaled, then clamped to [-clip, clip] (clip is
  // +inf when clipvalue is unset). Branch-free, so update loops vectorise; NaN stays NaN.
  static float clipped(float g, float scale, float clip) { return std::min(std::max(g * scale, -clip), clip); }

 private:
  class Applier;  // this optimizer as a GradientApplier
  struct Target;   // one variable's components and slots, as raw pointers
  // The slots of `var` (one tensor per SlotSpec), made on first sight.
  std::vector<Tensor>& slots_of(const Variable& var);
  Target target_of(const Variable& var);
  void apply(const std::vector<Tensor>& grads, const std::vector<Variable>& vars, Applier& applier);
  // The context of this step's update before clipping by norm.
  StepContext step_context() const;
  // This step's update of every component of each variable (iterations() is not advanced).
  void update_all(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);
  // This step's update of every component of `var` with the in-order sum of `parts` (null: zeros).
  void update_summed(const Variable& var, const std::vector<const float*>& parts);
  // The update rule on elements [begin, end) of target's component 0 (grad points at element begin's
  // gradient), then copied to its other components.
  void update_span(const Target& target, const float* grad, int64_t begin, int64_t end, const StepContext& c) const;

  OptimizerConfig config_;
  std::vector<SlotSpec> slot_specs_;
  int64_t iterations_ = 0;
  std::unordered_map<uint64_t, std::vector<Tensor>> slots_;  // by Variable::id()
};

// The global L2 norm of `tensors` (undefined ones skipped), accumulated in double.
float global_norm(const std::vector<Tensor>& tensors);
// tf.clip_by_global_norm: new tensors scaled by clip_norm / max(global_norm, clip_norm); undefined
// entries stay undefined. If `norm` is given, it receives the global norm before clipping.
std::vector<Tensor> clip_by_global_norm(const std::vector<Tensor>& tensors, float clip_norm, float* norm = nullptr);
// tf.clip_by_norm: a copy scaled to L2 norm at most clip_norm.
Tensor clip_by_norm(const Tensor& t, float clip_norm);

}  // namespace strata::optim
