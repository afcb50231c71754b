// The internals of ONNX export (strata/train/onnx_export.h), shared by its two source files: onnx_export.cc (the
// core, convolutional, recurrent and merge layers, and the walk over a model) and onnx_export_transformer.cc
// (LayerNormalization, MultiHeadAttention, TransformerEncoder). A GraphBuilder appends nodes and initializers with
// names unique in the graph; an Exporter emits each layer's nodes through it.
// Thread-safety: an Exporter and its GraphBuilder belong to one export on one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "onnx/onnx.pb.h"
#include "strata/nn/nn.h"

namespace strata::onnx_detail {

// "Dense 'dense_1'", for errors.
inline std::string describe(const nn::Layer& layer) { return layer.class_name() + " '" + layer.name() + "'"; }

// A value of the graph being built: its name, its shape as strata sees it (batch first, -1), and whether it is held
// transposed to NCHW (rank-4 values only).
struct Value {
  std::string name;
  Shape shape;
  bool channels_first = false;
};

// The float32 host copy of a weight.
std::vector<float> host_floats(const Variable& v);

// Builds one GraphProto: node and initializer helpers with names unique in the graph.
class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* graph) : graph_(graph) {}

  // "base", then "base_1", "base_2", ... for names already taken.
  std::string fresh(const std::string& base) {
    int& count = used_[base];
    const std::string name = count == 0 ? base : base + "_" + std::to_string(count);
    ++count;
    return name;
  }

  std::string floats(const std::string& base, const Shape& dims, const std::vector<float>& data) {
    onnx::TensorProto* t = graph_->add_initializer();
    t->set_name(fresh(base));
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)));
    return t->name();
  }
  std::string scalar(const std::string& base, float v) { return floats(base, {}, {v}); }

  std::string int64s(const std::string& base, const std::vector<int64_t>& data) {
    onnx::TensorProto* t = graph_->add_initializer();
    t->set_name(fresh(base));
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(data.size()));
    t->set_raw_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(int64_t)));
    return t->name();
  }

  // A node of `op` with these inputs ("" for an omitted optional one) and `outputs` fresh output names from
  // `base`; returns the node to add attributes to.
  onnx::NodeProto* node(const std::string& op, const std::string& base, const std::vector<std::string>& inputs,
                        int outputs = 1) {
    onnx::NodeProto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(fresh(base + "/" + op));
    for (const std::string& in : inputs) n->add_input(in);
    for (int i = 0; i < outputs; ++i) {
      std::string output = base + "/" + op;
      if (i > 0) output.append(":").append(std::to_string(i));  // (not ":" + ...: GCC 12's false -Wrestrict)
      n->add_output(fresh(output));
    }
    return n;
  }
  // A one-output node; returns its output's name.
  std::string op(const std::string& op, const std::string& base, const std::vector<std::string>& inputs) {
    return node(op, base, inputs)->output(0);
  }

 private:
  onnx::GraphProto* graph_;
  std::map<std::string, int> used_;
};

inline void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
inline void attr(onnx::NodeProto* n, const std::string& name, float v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
inline void attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
inline void attr(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRINGS);
  for (const std::string& x : v) a->add_strings(x);
}

// Emits the layers of one model into a graph: a method per kind of layer, each appending the layer's nodes and
// weights and returning its output value.
class Exporter {
 public:
  explicit Exporter(onnx::GraphProto* graph) : g_(graph) {}

  // The layer applied to `inputs` (strata's shapes of its inputs are the values' shapes).
  Value layer(const nn::Layer& layer, const std::vector<Value>& inputs);

  // Marks a graph input's dtype (Rescaling casts integers; Embedding casts floats).
  void note_input(const std::string& name, DType dtype);

  // `v` in strata's layout (NHWC for images).
  Value nhwc(const Value& v);

 private:
  Value nchw(const Value& v, const nn::Layer& layer);

  // A layer's activation by Keras name, after the layer's own op.
  Value activation(const std::string& name, const nn::Layer& layer, const char* option, Value x);

  Value dense(const nn::Dense& l, const Value& in);

