// ONNX export (strata/train/onnx_export.h): the bytes parse as onnx::ModelProto (generated from the ONNX schema) with
// the expected graph: node op types in order, the layouts' Transposes, initializer shapes and the weights moved to
// ONNX's layouts (Conv's OIHW, LSTM's gate order i, o, f, c, GRU's [Wb, Rb]); what has no ONNX form is a clear
// error. The Transformer layers: LayerNormalization, MultiHeadAttention's projections as [features, heads * dim]
// MatMuls and its causal mask, a TransformerEncoder as its sublayers' ops under its name. onnxruntime runs the files
// in tests/peers/test_onnx_export.py.
#include "strata/train/onnx_export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "onnx/onnx.pb.h"
#include "strata/error.h"
#include "strata/nn/nn.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

onnx::ModelProto parse(const std::string& bytes) {
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(bytes));
  return model;
}

std::vector<std::string> op_types(const onnx::ModelProto& model) {
  std::vector<std::string> ops;
  for (const onnx::NodeProto& n : model.graph().node()) ops.push_back(n.op_type());
  return ops;
}

// name -> dims of every initializer.
std::map<std::string, std::vector<int64_t>> initializer_shapes(const onnx::ModelProto& model) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const onnx::TensorProto& t : model.graph().initializer()) shapes[t.name()] = {t.dims().begin(), t.dims().end()};
  return shapes;
}

std::vector<float> initializer_floats(const onnx::ModelProto& model, const std::string& name) {
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    if (t.name() != name) continue;
    EXPECT_EQ(t.data_type(), onnx::TensorProto::FLOAT);
    std::vector<float> values(t.raw_data().size() / sizeof(float));
    std::memcpy(values.data(), t.raw_data().data(), t.raw_data().size());
    return values;
  }
  ADD_FAILURE() << "no initializer " << name;
  return {};
}

const onnx::AttributeProto& attribute(const onnx::NodeProto& node, const std::string& name) {
  for (const onnx::AttributeProto& a : node.attribute())
    if (a.name() == name) return a;
  throw std::runtime_error(node.op_type() + " has no attribute " + name);
}

const onnx::NodeProto& first_node(const onnx::ModelProto& model, const std::string& op) {
  for (const onnx::NodeProto& n : model.graph().node())
    if (n.op_type() == op) return n;
  throw std::runtime_error("no " + op + " node");
}

// Fills every weight with distinct values, so a misplaced element shows.
void number_weights(const Model& model) {
  float next = 0.0f;
  for (Variable v : model.variables()) {
    std::vector<float> values(static_cast<size_t>(shape_numel(v.shape())));
    for (float& x : values) x = (next += 0.001f);
    v.assign(Tensor::from_vector(values, v.shape()));
  }
}

