// Functional model graphs: symbolic calls of layers and running the recorded graph (see strata/nn/functional.h).
#include "strata/nn/functional.h"

#include <map>
#include <mutex>
#include <set>

#include "strata/error.h"
#include "strata/gradient_tape.h"

namespace strata::nn {

const Shape& SymbolicTensor::shape() const {
  STRATA_CHECK(node_ != nullptr, InvalidArgument, "undefined symbolic tensor");
  return node_->shape;
}

DType SymbolicTensor::dtype() const {
  STRATA_CHECK(node_ != nullptr, InvalidArgument, "undefined symbolic tensor");
  return node_->dtype;
}

SymbolicTensor Input(const Shape& shape, DType dtype, const std::string& name) {
  for (int64_t d : shape) {
    STRATA_CHECK(d > 0, ShapeError, "Input shape " << shape_str(shape) << " (without the batch dimension) needs positive sizes");
  }
  auto node = std::make_shared<detail::GraphNode>();
  node->shape.push_back(-1);
  node->shape.insert(node->shape.end(), shape.begin(), shape.end());
  node->dtype = dtype;
  node->input_name = name.empty() ? "input" : name;
  return SymbolicTensor(std::move(node));
}

SymbolicTensor Layer::operator()(const SymbolicTensor& input) { return (*this)(std::vector<SymbolicTensor>{input}); }

namespace {
// Layers of functional graphs are built before they join a model, so (as in Keras) their default names
// are made unique per process: "dense", "dense_1", ...
std::string unique_default_name(const std::string& base) {
  static std::mutex mu;
  static std::map<std::string, int> used;
  std::lock_guard<std::mutex> lock(mu);
  const int n = used[base]++;
  return n == 0 ? base : base + "_" + std::to_string(n);
}
}  // namespace

SymbolicTensor Layer::operator()(const std::vector<SymbolicTensor>& inputs) {
  if (name_.empty()) name_ = unique_default_name(to_snake_case(class_name()));
  // Run once on a batch of one: builds the layer and yields the output shape, with errors raised here.
  std::vector<Variable> probes;
  for (const auto& in : inputs) {
    STRATA_CHECK(in.node() != nullptr, InvalidArgument, class_name() << " '" << name() << "' got an undefined symbolic input");
    Shape s = in.shape();
    s[0] = 1;
    probes.emplace_back(Tensor::zeros(s, in.dtype(), variable_device()));  // where the layer's variables will be
  }
  Variable out;
  {
    NoGradGuard no_grad;
    out = (*this)(probes, /*training=*/false);
  }
  auto node = std::make_shared<detail::GraphNode>();
  if (symbolic_self_ == nullptr) symbolic_self_ = clone();  // one graph layer per layer object
  node->layer = symbolic_self_;
  node->inputs = inputs;
  node->shape = out.shape();
  node->shape[0] = -1;
  node->dtype = out.dtype();
  return SymbolicTensor(std::move(node));
}

Graph::Graph(std::vector<SymbolicTensor> inputs, std::vector<SymbolicTensor> outputs)
    : inputs_(std::move(inputs)), outputs_(std::move(outputs)) {
  STRATA_CHECK(!outputs_.empty(), InvalidArgument, "a functional model needs at least one output");
  std::set<const detail::GraphNode*> input_nodes, visited, reached_inputs;
  for (const auto& in : inputs_) {
    STRATA_CHECK(in.node() != nullptr && in.node()->layer == nullptr, InvalidArgument,
                 "functional model inputs must come from nn::Input()");
    input_nodes.insert(in.node().get());
  }
  // Depth-first post-order from the outputs gives a run order.
  std::function<void(const std::shared_ptr<detail::GraphNode>&)> visit = [&](const auto& node) {
    if (!visited.insert(node.get()).second) return;
    if (node->layer == nullptr) {
      STRATA_CHECK(input_nodes.count(node.get()) != 0, InvalidArgument,
                   "the model's outputs depend on input '" << node->input_name << "' " << shape_str(node->shape)
                                                           << ", which is not among the model's inputs");
      reached_inputs.insert(node.get());
      return;
    }
    for (const auto& in : node->inputs) visit(in.node());
    order_.push_back(node);
  };
  for (const auto& out : outputs_) {
    STRATA_CHECK(out.node() != nullptr, InvalidArgument, "undefined model output");
    visit(out.node());
  }
  for (const auto& in : inputs_) {
    STRATA_CHECK(reached_inputs.count(in.node().get()) != 0, InvalidArgument,
                 "model input '" << in.node()->input_name << "' is not connected to any output");
  }
}

std::vector<Variable> Graph::run(const std::vector<Variable>& inputs, bool training) const {
  STRATA_CHECK(inputs.size() == inputs_.size(), InvalidArgument,
               "the model takes " << inputs_.size() << " input(s), got " << inputs.size());
  std::map<const detail::GraphNode*, Variable> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape& want = inputs_[i].shape();
    const Shape& got = inputs[i].shape();
    bool ok = got.size() == want.size();
    for (size_t d = 1; ok && d < want.size(); ++d) ok = got[d] == want[d];
    STRATA_CHECK(ok, ShapeError,
                 "model input '" << inputs_[i].node()->input_name << "' expects shape " << shape_str(want)
                                 << " (batch first), got " << shape_str(got));
    values[inputs_[i].node().get()] = inputs[i];
  }
  for (const auto& node : order_) {
    std::vector<Variable> args;
    args.reserve(node->inputs.size());
    for (const auto& in : node->inputs) args.push_back(values.at(in.node().get()));
    values[node.get()] = (*node->layer)(args, training);
  }
  std::vector<Variable> out;
  for (const auto& o : outputs_) out.push_back(values.at(o.node().get()));
  return out;
}

std::vector<std::shared_ptr<Layer>> Graph::layers() const {
  std::vector<std::shared_ptr<Layer>> out;
  std::set<const Layer*> seen;
  for (const auto& node : order_) {
    if (seen.insert(node->layer.get()).second) out.push_back(node->layer);
  }
  return out;
}

}  // namespace strata::nn
