// The Transformer layers: LayerNormalization, GELU, GlobalAveragePooling1D, MultiHeadAttention, PositionEmbedding,
// TransformerEncoder and Conv1D (a sequence stem; tested here for the shared PyTorch reference). Keras's weight layouts
// and names; gradients of the inputs and every weight against finite differences; outputs and gradients on fixed
// weights against PyTorch (tests/nn/transformer_reference.json, written by tests/nn/make_transformer_reference.py); the
// causal and padding masks hide what they should. Thread-safety: each test runs on one thread (the reference JSON is
// parsed once, by a function-local static).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "autograd/composed_ops.h"
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
using json = nlohmann::json;

Tensor tensor_of(const json& j) {
  return Tensor::from_vector(j.at("values").get<std::vector<float>>(), j.at("shape").get<Shape>());
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  float worst = 0;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

const json& reference() {
  static const json ref = [] {
    std::ifstream in("tests/nn/transformer_reference.json");
    EXPECT_TRUE(in.good()) << "tests/nn/transformer_reference.json (run from the repository root)";
    return json::parse(in);
  }();
  return ref;
}

// Checks `got` against the reference's `key` to `tol`, printing the error.
void expect_matches(const std::string& what, const Tensor& got, const json& ref, const std::string& key,
                    float tol = 1e-5f) {
  const float error = max_abs_diff(got, tensor_of(ref.at(key)));
  EXPECT_LE(error, tol) << what << " " << key;
  std::cout << what << " vs PyTorch " << reference().value("torch", "") << ": max |error| of " << key << " = " << error
            << "\n";
}

void set_weight(Variable weight, const Tensor& value) { weight.assign(value); }

// ---------------------------------------------------------------- LayerNormalization
TEST(TransformerTest, LayerNormalizationHasKerasWeightsAndNormalisesEachExample) {
  nn::LayerNormalization ln;
  EXPECT_EQ(ln.options().epsilon, 1e-3f);  // Keras's default
  const Tensor x = random_tensor({3, 4, 6}, 1, -2.0f, 3.0f);
  const Tensor y = ln(x).value();
  EXPECT_EQ(ln.gamma().name(), "layer_normalization/gamma");
  EXPECT_EQ(ln.beta().name(), "layer_normalization/beta");
  EXPECT_EQ(ln.gamma().shape(), (Shape{6}));
  // Each row: mean 0 and variance var / (var + eps).
  const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (int row = 0; row < 12; ++row) {
    double mx = 0, vx = 0, my = 0, vy = 0;
    for (int c = 0; c < 6; ++c) mx += xv[row * 6 + c] / 6, my += yv[row * 6 + c] / 6;
    for (int c = 0; c < 6; ++c) {
      vx += std::pow(xv[row * 6 + c] - mx, 2) / 6;
      vy += std::pow(yv[row * 6 + c] - my, 2) / 6;
    }
    EXPECT_NEAR(my, 0.0, 1e-5);
    EXPECT_NEAR(vy, vx / (vx + 1e-3), 1e-4);
  }
  EXPECT_THAT(message_of<InvalidArgument>([] { nn::LayerNormalization({.epsilon = 0.0f}); }), HasSubstr("epsilon"));
  EXPECT_THAT(message_of<ShapeError>([&] { ln(random_tensor({3, 4, 5}, 2)); }), HasSubstr("6 features"));
}

TEST(TransformerTest, LayerNormalizationMatchesPyTorch) {
  const json& ref = reference().at("layer_norm");
  nn::LayerNormalization ln({.epsilon = ref.at("epsilon").get<float>()});
  const Tensor x = tensor_of(ref.at("x"));
  ln(x);
  set_weight(ln.gamma(), tensor_of(ref.at("gamma")));
  set_weight(ln.beta(), tensor_of(ref.at("beta")));
  Variable input(x.clone(), true, "x");
  GradientTape tape;
  Variable y = ln(input);
  const auto grads = tape.gradient(y, {input, ln.gamma(), ln.beta()}, tensor_of(ref.at("r")));
  expect_matches("LayerNormalization", y.value(), ref, "output");
  expect_matches("LayerNormalization", grads[0], ref, "grad_x");
  expect_matches("LayerNormalization", grads[1], ref, "grad_gamma");
  expect_matches("LayerNormalization", grads[2], ref, "grad_beta");
}

TEST(TransformerTest, LayerNormalizationGradientsMatchFiniteDifferences) {
  nn::LayerNormalization ln({.beta_initializer = "random_uniform", .gamma_initializer = "random_uniform"});
  testing::check_layer_gradients(ln, {random_tensor({2, 3, 5}, 3)});
  // Another axis (moved last and back), and without gamma and beta.
  nn::LayerNormalization on_steps({.axis = 1, .gamma_initializer = "random_uniform"});
  testing::check_layer_gradients(on_steps, {random_tensor({2, 4, 3}, 4)});
  EXPECT_EQ(on_steps.gamma().shape(), (Shape{4}));
  nn::LayerNormalization bare({.center = false, .scale = false});
  testing::check_layer_gradients(bare, {random_tensor({3, 5}, 5)});
  EXPECT_TRUE(bare.variables().empty());
}

// What a GPU runs (no layer-norm kernel there yet) is the oneDNN op's math: same outputs and gradients on the host.
TEST(TransformerTest, LayerNormOpMatchesItsComposedForm) {
  const Tensor xv = random_tensor({4, 3, 7}, 11, -3.0f, 2.0f);
  Variable x(xv.clone(), true, "x"), gamma(random_tensor({7}, 12), true, "gamma"),
      beta(random_tensor({7}, 13), true, "beta");
  const Tensor r = random_tensor({4, 3, 7}, 14);
  std::vector<Tensor> fused_grads, composed_grads;
  Tensor fused, composed;
  {
    GradientTape tape;
    Variable y = layer_norm(x, gamma, beta, 1e-3f);
    fused = y.value();
    fused_grads = tape.gradient(y, {x, gamma, beta}, r);
  }
  {
    GradientTape tape;
    Variable y = detail::layer_norm_composed(x, gamma, beta, 1e-3f);
    composed = y.value();
    composed_grads = tape.gradient(y, {x, gamma, beta}, r);
  }
  expect_near(fused, composed, 2e-6f);
  for (size_t i = 0; i < 3; ++i) expect_near(fused_grads[i], composed_grads[i], 1e-5f);
}

// ---------------------------------------------------------------- GELU
TEST(TransformerTest, GeluIsKerasExactFormAndMatchesPyTorch) {
  const json& ref = reference().at("gelu");
  Variable x(tensor_of(ref.at("x")), true, "x");
  GradientTape tape;
  Variable y = nn::activation("gelu")(x);
  const auto grads = tape.gradient(sum(y), {x});
  expect_matches("gelu", y.value(), ref, "output", 2e-6f);
  expect_matches("gelu", grads[0], ref, "grad_x", 2e-6f);
  // The erf form, not tanh's approximation: they differ by ~1e-3 near |x| = 2.
  const float at_two =
      nn::activation("gelu")(Variable(Tensor::from_vector(std::vector<float>{2.0f}))).value().item<float>();
  EXPECT_NEAR(at_two, 2.0 * 0.5 * (1.0 + std::erf(2.0 / std::sqrt(2.0))), 1e-6);
}

// ---------------------------------------------------------------- GlobalAveragePooling1D
TEST(TransformerTest, GlobalAveragePooling1DAveragesTheSteps) {
  nn::GlobalAveragePooling1D pool;
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3, 2});
  expect_near(pool(x).value(), Tensor::from_vector(std::vector<float>{3, 4, 9, 10}, {2, 2}));
  nn::GlobalAveragePooling1D keep({.keepdims = true});
  EXPECT_EQ(keep(x).shape(), (Shape{2, 1, 2}));
  EXPECT_THAT(message_of<ShapeError>([] {
                nn::GlobalAveragePooling1D()(random_tensor({2, 3}, 1));
              }),
              HasSubstr("[batch, steps, features]"));
  testing::check_layer_gradients(pool, {random_tensor({2, 3, 4}, 6)});
}

