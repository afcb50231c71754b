// Variable nodes, replica resolution of distributed variables, and the variable-creator hook stack.
// Thread-safety: the creator stack and the replica state are per thread.
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
thread_local std::vector<Device> t_creator_devices;  // each creator's variable device, in step with t_creators

// The replica this thread runs (ScopedReplica); owner 0: not a replica.
struct ReplicaState {
  int replica = 0;
  uint64_t owner = 0;
};
thread_local ReplicaState t_replica;

// value() on a replica thread: the replica's component, after checking who made the variable.
const Tensor& replica_value(const detail::Node& n) {
  if (n.model_variable && n.owner != t_replica.owner) {
    STRATA_THROW(InvalidArgument,
                 "variable '" << n.name << "' was created outside the scope of the strategy running this replica; "
                              << "create the model (and build it) inside `auto scope = strategy.scope();`");
  }
  if (t_replica.replica == 0 || n.components.empty()) return n.value;
  STRATA_CHECK(static_cast<size_t>(t_replica.replica) <= n.components.size(), InvalidArgument,
               "variable '" << n.name << "' has " << n.components.size() + 1 << " components; replica "
                            << t_replica.replica << " has none");
  return n.components[t_replica.replica - 1];
}

Variable create_at(size_t depth, const Tensor& initial, const VariableOptions& options) {
  if (depth == 0) return Variable(initial, options.trainable, options.name);
  const auto next = [depth](const Tensor& t, const VariableOptions& o) { return create_at(depth - 1, t, o); };
  return t_creators[depth - 1](initial, options, next);
}
}  // namespace

Variable::Variable(Tensor value) : node_(new_node(std::move(value), false, "")) {}
Variable::Variable(Tensor value, bool trainable, std::string name)
    : node_(new_node(std::move(value), trainable, std::move(name))) {}

const Tensor& Variable::value() const {
  const detail::Node& n = checked(node_);
  if (t_replica.owner == 0) [[likely]]
    return n.value;
  return replica_value(n);
}

int Variable::num_components() const { return static_cast<int>(checked(node_).components.size()) + 1; }
const Tensor& Variable::component(int i) const {
  const detail::Node& n = checked(node_);
  STRATA_CHECK(i >= 0 && i < num_components(), InvalidArgument,
               "variable '" << n.name << "' has " << num_components() << " component(s); asked for " << i);
  return i == 0 ? n.value : n.components[i - 1];
}
uint64_t Variable::owner() const { return checked(node_).owner; }
bool Variable::is_model_variable() const { return checked(node_).model_variable; }

template <class F>
void Variable::for_each_written_component(F&& fn) const {
  if (t_replica.owner != 0) {
    fn(const_cast<Tensor&>(replica_value(*node_)));
    return;
  }
  fn(node_->value);
  for (Tensor& c : node_->components) fn(c);
}
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
  for_each_written_component([&](Tensor& t) { t.copy_(value); });
}

void Variable::assign_add(const Tensor& delta, float scale) { add_scaled("assign_add", delta, scale); }
void Variable::assign_sub(const Tensor& delta, float scale) { add_scaled("assign_sub", delta, -scale); }

void Variable::add_scaled(const char* op, const Tensor& delta, float scale) {
  checked(node_);
  STRATA_CHECK(delta.shape() == node_->value.shape(), ShapeError,
               op << ": delta " << delta.shape_str() << " for variable '" << node_->name << "' of shape "
                  << node_->value.shape_str());
  for_each_written_component([&](Tensor& t) { kernels::axpy_(t, scale, delta); });
}

ScopedVariableCreator::ScopedVariableCreator(VariableCreator creator, Device device) {
  t_creators.push_back(std::move(creator));
  t_creator_devices.push_back(device);
}
ScopedVariableCreator::~ScopedVariableCreator() {
  t_creators.pop_back();
  t_creator_devices.pop_back();
}

Device variable_device() { return t_creator_devices.empty() ? Device::cpu() : t_creator_devices.back(); }

Variable make_variable(const Tensor& initial_value, const VariableOptions& options) {
  Variable v = create_at(t_creators.size(), initial_value, options);
  v.node()->model_variable = true;
  return v;
}

Variable make_distributed_variable(std::vector<Tensor> components, const VariableOptions& options, uint64_t owner) {
  STRATA_CHECK(!components.empty(), InvalidArgument,
               "make_distributed_variable: variable '" << options.name << "' needs at least one component");
  STRATA_CHECK(owner != 0, InvalidArgument, "make_distributed_variable: owner must be a strategy id (non-zero)");
  for (size_t i = 1; i < components.size(); ++i) {
    STRATA_CHECK(components[i].defined() && components[i].shape() == components[0].shape() &&
                     components[i].dtype() == components[0].dtype(),
                 ShapeError,
                 "make_distributed_variable: component " << i << " of variable '" << options.name
                                                         << "' differs in shape or dtype from component 0");
  }
  Variable v(components[0], options.trainable, options.name);
  detail::Node& node = *v.node();
  node.components.assign(std::make_move_iterator(components.begin() + 1), std::make_move_iterator(components.end()));
  node.owner = owner;
  node.model_variable = true;
  return v;
}

ScopedReplica::ScopedReplica(int replica, uint64_t owner)
    : previous_replica_(t_replica.replica), previous_owner_(t_replica.owner) {
  STRATA_CHECK(replica >= 0, InvalidArgument, "ScopedReplica: replica must be >= 0, got " << replica);
  t_replica = {owner == 0 ? 0 : replica, owner};
}
ScopedReplica::~ScopedReplica() { t_replica = {previous_replica_, previous_owner_}; }

}  // namespace strata
