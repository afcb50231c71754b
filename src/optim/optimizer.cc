// The optimizer base: gradient checks, clipping, weight decay, slot storage, the parallel update
// loop and checkpoint state. The per-element rules live in optimizers.cc (and, for variables on a GPU,
// optim/cuda/optimizers.cu, reached through update_on_gpu).
// Thread-safety: see strata/optim/optimizer.h (not synchronised).
#include "strata/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "autograd/sum_in_order.h"
#include "kernels/kernels.h"
#include "optim/cuda/optim_kernels.h"
#include "strata/threading.h"
#include "strata/trace.h"

namespace strata::optim {

namespace {

// Elements per parallel chunk; smaller variables update inline on the calling thread.
constexpr int64_t kGrain = 1 << 15;
// Elements updated at a time before they are copied to a mirrored variable's other components (or
// summed from replicas' gradients), so that the copy and the update read them from cache.
constexpr int64_t kSpan = 4096;

// Runs fn(begin, end) over [0, n): split over parallel_for when large, else inline.
template <typename Fn>
void for_grains(int64_t n, const Fn& fn) {
  if (n < 2 * kGrain || num_threads() == 1) {
    fn(int64_t{0}, n);
    return;
  }
  parallel_for(0, n, kGrain, fn);
}

double sum_of_squares(const Tensor& t) {
  if (!t.device().is_cpu()) {
#ifdef STRATA_WITH_CUDA
    return cuda::sum_of_squares(t.device().index, t.data<float>(), t.numel());  // waits for the device
#else
    STRATA_THROW(Unavailable, "sum of squares: a tensor on " << t.device().str() << " in a build without CUDA");
#endif
  }
  const float* p = t.data<float>();
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += static_cast<double>(p[i]) * p[i];
  return s;
}

// The name state() uses for vars[i].
std::string state_name(const Variable& var, size_t index) {
  return var.name().empty() ? "variable_" + std::to_string(index) : var.name();
}

void check_unique_names(const char* who, const std::vector<Variable>& vars) {
  std::set<std::string> seen;
  for (size_t i = 0; i < vars.size(); ++i) {
    STRATA_CHECK(vars[i].defined(), InvalidArgument, who << ": variable " << i << " is undefined");
    STRATA_CHECK(seen.insert(state_name(vars[i], i)).second, InvalidArgument,
                 who << ": two variables are named '" << state_name(vars[i], i)
                     << "'; optimizer state needs unique variable names");
  }
}

}  // namespace

Optimizer::Optimizer(OptimizerConfig config, std::vector<SlotSpec> slots)
    : config_(std::move(config)), slot_specs_(std::move(slots)) {
  STRATA_CHECK(slot_specs_.size() <= kMaxSlots, InvalidArgument, "Optimizer: at most " << kMaxSlots << " slots");
  const int clip_options = (config_.clipnorm ? 1 : 0) + (config_.clipvalue ? 1 : 0) + (config_.global_clipnorm ? 1 : 0);
  STRATA_CHECK(clip_options <= 1, InvalidArgument,
               "Optimizer: only one of clipnorm, clipvalue and global_clipnorm can be set (as in Keras)");
  for (const auto& [what, value] : {std::pair{"clipnorm", config_.clipnorm}, std::pair{"clipvalue", config_.clipvalue},
                                    std::pair{"global_clipnorm", config_.global_clipnorm}}) {
    STRATA_CHECK(!value || *value > 0, InvalidArgument, "Optimizer: " << what << " must be > 0, got " << *value);
  }
}

Optimizer::~Optimizer() = default;

std::vector<std::string> Optimizer::slot_names() const {
  std::vector<std::string> names;
  for (const SlotSpec& s : slot_specs_) names.push_back(s.name);
  return names;
}

std::vector<Tensor>& Optimizer::slots_of(const Variable& var) {
  auto [it, inserted] = slots_.try_emplace(var.id());
  if (inserted) {
    const Device device = var.component(0).device();  // on the variable's device
    for (const SlotSpec& s : slot_specs_)
      it->second.push_back(Tensor::full(var.shape(), s.initial_value, DType::kFloat32, device));
  }
  return it->second;
}

struct Optimizer::Target {
  std::vector<float*> components;  // component 0 is updated; the others receive copies
  std::array<float*, kMaxSlots> slots{};
  int64_t numel = 0;
  int gpu = -1;  // the CUDA device the variable lives on; -1 the host
};

Optimizer::Target Optimizer::target_of(const Variable& var) {
  const auto found = slots_.find(var.id());
  STRATA_CHECK(found != slots_.end(), Error, name() << ": no slots for variable '" << var.name() << "'");
  Target t;
  for (int c = 0; c < var.num_components(); ++c) {
    Tensor value = var.component(c);  // shares the variable's storage
    t.components.push_back(value.data<float>());
  }
  for (size_t s = 0; s < slot_specs_.size(); ++s) t.slots[s] = found->second[s].data<float>();
  t.numel = var.component(0).numel();
  const Device device = var.component(0).device();
  if (!device.is_cpu()) t.gpu = device.index;  // (copies on other GPUs receive component 0 after its update)
  return t;
}

void Optimizer::build(const std::vector<Variable>& vars) {
  for (const Variable& v : vars) slots_of(v);
}

Tensor Optimizer::slot(const Variable& var, const std::string& slot_name) {
  for (size_t i = 0; i < slot_specs_.size(); ++i) {
    if (slot_specs_[i].name == slot_name) return slots_of(var)[i];
  }
  STRATA_THROW(InvalidArgument, name() << ": no slot named '" << slot_name << "'");
}

// The optimizer's update in the three parts a strategy's aggregator schedules.
class Optimizer::Applier final : public GradientApplier {
 public:
  explicit Applier(Optimizer& optimizer) : optimizer_(optimizer) {}
  bool prepared(const std::vector<Variable>& vars) const override {
    for (const Variable& v : vars) {
      if (optimizer_.slots_.count(v.id()) == 0) return false;
    }
    return true;
  }
  void prepare(const std::vector<Variable>& vars) override { optimizer_.build(vars); }
  void update(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) override {
    optimizer_.update_all(grads, vars);
  }
  bool elementwise() const override { return !optimizer_.config_.clipnorm && !optimizer_.config_.global_clipnorm; }
  void update_summed(const Variable& var, const std::vector<const float*>& parts) override {
    optimizer_.update_summed(var, parts);
  }
  void finish() override { ++optimizer_.iterations_; }
  int64_t iterations() const override { return optimizer_.iterations_; }