TEST(OnnxExportTest, ACnnBecomesTheOpsOfItsLayersWithNchwInsideTheConvolutions) {
  Sequential model({nn::Rescaling(1.0f / 255), nn::Conv2D(4, {3, 3}, {.activation = "relu"}), nn::MaxPooling2D({2, 2}),
                    nn::Flatten(), nn::Dense(6, {.activation = "relu"}), nn::Dense(3)},
                   "cnn");
  model.build_for({1, 8, 8, 1}, DType::kUInt8);
  number_weights(model);
  const onnx::ModelProto proto = parse(onnx_model_bytes(model, {.input_dtype = DType::kUInt8}));

  EXPECT_EQ(proto.opset_import(0).version(), kOnnxOpset);
  EXPECT_EQ(proto.opset_import(0).domain(), "");
  EXPECT_EQ(proto.graph().name(), "cnn");
  EXPECT_THAT(op_types(proto), ElementsAre("Cast", "Mul", "Transpose", "Conv", "Relu", "MaxPool", "Transpose",
                                           "Flatten", "Gemm", "Relu", "Gemm"));
  // The input is as strata takes it: raw uint8 NHWC, any batch.
  ASSERT_EQ(proto.graph().input_size(), 1);
  const onnx::TypeProto::Tensor& input = proto.graph().input(0).type().tensor_type();
  EXPECT_EQ(input.elem_type(), onnx::TensorProto::UINT8);
  ASSERT_EQ(input.shape().dim_size(), 4);
  EXPECT_EQ(input.shape().dim(0).dim_param(), "N");
  EXPECT_EQ(input.shape().dim(3).dim_value(), 1);
  const onnx::TypeProto::Tensor& output = proto.graph().output(0).type().tensor_type();
  EXPECT_EQ(output.elem_type(), onnx::TensorProto::FLOAT);
  EXPECT_EQ(output.shape().dim(1).dim_value(), 3);

  const auto shapes = initializer_shapes(proto);
  const std::string conv = model.layers()[1]->name(), dense = model.layers()[4]->name();
  EXPECT_THAT(shapes.at(conv + "/kernel"), ElementsAre(4, 1, 3, 3));  // OIHW
  EXPECT_THAT(shapes.at(conv + "/bias"), ElementsAre(4));
  EXPECT_THAT(shapes.at(dense + "/kernel"), ElementsAre(3 * 3 * 4, 6));
  // OIHW[o, i, h, w] is strata's HWIO[h, w, i, o].
  const auto& conv_layer = dynamic_cast<const nn::Conv2D&>(*model.layers()[1]);
  const Tensor hwio = conv_layer.kernel().value();
  const std::vector<float> oihw = initializer_floats(proto, conv + "/kernel");
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t w = 0; w < 3; ++w)
        EXPECT_EQ(oihw[static_cast<size_t>((o * 3 + h) * 3 + w)], hwio.data<float>()[(h * 3 + w) * 4 + o]);
  EXPECT_THAT(attribute(first_node(proto, "Transpose"), "perm").ints(), ElementsAre(0, 3, 1, 2));
  EXPECT_THAT(attribute(first_node(proto, "Conv"), "pads").ints(), ElementsAre(0, 0, 0, 0));
}

TEST(OnnxExportTest, SamePaddingIsTensorFlowsWithTheOddCellAfter) {
  Sequential model({nn::Conv2D(2, {4, 4}, {.strides = 2, .padding = "same"}),
                    nn::AveragePooling2D({3, 3}, {.strides = 1, .padding = "same"})});
  model.build_for({1, 9, 10, 3});
  const onnx::ModelProto proto = parse(onnx_model_bytes(model));
  // Height 9, stride 2: out 5, total (5-1)*2+4-9 = 3 -> 1 before, 2 after; width 10: total 2 -> 1, 1.
  EXPECT_THAT(attribute(first_node(proto, "Conv"), "pads").ints(), ElementsAre(1, 1, 2, 1));
  EXPECT_THAT(attribute(first_node(proto, "AveragePool"), "pads").ints(), ElementsAre(1, 1, 1, 1));
  EXPECT_THAT(op_types(proto), ElementsAre("Transpose", "Conv", "AveragePool", "Transpose"));
}

TEST(OnnxExportTest, Conv1DIsAOneDimensionalConvBetweenTwoTransposes) {
  Sequential model({nn::Conv1D(4, 3, {.padding = "causal", .dilation_rate = 2, .activation = "relu"}),
                    nn::Conv1D(2, 4, {.strides = 2, .padding = "same", .use_bias = false}),
                    nn::Conv1D(3, 2, {.activation = "softmax"})});
  model.build_for({1, 9, 5});
  number_weights(model);
  const onnx::ModelProto proto = parse(onnx_model_bytes(model));
  EXPECT_THAT(op_types(proto), ElementsAre("Transpose", "Conv", "Transpose", "Relu", "Transpose", "Conv", "Transpose",
                                           "Transpose", "Conv", "Transpose", "Softmax"));
  const auto shapes = initializer_shapes(proto);
  const std::string causal = model.layers()[0]->name(), same = model.layers()[1]->name();
  EXPECT_THAT(shapes.at(causal + "/kernel"), ElementsAre(4, 5, 3));  // [out, in, k]
  EXPECT_THAT(shapes.at(causal + "/bias"), ElementsAre(4));
  EXPECT_EQ(shapes.count(same + "/bias"), 0u);
  // OIK[o, i, t] is strata's KIO[t, i, o].
  const Tensor kio = dynamic_cast<const nn::Conv1D&>(*model.layers()[0]).kernel().value();
  const std::vector<float> oik = initializer_floats(proto, causal + "/kernel");
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t t = 0; t < 3; ++t)
        EXPECT_EQ(oik[static_cast<size_t>((o * 5 + i) * 3 + t)], kio.data<float>()[(t * 5 + i) * 4 + o]);
  std::vector<const onnx::NodeProto*> convs;
  for (const onnx::NodeProto& n : proto.graph().node())
    if (n.op_type() == "Conv") convs.push_back(&n);
  ASSERT_EQ(convs.size(), 3u);
  // Causal: (3 - 1) * 2 zeros before. Same, 9 steps, stride 2, kernel 4: out 5, total (5-1)*2+4-9 = 3 -> 1, 2.
  EXPECT_THAT(attribute(*convs[0], "pads").ints(), ElementsAre(4, 0));
  EXPECT_THAT(attribute(*convs[0], "dilations").ints(), ElementsAre(2));
  EXPECT_THAT(attribute(*convs[1], "pads").ints(), ElementsAre(1, 2));
  EXPECT_THAT(attribute(*convs[1], "strides").ints(), ElementsAre(2));
  EXPECT_THAT(attribute(*convs[2], "pads").ints(), ElementsAre(0, 0));
  EXPECT_THAT(attribute(*convs[2], "kernel_shape").ints(), ElementsAre(2));
  EXPECT_THAT(attribute(first_node(proto, "Transpose"), "perm").ints(), ElementsAre(0, 2, 1));
  EXPECT_EQ(attribute(first_node(proto, "Softmax"), "axis").i(), -1);  // over the filters, in strata's layout
}