// ---------------------------------------------------------------- MultiHeadAttention
TEST(TransformerTest, MultiHeadAttentionHasKerasEinsumDenseWeights) {
  nn::MultiHeadAttention mha(2, 3, {.value_dim = 4, .output_shape = 7});
  Variable y = mha.attend(random_tensor({2, 5, 6}, 1), random_tensor({2, 4, 8}, 2), random_tensor({2, 4, 9}, 3));
  EXPECT_EQ(y.shape(), (Shape{2, 5, 7}));
  EXPECT_EQ(mha.query_kernel().shape(), (Shape{6, 2, 3}));
  EXPECT_EQ(mha.query_bias().shape(), (Shape{2, 3}));
  EXPECT_EQ(mha.key_kernel().shape(), (Shape{9, 2, 3}));
  EXPECT_EQ(mha.value_kernel().shape(), (Shape{8, 2, 4}));
  EXPECT_EQ(mha.value_bias().shape(), (Shape{2, 4}));
  EXPECT_EQ(mha.output_kernel().shape(), (Shape{2, 4, 7}));
  EXPECT_EQ(mha.output_bias().shape(), (Shape{7}));
  std::vector<std::string> names;
  for (const Variable& v : mha.variables()) names.push_back(v.name());
  EXPECT_THAT(names, ::testing::ElementsAre("multi_head_attention/query/kernel", "multi_head_attention/query/bias",
                                            "multi_head_attention/key/kernel", "multi_head_attention/key/bias",
                                            "multi_head_attention/value/kernel", "multi_head_attention/value/bias",
                                            "multi_head_attention/attention_output/kernel",
                                            "multi_head_attention/attention_output/bias"));
  // Self-attention keeps the query's size; no biases without use_bias.
  nn::MultiHeadAttention self(4, 2, {.use_bias = false});
  EXPECT_EQ(self(random_tensor({3, 6, 5}, 4)).shape(), (Shape{3, 6, 5}));
  EXPECT_EQ(self.variables().size(), 4u);
  EXPECT_THAT(message_of<InvalidArgument>([] { nn::MultiHeadAttention(0, 4); }), HasSubstr("num_heads"));
  // Sizes from an untrusted config whose product overflows are refused before anything is allocated.
  EXPECT_THAT(message_of<ShapeError>([] {
                nn::MultiHeadAttention(int64_t{1} << 32, int64_t{1} << 32)(random_tensor({1, 2, 4}, 1));
              }),
              HasSubstr("weight 'query/kernel' of shape [4, 4294967296, 4294967296] is too large"));
  EXPECT_THAT(message_of<ShapeError>([] {
                nn::MultiHeadAttention(2, 2)(random_tensor({3, 4}, 1));
              }),
              HasSubstr("[batch, steps, features]"));
  EXPECT_THAT(message_of<ShapeError>([&] {
                self.attend(random_tensor({3, 6, 5}, 4), random_tensor({3, 6, 5}, 4), {}, Tensor::ones({3, 5}));
              }),
              HasSubstr("padding mask [batch, 6]"));
}