 private:
  Optimizer& optimizer_;
};

void Optimizer::apply_gradients(const std::vector<std::pair<Tensor, Variable>>& grads_and_vars) {
  std::vector<Tensor> grads;
  std::vector<Variable> vars;
  grads.reserve(grads_and_vars.size());
  vars.reserve(grads_and_vars.size());
  for (const auto& [g, v] : grads_and_vars) {
    grads.push_back(g);
    vars.push_back(v);
  }
  Applier applier(*this);
  apply(grads, vars, applier);
}

void Optimizer::apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  STRATA_CHECK(grads.size() == vars.size(), InvalidArgument,
               name() << ".apply_gradients: " << grads.size() << " gradients for " << vars.size() << " variables");
  Applier applier(*this);
  apply(grads, vars, applier);
}

void Optimizer::minimize(const Variable& loss, const std::vector<Variable>& vars, GradientTape& tape,
                         UnconnectedGradients unconnected) {
  Applier applier(*this);
  if (GradientAggregator* aggregator = current_gradient_aggregator()) aggregator->expect_apply(applier, vars);
  std::vector<Tensor> grads;
  {
    trace::Span span("compute", "backward");
    grads = tape.gradient(loss, vars, unconnected);
  }
  apply(grads, vars, applier);
}

void Optimizer::apply(const std::vector<Tensor>& grads, const std::vector<Variable>& vars, Applier& applier) {
  bool any = false;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    const Variable& v = vars[i];
    STRATA_CHECK(v.defined(), InvalidArgument, name() << ".apply_gradients: variable " << i << " is undefined");
    if (!g.defined()) continue;
    any = true;
    STRATA_CHECK(g.device() == v.component(0).device(), InvalidArgument,
                 name() << ".apply_gradients: variable '" << v.name() << "' is on " << v.component(0).device().str()
                        << " but its gradient on " << g.device().str());
    STRATA_CHECK(v.dtype() == DType::kFloat32 && g.dtype() == DType::kFloat32, InvalidArgument,
                 name() << ".apply_gradients: variable '" << v.name() << "' (" << dtype_name(v.dtype())
                        << ") and its gradient (" << dtype_name(g.dtype()) << ") must be float32");
    STRATA_CHECK(g.shape() == v.shape(), ShapeError,
                 name() << ".apply_gradients: gradient " << g.shape_str() << " does not match variable '" << v.name()
                        << "' " << shape_str(v.shape()));
  }
  STRATA_CHECK(any, InvalidArgument, name() << ".apply_gradients: no gradients provided for any variable");

  if (GradientAggregator* aggregator = current_gradient_aggregator()) {
    aggregator->apply_gradients(grads, vars, applier);
    return;
  }
  // Not on a replica: the update (of every component of a mirrored variable) runs here.
  trace::Span span("compute", "optimizer");
  applier.prepare(vars);
  applier.update(grads, vars);
  applier.finish();
}