TEST(OnnxExportTest, LstmGatesAreReorderedFromKerasIfcoToOnnxIofc) {
  Sequential model({nn::LSTM(3, {.return_sequences = true})});
  model.build_for({1, 5, 2});
  number_weights(model);
  const onnx::ModelProto proto = parse(onnx_model_bytes(model));
  EXPECT_THAT(op_types(proto), ElementsAre("Transpose", "LSTM", "Squeeze", "Transpose"));
  const std::string name = model.layers()[0]->name();
  const auto shapes = initializer_shapes(proto);
  EXPECT_THAT(shapes.at(name + "/W"), ElementsAre(1, 12, 2));
  EXPECT_THAT(shapes.at(name + "/R"), ElementsAre(1, 12, 3));
  EXPECT_THAT(shapes.at(name + "/B"), ElementsAre(1, 24));
  const auto& lstm = dynamic_cast<const nn::LSTM&>(*model.layers()[0]);
  const Tensor kernel = lstm.kernel().value(), bias = lstm.bias().value();  // [2, 12], [12]: i f c o
  const std::vector<float> w = initializer_floats(proto, name + "/W"), b = initializer_floats(proto, name + "/B");
  const int64_t keras_of_onnx[] = {0, 3, 1, 2};  // ONNX i, o, f, c
  for (int64_t gate = 0; gate < 4; ++gate) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t f = 0; f < 2; ++f) {
        EXPECT_EQ(w[static_cast<size_t>((gate * 3 + j) * 2 + f)],
                  kernel.data<float>()[f * 12 + keras_of_onnx[gate] * 3 + j]);
      }
      EXPECT_EQ(b[static_cast<size_t>(gate * 3 + j)], bias.data<float>()[keras_of_onnx[gate] * 3 + j]);
      EXPECT_EQ(b[static_cast<size_t>(12 + gate * 3 + j)], 0.0f);  // no recurrent bias in Keras's LSTM
    }
  }
  EXPECT_EQ(attribute(first_node(proto, "LSTM"), "hidden_size").i(), 3);
}

TEST(OnnxExportTest, GruResetAfterIsLinearBeforeResetWithBothBiases) {
  Sequential model({nn::GRU(2, {.go_backwards = true}), nn::Dense(1)});
  model.build_for({1, 4, 3});
  number_weights(model);
  const onnx::ModelProto proto = parse(onnx_model_bytes(model));
  EXPECT_THAT(op_types(proto), ElementsAre("Slice", "Transpose", "GRU", "Squeeze", "Gemm"));
  const onnx::NodeProto& gru = first_node(proto, "GRU");
  EXPECT_EQ(attribute(gru, "linear_before_reset").i(), 1);
  const auto& layer = dynamic_cast<const nn::GRU&>(*model.layers()[0]);
  const Tensor bias = layer.bias().value();  // [2, 6]: input then recurrent, both z r h
  const std::vector<float> b = initializer_floats(proto, layer.name() + "/B");
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(b[i], bias.data<float>()[i]);

  Sequential before({nn::GRU(2, {.reset_after = false})});
  before.build_for({1, 4, 3});
  number_weights(before);
  const onnx::ModelProto before_proto = parse(onnx_model_bytes(before));
  EXPECT_EQ(attribute(first_node(before_proto, "GRU"), "linear_before_reset").i(), 0);
  const std::vector<float> b2 = initializer_floats(before_proto, before.layers()[0]->name() + "/B");
  ASSERT_EQ(b2.size(), 12u);
  for (size_t i = 6; i < 12; ++i) EXPECT_EQ(b2[i], 0.0f);
}

