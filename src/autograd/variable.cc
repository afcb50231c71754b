// Variable nodes and the variable-creator hook stack.
#include "strata/variable.h"

#include <atomic>

#include "autograd/node.h"
#include "kernels/kernels.h"

namespace strata {

namespace {
std::atomic<uint64_t> g_next_id{1};

std::shared_ptr<detail::Node> new_node(Tensor value, bool trainable, std::string name) {
  STRATA_CHECK(value.defined(), InvalidArgument, "a Variable needs a defined tensor");
  auto node = std::make_shared<detail::Node>();
  node->value = std::move(value);
  node->trainable = trainable;
  node->name = std::move(name);
  node->id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  return node;
}

const detail::Node& checked(const std::shared_ptr<detail::Node>& node) {
  STRATA_CHECK(node != nullptr, InvalidArgument, "use of an undefined Variable");
  return *node;
}

thread_local std::vector<VariableCreator> t_creators;

Variable create_at(size_t depth, const Tensor& initial, const VariableOptions& options) {
  if (depth == 0) return Variable(initial, options.trainable, options.name);
  const auto next = [depth](const Tensor& t, const VariableOptions& o) { return create_at(depth - 1, t, o); };
  return t_creators[depth - 1](initial, options, next);
}
}  // namespace

Variable::Variable(Tensor value) : node_(new_node(std::move(value), false, "")) {}
Variable::Variable(Tensor value, bool trainable, std::string name)
    : node_(new_node(std::move(value), trainable, std::move(name))) {}

const Tensor& Variable::value() const { return checked(node_).value; }
bool Variable::trainable() const { return checked(node_).trainable; }
const std::string& Variable::name() const { return checked(node_).name; }
uint64_t Variable::id() const { return checked(node_).id; }
const Tensor& Variable::grad() const { return checked(node_).grad; }
bool Variable::has_grad_fn() const { return static_cast<bool>(checked(node_).backward); }

void Variable::set_grad(Tensor grad) {
  checked(node_);
  STRATA_CHECK(!grad.defined() || grad.shape() == node_->value.shape(), ShapeError,
               "set_grad: gradient " << grad.shape_str() << " for variable '" << node_->name << "' of shape "
                                     << node_->value.shape_str());
  node_->grad = std::move(grad);
}

void Variable::assign(const Tensor& value) {
  checked(node_);
  STRATA_CHECK(value.shape() == node_->value.shape() && value.dtype() == node_->value.dtype(), ShapeError,
               "assign: value " << dtype_name(value.dtype()) << value.shape_str() << " for variable '"
                                << node_->name << "' of " << dtype_name(node_->value.dtype())
                                << node_->value.shape_str());
  node_->value.copy_(value);
}

void Variable::assign_add(const Tensor& delta, float scale) { add_scaled("assign_add", delta, scale); }
void Variable::assign_sub(const Tensor& delta, float scale) { add_scaled("assign_sub", delta, -scale); }

void Variable::add_scaled(const char* op, const Tensor& delta, float scale) {
  checked(node_);
  STRATA_CHECK(delta.shape() == node_->value.shape(), ShapeError,
               op << ": delta " << delta.shape_str() << " for variable '" << node_->name << "' of shape "
                  << node_->value.shape_str());
  kernels::axpy_(node_->value, scale, delta);
}

ScopedVariableCreator::ScopedVariableCreator(VariableCreator creator) { t_creators.push_back(std::move(creator)); }
ScopedVariableCreator::~ScopedVariableCreator() { t_creators.pop_back(); }

Variable make_variable(const Tensor& initial_value, const VariableOptions& options) {
  return create_at(t_creators.size(), initial_value, options);
}

}  // namespace strata
