// The per-element update rules of SGD, Adam/AdamW, RMSprop and Adagrad (Keras 3's update_step, one
// fused loop each) and their construction, each with its config (made from one by registry.cc).
// A variable on a GPU takes the same rule in optim/cuda/optimizers.cu (update_on_gpu).
// Thread-safety: update() only touches the chunk it is given; see strata/optim/optimizer.h.
#include "strata/optim/optimizers.h"

// GCC 12's AVX-512 intrinsics read a deliberately undefined register (_mm512_undefined_*) and, inlined here, warn
// that it "may be used uninitialized" (GCC bug 105593, fixed in GCC 13). The pragma precedes the header: the
// warning is placed at the header's lines.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "optim/cuda/optim_kernels.h"

namespace strata::optim {

namespace {

// The arguments of one GPU update (optim/cuda/optim_kernels.h) from those of update().
cuda::UpdateArgs gpu_args(int device, float* var, const float* grad, const std::array<float*, 4>& slots, int64_t n,
                          float grad_scale, float clip_value, float decay) {
  cuda::UpdateArgs a;
  a.device = device;
  a.var = var;
  a.grad = grad;
  for (size_t s = 0; s < 4; ++s) a.slots[s] = slots[s];
  a.n = n;
  a.grad_scale = grad_scale;
  a.clip_value = clip_value;
  a.keep = 1.0f - decay;
  return a;
}

// Runs `update` (a call of optim/cuda) in a CUDA build; Unavailable naming `who` otherwise.
template <class F>
void on_gpu(const char* who, int device, F&& update) {
#ifdef STRATA_WITH_CUDA
  (void)who;
  (void)device;
  update();
#else
  (void)update;
  STRATA_THROW(Unavailable, who << ": a variable on cuda:" << device << " in a build without CUDA");
#endif
}

// The config (Keras's get_config) of optimizer `name` made with options `o` and its own `hyperparameters`.
template <class O>
OptimizerConfig config_of(const O& o, const char* name, std::map<std::string, double> hyperparameters) {
  return {.name = name,
          .learning_rate = o.learning_rate,
          .clipnorm = o.clipnorm,
          .clipvalue = o.clipvalue,
          .global_clipnorm = o.global_clipnorm,
          .weight_decay = o.weight_decay,
          .hyperparameters = std::move(hyperparameters)};
}

double flag(bool b) { return b ? 1.0 : 0.0; }

void check_unit(const char* who, const char* what, double value, bool allow_one = false) {
  STRATA_CHECK(value >= 0.0 && (allow_one ? value <= 1.0 : value < 1.0), InvalidArgument,
               who << ": " << what << " must be in [0, 1" << (allow_one ? "]" : ")") << ", got " << value);
}

void check_epsilon(const char* who, float epsilon) {
  STRATA_CHECK(epsilon >= 0.0f, InvalidArgument, who << ": epsilon must be >= 0, got " << epsilon);
}

}  // namespace

// ---- SGD

SGD::SGD(Options options)
    : Optimizer(config_of(options, "sgd", {{"momentum", options.momentum}, {"nesterov", flag(options.nesterov)}}),
                options.momentum != 0.0f ? std::vector<SlotSpec>{{"momentum", 0.0f}} : std::vector<SlotSpec>{}),
      options_(std::move(options)) {
  check_unit("SGD", "momentum", options_.momentum, true);
}

std::shared_ptr<Optimizer> SGD::clone() const {
  Options o = options_;
  o.learning_rate = config().learning_rate;
  return std::make_shared<SGD>(std::move(o));
}

void SGD::update(float* var_, const float* grad_, const std::array<float*, kMaxSlots>& slots, int64_t n,
                 const StepContext& ctx) const {
  float* __restrict var = var_;
  const float* __restrict grad = grad_;
  const float lr = ctx.lr, keep = 1.0f - ctx.decay, scale = ctx.grad_scale, clip = ctx.clip_value;
  if (options_.momentum == 0.0f) {
    for (int64_t i = 0; i < n; ++i) var[i] = var[i] * keep - lr * clipped(grad[i], scale, clip);
    return;
  }
  const float mu = options_.momentum;
  float* __restrict m = slots[0];
  if (options_.nesterov) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = clipped(grad[i], scale, clip);
      m[i] = mu * m[i] - lr * g;
      var[i] = var[i] * keep + (mu * m[i] - lr * g);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      m[i] = mu * m[i] - lr * clipped(grad[i], scale, clip);
      var[i] = var[i] * keep + m[i];
    }
  }
}