TEST(OnnxExportTest, FunctionalModelsExportTheirConcatenateAndAdd) {
  auto ids = nn::Input({4}, DType::kInt64, "ids");
  auto dense = nn::Input({3}, DType::kFloat32, "dense");
  auto embedded = nn::Flatten()(nn::Embedding(10, 2)(ids));
  auto joined = nn::Concatenate()({embedded, dense});
  auto h = nn::Dense(5, {.activation = "relu"})(joined);
  auto out = nn::Add()({h, nn::Dense(5)(h)});
  Model model({ids, dense}, out, "two_inputs");
  const onnx::ModelProto proto = parse(onnx_model_bytes(model));
  EXPECT_THAT(op_types(proto), ElementsAre("Gather", "Flatten", "Concat", "Gemm", "Relu", "Gemm", "Add"));
  ASSERT_EQ(proto.graph().input_size(), 2);
  EXPECT_EQ(proto.graph().input(0).name(), "ids");
  EXPECT_EQ(proto.graph().input(0).type().tensor_type().elem_type(), onnx::TensorProto::INT64);
  EXPECT_EQ(proto.graph().input(1).name(), "dense");
  EXPECT_EQ(attribute(first_node(proto, "Concat"), "axis").i(), 1);
}

TEST(OnnxExportTest, APreNormTransformerEncoderIsItsSublayersOpsWithResidualAdds) {
  Sequential model({nn::PositionEmbedding(6, {.name = "positions"}),
                    nn::TransformerEncoder(8, 2, {.dropout = 0.1f, .activation = "gelu", .name = "encoder"}),
                    nn::LayerNormalization({.epsilon = 1e-6f, .name = "final_norm"}), nn::GlobalAveragePooling1D()});
  model.build_for({1, 5, 4});
  number_weights(model);
  const onnx::ModelProto proto = parse(onnx_model_bytes(model));
  EXPECT_THAT(op_types(proto),
              ElementsAre("Add",                                           // position embedding
                          "LayerNormalization",                            // pre-norm
                          "MatMul", "Add", "Reshape", "Transpose", "Mul",  // query, scaled
                          "MatMul", "Add", "Reshape", "Transpose",         // key
                          "MatMul", "Add", "Reshape", "Transpose",         // value
                          "Transpose", "MatMul", "Softmax", "MatMul",      // heads
                          "Transpose", "Reshape", "MatMul", "Add",         // attention output
                          "Add",                                           // residual
                          "LayerNormalization", "MatMul", "Add",           // feed-forward
                          "Mul", "Erf", "Add", "Mul", "Mul",               // gelu
                          "MatMul", "Add", "Add",                          // output dense, residual
                          "LayerNormalization", "ReduceMean"));
  const auto shapes = initializer_shapes(proto);
  EXPECT_THAT(shapes.at("positions/embeddings"), ElementsAre(5, 4));                       // the first 5 of 6 rows
  EXPECT_THAT(shapes.at("encoder/self_attention_layer/query/kernel"), ElementsAre(4, 4));  // [d, heads * 2]
  EXPECT_THAT(shapes.at("encoder/self_attention_layer/query/bias"), ElementsAre(4));
  EXPECT_THAT(shapes.at("encoder/self_attention_layer/attention_output/kernel"), ElementsAre(4, 4));
  EXPECT_THAT(shapes.at("encoder/self_attention_layer_norm/gamma"), ElementsAre(4));
  EXPECT_THAT(shapes.at("encoder/feedforward_intermediate_dense/kernel"), ElementsAre(4, 8));
  EXPECT_THAT(shapes.at("encoder/feedforward_output_dense/kernel"), ElementsAre(8, 4));
  const auto& pe = dynamic_cast<const nn::PositionEmbedding&>(*model.layers()[0]);
  const std::vector<float> table = initializer_floats(proto, "positions/embeddings");
  EXPECT_EQ(table,
            std::vector<float>(pe.embeddings().value().data<float>(), pe.embeddings().value().data<float>() + 20));
  const auto& encoder = dynamic_cast<const nn::TransformerEncoder&>(*model.layers()[1]);
  const Tensor wq = encoder.attention()->query_kernel().value();
  EXPECT_EQ(
      initializer_floats(proto, "encoder/self_attention_layer/query/kernel"),
      std::vector<float>(wq.data<float>(), wq.data<float>() + 16));  // [d, heads, dim] row-major is [d, heads*dim]
  const onnx::NodeProto& norm = first_node(proto, "LayerNormalization");
  EXPECT_EQ(attribute(norm, "axis").i(), -1);
  EXPECT_FLOAT_EQ(attribute(norm, "epsilon").f(), 1e-5f);  // the encoder's layer_norm_epsilon
  EXPECT_FLOAT_EQ(attribute(*(proto.graph().node().end() - 2), "epsilon").f(), 1e-6f);
  EXPECT_THAT(attribute(first_node(proto, "ReduceMean"), "axes").ints(), ElementsAre(1));
  EXPECT_THAT(initializer_floats(proto, "encoder/self_attention_layer/query/scale"),
              ElementsAre(static_cast<float>(1.0 / std::sqrt(2.0))));                       // 1 / sqrt(key_dim)
  for (const onnx::NodeProto& n : proto.graph().node()) EXPECT_NE(n.op_type(), "Dropout");  // inference
}