Optimizer::StepContext Optimizer::step_context() const {
  StepContext ctx;
  ctx.lr = learning_rate();
  ctx.step = iterations_ + 1;
  ctx.clip_value = config_.clipvalue.value_or(std::numeric_limits<float>::infinity());
  ctx.decay = config_.weight_decay ? *config_.weight_decay * ctx.lr : 0.0f;
  return ctx;
}

void Optimizer::update_span(const Target& t, const float* grad, int64_t begin, int64_t end,
                            const StepContext& c) const {
  const size_t num_slots = slot_specs_.size();
  const int64_t span = t.components.size() == 1 ? end - begin : kSpan;  // one component: nothing to copy
  for (int64_t b = begin; b < end; b += span) {
    const int64_t e = std::min(end, b + span);
    std::array<float*, kMaxSlots> slots{};
    for (size_t s = 0; s < num_slots; ++s) slots[s] = t.slots[s] + b;
    update(t.components[0] + b, grad + (b - begin), slots, e - b, c);
    for (size_t k = 1; k < t.components.size(); ++k)
      std::copy(t.components[0] + b, t.components[0] + e, t.components[k] + b);
  }
}

void Optimizer::update_on_gpu(int device, float*, const float*, const std::array<float*, kMaxSlots>&, int64_t,
                              const StepContext&) const {
  STRATA_THROW(Unavailable, name() << ": no GPU update (a variable is on cuda:" << device << ")");
}

void Optimizer::update_all(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  StepContext ctx = step_context();
  if (config_.global_clipnorm) {
    double s = 0;
    for (const Tensor& g : grads) {
      if (g.defined()) s += sum_of_squares(g);
    }
    const double norm = std::sqrt(s), clip = *config_.global_clipnorm;
    ctx.grad_scale = static_cast<float>(clip / std::max(norm, clip));
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    StepContext c = ctx;
    if (config_.clipnorm) {
      const double norm = std::sqrt(sum_of_squares(g)), clip = *config_.clipnorm;
      c.grad_scale = static_cast<float>(clip / std::max(norm, clip));
    }
    const Target target = target_of(vars[i]);
    if (target.gpu >= 0) {  // one pass on the device, queued on its stream
      // A mirrored variable's copies live on their replicas' GPUs (MirroredStrategy over GPUs): the summed gradient
      // (on whichever replica's GPU) goes to component 0's, which is updated with the slots beside it and then copied
      // to the other copies, as update_span copies on the host.
      const Device device = vars[i].component(0).device();
      const Tensor here = g.device() == device ? g : g.to(device);
      update_on_gpu(target.gpu, target.components[0], here.data<float>(), target.slots, target.numel, c);
      for (int k = 1; k < vars[i].num_components(); ++k) {
        Tensor copy = vars[i].component(k);  // shares that copy's storage
        copy.copy_(vars[i].component(0));
      }
      continue;
    }
    const float* grad = g.data<float>();
    for_grains(target.numel, [&](int64_t begin, int64_t end) { update_span(target, grad + begin, begin, end, c); });
  }
}

