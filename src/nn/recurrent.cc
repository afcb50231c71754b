// LSTM and GRU (see strata/nn/recurrent.h): a loop over time of differentiable ops, so the tape
// records every step and backpropagation through time needs no code of its own. An LSTM with Keras's default
// activations (tanh, sigmoid gates) runs each step's cell as one fused op (lstm_cell), others as composed ops.
//
// The input projections of all steps are one product: the input goes time-major, [time * batch,
// features] @ kernel (+ bias), and each step takes its rows; only the recurrent product is per step.
// Thread-safety: as for every layer (see nn/layer.h); a call reads the weights only.
#include "strata/nn/recurrent.h"

#include <algorithm>

#include "nn/layer_util.h"
#include "strata/error.h"
#include "strata/ops.h"

namespace strata::nn {

using detail::label;
using detail::with_free_batch;

namespace {

// REQUIRES: a built layer with `features` inputs per step.
void check_sequence_input(const Layer& layer, const Shape& s, int64_t features) {
  STRATA_CHECK(s.size() == 3 && s[1] > 0 && (features < 0 || s[2] == features), ShapeError,
               label(layer) << " expects input [batch, time, "
                            << (features < 0 ? std::string("features") : std::to_string(features))
                            << "] with time > 0, got " << shape_str(with_free_batch(s)));
}

// The input projection of every step: [time * batch, columns], time-major (step t is rows t*batch ...).
Variable project_inputs(const Variable& input, const Variable& kernel, const Variable& bias) {
  const Shape& s = input.shape();
  const Variable time_major = reshape(transpose(input, {1, 0, 2}), {s[0] * s[1], s[2]});
  Variable projected = matmul(time_major, kernel);
  return bias.defined() ? projected + bias : projected;
}

// Rows of step `t` of a time-major projection.
Variable step_rows(const Variable& projected, int64_t t, int64_t batch) {
  return slice_axis(projected, 0, t * batch, (t + 1) * batch);
}

// Gate `g` of `units` columns each.
Variable gate(const Variable& x, int g, int64_t units) { return slice_axis(x, 1, g * units, (g + 1) * units); }

// The layer's output from each step's h (in processing order).
Variable sequence_output(const std::vector<Variable>& hs, bool return_sequences) {
  return return_sequences ? stack(hs, 1) : hs.back();
}

void check_initial_state(const Layer& layer, const std::vector<Variable>& initial_state, size_t count, int64_t batch,
                         int64_t units) {
  STRATA_CHECK(initial_state.empty() || initial_state.size() == count, InvalidArgument,
               label(layer) << " takes " << count << " initial states, got " << initial_state.size());
  for (const Variable& s : initial_state) {
    STRATA_CHECK(s.defined() && s.shape() == (Shape{batch, units}), ShapeError,
                 label(layer) << " wants initial states [" << batch << ", " << units << "], got "
                              << (s.defined() ? shape_str(s.shape()) : std::string("an undefined one")));
  }
}

std::vector<int64_t> time_order(int64_t steps, bool go_backwards) {
  std::vector<int64_t> order(static_cast<size_t>(steps));
  for (int64_t t = 0; t < steps; ++t) order[static_cast<size_t>(t)] = go_backwards ? steps - 1 - t : t;
  return order;
}

void check_units(const char* what, int64_t units) {
  STRATA_CHECK(units > 0, InvalidArgument, what << " needs a positive number of units, got " << units);
}

}  // namespace

// ---------------------------------------------------------------- LSTM
LSTM::LSTM(int64_t units, LSTMOptions options) : LayerBase(options.name), units_(units), options_(std::move(options)) {
  check_units("LSTM", units);
}

void LSTM::build_impl(const Shape& input_shape) {
  check_sequence_input(*this, input_shape, -1);
  const int64_t features = input_shape[2], u = units_;
  kernel_ =
      add_weight("kernel", {features, 4 * u}, options_.kernel_initializer.fn(), true, options_.kernel_regularizer.fn());
  recurrent_kernel_ = add_weight("recurrent_kernel", {u, 4 * u}, options_.recurrent_initializer.fn(), true,
                                 options_.recurrent_regularizer.fn());
  if (options_.use_bias) {
    init::Initializer bias_init = options_.bias_initializer.fn();
    if (options_.unit_forget_bias) {
      // Keras: bias_initializer for i, c and o; ones for f.
      bias_init = [inner = bias_init, u](const Shape&, Generator& gen) {
        Tensor b = inner({4 * u}, gen);
        std::fill(b.data<float>() + u, b.data<float>() + 2 * u, 1.0f);
        return b;
      };
    }
    bias_ = add_weight("bias", {4 * u}, bias_init, true, options_.bias_regularizer.fn());
  }
}

RecurrentResult LSTM::run_sequence(const Variable& input, const std::vector<Variable>& initial_state) const {
  check_sequence_input(*this, input.shape(), kernel_.shape()[0]);
  const int64_t batch = input.shape()[0], steps = input.shape()[1], u = units_;
  check_initial_state(*this, initial_state, 2, batch, u);
  const Variable projected = project_inputs(input, kernel_, bias_);
  const ActivationSpec& act = options_.activation;
  const ActivationSpec& rec = options_.recurrent_activation;
  const bool fused = act.name() == "tanh" && rec.name() == "sigmoid";
  // Zero initial states are left undefined, so the first step skips the products with them.
  Variable h = initial_state.empty() ? Variable() : initial_state[0];
  Variable c = initial_state.empty() ? Variable() : initial_state[1];
  std::vector<Variable> hs;
  hs.reserve(static_cast<size_t>(steps));
  for (int64_t t : time_order(steps, options_.go_backwards)) {
    Variable z = step_rows(projected, t, batch);
    if (h.defined()) z = z + matmul(h, recurrent_kernel_);
    if (fused) {  // Keras's default cell in one op: one pass forward and one backward per step
      const Variable packed = lstm_cell(z, c);
      h = slice_axis(packed, 1, 0, u);
      c = slice_axis(packed, 1, u, 2 * u);
    } else {
      const Variable i = rec(gate(z, 0, u)), f = rec(gate(z, 1, u)), candidate = act(gate(z, 2, u)),
                     o = rec(gate(z, 3, u));
      c = c.defined() ? f * c + i * candidate : i * candidate;
      h = o * act(c);
    }
    hs.push_back(h);
  }
  return {sequence_output(hs, options_.return_sequences), {h, c}};
}

Variable LSTM::call(const Variable& input, bool) { return run_sequence(input, {}).output; }

RecurrentResult LSTM::call_with_states(const Variable& input, bool, const std::vector<Variable>& initial_state) {
  STRATA_CHECK(input.defined(), InvalidArgument, label(*this) << " got an undefined input");
  build({input.shape()});
  return run_sequence(input, initial_state);
}

// ---------------------------------------------------------------- GRU
GRU::GRU(int64_t units, GRUOptions options) : LayerBase(options.name), units_(units), options_(std::move(options)) {
  check_units("GRU", units);
}

void GRU::build_impl(const Shape& input_shape) {
  check_sequence_input(*this, input_shape, -1);
  const int64_t features = input_shape[2], u = units_;
  kernel_ =
      add_weight("kernel", {features, 3 * u}, options_.kernel_initializer.fn(), true, options_.kernel_regularizer.fn());
  recurrent_kernel_ = add_weight("recurrent_kernel", {u, 3 * u}, options_.recurrent_initializer.fn(), true,
                                 options_.recurrent_regularizer.fn());
  if (options_.use_bias) {
    const Shape bias_shape = options_.reset_after ? Shape{2, 3 * u} : Shape{3 * u};
    bias_ = add_weight("bias", bias_shape, options_.bias_initializer.fn(), true, options_.bias_regularizer.fn());
  }
}

RecurrentResult GRU::run_sequence(const Variable& input, const std::vector<Variable>& initial_state) const {
  check_sequence_input(*this, input.shape(), kernel_.shape()[0]);
  const int64_t batch = input.shape()[0], steps = input.shape()[1], u = units_;
  check_initial_state(*this, initial_state, 1, batch, u);
  const bool reset_after = options_.reset_after;
  Variable input_bias, recurrent_bias;
  if (bias_.defined()) {
    input_bias = reset_after ? reshape(slice_axis(bias_, 0, 0, 1), {3 * u}) : bias_;
    if (reset_after) recurrent_bias = reshape(slice_axis(bias_, 0, 1, 2), {3 * u});
  }
  const Variable projected = project_inputs(input, kernel_, input_bias);
  const ActivationSpec& act = options_.activation;
  const ActivationSpec& rec = options_.recurrent_activation;
  // Reset-before needs the recurrent kernel's z, r columns and its h columns apart.
  const Variable recurrent_zr = reset_after ? Variable() : slice_axis(recurrent_kernel_, 1, 0, 2 * u);
  const Variable recurrent_h = reset_after ? Variable() : slice_axis(recurrent_kernel_, 1, 2 * u, 3 * u);
  // A zero h0 is made explicit: h enters the update z * h + (1 - z) * h~ at every step.
  Variable h = initial_state.empty() ? Variable(Tensor::zeros({batch, u}), /*trainable=*/false) : initial_state[0];
  std::vector<Variable> hs;
  hs.reserve(static_cast<size_t>(steps));
  for (int64_t t : time_order(steps, options_.go_backwards)) {
    const Variable x = step_rows(projected, t, batch);
    Variable candidate;
    Variable z, r;
    if (reset_after) {
      Variable inner = matmul(h, recurrent_kernel_);
      if (recurrent_bias.defined()) inner = inner + recurrent_bias;
      z = rec(gate(x, 0, u) + gate(inner, 0, u));
      r = rec(gate(x, 1, u) + gate(inner, 1, u));
      candidate = act(gate(x, 2, u) + r * gate(inner, 2, u));
    } else {
      const Variable inner = matmul(h, recurrent_zr);
      z = rec(gate(x, 0, u) + gate(inner, 0, u));
      r = rec(gate(x, 1, u) + gate(inner, 1, u));
      candidate = act(gate(x, 2, u) + matmul(r * h, recurrent_h));
    }
    h = z * h + affine(z, -1.0f, 1.0f) * candidate;  // (1 - z) * h~
    hs.push_back(h);
  }
  return {sequence_output(hs, options_.return_sequences), {h}};
}

Variable GRU::call(const Variable& input, bool) { return run_sequence(input, {}).output; }

RecurrentResult GRU::call_with_states(const Variable& input, bool, const std::vector<Variable>& initial_state) {
  STRATA_CHECK(input.defined(), InvalidArgument, label(*this) << " got an undefined input");
  build({input.shape()});
  return run_sequence(input, initial_state);
}

}  // namespace strata::nn
