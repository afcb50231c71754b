// Functional model graphs: layers called on symbolic tensors, for models that are not a plain stack.
//
//   auto a = nn::Input({16}), b = nn::Input({8});
//   auto h = nn::Dense(32, "relu")(nn::Concatenate()({a, b}));
//   auto out = nn::Add()({h, nn::Dense(32)(h)});        // a residual connection
//   Model model({a, b}, out);                            // strata/train/model.h
//
// A SymbolicTensor is a node of that graph: an input, or a layer applied to other nodes. Applying a
// layer builds it at once on a batch of one (so shapes are known and errors point at the line that
// made the graph) and stores a clone of it that shares its weights. A Graph runs the nodes in order.
//
// Thread-safety: a graph is immutable once made; running it follows the layers' rules (layer.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/nn/layer.h"

namespace strata::nn {

namespace detail {
struct GraphNode;
}

class SymbolicTensor {
 public:
  SymbolicTensor() = default;
  explicit SymbolicTensor(std::shared_ptr<detail::GraphNode> node) : node_(std::move(node)) {}
  // Shape with the batch dimension as -1.
  const Shape& shape() const;
  DType dtype() const;
  const std::shared_ptr<detail::GraphNode>& node() const { return node_; }

 private:
  std::shared_ptr<detail::GraphNode> node_;
};

// A model input of the given shape without the batch dimension (Keras's `Input(shape=...)`).
SymbolicTensor Input(const Shape& shape, DType dtype = DType::kFloat32, const std::string& name = "");

namespace detail {
struct GraphNode {
  std::shared_ptr<Layer> layer;  // null for an input
  std::vector<SymbolicTensor> inputs;
  Shape shape;  // batch dimension -1
  DType dtype = DType::kFloat32;
  std::string input_name;  // inputs only
};
}  // namespace detail

// The nodes between some inputs and outputs, in an order that runs each node after its inputs.
class Graph {
 public:
  Graph() = default;
  // Every output must depend only on `inputs`; an unreachable input or a missing one is an
  // InvalidArgument naming it.
  Graph(std::vector<SymbolicTensor> inputs, std::vector<SymbolicTensor> outputs);

  // One value per output. `inputs` in the order given to the constructor.
  std::vector<Variable> run(const std::vector<Variable>& inputs, bool training) const;

  // The distinct layers in run order (a layer used twice appears once).
  std::vector<std::shared_ptr<Layer>> layers() const;
  const std::vector<SymbolicTensor>& inputs() const { return inputs_; }
  const std::vector<SymbolicTensor>& outputs() const { return outputs_; }
  // The layer nodes (inputs excluded) in run order, each after its inputs; a layer used twice has two nodes.
  const std::vector<std::shared_ptr<detail::GraphNode>>& nodes() const { return order_; }

 private:
  std::vector<SymbolicTensor> inputs_, outputs_;
  std::vector<std::shared_ptr<detail::GraphNode>> order_;  // layer nodes only, topologically sorted
};

}  // namespace strata::nn
