// The optimizers, with Keras's defaults and update rules (keras.optimizers.SGD, Adam, AdamW, RMSprop,
// Adagrad). Each takes an Options struct for designated initialisers:
//
//   optim::SGD sgd({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
//   optim::Adam adam(1e-3);                       // just a learning rate (or a schedule)
//
// Update rules (g: the clipped gradient, lr: the step's learning rate, t: the 1-based step):
//   SGD      m = momentum * m - lr * g;  var += nesterov ? momentum * m - lr * g : m   (no momentum: var -= lr * g)
//   Adam     m += (g - m)(1 - b1);  v += (g² - v)(1 - b2);  [amsgrad: vhat = max(vhat, v), used for v]
//            var -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon)
//   AdamW    Adam after var -= var * weight_decay * lr (PyTorch's AdamW, up to where epsilon sits)
//   RMSprop  v = rho v + (1 - rho) g²;  [centered: a = rho a + (1 - rho) g, denominator v - a²]
//            step = lr * g / sqrt(denominator + epsilon);  momentum > 0: mo = momentum mo + step, var -= mo
//   Adagrad  acc += g²;  var -= lr * g / sqrt(acc + epsilon)   (acc starts at initial_accumulator_value)
// Slots: SGD "momentum"; Adam/AdamW "m", "v" (+ "vhat"); RMSprop "velocity" (+ "momentum",
// "average_gradient"); Adagrad "accumulator".
// Thread-safety: as Optimizer.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "strata/optim/optimizer.h"

namespace strata::optim {

struct SGDOptions {
  LearningRate learning_rate = 0.01;
  float momentum = 0.0f;
  bool nesterov = false;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{}, weight_decay{};
};
class SGD final : public Optimizer {
 public:
  using Options = SGDOptions;
  explicit SGD(Options options = {});
  explicit SGD(LearningRate lr) : SGD(Options{.learning_rate = std::move(lr)}) {}
  std::string name() const override { return "sgd"; }
  std::shared_ptr<Optimizer> clone() const override;
  // The options it was made with (config() holds the same, by Keras's names).
  const Options& options() const { return options_; }

 protected:
  void update(float* var, const float* grad, const std::array<float*, kMaxSlots>& slots, int64_t n,
              const StepContext& ctx) const override;
  void update_on_gpu(int device, float* var, const float* grad, const std::array<float*, kMaxSlots>& slots,
                     int64_t n, const StepContext& ctx) const override;

 private:
  Options options_;
};

struct AdamOptions {
  LearningRate learning_rate = 0.001;
  // Doubles, as Keras's Python floats: the moments' rates 1 - beta_1 and 1 - beta_2 are taken before rounding to
  // float32 (1 - 0.999 is 0.001, where 1 - 0.999f would be 0.00099998713); the bias corrections use the betas
  // rounded to float32, as Keras computes them in the variable's dtype.
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  float epsilon = 1e-7f;
  bool amsgrad = false;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{}, weight_decay{};
};
class Adam : public Optimizer {
 public:
  using Options = AdamOptions;
  explicit Adam(Options options = {});
  explicit Adam(LearningRate lr) : Adam(Options{.learning_rate = std::move(lr)}) {}
  std::string name() const override { return "adam"; }
  std::shared_ptr<Optimizer> clone() const override;
  // The options it was made with (config() holds the same, by Keras's names).
  const Options& options() const { return options_; }

 protected:
  Adam(const Options& options, OptimizerConfig config);
  void update(float* var, const float* grad, const std::array<float*, kMaxSlots>& slots, int64_t n,
              const StepContext& ctx) const override;
  void update_on_gpu(int device, float* var, const float* grad, const std::array<float*, kMaxSlots>& slots,
                     int64_t n, const StepContext& ctx) const override;