TEST(OnnxExportTest, MultiHeadAttentionsCausalMaskIsAConstantAddedToTheScores) {
  Sequential model(
      {nn::MultiHeadAttention(
           2, 3, {.value_dim = 5, .use_bias = false, .output_shape = 7, .use_causal_mask = true, .name = "mha"}),
       nn::TransformerEncoder(6, 7, {.normalize_first = false, .name = "post"})});
  model.build_for({1, 4, 6});
  const onnx::ModelProto proto = parse(onnx_model_bytes(model));
  const auto shapes = initializer_shapes(proto);
  EXPECT_THAT(shapes.at("mha/query/kernel"), ElementsAre(6, 6));
  EXPECT_THAT(shapes.at("mha/value/kernel"), ElementsAre(6, 10));
  EXPECT_THAT(shapes.at("mha/attention_output/kernel"), ElementsAre(10, 7));
  EXPECT_EQ(shapes.count("mha/query/bias"), 0u);
  EXPECT_THAT(initializer_floats(proto, "mha/causal_mask"),
              ElementsAre(0, -1e9f, -1e9f, -1e9f, 0, 0, -1e9f, -1e9f, 0, 0, 0, -1e9f, 0, 0, 0, 0));
  std::vector<std::string> ops = op_types(proto);
  // Without biases: MatMul, Reshape, Transpose per projection; the mask's Add before the Softmax.
  EXPECT_THAT(
      std::vector<std::string>(ops.begin(), ops.begin() + 18),
      ElementsAre("MatMul", "Reshape", "Transpose", "Mul", "MatMul", "Reshape", "Transpose", "MatMul", "Reshape",
                  "Transpose", "Transpose", "MatMul", "Add", "Softmax", "MatMul", "Transpose", "Reshape", "MatMul"));
  // Post-norm: the residual Add, then the norm; the block ends with one.
  EXPECT_EQ(ops.back(), "LayerNormalization");
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "LayerNormalization"), 2);
  EXPECT_EQ(shapes.count("post/self_attention_layer/causal_mask"), 0u);  // the encoder's attention is unmasked
}