// Loads a reference case's weights into `mha` (built by a call on the case's inputs).
void load_mha_weights(nn::MultiHeadAttention& mha, const json& ref) {
  set_weight(mha.query_kernel(), tensor_of(ref.at("query_kernel")));
  set_weight(mha.query_bias(), tensor_of(ref.at("query_bias")));
  set_weight(mha.key_kernel(), tensor_of(ref.at("key_kernel")));
  set_weight(mha.key_bias(), tensor_of(ref.at("key_bias")));
  set_weight(mha.value_kernel(), tensor_of(ref.at("value_kernel")));
  set_weight(mha.value_bias(), tensor_of(ref.at("value_bias")));
  set_weight(mha.output_kernel(), tensor_of(ref.at("output_kernel")));
  set_weight(mha.output_bias(), tensor_of(ref.at("output_bias")));
}

const std::vector<std::string> kMhaWeights = {"query_kernel", "query_bias", "key_kernel",    "key_bias",
                                              "value_kernel", "value_bias", "output_kernel", "output_bias"};

std::vector<Variable> mha_weights(const nn::MultiHeadAttention& mha) {
  return {mha.query_kernel(), mha.query_bias(), mha.key_kernel(),    mha.key_bias(),
          mha.value_kernel(), mha.value_bias(), mha.output_kernel(), mha.output_bias()};
}

