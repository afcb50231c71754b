// Variable: a tensor that takes part in differentiation.
//
// A Variable is a handle (cheap to copy; copies share one node) to a value Tensor plus a gradient
// slot, a trainable flag and a name. Model parameters are trainable Variables; the results of ops
// on Variables (see strata/ops.h) are Variables too, and while a GradientTape records, each result
// remembers its inputs and how to send a gradient back to them. A Tensor converts implicitly into a
// constant (non-trainable) Variable, so ops accept plain tensors.
//
// Variables made for a model should come from `make_variable`, which asks the innermost installed
// VariableCreator (a distribution strategy's scope installs one, like TensorFlow's variable-creator
// scopes) and otherwise builds a plain Variable.
//
// Distributed variables: a strategy's creator may make a variable with one component per replica
// (a mirrored variable) and mark it with the strategy's id (its owner). On a thread inside
// ScopedReplica(r, owner), value() is component r, assign* write component r, and reading a model
// variable of another owner (one created outside the strategy's scope) is an InvalidArgument naming
// it. Elsewhere value() is component 0 and assign* write every component.
//
// Thread-safety: reading a Variable from many threads is safe; `assign*` and `set_grad` must not race
// with readers of the same Variable (replicas each write only their own component).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/tensor.h"

namespace strata {

namespace detail {
struct Node;
}

class Variable {
 public:
  // An undefined Variable.
  Variable() = default;
  // A constant (non-trainable) Variable holding `value`.
  Variable(Tensor value);  // NOLINT(google-explicit-constructor): tensors pass where variables are expected
  Variable(Tensor value, bool trainable, std::string name = "");

  bool defined() const { return node_ != nullptr; }
  const Tensor& value() const;
  const Shape& shape() const { return value().shape(); }
  DType dtype() const { return value().dtype(); }
  bool trainable() const;
  const std::string& name() const;
  // A process-unique id (stable for the life of the node).
  uint64_t id() const;

  // The gradient slot (undefined until set). Optimizers and strategies may use it; GradientTape
  // returns gradients directly and does not write here.
  const Tensor& grad() const;
  void set_grad(Tensor grad);

  // In-place updates of the value (same shape and dtype), like tf.Variable.assign*:
  // value = v; value += scale * delta; value -= scale * delta.
  void assign(const Tensor& value);
  void assign_add(const Tensor& delta, float scale = 1.0f);
  void assign_sub(const Tensor& delta, float scale = 1.0f);

  // Whether this Variable was produced by a recorded op (it has a gradient function).
  bool has_grad_fn() const;

  // ---- distributed variables (see the top of this file)
  // 1 for an ordinary variable, N for one mirrored over N replicas.
  int num_components() const;
  // Component i's value (0 <= i < num_components()); component 0 is what value() gives outside replicas.
  const Tensor& component(int i) const;
  // The id of the strategy whose creator made this variable (0: none).
  uint64_t owner() const;
  // Whether make_variable (or a strategy's creator) made it: a model's weight rather than an op's value.
  bool is_model_variable() const;

  bool same_as(const Variable& other) const { return node_ == other.node_; }
  const std::shared_ptr<detail::Node>& node() const { return node_; }
  explicit Variable(std::shared_ptr<detail::Node> node) : node_(std::move(node)) {}

 private:
  // value += scale * delta, with errors naming `op`.
  void add_scaled(const char* op, const Tensor& delta, float scale);
  // The components assign* write on this thread: its replica's, or all of them outside replicas.
  template <class F>
  void for_each_written_component(F&& fn) const;

  std::shared_ptr<detail::Node> node_;
};

// How a new model variable should be made.
struct VariableOptions {
  std::string name;
  bool trainable = true;
};

// A hook that makes variables: receives the initial value, the options, and the next creator down
// the stack (call it to get the default behaviour). Install with ScopedVariableCreator.
using VariableCreator =
    std::function<Variable(const Tensor& initial_value, const VariableOptions& options,
                           const std::function<Variable(const Tensor&, const VariableOptions&)>& next)>;

// Installs `creator` for the calling thread until destroyed (creators nest; innermost runs first). `device` is
// where the variables it makes live (a strategy's replica 0 device): layers built on a probe input (the functional
// API) make that probe there.
class ScopedVariableCreator {
 public:
  explicit ScopedVariableCreator(VariableCreator creator, Device device = Device::cpu());
  ~ScopedVariableCreator();
  ScopedVariableCreator(const ScopedVariableCreator&) = delete;
  ScopedVariableCreator& operator=(const ScopedVariableCreator&) = delete;
};

// The device of the innermost installed creator's variables (the host when none is installed).
Device variable_device();

// Makes a model variable through the installed creators.
Variable make_variable(const Tensor& initial_value, const VariableOptions& options = {});

// For strategies' creators: a model variable with these components (one per replica; they must share
// shape and dtype; component 0 is the value outside replicas), owned by strategy `owner` (non-zero).
Variable make_distributed_variable(std::vector<Tensor> components, const VariableOptions& options, uint64_t owner);

// Makes this thread a replica: value() resolves to component `replica` of variables with several
// components, and model variables not owned by `owner` are refused. Restores the previous state when
// destroyed. owner 0 turns replica resolution off.
class ScopedReplica {
 public:
  ScopedReplica(int replica, uint64_t owner);
  ~ScopedReplica();
  ScopedReplica(const ScopedReplica&) = delete;
  ScopedReplica& operator=(const ScopedReplica&) = delete;

 private:
  int previous_replica_;
  uint64_t previous_owner_;
};

}  // namespace strata