TEST(OnnxExportTest, AnAttentionMaskInputBecomesScoresJoinedWithTheCausalMaskByMin) {
  auto tokens = nn::Input({4, 6}, DType::kFloat32, "tokens");
  auto padding = nn::Input({4}, DType::kInt64, "padding");
  auto y = nn::MultiHeadAttention(2, 3, {.use_causal_mask = true, .name = "mha"})({tokens, tokens, tokens, padding});
  Model model({tokens, padding}, y, "padded");
  const onnx::ModelProto proto = parse(onnx_model_bytes(model));
  const std::vector<std::string> ops = op_types(proto);
  const auto at = std::find(ops.begin(), ops.end(), "Cast");
  ASSERT_NE(at, ops.end());
  EXPECT_THAT(std::vector<std::string>(at, at + 7),
              ElementsAre("Cast", "Equal", "Where", "Unsqueeze", "Min", "Add", "Softmax"));
  EXPECT_THAT(initializer_floats(proto, "mha/attention_mask/masked_score"), ElementsAre(-1e9f));
  EXPECT_EQ(attribute(first_node(proto, "Cast"), "to").i(), onnx::TensorProto::FLOAT);
  EXPECT_EQ(first_node(proto, "Cast").input(0), "padding");
  // A padding mask [N, S] is [N, 1, 1, S] against the scores [N, heads, T, S].
  EXPECT_EQ(first_node(proto, "Unsqueeze").input(1), "mha/attention_mask/axes");
  std::vector<int64_t> axes;
  for (const onnx::TensorProto& t : proto.graph().initializer()) {
    if (t.name() != "mha/attention_mask/axes") continue;
    axes.resize(t.raw_data().size() / sizeof(int64_t));
    std::memcpy(axes.data(), t.raw_data().data(), t.raw_data().size());
  }
  EXPECT_THAT(axes, ElementsAre(1, 2));
  EXPECT_EQ(proto.graph().input(1).type().tensor_type().elem_type(), onnx::TensorProto::INT64);
}

TEST(OnnxExportTest, LayerNormalizationOnAnotherAxisIsMovedLastAndBack) {
  Sequential model({nn::LayerNormalization({.axis = 1, .center = false, .name = "ln"})});
  model.build_for({1, 3, 5});
  const onnx::ModelProto proto = parse(onnx_model_bytes(model));
  EXPECT_THAT(op_types(proto), ElementsAre("Transpose", "LayerNormalization", "Transpose"));
  EXPECT_THAT(attribute(first_node(proto, "Transpose"), "perm").ints(), ElementsAre(0, 2, 1));
  EXPECT_THAT(initializer_floats(proto, "ln/beta"), ElementsAre(0, 0, 0));  // no center: a zero shift
  EXPECT_THAT(initializer_shapes(proto).at("ln/gamma"), ElementsAre(3));
}

// A layer strata has and ONNX export does not know.
class Squash : public nn::LayerBase<Squash> {
 public:
  Squash() : LayerBase("squash") {}
  std::string class_name() const override { return "Squash"; }

 protected:
  Variable call(const Variable& input, bool) override { return input * 0.5f; }
};

TEST(OnnxExportTest, WhatHasNoOnnxFormIsAnErrorNamingTheLayer) {
  Sequential unknown({nn::Dense(2), Squash()});
  unknown.build_for({1, 3});
  try {
    onnx_model_bytes(unknown);
    FAIL() << "exported a Squash layer";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot export Squash 'squash' to ONNX: strata exports Rescaling, Dense"));
  }

  Sequential custom({nn::Dense(2, {.activation = nn::ActivationSpec([](const Variable& x) { return x * x; })})});
  custom.build_for({1, 3});
  EXPECT_THAT([&] { onnx_model_bytes(custom); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("its activation is a C++ function")));

  Sequential elu_lstm({nn::LSTM(2, {.activation = "elu"})});
  elu_lstm.build_for({1, 3, 2});
  EXPECT_THAT(
      [&] { onnx_model_bytes(elu_lstm); },
      ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("its activation 'elu' is not one ONNX's recurrent ops")));

  Sequential unbuilt({nn::Dense(2)}, "unbuilt");
  EXPECT_THAT([&] { onnx_model_bytes(unbuilt); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("model 'unbuilt' is not built")));
}

TEST(OnnxExportTest, SaveOnnxWritesTheBytesToTheFile) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("strata_onnx_export_test_" + std::to_string(::getpid()) + ".onnx");
  Sequential model({nn::Dense(2, {.activation = "softmax"})});
  model.build_for({1, 3});
  save_onnx(model, path.string());
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::filesystem::remove(path);
  EXPECT_EQ(bytes.str(), onnx_model_bytes(model));
  EXPECT_THAT(op_types(parse(bytes.str())), ElementsAre("Gemm", "Softmax"));
  EXPECT_THROW(save_onnx(model, "/nonexistent-dir/model.onnx"), IoError);
}

}  // namespace
}  // namespace strata