TEST(TransformerTest, MultiHeadAttentionMatchesPyTorchOnCrossAttention) {
  const json& ref = reference().at("mha_cross");
  nn::MultiHeadAttention mha(
      ref.at("num_heads").get<int64_t>(), ref.at("key_dim").get<int64_t>(),
      {.value_dim = ref.at("value_dim").get<int64_t>(), .output_shape = ref.at("output_shape").get<int64_t>()});
  Variable q(tensor_of(ref.at("query")), true, "q"), v(tensor_of(ref.at("value")), true, "v"),
      k(tensor_of(ref.at("key")), true, "k");
  mha.attend(q, v, k);
  load_mha_weights(mha, ref);
  GradientTape tape;
  Variable y = mha.attend(q, v, k);
  std::vector<Variable> sources = {q, v, k};
  for (const Variable& w : mha_weights(mha)) sources.push_back(w);
  const auto grads = tape.gradient(y, sources, tensor_of(ref.at("r")));
  expect_matches("MultiHeadAttention", y.value(), ref, "output");
  const std::vector<std::string> keys = {"query", "value", "key"};
  for (size_t i = 0; i < 3; ++i) expect_matches("MultiHeadAttention", grads[i], ref, "grad_" + keys[i]);
  for (size_t i = 0; i < kMhaWeights.size(); ++i) {
    expect_matches("MultiHeadAttention", grads[3 + i], ref, "grad_" + kMhaWeights[i]);
  }
}

TEST(TransformerTest, MultiHeadAttentionMatchesPyTorchWithCausalAndPaddingMasks) {
  const json& ref = reference().at("mha_self_masked");
  nn::MultiHeadAttention mha(ref.at("num_heads").get<int64_t>(), ref.at("key_dim").get<int64_t>());
  const Tensor mask = tensor_of(ref.at("attention_mask"));  // causal and padded, [B, T, T]
  Variable x(tensor_of(ref.at("query")), true, "x");
  mha.attend(x, x);
  load_mha_weights(mha, ref);
  GradientTape tape;
  Variable y = mha.attend(x, x, {}, mask);
  std::vector<Variable> sources = {x};
  for (const Variable& w : mha_weights(mha)) sources.push_back(w);
  const auto grads = tape.gradient(y, sources, tensor_of(ref.at("r")));
  expect_matches("MultiHeadAttention (masked)", y.value(), ref, "output");
  expect_matches("MultiHeadAttention (masked)", grads[0], ref, "grad_query");
  for (size_t i = 0; i < kMhaWeights.size(); ++i) {
    expect_matches("MultiHeadAttention (masked)", grads[1 + i], ref, "grad_" + kMhaWeights[i]);
  }
  // The same mask as use_causal_mask and a padding mask of the keys [B, S] (the reference pads example 1 after 3).
  const int64_t batch = mask.dim(0), steps = mask.dim(2);
  std::vector<float> padding(static_cast<size_t>(batch * steps), 1.0f);
  for (int64_t j = 3; j < steps; ++j) padding[static_cast<size_t>(steps + j)] = 0.0f;
  const Tensor y2 = mha.attend(x, x, {}, Tensor::from_vector(padding, {batch, steps}), true).value();
  expect_near(y2, y.value(), 1e-6f);
  // A layer call with the mask as a fourth input, and the layer's use_causal_mask.
  nn::MultiHeadAttention causal(ref.at("num_heads").get<int64_t>(), ref.at("key_dim").get<int64_t>(),
                                {.use_causal_mask = true});
  causal({x});
  load_mha_weights(causal, ref);
  expect_near(causal({x, x, x, Variable(Tensor::from_vector(padding, {batch, 1, steps}))}).value(), y.value(), 1e-6f);
}

