// GradientTape: the per-thread stack of recording tapes, op recording, and the reverse walk. The seed and the zero
// gradients are made on their variable's device, and gradients add up through kernels::add, so a walk over tensors on
// a GPU never touches their elements on the host.
// Thread-safety: the tape stack is per thread; a walk reads recorded nodes only.
#include "strata/gradient_tape.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autograd/node.h"
#include "strata/aggregation.h"
#include "kernels/kernels.h"

namespace strata {

namespace {
thread_local std::vector<GradientTape*> t_tapes;
thread_local int t_no_grad_depth = 0;
}  // namespace

GradientTape::GradientTape(GradientTapeOptions options) : options_(options) { t_tapes.push_back(this); }

GradientTape::~GradientTape() {
  const auto it = std::find(t_tapes.begin(), t_tapes.end(), this);
  if (it != t_tapes.end()) t_tapes.erase(it);
}

void GradientTape::watch(const Variable& v) {
  STRATA_CHECK(v.defined(), InvalidArgument, "GradientTape::watch: undefined Variable");
  if (watched_.insert(v.node().get()).second) watched_alive_.push_back(v);
}

bool GradientTape::watches(const detail::Node* node) const {
  if (!recording_) return false;
  if (options_.watch_accessed_variables && node->trainable) return true;
  return watched_.count(node) > 0;
}

bool GradientTape::any_recording() {
  if (t_no_grad_depth > 0) return false;
  for (const GradientTape* tape : t_tapes)
    if (tape->recording_) return true;
  return false;
}

bool GradientTape::any_watches(const Variable& v) {
  if (t_no_grad_depth > 0) return false;
  for (const GradientTape* tape : t_tapes)
    if (tape->watches(v.node().get())) return true;
  return false;
}

GradientTape::Pause::Pause(GradientTape& tape) : tape_(tape) { tape_.recording_ = false; }
GradientTape::Pause::~Pause() { tape_.recording_ = true; }

NoGradGuard::NoGradGuard() { ++t_no_grad_depth; }
NoGradGuard::~NoGradGuard() { --t_no_grad_depth; }

std::vector<Tensor> GradientTape::gradient(const Variable& target, const std::vector<Variable>& sources,
                                           UnconnectedGradients unconnected) {
  STRATA_CHECK(target.defined(), InvalidArgument, "GradientTape::gradient: undefined target");
  return gradient(target, sources, Tensor::ones(target.shape(), DType::kFloat32, target.value().device()), unconnected);
}

std::vector<Tensor> GradientTape::gradient(const Variable& target, const std::vector<Variable>& sources,
                                           const Tensor& seed, UnconnectedGradients unconnected) {
  STRATA_CHECK(target.defined(), InvalidArgument, "GradientTape::gradient: undefined target");
  STRATA_CHECK(seed.shape() == target.shape(), ShapeError,
               "GradientTape::gradient: seed " << seed.shape_str() << " for target " << target.value().shape_str());
  STRATA_CHECK(options_.persistent || !used_, Error,
               "GradientTape::gradient can only be called once on a non-persistent tape; "
               "make it with {.persistent = true} to call it more often");
  used_ = true;
  // Gradients are plain computations: nothing below records on any tape.
  NoGradGuard no_grad;

  using NodePtr = detail::Node*;
  std::unordered_set<NodePtr> is_source;
  for (const Variable& s : sources) {
    STRATA_CHECK(s.defined(), InvalidArgument, "GradientTape::gradient: undefined source");
    is_source.insert(s.node().get());
  }
  // On a replica, the strategy's aggregator hears of each source's gradient as soon as it is final.
  GradientAggregator* aggregator = current_gradient_aggregator();
  std::unordered_map<NodePtr, size_t> source_index;  // first position of each source
  std::vector<bool> reported;
  if (aggregator) {
    for (size_t i = 0; i < sources.size(); ++i) source_index.try_emplace(sources[i].node().get(), i);
    reported.assign(sources.size(), false);
    aggregator->begin_gradients(sources);
  }

  // Post-order over the recorded graph (inputs before the ops that use them), iteratively.
  std::vector<NodePtr> order;
  std::unordered_map<NodePtr, bool> relevant;  // leads to a source
  std::unordered_map<NodePtr, int> uses;       // how many input slots of recorded ops read each node
  {
    std::vector<std::pair<NodePtr, size_t>> stack = {{target.node().get(), 0}};
    std::unordered_set<NodePtr> visited = {target.node().get()};
    while (!stack.empty()) {
      auto& [node, next_input] = stack.back();
      if (node->backward && next_input < node->inputs.size()) {
        NodePtr child = node->inputs[next_input++].node().get();
        ++uses[child];
        if (visited.insert(child).second) stack.push_back({child, 0});
        continue;
      }
      bool r = is_source.count(node) > 0;
      if (node->backward)
        for (const Variable& in : node->inputs) r = r || relevant[in.node().get()];
      relevant[node] = r;
      order.push_back(node);
      stack.pop_back();
    }
  }

  std::unordered_map<NodePtr, Tensor> grads;
  grads[target.node().get()] = seed;
  std::unordered_set<NodePtr> relu_masked;  // relu outputs whose gradient their one consumer masked
  // An op may mask its input's gradient by that input's relu when nothing else sees that gradient.
  const auto may_premask = [&](NodePtr node) {
    if (!node->relu_fusion.premasks_relu_input || node->inputs.empty()) return false;
    NodePtr in = node->inputs[0].node().get();
    return in->backward && in->relu_fusion.relu_output && uses[in] == 1 && !is_source.count(in);
  };
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    NodePtr node = *it;
    if (aggregator) {  // every consumer of `node` came earlier in this order: its gradient is final
      const auto s = source_index.find(node);
      if (s != source_index.end()) {
        const auto g = grads.find(node);
        const Tensor final_grad = g != grads.end() ? g->second : Tensor();
        if (final_grad.defined() || unconnected == UnconnectedGradients::kNone) {
          aggregator->gradient_ready(s->second, final_grad);
          reported[s->second] = true;
        }
      }
    }
    if (!node->backward || !relevant[node]) continue;
    auto found = grads.find(node);
    if (found == grads.end() || !found->second.defined()) continue;
    const Tensor dy = found->second;
    if (!is_source.count(node)) grads.erase(found);  // no longer needed: frees memory early
    detail::BackwardNeeds needs;
    needs.inputs.resize(node->inputs.size());
    for (size_t i = 0; i < needs.size(); ++i) needs.inputs[i] = relevant[node->inputs[i].node().get()];
    needs.dy_relu_masked = relu_masked.count(node) > 0;
    if (needs[0] && may_premask(node)) {
      needs.premask_relu_input = true;
      relu_masked.insert(node->inputs[0].node().get());
    }
    std::vector<Tensor> input_grads = node->backward(dy, needs);
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      if (!needs[i] || !input_grads[i].defined()) continue;
      NodePtr in = node->inputs[i].node().get();
      STRATA_CHECK(input_grads[i].shape() == in->value.shape(), ShapeError,
                   "gradient of " << node->op << " has shape " << input_grads[i].shape_str()
                                  << " for an input of shape " << in->value.shape_str());
      Tensor& acc = grads[in];
      acc = acc.defined() ? kernels::add(acc, input_grads[i]) : input_grads[i];
    }
  }

  std::vector<Tensor> result;
  result.reserve(sources.size());
  for (const Variable& s : sources) {
    auto found = grads.find(s.node().get());
    if (found != grads.end() && found->second.defined()) {
      result.push_back(found->second);
    } else {
      result.push_back(unconnected == UnconnectedGradients::kZero
                           ? Tensor::zeros(s.shape(), DType::kFloat32, s.value().device())
                           : Tensor());
    }
  }
  if (aggregator) {
    for (size_t i = 0; i < sources.size(); ++i) {  // unconnected sources, and repeats of a source
      if (!reported[i]) aggregator->gradient_ready(i, result[i]);
    }
    aggregator->end_gradients(result);
  }
  return result;
}

namespace detail {

bool tracked(const Variable& v) { return v.defined() && (v.has_grad_fn() || GradientTape::any_watches(v)); }

Variable make_result(Tensor value, const char* op, std::vector<Variable> inputs, BackwardFn backward,
                     ReluFusion relu_fusion) {
  Variable out(std::move(value));
  if (!GradientTape::any_recording()) return out;
  bool any_tracked = false;
  for (const Variable& in : inputs) any_tracked = any_tracked || tracked(in);
  if (!any_tracked) return out;
  detail::Node& node = *out.node();
  node.op = op;
  node.inputs = std::move(inputs);
  node.backward = std::move(backward);
  node.relu_fusion = relu_fusion;
  return out;
}

}  // namespace detail
}  // namespace strata