  Value conv2d(const nn::Conv2D& l, const Value& in);

  // [b, steps, c] -> Transpose [b, c, steps] -> 1-D Conv -> Transpose back, then the activation in strata's layout.
  Value conv1d(const nn::Conv1D& l, const Value& in);

  Value pooling(const nn::detail::Pooling2D& l, const Value& in);

  Value batch_norm(const nn::BatchNormalization& l, const Value& in);

  // LayerNormalization over one feature axis: ONNX's LayerNormalization (opset 17) normalises the axes from `axis`
  // on, so the last axis is used directly and another is moved last and back, as strata's layer does. ONNX's
  // (x - mean) / sqrt(variance + epsilon), biased variance, is oneDNN's, which strata's kernel uses.
  Value layer_norm(const nn::LayerNormalization& l, const Value& in);

  // x [N, T, D] through an EinsumDense kernel [D, heads, dim] and bias [heads, dim] (as one [D, heads * dim]
  // MatMul, strata's own view of it) -> [N, heads, T, dim].
  std::string project(const std::string& base, const Value& x, const Variable& kernel, const Variable& bias);

  // MultiHeadAttention as strata computes it (nn/attention.cc): q = (x Wq + bq) / sqrt(key_dim), per head
  // softmax(q k^T + mask) v, the heads side by side through the output kernel [heads, value_dim, out] seen as
  // [heads * value_dim, out]. Inputs [query], [query, value], [query, value, key] or [query, value, key,
  // attention_mask]. The mask added to the scores is strata's: 0 where query i attends key j, -1e9 where not. The
  // causal part (the layer's use_causal_mask) is a constant [T, S]; an attention_mask input ([N, S] of the keys or
  // [N, T, S], nonzero attends) becomes Where(mask == 0, -1e9, 0) made [N, 1, 1 or T, S], and the two are joined by
  // Min (masked by either: -1e9, as strata's single value).
  Value attention(const nn::MultiHeadAttention& l, const std::vector<Value>& inputs);

  // strata's TransformerEncoder (nn/transformer.cc), its sublayers' nodes named under the encoder's name. Pre-norm:
  //   x = x + MHA(LN(x));  x = x + Dense(Dense_act(LN(x)))
  // post-norm: x = LN(x + MHA(x)); x = LN(x + FFN(x)). Its dropouts are identities at inference and are left out.
  Value transformer_encoder(const nn::TransformerEncoder& l, const Value& in);

  Value merge(const nn::Layer& l, const std::vector<Value>& inputs);

  Value concatenate(const nn::Concatenate& l, const std::vector<Value>& inputs);

  // ONNX's name of an LSTM/GRU activation.
  static std::string recurrent_activation(const std::string& name, const nn::Layer& layer, const char* option);

  // [features, gates * u] (Keras) -> [1, gates * u, features] (ONNX), gate blocks taken in `order`.
  static std::vector<float> gate_rows(const std::vector<float>& kernel, int64_t rows, int64_t u,
                                      const std::vector<int64_t>& order);
  static std::vector<float> gate_blocks(const float* bias, int64_t u, const std::vector<int64_t>& order);

  // The shared part of LSTM and GRU: [N, T, F] in time-major order (reversed for go_backwards), then the op's
  // outputs back to [N, T, u] or the last state [N, u].
  std::string time_major(const std::string& base, const Value& x, bool go_backwards);
  Value recurrent_output(const std::string& base, onnx::NodeProto* n, bool return_sequences, const Shape& out_shape);

  Value lstm(const nn::LSTM& l, const Value& in);

  Value gru(const nn::GRU& l, const Value& in);

  // The names of a layer's nodes and weights: its own, under its composite's ("encoder/self_attention_layer") for
  // a sublayer, so that two encoders' sublayers do not share names.
  std::string base_of(const nn::Layer& l) const { return scope_ + l.name(); }

  GraphBuilder g_;
  std::string scope_;
  std::map<std::string, bool> input_is_integer_, input_is_float_;
};

}  // namespace strata::onnx_detail
