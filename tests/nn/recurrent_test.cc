// LSTM and GRU: Keras's weight layout, names and initializers, gate order against a scalar recurrence
// written out here, output and state shapes, gradients of every weight and the input against finite
// differences, and outputs and gradients against PyTorch's nn.LSTM / nn.GRU on the same weights
// (tests/nn/recurrent_reference.json, written by tests/nn/make_recurrent_reference.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "nn/layer_grad_check.h"
#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/ops.h"
#include "test_util.h"

namespace strata {
namespace {

using test::expect_near;
using test::message_of;
using test::random_tensor;
using ::testing::HasSubstr;

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Weights are handles: a copy writes the layer's weight.
void set_weight(Variable weight, const Tensor& value) { weight.assign(value); }

TEST(RecurrentTest, LSTMWeightsHaveKerasLayoutNamesAndInitializers) {
  nn::LSTM lstm(6);
  lstm(random_tensor({2, 3, 4}, 1));
  EXPECT_EQ(lstm.kernel().shape(), (Shape{4, 24}));
  EXPECT_EQ(lstm.recurrent_kernel().shape(), (Shape{6, 24}));
  EXPECT_EQ(lstm.bias().shape(), (Shape{24}));
  EXPECT_EQ(lstm.kernel().name(), "lstm/kernel");
  EXPECT_EQ(lstm.recurrent_kernel().name(), "lstm/recurrent_kernel");
  EXPECT_EQ(lstm.bias().name(), "lstm/bias");
  EXPECT_EQ(lstm.count_params(), 4 * 24 + 6 * 24 + 24);
  // unit_forget_bias: ones on the forget gate (the second block), zeros elsewhere.
  const auto bias = lstm.bias().value().to_vector<float>();
  for (int j = 0; j < 24; ++j) EXPECT_EQ(bias[j], j >= 6 && j < 12 ? 1.0f : 0.0f) << j;
  // orthogonal recurrent kernel [6, 24]: orthonormal rows.
  const Tensor r = lstm.recurrent_kernel().value();
  const Tensor gram = matmul(Variable(r), Variable(r), false, true).value();
  expect_near(gram,
              Tensor::from_vector(std::vector<float>{1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
                                                     0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1},
                                  {6, 6}),
              1e-5f);

  nn::GRU gru(5);
  gru(random_tensor({2, 3, 4}, 2));
  EXPECT_EQ(gru.kernel().shape(), (Shape{4, 15}));
  EXPECT_EQ(gru.recurrent_kernel().shape(), (Shape{5, 15}));
  EXPECT_EQ(gru.bias().shape(), (Shape{2, 15}));  // reset_after: input and recurrent biases
  EXPECT_EQ(gru.bias().name(), "gru/bias");
  nn::GRU gru_before(5, {.reset_after = false});
  gru_before(random_tensor({2, 3, 4}, 2));
  EXPECT_EQ(gru_before.bias().shape(), (Shape{15}));
  nn::LSTM no_bias(3, {.use_bias = false, .unit_forget_bias = false});
  no_bias(random_tensor({1, 2, 2}, 3));
  EXPECT_FALSE(no_bias.bias().defined());
  EXPECT_EQ(no_bias.variables().size(), 2u);
}

TEST(RecurrentTest, OutputAndStateShapes) {
  const Tensor x = random_tensor({2, 7, 3}, 4);
  nn::LSTM last(5);
  EXPECT_EQ(last(x).shape(), (Shape{2, 5}));
  EXPECT_EQ(last.output_shape(), (Shape{-1, 5}));
  nn::LSTM seq(5, {.return_sequences = true});
  EXPECT_EQ(seq(x).shape(), (Shape{2, 7, 5}));
  nn::RecurrentResult lstm_states = seq.call_with_states(x);
  ASSERT_EQ(lstm_states.states.size(), 2u);
  EXPECT_EQ(lstm_states.states[0].shape(), (Shape{2, 5}));
  EXPECT_EQ(lstm_states.states[1].shape(), (Shape{2, 5}));
  // The final h is the last step of the sequence.
  expect_near(lstm_states.states[0].value(), reshape(slice_axis(lstm_states.output, 1, 6, 7), {2, 5}).value(), 0);

  nn::GRU gru(4, {.return_sequences = true});
  nn::RecurrentResult gru_states = gru.call_with_states(x);
  EXPECT_EQ(gru_states.output.shape(), (Shape{2, 7, 4}));
  ASSERT_EQ(gru_states.states.size(), 1u);
  expect_near(gru_states.states[0].value(), reshape(slice_axis(gru_states.output, 1, 6, 7), {2, 4}).value(), 0);

  // Initial states are used: a second call continuing from the first's states equals one call on both halves.
  nn::LSTM whole(3, {.return_sequences = true}), halves(3, {.return_sequences = true});
  whole(x);
  halves(x);
  for (size_t i = 0; i < whole.variables().size(); ++i) halves.variables()[i].assign(whole.variables()[i].value());
  const Variable full = whole(x);
  nn::RecurrentResult first = halves.call_with_states(slice_axis(Variable(x), 1, 0, 4));
  nn::RecurrentResult second = halves.call_with_states(slice_axis(Variable(x), 1, 4, 7), false, first.states);
  expect_near(second.output.value(), slice_axis(full, 1, 4, 7).value(), 1e-6f);

  // Functional graphs see the shapes too.
  const nn::SymbolicTensor sequence = nn::GRU(4, {.return_sequences = true})(nn::Input({7, 3}));
  EXPECT_EQ(sequence.shape(), (Shape{-1, 7, 4}));
  EXPECT_EQ(nn::LSTM(2)(sequence).shape(), (Shape{-1, 2}));

  EXPECT_THAT(message_of<ShapeError>([] {
                nn::LSTM(3)(Tensor::ones({2, 3}));
              }),
              HasSubstr("expects input [batch, time, features]"));
  EXPECT_THAT(message_of<ShapeError>([&] { last(Tensor::ones({2, 7, 4})); }), HasSubstr("[batch, time, 3]"));
  EXPECT_THAT(message_of<InvalidArgument>([&] { seq.call_with_states(x, false, {first.states[0]}); }),
              HasSubstr("takes 2 initial states"));
  EXPECT_THAT(message_of<InvalidArgument>([] { nn::GRU(0); }), HasSubstr("positive number of units"));
}

// One unit, one feature: Keras's recurrence written out in double, so a permuted gate block shows.
TEST(RecurrentTest, GateOrderIsKeras) {
  const std::vector<float> xs = {0.5f, -1.0f, 0.8f};
  const Tensor x = Tensor::from_vector(xs, {1, 3, 1});
  {
    const std::vector<float> w = {0.3f, -0.7f, 1.1f, 0.9f}, rw = {-0.4f, 0.6f, 0.2f, -0.5f},
                             b = {0.1f, 0.2f, -0.3f, 0.4f};  // blocks i, f, c, o
    nn::LSTM lstm(1);
    lstm(x);
    set_weight(lstm.kernel(), Tensor::from_vector(w, {1, 4}));
    set_weight(lstm.recurrent_kernel(), Tensor::from_vector(rw, {1, 4}));
    set_weight(lstm.bias(), Tensor::from_vector(b, {4}));
    double h = 0, c = 0;
    for (float xt : xs) {
      auto z = [&](int g) { return xt * w[g] + h * rw[g] + b[g]; };
      const double i = sigmoid_d(z(0)), f = sigmoid_d(z(1)), g = std::tanh(z(2)), o = sigmoid_d(z(3));
      c = f * c + i * g;
      h = o * std::tanh(c);
    }
    EXPECT_NEAR(lstm(x).value().item<float>(), h, 1e-6);
  }
  for (bool reset_after : {true, false}) {
    const std::vector<float> w = {0.3f, -0.7f, 1.1f}, rw = {-0.4f, 0.6f, 0.9f}, bx = {0.1f, 0.2f, -0.3f},
                             bh = {0.25f, -0.15f, 0.35f};  // blocks z, r, h
    nn::GRU gru(1, {.reset_after = reset_after});
    gru(x);
    set_weight(gru.kernel(), Tensor::from_vector(w, {1, 3}));
    set_weight(gru.recurrent_kernel(), Tensor::from_vector(rw, {1, 3}));
    std::vector<float> bias = bx;
    if (reset_after) bias.insert(bias.end(), bh.begin(), bh.end());
    set_weight(gru.bias(), Tensor::from_vector(bias, gru.bias().shape()));
    double h = 0;
    for (float xt : xs) {
      const double hr0 = h * rw[0] + (reset_after ? bh[0] : 0), hr1 = h * rw[1] + (reset_after ? bh[1] : 0);
      const double z = sigmoid_d(xt * w[0] + bx[0] + hr0), r = sigmoid_d(xt * w[1] + bx[1] + hr1);
      const double candidate = reset_after ? std::tanh(xt * w[2] + bx[2] + r * (h * rw[2] + bh[2]))
                                           : std::tanh(xt * w[2] + bx[2] + (r * h) * rw[2]);
      h = z * h + (1 - z) * candidate;
    }
    EXPECT_NEAR(gru(x).value().item<float>(), h, 1e-6) << "reset_after " << reset_after;
  }
}

TEST(RecurrentTest, GoBackwardsReadsTheReversedSequence) {
  const Tensor x = random_tensor({2, 4, 3}, 5);
  std::vector<Variable> steps;
  for (int t = 3; t >= 0; --t) steps.push_back(slice_axis(Variable(x), 1, t, t + 1));
  const Tensor reversed = concat(steps, 1).value();
  nn::GRU forward(3, {.return_sequences = true}), backward(3, {.return_sequences = true, .go_backwards = true});
  forward(x);
  backward(x);
  for (size_t i = 0; i < forward.variables().size(); ++i)
    backward.variables()[i].assign(forward.variables()[i].value());
  expect_near(backward(x).value(), forward(reversed).value(), 1e-6f);
}

TEST(RecurrentTest, LSTMGradientsMatchFiniteDifferences) {
  for (bool sequences : {false, true}) {
    nn::LSTM lstm(3, {.bias_initializer = "random_uniform", .return_sequences = sequences});
    testing::check_layer_gradients(lstm, {random_tensor({2, 4, 3}, 6)});
  }
  nn::LSTM backwards(2, {.return_sequences = true, .go_backwards = true});
  testing::check_layer_gradients(backwards, {random_tensor({2, 3, 2}, 7)});
  // Other activations than Keras's defaults take the composed ops instead of the fused cell.
  nn::LSTM composed(3, {.activation = nn::ActivationSpec("elu"), .bias_initializer = "random_uniform",
                        .return_sequences = true});
  testing::check_layer_gradients(composed, {random_tensor({2, 4, 3}, 9)});
}

TEST(RecurrentTest, TheFusedCellIsTheComposedCell) {
  // lstm_cell against the same step written with sigmoid, tanh and products: values and both inputs' gradients.
  const int64_t u = 5;
  for (bool with_c : {true, false}) {
    Variable z(random_tensor({3, 4 * u}, 11, -3.0f, 3.0f), true, "z");
    Variable c_prev(random_tensor({3, u}, 12, -2.0f, 2.0f), true, "c_prev");
    const Tensor seed = random_tensor({3, 2 * u}, 13);
    GradientTape fused_tape;
    const Variable packed = lstm_cell(z, with_c ? c_prev : Variable());
    std::vector<Variable> sources = {z};
    if (with_c) sources.push_back(c_prev);
    const std::vector<Tensor> fused = fused_tape.gradient(packed, sources, seed);

    GradientTape tape;
    auto gate = [&](int g) { return slice_axis(z, 1, g * u, (g + 1) * u); };
    const Variable i = sigmoid(gate(0)), f = sigmoid(gate(1)), g = tanh(gate(2)), o = sigmoid(gate(3));
    const Variable c = with_c ? f * c_prev + i * g : i * g;
    const Variable composed = concat({o * tanh(c), c}, 1);
    const std::vector<Tensor> want = tape.gradient(composed, sources, seed);
    expect_near(packed.value(), composed.value(), 1e-6f);
    for (size_t k = 0; k < sources.size(); ++k) expect_near(fused[k], want[k], 1e-6f);
  }
}

TEST(RecurrentTest, GRUGradientsMatchFiniteDifferences) {
  for (bool reset_after : {true, false}) {
    nn::GRU gru(3, {.bias_initializer = "random_uniform", .return_sequences = true, .reset_after = reset_after});
    testing::check_layer_gradients(gru, {random_tensor({2, 4, 3}, 8)});
  }
}

// ---- against PyTorch
Tensor tensor_of(const nlohmann::json& j) {
  return Tensor::from_vector(j.at("values").get<std::vector<float>>(), j.at("shape").get<Shape>());
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  float worst = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

nlohmann::json load_reference() {
  std::ifstream in("tests/nn/recurrent_reference.json");
  EXPECT_TRUE(in.good()) << "tests/nn/recurrent_reference.json (run from the repository root)";
  return nlohmann::json::parse(in);
}

// Loads the case's weights into `layer`, runs it with return_sequences and checks the sequence, the
// final states and the gradients of sum(sequence * r) against PyTorch's to 1e-5.
template <class L>
void compare_with_pytorch(L& layer, const nlohmann::json& ref, const std::vector<std::string>& state_keys) {
  const Tensor x = tensor_of(ref.at("x"));
  layer(x);
  set_weight(layer.kernel(), tensor_of(ref.at("kernel")));
  set_weight(layer.recurrent_kernel(), tensor_of(ref.at("recurrent_kernel")));
  set_weight(layer.bias(), tensor_of(ref.at("bias")));
  Variable input(x.clone(), /*trainable=*/true, "x");
  GradientTape tape;
  nn::RecurrentResult result = layer.call_with_states(input);
  const std::vector<Tensor> grads = tape.gradient(
      result.output, {input, layer.kernel(), layer.recurrent_kernel(), layer.bias()}, tensor_of(ref.at("r")));
  std::vector<std::pair<std::string, float>> errors = {
      {"sequence", max_abs_diff(result.output.value(), tensor_of(ref.at("sequence")))},
      {"grad_x", max_abs_diff(grads[0], tensor_of(ref.at("grad_x")))},
      {"grad_kernel", max_abs_diff(grads[1], tensor_of(ref.at("grad_kernel")))},
      {"grad_recurrent_kernel", max_abs_diff(grads[2], tensor_of(ref.at("grad_recurrent_kernel")))},
      {"grad_bias", max_abs_diff(grads[3], tensor_of(ref.at("grad_bias")))}};
  for (size_t i = 0; i < state_keys.size(); ++i) {
    errors.emplace_back(state_keys[i], max_abs_diff(result.states[i].value(), tensor_of(ref.at(state_keys[i]))));
  }
  for (const auto& [what, error] : errors) {
    EXPECT_LE(error, 1e-5f) << layer.class_name() << " " << what;
    std::cout << layer.class_name() << " vs PyTorch " << ref.value("torch", "") << ": max |error| of " << what << " = "
              << error << "\n";
  }
}

TEST(RecurrentTest, LSTMMatchesPyTorch) {
  const nlohmann::json ref = load_reference();
  nn::LSTM lstm(ref.at("lstm").at("h").at("shape")[1].get<int64_t>(), {.return_sequences = true});
  nlohmann::json lstm_ref = ref.at("lstm");
  lstm_ref["torch"] = ref.at("torch");
  compare_with_pytorch(lstm, lstm_ref, {"h", "c"});
}

TEST(RecurrentTest, GRUMatchesPyTorch) {
  const nlohmann::json ref = load_reference();
  nn::GRU gru(ref.at("gru").at("h").at("shape")[1].get<int64_t>(), {.return_sequences = true});
  nlohmann::json gru_ref = ref.at("gru");
  gru_ref["torch"] = ref.at("torch");
  compare_with_pytorch(gru, gru_ref, {"h"});
}

}  // namespace
}  // namespace strata
