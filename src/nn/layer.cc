// Layer's lazy build, weight tracking and naming (see strata/nn/layer.h).
#include "strata/nn/layer.h"

#include <cctype>
#include <set>
#include <sstream>

#include "kernels/compute_precision.h"
#include "strata/error.h"
#include "strata/gradient_tape.h"
#include "strata/nn/functional.h"
#include "strata/nn/policy.h"
#include "strata/ops.h"
#include "strata/random.h"

namespace strata::nn {

std::string to_snake_case(const std::string& class_name) {
  // Keras: re.sub("(.)([A-Z][a-z]+)", r"\1_\2") then re.sub("([a-z])([A-Z])", r"\1_\2"), lower-cased.
  std::string first;
  const std::string& s = class_name;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && std::isupper(static_cast<unsigned char>(s[i])) && i + 1 < s.size() &&
        std::islower(static_cast<unsigned char>(s[i + 1])) && first.back() != '_') {
      first += '_';
    }
    first += s[i];
  }
  std::string out;
  for (size_t i = 0; i < first.size(); ++i) {
    if (i > 0 && std::isupper(static_cast<unsigned char>(first[i])) &&
        std::islower(static_cast<unsigned char>(first[i - 1]))) {
      out += '_';
    }
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(first[i])));
  }
  return out;
}

Layer::Layer(std::string name) : name_(std::move(name)) {}
Layer::~Layer() = default;

std::string Layer::name() const { return name_.empty() ? to_snake_case(class_name()) : name_; }

void Layer::set_name(std::string name) {
  STRATA_CHECK(!built_, InvalidArgument,
               "layer '" << this->name() << "' is built; rename it before its first call, its weights are named by it");
  name_ = std::move(name);
  repath_children();
}

std::string Layer::path() const {
  if (has_parent_) return parent_path_.empty() ? name() : parent_path_ + "/" + name();
  return root_container_ ? std::string() : name();
}

void Layer::build_impl(const Shape&) {}

void Layer::build_impl(const std::vector<Shape>& input_shapes) {
  STRATA_CHECK(input_shapes.size() == 1, InvalidArgument,
               class_name() << " '" << name() << "' takes one input, got " << input_shapes.size());
  build_impl(input_shapes[0]);
}

Variable Layer::call(const Variable&, bool) {
  STRATA_THROW(InvalidArgument, class_name() << " '" << name() << "' takes a list of inputs, got one");
}

Variable Layer::call(const std::vector<Variable>& inputs, bool training) {
  STRATA_CHECK(inputs.size() == 1, InvalidArgument,
               class_name() << " '" << name() << "' takes one input, got " << inputs.size());
  return call(inputs[0], training);
}

void Layer::build(const std::vector<Shape>& input_shapes) {
  if (built_) return;
  try {
    build_impl(input_shapes);
  } catch (const ShapeError& e) {
    // Name the layer here, so a direct build() names it as well as a first call does.
    STRATA_THROW(ShapeError, "building " << class_name() << " '" << path() << "': " << e.what());
  }
  built_ = true;
}

Variable Layer::run(const std::vector<Variable>& inputs, bool training) {
  std::vector<Shape> shapes;
  shapes.reserve(inputs.size());
  for (const auto& x : inputs) {
    STRATA_CHECK(x.defined(), InvalidArgument, class_name() << " '" << name() << "' got an undefined input");
    shapes.push_back(x.shape());
  }
  if (!built_) build(shapes);
  // The dtype policy (strata/nn/policy.h): the products and convolutions of this call, and of its gradient (each op
  // keeps the precision it ran in), compute in bf16 under mixed_bfloat16, on a GPU or on a CPU with bf16 instructions
  // (where the inputs are); sublayers see the same policy.
  const Device device = inputs.empty() ? Device::cpu() : inputs.front().value().device();
  const kernels::ComputePrecisionScope precision(effective_compute_dtype(device) == DType::kBFloat16
                                                     ? kernels::ComputePrecision::kBFloat16
                                                     : kernels::ComputePrecision::kFloat32);
  Variable out = call(inputs, training);
  if (input_shapes_.empty()) {
    for (auto s : shapes) {
      if (!s.empty()) s[0] = -1;
      input_shapes_.push_back(std::move(s));
    }
    output_shape_ = out.shape();
    if (!output_shape_.empty()) output_shape_[0] = -1;
  }
  return out;
}