TEST(TransformerTest, MultiHeadAttentionGradientsMatchFiniteDifferences) {
  nn::MultiHeadAttention cross(2, 3, {.value_dim = 2, .output_shape = 5, .bias_initializer = "random_uniform"});
  testing::check_layer_gradients(
      cross, {random_tensor({2, 3, 4}, 1), random_tensor({2, 4, 3}, 2), random_tensor({2, 4, 5}, 3)});
  nn::MultiHeadAttention self(2, 2, {.bias_initializer = "random_uniform", .use_causal_mask = true});
  testing::check_layer_gradients(self, {random_tensor({2, 4, 3}, 4)});
}

// Output position i of a causal self-attention never sees positions after i: changing them changes nothing before.
TEST(TransformerTest, CausalMaskHidesLaterPositions) {
  nn::MultiHeadAttention mha(2, 4, {.bias_initializer = "random_uniform"});
  const Tensor x = random_tensor({2, 6, 5}, 7);
  const Tensor y = mha.attend(x, x, {}, {}, true).value();
  const Tensor unmasked = mha.attend(x, x).value();
  for (int64_t i = 0; i < 6; ++i) {
    Tensor changed = x.clone();
    float* p = changed.data<float>();
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t t = i + 1; t < 6; ++t) {
        for (int64_t f = 0; f < 5; ++f) p[(b * 6 + t) * 5 + f] += 3.0f;
      }
    }
    const Tensor y2 = mha.attend(changed, changed, {}, {}, true).value();
    expect_near(slice_axis(Variable(y2), 1, 0, i + 1).value(), slice_axis(Variable(y), 1, 0, i + 1).value(), 1e-5f);
  }
  // Without the mask the first position does see the last (the check above could not pass by accident).
  Tensor last = x.clone();
  last.data<float>()[5 * 5] += 3.0f;
  EXPECT_GT(max_abs_diff(slice_axis(Variable(mha.attend(last, last).value()), 1, 0, 1).value(),
                         slice_axis(Variable(unmasked), 1, 0, 1).value()),
            1e-3f);
}

// Keys masked out by a padding mask change no output; positions the mask keeps do.
TEST(TransformerTest, PaddingMaskHidesPaddedKeys) {
  nn::MultiHeadAttention mha(2, 3);
  const Tensor q = random_tensor({2, 4, 5}, 8), v = random_tensor({2, 6, 5}, 9);
  // Example 0 keeps 4 keys, example 1 keeps 2.
  std::vector<float> keep = {1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0};
  const Tensor mask = Tensor::from_vector(keep, {2, 6});
  const Tensor y = mha.attend(q, v, {}, mask).value();
  Tensor padded_changed = v.clone(), kept_changed = v.clone();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t j = 0; j < 6; ++j) {
      for (int64_t f = 0; f < 5; ++f) {
        float& pc = padded_changed.data<float>()[(b * 6 + j) * 5 + f];
        if (keep[b * 6 + j] == 0.0f) pc += 5.0f;
      }
    }
  }
  kept_changed.data<float>()[(1 * 6 + 1) * 5] += 5.0f;  // example 1's second key, kept
  expect_near(mha.attend(q, padded_changed, {}, mask).value(), y, 1e-6f);
  EXPECT_GT(max_abs_diff(mha.attend(q, kept_changed, {}, mask).value(), y), 1e-3f);
}

TEST(TransformerTest, MultiHeadAttentionInAFunctionalModelTakesSeveralInputs) {
  auto query = nn::Input({4, 6}, DType::kFloat32, "query"), value = nn::Input({3, 5}, DType::kFloat32, "value");
  nn::MultiHeadAttention mha(2, 3);
  auto attended = mha({query, value});
  EXPECT_EQ(attended.shape(), (Shape{-1, 4, 6}));
  nn::Graph graph({query, value}, {nn::GlobalAveragePooling1D()(attended)});
  const Tensor q = random_tensor({2, 4, 6}, 1), v = random_tensor({2, 3, 5}, 2);
  const std::vector<Variable> out = graph.run({q, v}, false);
  ASSERT_EQ(out.size(), 1u);
  expect_near(out[0].value(), mean(mha.attend(q, v), {1}).value(), 1e-6f);
}