void Optimizer::update_summed(const Variable& var, const std::vector<const float*>& parts) {
  STRATA_CHECK(!config_.clipnorm && !config_.global_clipnorm, Error,
               name() << ": a gradient clipped by norm cannot be applied one variable at a time");
  const auto present = std::count_if(parts.begin(), parts.end(), [](const float* p) { return p != nullptr; });
  STRATA_CHECK(present > 0, Error, name() << ": no gradient part for variable '" << var.name() << "'");
  const Target target = target_of(var);
  STRATA_CHECK(target.gpu < 0, Unavailable,
               name() << ": variable '" << var.name() << "' is on a GPU; its replicas' gradients cannot be summed "
                         "on the host (GPU replicas take one device: OneDeviceStrategy)");
  const StepContext ctx = step_context();
  if (present == 1) {  // nothing to add: update from that part in place
    const float* only = *std::find_if(parts.begin(), parts.end(), [](const float* p) { return p != nullptr; });
    for_grains(target.numel, [&](int64_t begin, int64_t end) { update_span(target, only + begin, begin, end, ctx); });
    return;
  }
  for_grains(target.numel, [&](int64_t begin, int64_t end) {
    alignas(64) float sum[kSpan];
    for (int64_t b = begin; b < end; b += kSpan) {
      const int64_t n = std::min(end - b, kSpan);
      strata::detail::sum_in_order(parts, b, n, sum);
      update_span(target, sum, b, b + n, ctx);
    }
  });
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state(const std::vector<Variable>& vars) const {
  check_unique_names((name() + ".state").c_str(), vars);
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < vars.size(); ++i) {
    const auto found = slots_.find(vars[i].id());
    for (size_t s = 0; s < slot_specs_.size(); ++s) {
      Tensor t = found != slots_.end() ? found->second[s].to(Device::cpu())  // a copy, on the host
                                       : Tensor::full(vars[i].shape(), slot_specs_[s].initial_value);
      out.emplace_back(state_name(vars[i], i) + "/" + slot_specs_[s].name, std::move(t));
    }
  }
  out.emplace_back("iterations", Tensor::from_vector(std::vector<int64_t>{iterations_}, Shape{}));
  return out;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& state,
                           const std::vector<Variable>& vars) {
  const std::string who = name() + ".load_state";
  check_unique_names(who.c_str(), vars);
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [key, t] : state) {
    STRATA_CHECK(given.emplace(key, &t).second, InvalidArgument, who << ": '" << key << "' appears twice");
  }
  // Check everything first, so that a bad checkpoint changes nothing.
  auto take = [&](const std::string& key, const Shape& shape, DType dtype) -> const Tensor& {
    const auto it = given.find(key);
    STRATA_CHECK(it != given.end(), InvalidArgument, who << ": missing '" << key << "'");
    const Tensor& t = *it->second;
    STRATA_CHECK(t.defined() && t.dtype() == dtype, InvalidArgument,
                 who << ": '" << key << "' has dtype " << (t.defined() ? dtype_name(t.dtype()) : "undefined")
                     << ", expected " << dtype_name(dtype));
    STRATA_CHECK(t.shape() == shape, InvalidArgument,
                 who << ": '" << key << "' has shape " << t.shape_str() << ", expected " << shape_str(shape));
    given.erase(it);
    return t;
  };
  std::vector<const Tensor*> slot_values;
  for (size_t i = 0; i < vars.size(); ++i) {
    for (const SlotSpec& s : slot_specs_) {
      slot_values.push_back(&take(state_name(vars[i], i) + "/" + s.name, vars[i].shape(), DType::kFloat32));
    }
  }
  const Tensor& it = take("iterations", Shape{}, DType::kInt64);
  if (!given.empty()) {
    std::string extra;
    for (const auto& [key, t] : given) extra += (extra.empty() ? "'" : ", '") + key + "'";
    STRATA_THROW(InvalidArgument,
                 who << ": unexpected " << extra << " (not a slot of these variables for " << name() << ")");
  }
  size_t k = 0;
  for (const Variable& v : vars) {
    std::vector<Tensor>& slots = slots_of(v);
    for (size_t s = 0; s < slot_specs_.size(); ++s) slots[s].copy_(*slot_values[k + s]);
    k += slot_specs_.size();
  }
  iterations_ = it.item<int64_t>();
}

float global_norm(const std::vector<Tensor>& tensors) {
  double s = 0;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    check_dtype("global_norm", t, DType::kFloat32);
    s += sum_of_squares(t);
  }
  return static_cast<float>(std::sqrt(s));
}

std::vector<Tensor> clip_by_global_norm(const std::vector<Tensor>& tensors, float clip_norm, float* norm) {
  STRATA_CHECK(clip_norm > 0, InvalidArgument, "clip_by_global_norm: clip_norm must be > 0, got " << clip_norm);
  const float g = global_norm(tensors);
  if (norm) *norm = g;
  const float scale = static_cast<float>(static_cast<double>(clip_norm) / std::max<double>(g, clip_norm));
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    if (!t.defined()) {
      out.emplace_back();
      continue;
    }
    if (!t.device().is_cpu()) {  // on its device, through the kernels
      out.push_back(kernels::affine(t, scale, 0.0f));
      continue;
    }
    Tensor c = Tensor::empty(t.shape());
    const float* src = t.data<float>();
    float* dst = c.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = src[i] * scale;
    out.push_back(std::move(c));
  }
  return out;
}

Tensor clip_by_norm(const Tensor& t, float clip_norm) {
  STRATA_CHECK(clip_norm > 0, InvalidArgument, "clip_by_norm: clip_norm must be > 0, got " << clip_norm);
  return clip_by_global_norm({t}, clip_norm)[0];
}

}  // namespace strata::optim