 private:
  Options options_;
};

struct AdamWOptions {
  LearningRate learning_rate = 0.001;
  float weight_decay = 0.004f;  // Keras's default (PyTorch's is 0.01)
  double beta_1 = 0.9;  // doubles, as AdamOptions'
  double beta_2 = 0.999;
  float epsilon = 1e-7f;
  bool amsgrad = false;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{};
};
class AdamW final : public Adam {
 public:
  using Options = AdamWOptions;
  explicit AdamW(Options options = {});
  explicit AdamW(LearningRate lr) : AdamW(Options{.learning_rate = std::move(lr)}) {}
  std::string name() const override { return "adamw"; }
  std::shared_ptr<Optimizer> clone() const override;

 private:
  Options options_;
};

struct RMSpropOptions {
  LearningRate learning_rate = 0.001;
  float rho = 0.9f;
  float momentum = 0.0f;
  float epsilon = 1e-7f;
  bool centered = false;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{}, weight_decay{};
};
class RMSprop final : public Optimizer {
 public:
  using Options = RMSpropOptions;
  explicit RMSprop(Options options = {});
  explicit RMSprop(LearningRate lr) : RMSprop(Options{.learning_rate = std::move(lr)}) {}
  std::string name() const override { return "rmsprop"; }
  std::shared_ptr<Optimizer> clone() const override;

 protected:
  void update(float* var, const float* grad, const std::array<float*, kMaxSlots>& slots, int64_t n,
              const StepContext& ctx) const override;
  void update_on_gpu(int device, float* var, const float* grad, const std::array<float*, kMaxSlots>& slots,
                     int64_t n, const StepContext& ctx) const override;

 private:
  Options options_;
};

struct AdagradOptions {
  LearningRate learning_rate = 0.001;
  float initial_accumulator_value = 0.1f;
  float epsilon = 1e-7f;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{}, weight_decay{};
};
class Adagrad final : public Optimizer {
 public:
  using Options = AdagradOptions;
  explicit Adagrad(Options options = {});
  explicit Adagrad(LearningRate lr) : Adagrad(Options{.learning_rate = std::move(lr)}) {}
  std::string name() const override { return "adagrad"; }
  std::shared_ptr<Optimizer> clone() const override;
  // The options it was made with (config() holds the same, by Keras's names).
  const Options& options() const { return options_; }

 protected:
  void update(float* var, const float* grad, const std::array<float*, kMaxSlots>& slots, int64_t n,
              const StepContext& ctx) const override;
  void update_on_gpu(int device, float* var, const float* grad, const std::array<float*, kMaxSlots>& slots,
                     int64_t n, const StepContext& ctx) const override;

 private:
  Options options_;
};

// ---- the registry (src/optim/registry.cc): every optimizer above, made from its config (Keras's from_config and
// get_config). The job file's `optimizer:` section, the parameter server's shards and ParameterServerStrategy all
// make and describe optimizers through it.
//
//   optim::OptimizerConfig c = optim::default_config("adam");   // {adam, 0.001, beta_1: 0.9, ...}
//   c.hyperparameters["beta_1"] = 0.8;
//   auto adam = optim::from_config(c);                          // adam->config() is c
//
// Names are "sgd", "adam", "adamw", "rmsprop", "adagrad", in any case, with or without underscores ("RMSprop").

// The optimizer `config` describes, with fresh state: config.learning_rate (a schedule too), the shared options, and
// each hyperparameter of config.hyperparameters (a missing one takes the optimizer's default; adamw's weight_decay
// too). InvalidArgument naming an unknown name, a hyperparameter the optimizer does not take, a flag other than 0
// or 1, or a value the optimizer refuses (its constructor's check, e.g. "Adam: beta_1 must be in [0, 1), got 1.5").
std::shared_ptr<Optimizer> from_config(const OptimizerConfig& config);
// The config of optimizer `name` with Keras's defaults (its learning rate too); InvalidArgument for an unknown name.
OptimizerConfig default_config(const std::string& name);
// from_config(default_config(name)) with learning rate `lr` (lr <= 0: that optimizer's default). Unknown names
// throw InvalidArgument listing the known ones.
std::shared_ptr<Optimizer> get(const std::string& name, float lr = -1.0f);

}  // namespace strata::optim