void SGD::update_on_gpu(int device, float* var, const float* grad, const std::array<float*, kMaxSlots>& slots,
                        int64_t n, const StepContext& ctx) const {
  on_gpu("SGD", device, [&] {
    cuda::sgd_update(gpu_args(device, var, grad, slots, n, ctx.grad_scale, ctx.clip_value, ctx.decay), ctx.lr,
                     options_.momentum, options_.nesterov);
  });
}

// ---- Adam and AdamW

namespace {
std::vector<Optimizer::SlotSpec> adam_slots(bool amsgrad) {
  std::vector<Optimizer::SlotSpec> s = {{"m", 0.0f}, {"v", 0.0f}};
  if (amsgrad) s.push_back({"vhat", 0.0f});
  return s;
}

std::map<std::string, double> adam_hyperparameters(const AdamOptions& o) {
  return {{"beta_1", o.beta_1}, {"beta_2", o.beta_2}, {"epsilon", o.epsilon}, {"amsgrad", flag(o.amsgrad)}};
}

// lr * sqrt(1 - b2^t) / (1 - b1^t): the bias corrections folded into the step size, in double and then rounded once,
// from the betas rounded to float32, as Keras computes them (in the variable's dtype).
float adam_step_size(float lr, int64_t step, double beta_1, double beta_2) {
  const double t = static_cast<double>(step);
  const double b1 = static_cast<float>(beta_1), b2 = static_cast<float>(beta_2);
  return static_cast<float>(lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
}

void check_adam(const char* who, const AdamOptions& o) {
  check_unit(who, "beta_1", o.beta_1);
  check_unit(who, "beta_2", o.beta_2);
  check_epsilon(who, o.epsilon);
}
}  // namespace

Adam::Adam(Options options) : Adam(options, config_of(options, "adam", adam_hyperparameters(options))) {}

Adam::Adam(const Options& options, OptimizerConfig config)
    : Optimizer(std::move(config), adam_slots(options.amsgrad)), options_(options) {
  check_adam(options.amsgrad ? "Adam(amsgrad)" : "Adam", options_);
}

std::shared_ptr<Optimizer> Adam::clone() const {
  Options o = options_;
  o.learning_rate = config().learning_rate;
  return std::make_shared<Adam>(std::move(o));
}

namespace {
// The Adam loop, compiled for AVX-512, AVX2 and plain x86-64 and picked at load time (an ifunc): the
// build targets baseline x86-64, whose 4-wide sqrt/div made this loop ~20% of an MLP step; 16-wide
// AVX-512 cuts that about fourfold. Clipping is written out here so it inlines into every clone.
//
// On AVX-512 the plain (non-amsgrad) loop is written with intrinsics: vdivps is the slowest instruction
// in it, so 1 / (sqrt(v) + eps) is a 14-bit reciprocal estimate refined by one Newton step (relative
// error ~1e-8, below float's 6e-8 rounding step).
__attribute__((target("avx512f"))) void adam_loop_avx512(float* __restrict var, const float* __restrict grad,
                                                          float* __restrict m, float* __restrict v, int64_t n,
                                                          float alpha, float one_minus_b1, float one_minus_b2,
                                                          float eps, float keep, float scale, float clip) {
  const __m512 k_b1 = _mm512_set1_ps(one_minus_b1), k_b2 = _mm512_set1_ps(one_minus_b2);
  const __m512 k_eps = _mm512_set1_ps(eps), k_keep = _mm512_set1_ps(keep), k_alpha = _mm512_set1_ps(alpha);
  const __m512 k_scale = _mm512_set1_ps(scale), k_hi = _mm512_set1_ps(clip), k_lo = _mm512_set1_ps(-clip);
  const __m512 k_two = _mm512_set1_ps(2.0f);
  // The lanes of `lanes` (a full block, or the masked tail: every element takes the same arithmetic wherever it sits,
  // so a variable split into shards updates bit for bit as the whole would).
  const auto block = [&](int64_t i, __mmask16 lanes) __attribute__((target("avx512f"))) {
    __m512 g = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, grad + i), k_scale), k_lo), k_hi);
    __m512 mi = _mm512_maskz_loadu_ps(lanes, m + i), vi = _mm512_maskz_loadu_ps(lanes, v + i);
    mi = _mm512_fmadd_ps(_mm512_sub_ps(g, mi), k_b1, mi);
    vi = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_mul_ps(g, g), vi), k_b2, vi);
    const __m512 den = _mm512_add_ps(_mm512_sqrt_ps(vi), k_eps);
    __m512 inv = _mm512_rcp14_ps(den);
    inv = _mm512_mul_ps(inv, _mm512_fnmadd_ps(den, inv, k_two));  // Newton: inv * (2 - den * inv)
    const __m512 step = _mm512_mul_ps(_mm512_mul_ps(k_alpha, mi), inv);
    _mm512_mask_storeu_ps(m + i, lanes, mi);
    _mm512_mask_storeu_ps(v + i, lanes, vi);
    _mm512_mask_storeu_ps(var + i, lanes,
                          _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, var + i), k_keep), step));
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) block(i, static_cast<__mmask16>(0xFFFF));
  if (i < n) block(i, static_cast<__mmask16>((1u << (n - i)) - 1));
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void adam_loop(
    float* __restrict var, const float* __restrict grad, float* __restrict m, float* __restrict v,
    float* __restrict vhat, int64_t n, float alpha, float one_minus_b1, float one_minus_b2, float eps, float keep,
    float scale, float clip) {
  if (vhat == nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = std::min(std::max(grad[i] * scale, -clip), clip);
      m[i] += (g - m[i]) * one_minus_b1;
      v[i] += (g * g - v[i]) * one_minus_b2;
      var[i] = var[i] * keep - alpha * m[i] / (std::sqrt(v[i]) + eps);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(std::max(grad[i] * scale, -clip), clip);
    m[i] += (g - m[i]) * one_minus_b1;
    v[i] += (g * g - v[i]) * one_minus_b2;
    vhat[i] = std::max(vhat[i], v[i]);
    var[i] = var[i] * keep - alpha * m[i] / (std::sqrt(vhat[i]) + eps);
  }
}
}  // namespace

