// peers_tool's onnx-functional: a functional model of the layers no job file can hold (Concatenate and Add of
// branches, GRU with reset_after false, go_backwards LSTM and GRU, BatchNormalization with non-trivial statistics,
// Conv2D with SAME padding and strides, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, Dropout and the
// activations elu, gelu, swish, tanh, softplus, leaky_relu and softmax), with every weight drawn at random from the
// request's seed, exported by save_onnx; the answer is what strata predicts for the request's inputs, for
// tests/peers/test_onnx_export.py to compare with onnxruntime on the file. onnx-attention does the same for
// MultiHeadAttention's attention_mask inputs (a padding mask of the keys, a [T, S] mask with a causal one), and
// cross-attention of a query on another sequence, which a job file's layer list cannot hold.
// Thread-safety: runs on the calling thread alone.
#include "strata/train/onnx_export.h"

#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "strata/nn/nn.h"
#include "strata/train/model.h"

namespace strata::peers {

namespace {

// Inputs: "sequence" [6, 5], "features" [8], "image" [8, 8, 3]; output [N, 5] of a softmax.
Model functional_model() {
  auto sequence = nn::Input({6, 5}, DType::kFloat32, "sequence");
  auto features = nn::Input({8}, DType::kFloat32, "features");
  auto image = nn::Input({8, 8, 3}, DType::kFloat32, "image");
  auto gru = nn::GRU(8, {.reset_after = false})(sequence);
  auto gru_backwards = nn::GRU(4, {.return_sequences = true, .go_backwards = true})(sequence);
  auto lstm = nn::LSTM(8, {.go_backwards = true})(sequence);
  auto conv = nn::Conv2D(4, {3, 3}, {.strides = 2, .padding = "same", .activation = "elu"})(image);
  auto normalized = nn::BatchNormalization()(conv);
  auto other = nn::Conv2D(4, {1, 1}, {.strides = 2, .activation = "tanh"})(image);
  auto residual = nn::Add()({normalized, other});
  auto pooled = nn::MaxPooling2D({2, 2}, {.strides = 1, .padding = "same"})(residual);
  auto averaged = nn::AveragePooling2D({3, 3}, {.strides = 2, .padding = "same"})(pooled);
  auto global = nn::GlobalAveragePooling2D()(averaged);
  auto joined = nn::Concatenate()({gru, lstm, features, global, nn::Flatten()(gru_backwards)});
  auto a = nn::Dense(8, {.activation = "gelu"})(joined);
  auto b = nn::Dense(8, {.activation = "swish"})(nn::Dropout(0.5f)(joined));
  auto c = nn::Dense(8, {.activation = "softplus"})(joined);
  auto summed = nn::Add()({a, b, c});
  auto normalized_rows = nn::BatchNormalization()(nn::Activation("leaky_relu")(summed));
  auto out = nn::Dense(5, {.activation = "softmax"})(normalized_rows);
  return Model({sequence, features, image}, out, "functional");
}

// Inputs: "tokens" [6, 8], "context" [5, 8], "padding" [5] (int32, nonzero attends), "mask" [6, 6] (float);
// output [N, 4].
Model attention_model() {
  auto tokens = nn::Input({6, 8}, DType::kFloat32, "tokens");
  auto context = nn::Input({5, 8}, DType::kFloat32, "context");
  auto padding = nn::Input({5}, DType::kInt32, "padding");
  auto mask = nn::Input({6, 6}, DType::kFloat32, "mask");
  auto padded = nn::MultiHeadAttention(2, 4, {.name = "padded"})({tokens, context, context, padding});
  auto crossed =
      nn::MultiHeadAttention(2, 3, {.value_dim = 4, .use_bias = false, .name = "crossed"})({tokens, context});
  auto masked =
      nn::MultiHeadAttention(4, 2, {.use_causal_mask = true, .name = "masked"})({tokens, tokens, tokens, mask});
  auto summed = nn::Add()({padded, crossed, masked});
  auto pooled = nn::GlobalAveragePooling1D()(nn::LayerNormalization()(summed));
  return Model({tokens, context, padding, mask}, nn::Dense(4)(pooled), "attention");
}

// Every weight of `model` drawn from N(0, 0.5) (moving variances 0.5 + |N|) by `seed`.
void draw_weights(Model& model, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (Variable v : model.variables()) {
    std::vector<float> values(static_cast<size_t>(shape_numel(v.shape())));
    const bool variance = v.name().ends_with("moving_variance");
    for (float& x : values) x = variance ? 0.5f + std::abs(normal(gen)) : normal(gen);
    v.assign(Tensor::from_vector(values, v.shape()));
  }
}

json export_and_predict(Model& model, const json& request) {
  draw_weights(model, member(request, "seed").get<uint32_t>());
  save_onnx(model, member(request, "path").get<std::string>());
  std::vector<Variable> inputs;
  for (const json& x : member(request, "inputs")) inputs.emplace_back(tensor_from_json(x));
  return tensor_to_json(model(inputs, false).value());
}

}  // namespace

json onnx_functional(const json& request) {
  Model model = functional_model();
  return export_and_predict(model, request);
}

json onnx_attention(const json& request) {
  Model model = attention_model();
  return export_and_predict(model, request);
}

}  // namespace strata::peers
