// Recurrent layers LSTM and GRU with Keras's semantics, gate order and weight layout, so weights saved
// by Keras (kernel, recurrent_kernel, bias) load as they are:
//
//   LSTM  kernel [features, 4u], recurrent_kernel [u, 4u], bias [4u]; gates i, f, c, o along the last axis.
//   GRU   kernel [features, 3u], recurrent_kernel [u, 3u], bias [2, 3u] (reset_after, Keras 2's default:
//         row 0 input bias, row 1 recurrent bias) or [3u]; gates z, r, h along the last axis.
//
//   nn::LSTM(64)                                        // [batch, time, features] -> [batch, 64]
//   nn::LSTM(64, {.return_sequences = true})            // -> [batch, time, 64]
//   nn::GRU(32, {.go_backwards = true})
//   auto [out, states] = lstm.call_with_states(x);      // Keras's return_state=True: states {h, c}
//
// A layer returns one Variable, so Keras's `return_state=True` is the method call_with_states(), which
// returns the output and the final states (and takes optional initial states); calling the layer gives
// the output alone. The loop over time is made of differentiable ops, so backpropagation through time
// is the tape's. The outputs of go_backwards are in processing order (last input step first), as in Keras.
//
// Thread-safety: as for every layer (see nn/layer.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/nn/layer.h"
#include "strata/nn/layer_options.h"

namespace strata::nn {

// The output of a recurrent layer and its final states (LSTM: {h, c}; GRU: {h}), each [batch, units].
struct RecurrentResult {
  Variable output;
  std::vector<Variable> states;
};

struct LSTMOptions {
  ActivationSpec activation = "tanh";
  ActivationSpec recurrent_activation = "sigmoid";
  bool use_bias = true;
  InitializerSpec kernel_initializer = "glorot_uniform";
  InitializerSpec recurrent_initializer = "orthogonal";
  InitializerSpec bias_initializer = "zeros";
  // Adds 1 to the forget gate's bias at initialisation (Jozefowicz et al., 2015), as Keras does.
  bool unit_forget_bias = true;
  RegularizerSpec kernel_regularizer = {};
  RegularizerSpec recurrent_regularizer = {};
  RegularizerSpec bias_regularizer = {};
  bool return_sequences = false;  // every step's h [batch, time, units] instead of the last [batch, units]
  bool go_backwards = false;      // read the sequence from its last step
  std::string name = "";
};

class LSTM : public LayerBase<LSTM> {
 public:
  using Options = LSTMOptions;
  explicit LSTM(int64_t units, LSTMOptions options = {});

  std::string class_name() const override { return "LSTM"; }
  int64_t units() const { return units_; }
  const LSTMOptions& options() const { return options_; }
  // Runs like operator() (building on first use) and returns the final states {h, c} too.
  // `initial_state`: empty (zeros) or {h0, c0}, each [batch, units].
  RecurrentResult call_with_states(const Variable& input, bool training = false,
                                   const std::vector<Variable>& initial_state = {});

  // Undefined until built; bias() also when use_bias is false.
  const Variable& kernel() const { return kernel_; }
  const Variable& recurrent_kernel() const { return recurrent_kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  RecurrentResult run_sequence(const Variable& input, const std::vector<Variable>& initial_state) const;
  int64_t units_;
  LSTMOptions options_;
  Variable kernel_, recurrent_kernel_, bias_;
};

struct GRUOptions {
  ActivationSpec activation = "tanh";
  ActivationSpec recurrent_activation = "sigmoid";
  bool use_bias = true;
  InitializerSpec kernel_initializer = "glorot_uniform";
  InitializerSpec recurrent_initializer = "orthogonal";
  InitializerSpec bias_initializer = "zeros";
  RegularizerSpec kernel_regularizer = {};
  RegularizerSpec recurrent_regularizer = {};
  RegularizerSpec bias_regularizer = {};
  bool return_sequences = false;
  bool go_backwards = false;
  // true (Keras 2's default, and cuDNN's and PyTorch's form): the reset gate multiplies the recurrent
  // product, h~ = act(x Wh + bx + r * (h Rh + bh)); false: h~ = act(x Wh + (r * h) Rh + b).
  bool reset_after = true;
  std::string name = "";
};

class GRU : public LayerBase<GRU> {
 public:
  using Options = GRUOptions;
  explicit GRU(int64_t units, GRUOptions options = {});

  std::string class_name() const override { return "GRU"; }
  int64_t units() const { return units_; }
  const GRUOptions& options() const { return options_; }
  // Runs like operator() and returns the final state {h} too. `initial_state`: empty (zeros) or {h0}.
  RecurrentResult call_with_states(const Variable& input, bool training = false,
                                   const std::vector<Variable>& initial_state = {});

  const Variable& kernel() const { return kernel_; }
  const Variable& recurrent_kernel() const { return recurrent_kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  RecurrentResult run_sequence(const Variable& input, const std::vector<Variable>& initial_state) const;
  int64_t units_;
  GRUOptions options_;
  Variable kernel_, recurrent_kernel_, bias_;
};

}  // namespace strata::nn