Variable Layer::operator()(const Variable& input, bool training) { return run({input}, training); }

Variable Layer::operator()(const std::vector<Variable>& inputs, bool training) { return run(inputs, training); }

Variable Layer::add_weight(const std::string& name, const Shape& shape, const init::Initializer& initializer,
                           bool trainable, Regularizer regularizer) {
  for (const auto& w : weights_) {
    STRATA_CHECK(w.variable.name() != path() + "/" + name, InvalidArgument,
                 "layer '" << path() << "' already has a weight named '" << name << "'");
  }
  const std::string full = path().empty() ? name : path() + "/" + name;
  // Sizes come from configs (a saved model's, a job file's) as well as from code: a shape whose element count does
  // not fit in int64 (num_heads * key_dim * features, say) is refused here, before any arithmetic on it.
  int64_t elements = 1;
  for (int64_t d : shape) {
    STRATA_CHECK(d >= 0 && !__builtin_mul_overflow(elements, d, &elements), ShapeError,
                 "layer '" << path() << "': weight '" << name << "' of shape " << shape_str(shape) << " is too large");
  }
  Variable v = make_variable(initializer(shape, default_generator()), {.name = full, .trainable = trainable});
  weights_.push_back({v, std::move(regularizer), trainable});
  return v;
}

std::shared_ptr<Layer> Layer::add_layer(std::shared_ptr<Layer> sublayer) {
  STRATA_CHECK(sublayer != nullptr, InvalidArgument, "layer '" << name() << "': cannot add a null layer");
  std::set<std::string> taken;
  for (const auto& l : sublayers_) taken.insert(l->name());
  if (sublayer->name_.empty()) {
    const std::string base = to_snake_case(sublayer->class_name());
    std::string candidate = base;
    for (int i = 1; taken.count(candidate) != 0; ++i) candidate = base + "_" + std::to_string(i);
    sublayer->name_ = candidate;
  } else {
    STRATA_CHECK(taken.count(sublayer->name_) == 0, InvalidArgument,
                 "layer '" << path() << "' already has a sublayer named '" << sublayer->name_
                           << "'; layer names in a model must be unique");
  }
  sublayer->has_parent_ = true;
  sublayer->parent_path_ = path();
  sublayer->repath_children();
  sublayers_.push_back(sublayer);
  return sublayer;
}

void Layer::repath_children() {
  for (const auto& l : sublayers_) {
    l->has_parent_ = true;
    l->parent_path_ = path();
    l->repath_children();
  }
}

// which: 0 all, 1 trainable, 2 non-trainable.
void Layer::collect(std::vector<Variable>& out, int which, bool parent_trainable) const {
  const bool layer_trainable = parent_trainable && trainable_;
  for (const auto& w : weights_) {
    const bool is_trainable = layer_trainable && w.trainable;
    if (which == 0 || (which == 1 && is_trainable) || (which == 2 && !is_trainable)) out.push_back(w.variable);
  }
  for (const auto& l : sublayers_) l->collect(out, which, layer_trainable);
}

std::vector<Variable> Layer::variables() const {
  std::vector<Variable> out;
  collect(out, 0, true);
  return out;
}

std::vector<Variable> Layer::trainable_variables() const {
  std::vector<Variable> out;
  collect(out, 1, true);
  return out;
}

std::vector<Variable> Layer::non_trainable_variables() const {
  std::vector<Variable> out;
  collect(out, 2, true);
  return out;
}

int64_t Layer::count_params() const {
  int64_t n = 0;
  for (const auto& v : variables()) n += v.value().numel();
  return n;
}

Variable Layer::regularization_loss() const {
  Variable total;
  for (const auto& w : weights_) {
    if (!w.regularizer) continue;
    Variable term = w.regularizer(w.variable);
    total = total.defined() ? total + term : term;
  }
  for (const auto& l : sublayers_) {
    Variable term = l->regularization_loss();
    if (term.defined()) total = total.defined() ? total + term : term;
  }
  return total;
}

}  // namespace strata::nn