// ---------------------------------------------------------------- PositionEmbedding
TEST(TransformerTest, PositionEmbeddingAddsALearnedRowPerPosition) {
  nn::PositionEmbedding pe(5);
  const Tensor x = random_tensor({2, 5, 3}, 1);
  const Tensor y = pe(x).value();
  EXPECT_EQ(pe.embeddings().shape(), (Shape{5, 3}));
  EXPECT_EQ(pe.embeddings().name(), "position_embedding/embeddings");
  expect_near(y, (Variable(x) + pe.embeddings()).value());
  // A shorter sequence takes the first rows; a longer one is an error.
  const Tensor short_x = random_tensor({2, 3, 3}, 2);
  expect_near(pe(short_x).value(), (Variable(short_x) + slice_axis(pe.embeddings(), 0, 0, 3)).value());
  EXPECT_THAT(message_of<ShapeError>([&] { pe(random_tensor({2, 6, 3}, 3)); }), HasSubstr("5 positions"));
  nn::PositionEmbedding fresh(4);
  testing::check_layer_gradients(fresh, {random_tensor({2, 4, 3}, 4)});
}

// ---------------------------------------------------------------- TransformerEncoder
TEST(TransformerTest, TransformerEncoderMatchesAPreNormBlockInPyTorch) {
  const json& ref = reference().at("encoder");
  nn::TransformerEncoder block(ref.at("intermediate_dim").get<int64_t>(), ref.at("num_heads").get<int64_t>(),
                               {.activation = "gelu", .layer_norm_epsilon = ref.at("layer_norm_epsilon").get<float>()});
  Variable x(tensor_of(ref.at("x")), true, "x");
  block(x);
  set_weight(block.attention_norm()->gamma(), tensor_of(ref.at("ln1_gamma")));
  set_weight(block.attention_norm()->beta(), tensor_of(ref.at("ln1_beta")));
  load_mha_weights(*block.attention(), ref);
  set_weight(block.feedforward_norm()->gamma(), tensor_of(ref.at("ln2_gamma")));
  set_weight(block.feedforward_norm()->beta(), tensor_of(ref.at("ln2_beta")));
  set_weight(block.intermediate_dense()->kernel(), tensor_of(ref.at("inter_kernel")));
  set_weight(block.intermediate_dense()->bias(), tensor_of(ref.at("inter_bias")));
  set_weight(block.output_dense()->kernel(), tensor_of(ref.at("out_kernel")));
  set_weight(block.output_dense()->bias(), tensor_of(ref.at("out_bias")));
  GradientTape tape;
  Variable y = block(x);
  const auto grads = tape.gradient(y,
                                   {x, block.attention_norm()->gamma(), block.attention()->query_kernel(),
                                    block.feedforward_norm()->beta(), block.intermediate_dense()->kernel()},
                                   tensor_of(ref.at("r")));
  expect_matches("TransformerEncoder", y.value(), ref, "output");
  expect_matches("TransformerEncoder", grads[0], ref, "grad_x");
  expect_matches("TransformerEncoder", grads[1], ref, "grad_ln1_gamma");
  expect_matches("TransformerEncoder", grads[2], ref, "grad_query_kernel");
  expect_matches("TransformerEncoder", grads[3], ref, "grad_ln2_beta");
  expect_matches("TransformerEncoder", grads[4], ref, "grad_inter_kernel");
}

