// The node behind a Variable and the helper ops use to record themselves on the tape.
// Thread-safety: a node is written by the thread that makes it; gradient walks only read nodes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "strata/gradient_tape.h"
#include "strata/variable.h"

namespace strata::detail {

// Given dy (shaped like the op's output) and which inputs want a gradient, returns one gradient per
// input (an undefined Tensor where not wanted). Gradients must have the input's shape.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& dy, const std::vector<bool>& needs)>;

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
  // Distributed variables: components 1..N-1 (component 0 is `value`) and the owning strategy's id.
  std::vector<Tensor> components;
  uint64_t owner = 0;
  bool model_variable = false;
};

// True when the tape would differentiate through `v` (watched leaf, or result of a recorded op).
bool tracked(const Variable& v);

// Wraps an op's result. If a tape is recording and some input is tracked, records `backward`;
// otherwise `backward` is dropped (no graph is kept).
Variable make_result(Tensor value, const char* op, std::vector<Variable> inputs, BackwardFn backward);

}  // namespace strata::detail
