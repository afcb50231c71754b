// The node behind a Variable and the helper ops use to record themselves on the tape.
// Thread-safety: a node is written by the thread that makes it; gradient walks only read nodes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "strata/gradient_tape.h"
#include "strata/variable.h"

namespace strata::detail {

// What the tape tells an op's backward: which inputs want a gradient, and which relu fusion applies.
//
// Relu fusion: relu's backward is a full pass over its output (dy where y > 0, else 0). When a relu's
// output feeds exactly one op, that op can often apply the mask on something smaller; max pooling masks
// its own dy by "pooled value > 0" (the argmax cell is then > 0 exactly when the pooled value is), a
// quarter of the pass for a 2x2 pool. The tape arranges it only when nothing else can see the relu's
// output gradient: one consumer, and the relu's output is not a requested source.
struct BackwardNeeds {
  std::vector<bool> inputs;  // which inputs want a gradient
  // Set for an op that ends in a relu (Node::relu_output): dy is already zero wherever the op's output
  // is <= 0, so the op skips its mask.
  bool dy_relu_masked = false;
  // Set for an op that declared Node::premasks_relu_input: return input 0's gradient already masked by
  // that input's relu (zero wherever the input is <= 0). The op must then do so.
  bool premask_relu_input = false;

  bool operator[](size_t i) const { return inputs[i]; }
  size_t size() const { return inputs.size(); }
};

// Given dy (shaped like the op's output) and which inputs want a gradient, returns one gradient per
// input (an undefined Tensor where not wanted). Gradients must have the input's shape.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& dy, const BackwardNeeds& needs)>;

// The relu fusion an op takes part in (see BackwardNeeds).
struct ReluFusion {
  bool relu_output = false;          // the op's output is relu(...) and its backward masks dy by output > 0
  bool premasks_relu_input = false;  // the op's backward can mask its input's gradient by that input's relu
};

struct Node {
  Tensor value;
  Tensor grad;
  bool trainable = false;
  std::string name;
  uint64_t id = 0;
  // Set for results of recorded ops.
  const char* op = nullptr;
  std::vector<Variable> inputs;
  BackwardFn backward;
  ReluFusion relu_fusion;
  // Distributed variables: components 1..N-1 (component 0 is `value`) and the owning strategy's id.
  std::vector<Tensor> components;
  uint64_t owner = 0;
  bool model_variable = false;
};

// True when the tape would differentiate through `v` (watched leaf, or result of a recorded op).
bool tracked(const Variable& v);

// Wraps an op's result. If a tape is recording and some input is tracked, records `backward`;
// otherwise `backward` is dropped (no graph is kept).
Variable make_result(Tensor value, const char* op, std::vector<Variable> inputs, BackwardFn backward,
                     ReluFusion relu_fusion = {});

}  // namespace strata::detail