TEST(TransformerTest, TransformerEncoderHasKerasHubSublayersAndGradients) {
  nn::TransformerEncoder block(8, 2, {.dropout = 0.1f});
  block(random_tensor({2, 3, 4}, 1));
  std::vector<std::string> names;
  for (const Variable& v : block.variables()) names.push_back(v.name());
  EXPECT_EQ(names.size(), 16u);
  EXPECT_EQ(names.front(), "transformer_encoder/self_attention_layer/query/kernel");
  EXPECT_THAT(names, ::testing::Contains("transformer_encoder/self_attention_layer_norm/gamma"));
  EXPECT_THAT(names, ::testing::Contains("transformer_encoder/feedforward_intermediate_dense/kernel"));
  EXPECT_EQ(names.back(), "transformer_encoder/feedforward_output_dense/bias");
  EXPECT_EQ(block.attention()->key_dim(), 2);  // features / num_heads
  EXPECT_EQ(block.intermediate_dense()->kernel().shape(), (Shape{4, 8}));
  // Dropout acts in training calls only.
  const Tensor x = random_tensor({2, 3, 4}, 2);
  expect_near(block(x, false).value(), block(x, false).value(), 0.0f);
  EXPECT_GT(max_abs_diff(block(x, true).value(), block(x, false).value()), 1e-4f);
  // Inference gradients of the input and every weight, pre-norm and post-norm.
  for (bool normalize_first : {true, false}) {
    nn::TransformerEncoder b(
        6, 2, {.activation = "gelu", .bias_initializer = "random_uniform", .normalize_first = normalize_first});
    testing::check_layer_gradients(b, {random_tensor({2, 3, 4}, 3)}, false, {.epsilon = 2e-3, .rtol = 3e-2});
  }
  EXPECT_THAT(message_of<ShapeError>([] {
                nn::TransformerEncoder(8, 4)(random_tensor({2, 3, 2}, 1));
              }),
              HasSubstr("4 heads"));
}

// ---------------------------------------------------------------- Conv1D
TEST(TransformerTest, Conv1DHasKerasShapesAndPaddings) {
  const Tensor x = random_tensor({2, 7, 3}, 1);
  nn::Conv1D valid(4, 3);
  EXPECT_EQ(valid(x).shape(), (Shape{2, 5, 4}));
  EXPECT_EQ(valid.kernel().name(), "conv1d/kernel");
  EXPECT_EQ(valid.kernel().shape(), (Shape{3, 3, 4}));  // [kernel_size, in, filters]
  EXPECT_EQ(valid.bias().shape(), (Shape{4}));
  EXPECT_EQ(nn::Conv1D(4, 3, {.strides = 2, .padding = "same"})(x).shape(), (Shape{2, 4, 4}));  // ceil(7 / 2)
  EXPECT_EQ(nn::Conv1D(4, 3, {.padding = "same", .dilation_rate = 3})(x).shape(), (Shape{2, 7, 4}));
  nn::Conv1D causal(2, 3, {.padding = "CAUSAL", .dilation_rate = 2, .use_bias = false});
  EXPECT_EQ(causal(x).shape(), (Shape{2, 7, 2}));
  EXPECT_EQ(causal.causal_padding(), 4);
  EXPECT_EQ(causal.options().padding.name(), std::string("causal"));
  EXPECT_EQ(causal.variables().size(), 1u);
  // Causal: output step t sees input steps <= t only; changing later steps changes nothing before them.
  const Tensor y = causal(x).value();
  for (int64_t t = 0; t < 6; ++t) {
    Tensor changed = x.clone();
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t c = 0; c < 3; ++c) changed.data<float>()[(b * 7 + t + 1) * 3 + c] += 2.0f;
    }
    const Tensor y2 = causal(changed).value();
    expect_near(slice_axis(Variable(y2), 1, 0, t + 1).value(), slice_axis(Variable(y), 1, 0, t + 1).value(), 0.0f);
    EXPECT_GT(max_abs_diff(slice_axis(Variable(y2), 1, t + 1, 7).value(), slice_axis(Variable(y), 1, t + 1, 7).value()),
              1e-4f);
  }
  // relu is fused into the convolution; any other activation follows it.
  nn::Conv1D relu(4, 2, {.activation = "relu", .bias_initializer = "random_uniform"});
  nn::Conv1D linear(4, 2, {.bias_initializer = "random_uniform"});
  relu(x);
  linear(x);
  set_weight(linear.kernel(), relu.kernel().value());
  set_weight(linear.bias(), relu.bias().value());
  expect_near(relu(x).value(), strata::relu(linear(x)).value(), 0.0f);
}