void Adam::update(float* var, const float* grad, const std::array<float*, kMaxSlots>& slots, int64_t n,
                  const StepContext& ctx) const {
  const double b1 = options_.beta_1, b2 = options_.beta_2;
  const float alpha = adam_step_size(ctx.lr, ctx.step, b1, b2);
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512 && !options_.amsgrad) {
    adam_loop_avx512(var, grad, slots[0], slots[1], n, alpha, static_cast<float>(1.0 - b1), static_cast<float>(1.0 - b2),
                     options_.epsilon, 1.0f - ctx.decay, ctx.grad_scale, ctx.clip_value);
    return;
  }
  adam_loop(var, grad, slots[0], slots[1], options_.amsgrad ? slots[2] : nullptr, n, alpha,
            static_cast<float>(1.0 - b1), static_cast<float>(1.0 - b2), options_.epsilon, 1.0f - ctx.decay,
            ctx.grad_scale, ctx.clip_value);
}

void Adam::update_on_gpu(int device, float* var, const float* grad, const std::array<float*, kMaxSlots>& slots,
                         int64_t n, const StepContext& ctx) const {
  const double b1 = options_.beta_1, b2 = options_.beta_2;
  const float alpha = adam_step_size(ctx.lr, ctx.step, b1, b2);  // as update()
  on_gpu(name().c_str(), device, [&] {
    cuda::adam_update(gpu_args(device, var, grad, slots, n, ctx.grad_scale, ctx.clip_value, ctx.decay), alpha,
                      static_cast<float>(1.0 - b1), static_cast<float>(1.0 - b2), options_.epsilon, options_.amsgrad);
  });
}

namespace {
AdamOptions adam_part(const AdamWOptions& o) {
  return {.learning_rate = o.learning_rate,
          .beta_1 = o.beta_1,
          .beta_2 = o.beta_2,
          .epsilon = o.epsilon,
          .amsgrad = o.amsgrad,
          .clipnorm = o.clipnorm,
          .clipvalue = o.clipvalue,
          .global_clipnorm = o.global_clipnorm,
          .weight_decay = o.weight_decay};
}

OptimizerConfig adamw_config(const AdamWOptions& o) {
  STRATA_CHECK(o.weight_decay >= 0.0f, InvalidArgument, "AdamW: weight_decay must be >= 0, got " << o.weight_decay);
  return config_of(o, "adamw", adam_hyperparameters(adam_part(o)));
}
}  // namespace

AdamW::AdamW(Options options) : Adam(adam_part(options), adamw_config(options)), options_(std::move(options)) {}

std::shared_ptr<Optimizer> AdamW::clone() const {
  Options o = options_;
  o.learning_rate = config().learning_rate;
  return std::make_shared<AdamW>(std::move(o));
}

// ---- RMSprop

namespace {
std::vector<Optimizer::SlotSpec> rmsprop_slots(const RMSpropOptions& o) {
  std::vector<Optimizer::SlotSpec> s = {{"velocity", 0.0f}};
  if (o.momentum > 0.0f) s.push_back({"momentum", 0.0f});
  if (o.centered) s.push_back({"average_gradient", 0.0f});
  return s;
}
}  // namespace