TEST(TransformerTest, Conv1DRefusesBadArgumentsNamingThem) {
  EXPECT_THAT(message_of<InvalidArgument>([] { nn::Conv1D(0, 3); }), HasSubstr("positive number of filters"));
  EXPECT_THAT(message_of<InvalidArgument>([] { nn::Conv1D(2, 0); }), HasSubstr("kernel_size must be positive"));
  EXPECT_THAT(message_of<InvalidArgument>([] { nn::Conv1D(2, 3, {.strides = 2, .dilation_rate = 2}); }),
              HasSubstr("strides above 1 cannot be combined with dilation_rate above 1"));
  EXPECT_THAT(message_of<InvalidArgument>([] { nn::Conv1D(2, 3, {.padding = "full"}); }),
              HasSubstr("unknown Conv1D padding 'full'; known: valid, same, causal"));
  EXPECT_THAT(message_of<ShapeError>([] {
                nn::Conv1D(2, 3)(random_tensor({2, 7}, 1));
              }),
              HasSubstr("Conv1D wants an input of rank 3 [batch, steps, features], got [-1, 7]"));
  EXPECT_THAT(message_of<ShapeError>([] {
                nn::Conv1D(2, 5, {.dilation_rate = 2})(random_tensor({2, 8, 3}, 1));
              }),
              HasSubstr("kernel_size 5 (dilation_rate 2) does not fit input [-1, 8, 3] with 'valid' padding"));
  nn::Conv1D conv(2, 3);
  conv(random_tensor({2, 7, 3}, 1));
  EXPECT_THAT(message_of<ShapeError>([&] {
                conv(random_tensor({2, 7, 4}, 1));
              }),
              HasSubstr("expects input [batch, steps, 3], got [2, 7, 4]"));
  // Causal padding lets a kernel longer than the sequence fit, as in Keras.
  EXPECT_EQ(nn::Conv1D(2, 5, {.padding = "causal"})(random_tensor({2, 3, 3}, 1)).shape(), (Shape{2, 3, 2}));
}

TEST(TransformerTest, Conv1DMatchesPyTorch) {
  for (const char* name : {"conv1d_same_strided", "conv1d_causal_dilated"}) {
    const json& ref = reference().at(name);
    nn::Conv1D conv(ref.at("filters").get<int64_t>(), ref.at("kernel_size").get<int>(),
                    {.strides = ref.at("strides").get<int>(),
                     .padding = ref.at("padding").get<std::string>(),
                     .dilation_rate = ref.at("dilation_rate").get<int>(),
                     .activation = ref.at("activation").get<std::string>()});
    Variable x(tensor_of(ref.at("x")), true, "x");
    conv(x);
    set_weight(conv.kernel(), tensor_of(ref.at("kernel")));
    set_weight(conv.bias(), tensor_of(ref.at("bias")));
    GradientTape tape;
    Variable y = conv(x);
    const auto grads = tape.gradient(y, {x, conv.kernel(), conv.bias()}, tensor_of(ref.at("r")));
    const std::string what = std::string("Conv1D ") + name;
    expect_matches(what, y.value(), ref, "output");
    expect_matches(what, grads[0], ref, "grad_x");
    expect_matches(what, grads[1], ref, "grad_kernel");
    expect_matches(what, grads[2], ref, "grad_bias");
  }
}

TEST(TransformerTest, Conv1DGradientsMatchFiniteDifferences) {
  const Tensor x = random_tensor({2, 7, 3}, 5);
  for (const char* padding : {"valid", "same", "causal"}) {
    for (const auto& [strides, dilation] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}}) {
      SCOPED_TRACE(std::string(padding) + " strides " + std::to_string(strides) + " dilation " +
                   std::to_string(dilation));
      nn::Conv1D conv(
          2, 3,
          {.strides = strides, .padding = padding, .dilation_rate = dilation, .bias_initializer = "random_uniform"});
      testing::check_layer_gradients(conv, {x});
    }
  }
  nn::Conv1D no_bias(3, 2, {.padding = "causal", .use_bias = false});
  testing::check_layer_gradients(no_bias, {x});
}

}  // namespace
}  // namespace strata