RMSprop::RMSprop(Options options)
    : Optimizer(config_of(options, "rmsprop",
                          {{"rho", options.rho},
                           {"momentum", options.momentum},
                           {"epsilon", options.epsilon},
                           {"centered", flag(options.centered)}}),
                rmsprop_slots(options)),
      options_(std::move(options)) {
  check_unit("RMSprop", "rho", options_.rho, true);
  check_unit("RMSprop", "momentum", options_.momentum, true);
  check_epsilon("RMSprop", options_.epsilon);
}

std::shared_ptr<Optimizer> RMSprop::clone() const {
  Options o = options_;
  o.learning_rate = config().learning_rate;
  return std::make_shared<RMSprop>(std::move(o));
}

void RMSprop::update(float* var_, const float* grad_, const std::array<float*, kMaxSlots>& slots, int64_t n,
                     const StepContext& ctx) const {
  const float rho = options_.rho, one_minus_rho = 1.0f - options_.rho, eps = options_.epsilon;
  const float mu = options_.momentum, lr = ctx.lr, keep = 1.0f - ctx.decay, scale = ctx.grad_scale,
              clip = ctx.clip_value;
  const bool with_momentum = mu > 0.0f;
  float* __restrict var = var_;
  const float* __restrict grad = grad_;
  float* __restrict vel = slots[0];
  float* __restrict mom = with_momentum ? slots[1] : nullptr;
  float* __restrict avg = options_.centered ? slots[with_momentum ? 2 : 1] : nullptr;
  // One loop per variant, so that each stays branch-free and vectorises.
  if (!avg && !mom) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = clipped(grad[i], scale, clip);
      vel[i] = rho * vel[i] + one_minus_rho * g * g;
      var[i] = var[i] * keep - lr * g / std::sqrt(vel[i] + eps);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float g = clipped(grad[i], scale, clip);
    vel[i] = rho * vel[i] + one_minus_rho * g * g;
    float denominator = vel[i];
    if (avg) {
      avg[i] = rho * avg[i] + one_minus_rho * g;
      denominator -= avg[i] * avg[i];
    }
    const float increment = lr * g / std::sqrt(denominator + eps);
    if (mom) {
      mom[i] = mu * mom[i] + increment;
      var[i] = var[i] * keep - mom[i];
    } else {
      var[i] = var[i] * keep - increment;
    }
  }
}

void RMSprop::update_on_gpu(int device, float* var, const float* grad, const std::array<float*, kMaxSlots>& slots,
                            int64_t n, const StepContext& ctx) const {
  on_gpu("RMSprop", device, [&] {
    cuda::rmsprop_update(gpu_args(device, var, grad, slots, n, ctx.grad_scale, ctx.clip_value, ctx.decay), ctx.lr,
                         options_.rho, options_.epsilon, options_.momentum, options_.centered);
  });
}

// ---- Adagrad

Adagrad::Adagrad(Options options)
    : Optimizer(config_of(options, "adagrad",
                          {{"initial_accumulator_value", options.initial_accumulator_value},
                           {"epsilon", options.epsilon}}),
                {{"accumulator", options.initial_accumulator_value}}),
      options_(std::move(options)) {
  STRATA_CHECK(options_.initial_accumulator_value >= 0.0f, InvalidArgument,
               "Adagrad: initial_accumulator_value must be >= 0, got " << options_.initial_accumulator_value);
  check_epsilon("Adagrad", options_.epsilon);
}

std::shared_ptr<Optimizer> Adagrad::clone() const {
  Options o = options_;
  o.learning_rate = config().learning_rate;
  return std::make_shared<Adagrad>(std::move(o));
}

void Adagrad::update(float* var_, const float* grad_, const std::array<float*, kMaxSlots>& slots, int64_t n,
                     const StepContext& ctx) const {
  const float lr = ctx.lr, eps = options_.epsilon, keep = 1.0f - ctx.decay, scale = ctx.grad_scale,
              clip = ctx.clip_value;
  float* __restrict var = var_;
  const float* __restrict grad = grad_;
  float* __restrict acc = slots[0];
  for (int64_t i = 0; i < n; ++i) {
    const float g = clipped(grad[i], scale, clip);
    acc[i] += g * g;
    var[i] = var[i] * keep - lr * g / std::sqrt(acc[i] + eps);
  }
}

void Adagrad::update_on_gpu(int device, float* var, const float* grad, const std::array<float*, kMaxSlots>& slots,
                            int64_t n, const StepContext& ctx) const {
  on_gpu("Adagrad", device, [&] {
    cuda::adagrad_update(gpu_args(device, var, grad, slots, n, ctx.grad_scale, ctx.clip_value, ctx.decay), ctx.lr,
                         options_.epsilon);
  });
}

}  // namespace strata::optim
