// ONNX export (strata/train/onnx_export.h): walks a Sequential's layers, or a functional model's graph nodes, and
// emits each layer as ONNX nodes into an onnx::ModelProto generated from the ONNX schema (onnx/onnx.proto, see
// src/CMakeLists.txt). Weights become float32 initializers (raw little-endian data), converted where ONNX lays them
// out differently: Conv's OIHW kernels, LSTM's and GRU's transposed, gate-reordered W/R/B. The Exporter
// (train/onnx_exporter.h) has a method per kind of layer: here the core, convolutional, recurrent and merge layers;
// the Transformer layers in onnx_export_transformer.cc.
//
// Layout: strata's images are NHWC; ONNX's Conv, MaxPool and AveragePool are NCHW. Each value remembers which
// layout it is in, and a Transpose is added only where a layer needs the other one, so a run of convolutions and
// pools stays NCHW and Flatten sees NHWC again, flattening in strata's order.
//
// Thread-safety: free functions of their arguments; no shared state.
#include "strata/train/onnx_export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "onnx/onnx.pb.h"
#include "strata/error.h"
#include "strata/nn/nn.h"
#include "train/onnx_exporter.h"

namespace strata {

namespace onnx_detail {

namespace {

// TensorFlow's padding of one spatial axis: SAME pads (out - 1) * stride + span - in, the odd cell after.
std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t kernel, int64_t stride, int64_t dilation) {
  const int64_t span = (kernel - 1) * dilation + 1;
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + span - in, 0);
  return {total / 2, total - total / 2};
}

// ONNX pads [top, left, bottom, right] of an NHWC input shape.
std::vector<int64_t> window_pads(const Shape& nhwc, nn::Size2 kernel, nn::Size2 strides, nn::Size2 dilation,
                                 bool same) {
  if (!same) return {0, 0, 0, 0};
  const auto [top, bottom] = same_padding(nhwc[1], kernel.h, strides.h, dilation.h);
  const auto [left, right] = same_padding(nhwc[2], kernel.w, strides.w, dilation.w);
  return {top, left, bottom, right};
}

}  // namespace

// The float32 host copy of a weight.
std::vector<float> host_floats(const Variable& v) {
  Tensor t = v.value();
  if (!t.device().is_cpu()) t = t.to(Device::cpu());
  if (t.dtype() != DType::kFloat32) t = t.to(DType::kFloat32);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// The layer applied to `inputs` (strata's shapes of its inputs are the values' shapes).
Value Exporter::layer(const nn::Layer& layer, const std::vector<Value>& inputs) {
  const std::string base = layer.name();
  const std::string cls = layer.class_name();
  if (cls == "Add" || cls == "Subtract" || cls == "Multiply") return merge(layer, inputs);
  if (const auto* l = dynamic_cast<const nn::Concatenate*>(&layer)) return concatenate(*l, inputs);
  if (const auto* l = dynamic_cast<const nn::MultiHeadAttention*>(&layer)) return attention(*l, inputs);
  STRATA_CHECK(inputs.size() == 1, InvalidArgument,
               "cannot export " << describe(layer) << " to ONNX: it takes one input, got " << inputs.size());
  const Value& x = inputs[0];
  const Shape& out_shape = layer.output_shape();
  if (const auto* l = dynamic_cast<const nn::Rescaling*>(&layer)) {
    std::string v = x.name;
    if (input_is_integer_.count(v) != 0) {
      onnx::NodeProto* cast = g_.node("Cast", base, {v});
      attr(cast, "to", static_cast<int64_t>(onnx::TensorProto::FLOAT));
      v = cast->output(0);
    }
    v = g_.op("Mul", base, {v, g_.scalar(base + "/scale", l->scale())});
    if (l->offset() != 0.0f) v = g_.op("Add", base, {v, g_.scalar(base + "/offset", l->offset())});
    return {v, out_shape, x.channels_first};
  }
  if (const auto* l = dynamic_cast<const nn::Dense*>(&layer)) return dense(*l, x);
  if (const auto* l = dynamic_cast<const nn::Conv2D*>(&layer)) return conv2d(*l, x);
  if (const auto* l = dynamic_cast<const nn::Conv1D*>(&layer)) return conv1d(*l, x);
  if (const auto* l = dynamic_cast<const nn::detail::Pooling2D*>(&layer)) return pooling(*l, x);
  if (const auto* l = dynamic_cast<const nn::GlobalAveragePooling2D*>(&layer)) {
    onnx::NodeProto* n = g_.node("ReduceMean", base, {x.name});
    attr(n, "axes", x.channels_first ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{1, 2});
    attr(n, "keepdims", static_cast<int64_t>(l->keepdims() ? 1 : 0));
    return {n->output(0), out_shape, l->keepdims() && x.channels_first};
  }
  if (const auto* l = dynamic_cast<const nn::GlobalAveragePooling1D*>(&layer)) {  // the mean over the steps
    onnx::NodeProto* n = g_.node("ReduceMean", base, {nhwc(x).name});
    attr(n, "axes", std::vector<int64_t>{1});
    attr(n, "keepdims", static_cast<int64_t>(l->keepdims() ? 1 : 0));
    return {n->output(0), out_shape, false};
  }
  if (dynamic_cast<const nn::Flatten*>(&layer) != nullptr) {
    onnx::NodeProto* n = g_.node("Flatten", base, {nhwc(x).name});
    attr(n, "axis", static_cast<int64_t>(1));
    return {n->output(0), out_shape, false};
  }
  if (dynamic_cast<const nn::Reshape*>(&layer) != nullptr) {
    // 0 keeps the batch dimension; the rest is the built output shape (any -1 already resolved).
    std::vector<int64_t> target(out_shape.begin(), out_shape.end());
    target[0] = 0;
    return {g_.op("Reshape", base, {nhwc(x).name, g_.int64s(base + "/shape", target)}), out_shape, false};
  }
  if (dynamic_cast<const nn::Dropout*>(&layer) != nullptr) {
    return {g_.op("Dropout", base, {x.name}), out_shape, x.channels_first};  // training_mode false: identity
  }
  if (const auto* l = dynamic_cast<const nn::BatchNormalization*>(&layer)) return batch_norm(*l, x);
  if (const auto* l = dynamic_cast<const nn::LayerNormalization*>(&layer)) return layer_norm(*l, x);
  if (const auto* l = dynamic_cast<const nn::PositionEmbedding*>(&layer)) {
    // strata adds the table's first `steps` rows: the initializer holds just those.
    const Value v = nhwc(x);
    const int64_t steps = v.shape[1], dim = v.shape[2];
    STRATA_CHECK(steps > 0, InvalidArgument,
                 "cannot export " << describe(layer) << " to ONNX: its input " << shape_str(v.shape)
                                  << " has no fixed number of steps to cut the table to");
    std::vector<float> table = host_floats(l->embeddings());
    table.resize(static_cast<size_t>(steps * dim));
    return {g_.op("Add", base, {v.name, g_.floats(base + "/embeddings", {steps, dim}, table)}), out_shape, false};
  }
  if (const auto* l = dynamic_cast<const nn::TransformerEncoder*>(&layer)) return transformer_encoder(*l, x);
  if (const auto* l = dynamic_cast<const nn::Activation*>(&layer)) {
    return activation(l->activation().name(), layer, "activation", x);
  }
  if (const auto* l = dynamic_cast<const nn::Embedding*>(&layer)) {
    std::string ids = x.name;
    if (input_is_float_.count(ids) != 0) {  // strata truncates float indices to int64, as Cast does
      onnx::NodeProto* cast = g_.node("Cast", base, {ids});
      attr(cast, "to", static_cast<int64_t>(onnx::TensorProto::INT64));
      ids = cast->output(0);
    }
    const std::string table =
        g_.floats(base + "/embeddings", {l->input_dim(), l->output_dim()}, host_floats(l->embeddings()));
    onnx::NodeProto* n = g_.node("Gather", base, {table, ids});
    attr(n, "axis", static_cast<int64_t>(0));
    return {n->output(0), out_shape, false};
  }
  if (const auto* l = dynamic_cast<const nn::LSTM*>(&layer)) return lstm(*l, x);
  if (const auto* l = dynamic_cast<const nn::GRU*>(&layer)) return gru(*l, x);
  STRATA_THROW(
      InvalidArgument,
      "cannot export " << describe(layer)
                       << " to ONNX: strata exports Rescaling, Dense, Conv2D, Conv1D, MaxPooling2D, AveragePooling2D, "
                          "GlobalAveragePooling2D, GlobalAveragePooling1D, Flatten, Reshape, Dropout, "
                          "BatchNormalization, LayerNormalization, Activation, Embedding, LSTM, GRU, "
                          "PositionEmbedding, MultiHeadAttention, TransformerEncoder, Concatenate, Add, Subtract and "
                          "Multiply layers");
}

// Marks a graph input's dtype (Rescaling casts integers; Embedding casts floats).
void Exporter::note_input(const std::string& name, DType dtype) {
  if (dtype == DType::kFloat32) {
    input_is_float_[name] = true;
  } else {
    input_is_integer_[name] = true;
  }
}

// `v` in strata's layout (NHWC for images).
Value Exporter::nhwc(const Value& v) {
  if (!v.channels_first) return v;
  onnx::NodeProto* n = g_.node("Transpose", v.name + "_nhwc", {v.name});
  attr(n, "perm", std::vector<int64_t>{0, 2, 3, 1});
  return {n->output(0), v.shape, false};
}

Value Exporter::nchw(const Value& v, const nn::Layer& layer) {
  STRATA_CHECK(v.shape.size() == 4, InvalidArgument,
               "cannot export " << describe(layer) << " to ONNX: it wants [batch, height, width, channels] inputs, got "
                                << shape_str(v.shape));
  if (v.channels_first) return v;
  onnx::NodeProto* n = g_.node("Transpose", v.name + "_nchw", {v.name});
  attr(n, "perm", std::vector<int64_t>{0, 3, 1, 2});
  return {n->output(0), v.shape, true};
}

// A layer's activation by Keras name, after the layer's own op.
Value Exporter::activation(const std::string& name, const nn::Layer& layer, const char* option, Value x) {
  STRATA_CHECK(
      name != "custom", InvalidArgument,
      "cannot export " << describe(layer) << " to ONNX: its " << option << " is a C++ function; give it by Keras name");
  const std::string base = base_of(layer) + "/" + name;
  const auto unary = [&](const std::string& op) { return Value{g_.op(op, base, {x.name}), x.shape, x.channels_first}; };
  if (name.empty() || name == "linear") return x;
  if (name == "relu") return unary("Relu");
  if (name == "sigmoid") return unary("Sigmoid");
  if (name == "tanh") return unary("Tanh");
  if (name == "softplus") return unary("Softplus");
  if (name == "exponential") return unary("Exp");
  if (name == "elu") {
    onnx::NodeProto* n = g_.node("Elu", base, {x.name});
    attr(n, "alpha", 1.0f);
    return {n->output(0), x.shape, x.channels_first};
  }
  if (name == "leaky_relu") {  // strata's leaky_relu: alpha 0.2 (ops.h), Keras 3's default
    onnx::NodeProto* n = g_.node("LeakyRelu", base, {x.name});
    attr(n, "alpha", 0.2f);
    return {n->output(0), x.shape, x.channels_first};
  }
  if (name == "softmax" || name == "log_softmax") {  // over the last axis of strata's layout
    x = nhwc(x);
    onnx::NodeProto* n = g_.node(name == "softmax" ? "Softmax" : "LogSoftmax", base, {x.name});
    attr(n, "axis", static_cast<int64_t>(-1));
    return {n->output(0), x.shape, false};
  }
  if (name == "swish" || name == "silu") {
    const std::string s = g_.op("Sigmoid", base, {x.name});
    return {g_.op("Mul", base, {x.name, s}), x.shape, x.channels_first};
  }
  if (name == "gelu") {  // the exact form, as strata's kernel: x * (1 + erf(x / sqrt 2)) / 2
    const std::string scaled = g_.op("Mul", base, {x.name, g_.scalar(base + "/rsqrt2", static_cast<float>(M_SQRT1_2))});
    const std::string one_plus = g_.op("Add", base, {g_.op("Erf", base, {scaled}), g_.scalar(base + "/one", 1.0f)});
    const std::string half_x = g_.op("Mul", base, {x.name, g_.scalar(base + "/half", 0.5f)});
    return {g_.op("Mul", base, {half_x, one_plus}), x.shape, x.channels_first};
  }
  STRATA_THROW(InvalidArgument, "cannot export " << describe(layer) << " to ONNX: its " << option << " '" << name
                                                 << "' has no ONNX form here");
}

Value Exporter::dense(const nn::Dense& l, const Value& in) {
  const std::string base = base_of(l);
  const Value x = nhwc(in);
  const Shape& k = l.kernel().shape();
  const std::string kernel = g_.floats(base + "/kernel", k, host_floats(l.kernel()));
  const bool bias = l.options().use_bias;
  std::string y;
  if (x.shape.size() == 2) {  // Gemm: x [N, in] @ kernel [in, out] + bias [out]
    std::vector<std::string> inputs{x.name, kernel};
    if (bias) inputs.push_back(g_.floats(base + "/bias", {k[1]}, host_floats(l.bias())));
    y = g_.op("Gemm", base, inputs);
  } else {
    y = g_.op("MatMul", base, {x.name, kernel});
    if (bias) y = g_.op("Add", base, {y, g_.floats(base + "/bias", {k[1]}, host_floats(l.bias()))});
  }
  return activation(l.options().activation.name(), l, "activation", {y, l.output_shape(), false});
}

Value Exporter::conv2d(const nn::Conv2D& l, const Value& in) {
  const std::string base = l.name();
  const Value x = nchw(in, l);
  const nn::Conv2DLayerOptions& o = l.options();
  const Shape& k = l.kernel().shape();  // [kh, kw, in, out] -> ONNX's [out, in, kh, kw]
  const std::vector<float> hwio = host_floats(l.kernel());
  std::vector<float> oihw(hwio.size());
  for (int64_t h = 0; h < k[0]; ++h)
    for (int64_t w = 0; w < k[1]; ++w)
      for (int64_t i = 0; i < k[2]; ++i)
        for (int64_t c = 0; c < k[3]; ++c)
          oihw[static_cast<size_t>(((c * k[2] + i) * k[0] + h) * k[1] + w)] =
              hwio[static_cast<size_t>(((h * k[1] + w) * k[2] + i) * k[3] + c)];
  std::vector<std::string> inputs{x.name, g_.floats(base + "/kernel", {k[3], k[2], k[0], k[1]}, oihw)};
  if (o.use_bias) inputs.push_back(g_.floats(base + "/bias", {k[3]}, host_floats(l.bias())));
  onnx::NodeProto* n = g_.node("Conv", base, inputs);
  attr(n, "kernel_shape", std::vector<int64_t>{k[0], k[1]});
  attr(n, "strides", std::vector<int64_t>{o.strides.h, o.strides.w});
  attr(n, "dilations", std::vector<int64_t>{o.dilation_rate.h, o.dilation_rate.w});
  attr(n, "pads",
       window_pads(in.shape, l.kernel_size(), o.strides, o.dilation_rate, o.padding.value() == Padding::kSame));
  return activation(o.activation.name(), l, "activation", {n->output(0), l.output_shape(), true});
}

// [b, steps, c] -> Transpose [b, c, steps] -> 1-D Conv -> Transpose back, then the activation in strata's layout.
Value Exporter::conv1d(const nn::Conv1D& l, const Value& in) {
  const std::string base = l.name();
  STRATA_CHECK(in.shape.size() == 3 && !in.channels_first, InvalidArgument,
               "cannot export " << describe(l) << " to ONNX: it wants [batch, steps, channels] inputs, got "
                                << shape_str(in.shape));
  const nn::Conv1DLayerOptions& o = l.options();
  onnx::NodeProto* to_channels_first = g_.node("Transpose", base + "_ncw", {in.name});
  attr(to_channels_first, "perm", std::vector<int64_t>{0, 2, 1});
  const Shape& k = l.kernel().shape();  // [k, in, out] -> ONNX's [out, in, k]
  const std::vector<float> kio = host_floats(l.kernel());
  std::vector<float> oik(kio.size());
  for (int64_t t = 0; t < k[0]; ++t)
    for (int64_t i = 0; i < k[1]; ++i)
      for (int64_t c = 0; c < k[2]; ++c)
        oik[static_cast<size_t>((c * k[1] + i) * k[0] + t)] = kio[static_cast<size_t>((t * k[1] + i) * k[2] + c)];
  std::vector<std::string> inputs{to_channels_first->output(0), g_.floats(base + "/kernel", {k[2], k[1], k[0]}, oik)};
  if (o.use_bias) inputs.push_back(g_.floats(base + "/bias", {k[2]}, host_floats(l.bias())));
  onnx::NodeProto* n = g_.node("Conv", base, inputs);
  attr(n, "kernel_shape", std::vector<int64_t>{k[0]});
  attr(n, "strides", std::vector<int64_t>{o.strides});
  attr(n, "dilations", std::vector<int64_t>{o.dilation_rate});
  std::pair<int64_t, int64_t> pads{l.causal_padding(), 0};  // causal: the zeros before; valid: none
  if (o.padding.value() == Padding::kSame) pads = same_padding(in.shape[1], k[0], o.strides, o.dilation_rate);
  attr(n, "pads", std::vector<int64_t>{pads.first, pads.second});
  onnx::NodeProto* back = g_.node("Transpose", base + "_nwc", {n->output(0)});
  attr(back, "perm", std::vector<int64_t>{0, 2, 1});
  return activation(o.activation.name(), l, "activation", {back->output(0), l.output_shape(), false});
}

Value Exporter::pooling(const nn::detail::Pooling2D& l, const Value& in) {
  const Value x = nchw(in, l);
  const bool max = dynamic_cast<const nn::MaxPooling2D*>(&l) != nullptr;
  // AveragePool's default count_include_pad 0 averages real cells only, as TensorFlow's SAME does.
  onnx::NodeProto* n = g_.node(max ? "MaxPool" : "AveragePool", l.name(), {x.name});
  const nn::Size2 pool = l.pool_size(), strides = l.strides();
  attr(n, "kernel_shape", std::vector<int64_t>{pool.h, pool.w});
  attr(n, "strides", std::vector<int64_t>{strides.h, strides.w});
  attr(n, "pads", window_pads(in.shape, pool, strides, nn::Size2(1, 1), l.padding() == Padding::kSame));
  return {n->output(0), l.output_shape(), true};
}

Value Exporter::batch_norm(const nn::BatchNormalization& l, const Value& in) {
  const std::string base = l.name();
  const nn::BatchNormalizationOptions& o = l.options();
  const int rank = static_cast<int>(in.shape.size());
  const int axis = o.axis < 0 ? o.axis + rank : o.axis;
  const int64_t c = l.moving_mean().shape()[0];
  // ONNX normalises axis 1: an NHWC image's channels are there in NCHW; another axis is moved there and back.
  Value x;
  std::vector<int64_t> perm;
  if (rank == 4 && axis == 3) {
    x = nchw(in, l);
  } else {
    x = nhwc(in);
    if (axis != 1) {
      perm.push_back(0);
      perm.push_back(axis);
      for (int i = 1; i < rank; ++i)
        if (i != axis) perm.push_back(i);
      onnx::NodeProto* t = g_.node("Transpose", base, {x.name});
      attr(t, "perm", perm);
      x.name = t->output(0);
    }
  }
  const std::vector<float> gamma = o.scale ? host_floats(l.gamma()) : std::vector<float>(static_cast<size_t>(c), 1.0f);
  const std::vector<float> beta = o.center ? host_floats(l.beta()) : std::vector<float>(static_cast<size_t>(c), 0.0f);
  onnx::NodeProto* n = g_.node("BatchNormalization", base,
                               {x.name, g_.floats(base + "/gamma", {c}, gamma), g_.floats(base + "/beta", {c}, beta),
                                g_.floats(base + "/moving_mean", {c}, host_floats(l.moving_mean())),
                                g_.floats(base + "/moving_variance", {c}, host_floats(l.moving_variance()))});
  attr(n, "epsilon", o.epsilon);
  Value y{n->output(0), l.output_shape(), x.channels_first};
  if (!perm.empty()) {
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    onnx::NodeProto* t = g_.node("Transpose", base, {y.name});
    attr(t, "perm", inverse);
    y.name = t->output(0);
  }
  return y;
}

Value Exporter::merge(const nn::Layer& l, const std::vector<Value>& inputs) {
  const std::string op = l.class_name() == "Add" ? "Add" : l.class_name() == "Subtract" ? "Sub" : "Mul";
  // One layout for all: NCHW when every input already is, else strata's.
  const bool all_first = std::all_of(inputs.begin(), inputs.end(), [](const Value& v) { return v.channels_first; });
  std::string acc = all_first ? inputs[0].name : nhwc(inputs[0]).name;
  for (size_t i = 1; i < inputs.size(); ++i) {  // left to right, as strata sums
    acc = g_.op(op, l.name(), {acc, all_first ? inputs[i].name : nhwc(inputs[i]).name});
  }
  return {acc, l.output_shape(), all_first};
}

Value Exporter::concatenate(const nn::Concatenate& l, const std::vector<Value>& inputs) {
  std::vector<std::string> names;
  for (const Value& v : inputs) names.push_back(nhwc(v).name);
  const int64_t rank = static_cast<int64_t>(l.output_shape().size());
  onnx::NodeProto* n = g_.node("Concat", l.name(), names);
  attr(n, "axis", static_cast<int64_t>(l.axis() < 0 ? l.axis() + rank : l.axis()));
  return {n->output(0), l.output_shape(), false};
}

// ONNX's name of an LSTM/GRU activation.
std::string Exporter::recurrent_activation(const std::string& name, const nn::Layer& layer, const char* option) {
  if (name == "tanh") return "Tanh";
  if (name == "sigmoid") return "Sigmoid";
  if (name == "relu") return "Relu";
  STRATA_THROW(InvalidArgument, "cannot export "
                                    << describe(layer) << " to ONNX: its " << option << " '" << name
                                    << "' is not one ONNX's recurrent ops take here (tanh, sigmoid, relu)");
}

// [features, gates * u] (Keras) -> [1, gates * u, features] (ONNX), gate blocks taken in `order`.
std::vector<float> Exporter::gate_rows(const std::vector<float>& kernel, int64_t rows, int64_t u,
                                       const std::vector<int64_t>& order) {
  const int64_t cols = static_cast<int64_t>(order.size()) * u;
  std::vector<float> out(kernel.size());
  for (size_t g = 0; g < order.size(); ++g)
    for (int64_t j = 0; j < u; ++j)
      for (int64_t f = 0; f < rows; ++f)
        out[static_cast<size_t>((static_cast<int64_t>(g) * u + j) * rows + f)] =
            kernel[static_cast<size_t>(f * cols + order[g] * u + j)];
  return out;
}

std::vector<float> Exporter::gate_blocks(const float* bias, int64_t u, const std::vector<int64_t>& order) {
  std::vector<float> out;
  for (int64_t k : order) out.insert(out.end(), bias + k * u, bias + (k + 1) * u);
  return out;
}

// The shared part of LSTM and GRU: [N, T, F] in time-major order (reversed for go_backwards), then the op's
// outputs back to [N, T, u] or the last state [N, u].
std::string Exporter::time_major(const std::string& base, const Value& x, bool go_backwards) {
  std::string v = x.name;
  if (go_backwards) {  // Keras's go_backwards reads the steps last first and outputs them in that order
    v = g_.op("Slice", base,
              {v, g_.int64s(base + "/starts", {-1}), g_.int64s(base + "/ends", {std::numeric_limits<int64_t>::min()}),
               g_.int64s(base + "/axes", {1}), g_.int64s(base + "/steps", {-1})});
  }
  onnx::NodeProto* t = g_.node("Transpose", base, {v});
  attr(t, "perm", std::vector<int64_t>{1, 0, 2});
  return t->output(0);
}

Value Exporter::recurrent_output(const std::string& base, onnx::NodeProto* n, bool return_sequences,
                                 const Shape& out_shape) {
  if (return_sequences) {  // Y [T, 1, N, u] -> [T, N, u] -> [N, T, u]
    const std::string y = g_.op("Squeeze", base, {n->output(0), g_.int64s(base + "/direction_axis", {1})});
    onnx::NodeProto* t = g_.node("Transpose", base, {y});
    attr(t, "perm", std::vector<int64_t>{1, 0, 2});
    return {t->output(0), out_shape, false};
  }
  return {g_.op("Squeeze", base, {n->output(1), g_.int64s(base + "/direction_axis", {0})}), out_shape, false};
}

Value Exporter::lstm(const nn::LSTM& l, const Value& in) {
  const std::string base = l.name();
  const nn::LSTMOptions& o = l.options();
  const std::vector<std::string> activations{
      recurrent_activation(o.recurrent_activation.name(), l, "recurrent_activation"),
      recurrent_activation(o.activation.name(), l, "activation"),
      recurrent_activation(o.activation.name(), l, "activation")};
  const int64_t u = l.units(), features = l.kernel().shape()[0];
  const std::vector<int64_t> order{0, 3, 1, 2};  // ONNX's i, o, f, c from Keras's i, f, c, o
  std::vector<std::string> inputs{
      time_major(base, in, o.go_backwards),
      g_.floats(base + "/W", {1, 4 * u, features}, gate_rows(host_floats(l.kernel()), features, u, order)),
      g_.floats(base + "/R", {1, 4 * u, u}, gate_rows(host_floats(l.recurrent_kernel()), u, u, order))};
  if (o.use_bias) {  // [Wb, Rb]: strata has one bias, the input's
    std::vector<float> b = gate_blocks(host_floats(l.bias()).data(), u, order);
    b.resize(static_cast<size_t>(8 * u), 0.0f);
    inputs.push_back(g_.floats(base + "/B", {1, 8 * u}, b));
  }
  onnx::NodeProto* n = g_.node("LSTM", base, inputs, 2);
  attr(n, "hidden_size", u);
  attr(n, "activations", activations);
  return recurrent_output(base, n, o.return_sequences, l.output_shape());
}

Value Exporter::gru(const nn::GRU& l, const Value& in) {
  const std::string base = l.name();
  const nn::GRUOptions& o = l.options();
  const std::vector<std::string> activations{
      recurrent_activation(o.recurrent_activation.name(), l, "recurrent_activation"),
      recurrent_activation(o.activation.name(), l, "activation")};
  const int64_t u = l.units(), features = l.kernel().shape()[0];
  const std::vector<int64_t> order{0, 1, 2};  // z, r, h in both
  std::vector<std::string> inputs{
      time_major(base, in, o.go_backwards),
      g_.floats(base + "/W", {1, 3 * u, features}, gate_rows(host_floats(l.kernel()), features, u, order)),
      g_.floats(base + "/R", {1, 3 * u, u}, gate_rows(host_floats(l.recurrent_kernel()), u, u, order))};
  if (o.use_bias) {  // reset_after: bias [2, 3u] is [input; recurrent], ONNX's [Wb, Rb]; otherwise Rb is 0
    std::vector<float> b = host_floats(l.bias());
    b.resize(static_cast<size_t>(6 * u), 0.0f);
    inputs.push_back(g_.floats(base + "/B", {1, 6 * u}, b));
  }
  onnx::NodeProto* n = g_.node("GRU", base, inputs, 2);
  attr(n, "hidden_size", u);
  attr(n, "activations", activations);
  // Keras's reset_after applies the reset gate to (h R_h + Rb_h): ONNX's linear_before_reset.
  attr(n, "linear_before_reset", static_cast<int64_t>(o.reset_after ? 1 : 0));
  return recurrent_output(base, n, o.return_sequences, l.output_shape());
}

}  // namespace onnx_detail

namespace {

// ONNX's IR version for opset 17 (ONNX 1.12).
constexpr int64_t kIrVersion = 8;

using onnx_detail::attr;
using onnx_detail::describe;
using onnx_detail::Exporter;
using onnx_detail::Value;

int onnx_elem_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return onnx::TensorProto::FLOAT;
    case DType::kInt32:
      return onnx::TensorProto::INT32;
    case DType::kInt64:
      return onnx::TensorProto::INT64;
    case DType::kUInt8:
      return onnx::TensorProto::UINT8;
    case DType::kBFloat16:
      return onnx::TensorProto::BFLOAT16;
  }
  return onnx::TensorProto::UNDEFINED;
}

void set_value_info(onnx::ValueInfoProto* info, const std::string& name, DType dtype, const Shape& shape) {
  info->set_name(name);
  onnx::TypeProto::Tensor* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx_elem_type(dtype));
  onnx::TensorShapeProto* dims = tensor->mutable_shape();
  for (size_t i = 0; i < shape.size(); ++i) {
    onnx::TensorShapeProto::Dimension* d = dims->add_dim();
    if (i == 0) {
      d->set_dim_param("N");
    } else {
      d->set_dim_value(shape[i]);
    }
  }
}

void check_exportable(const nn::Layer& layer) {
  STRATA_CHECK(dynamic_cast<const Model*>(&layer) == nullptr, InvalidArgument,
               "cannot export " << describe(layer)
                                << " to ONNX: a model nested in a model is not exported; add its "
                                   "layers to the outer model");
}

onnx::ModelProto build_onnx(const Model& model, const OnnxExportOptions& options) {
  onnx::ModelProto proto;
  proto.set_ir_version(kIrVersion);
  proto.set_producer_name("strata");
  proto.set_model_version(1);
  onnx::OperatorSetIdProto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  onnx::GraphProto* graph = proto.mutable_graph();
  graph->set_name(model.name());
  Exporter exporter(graph);
  std::vector<Value> outputs;
  if (const nn::Graph* functional = model.graph()) {
    std::map<const nn::detail::GraphNode*, Value> values;
    for (const nn::SymbolicTensor& input : functional->inputs()) {
      const nn::detail::GraphNode& node = *input.node();
      const std::string name = node.input_name.empty() ? "input" : node.input_name;
      set_value_info(graph->add_input(), name, node.dtype, node.shape);
      exporter.note_input(name, node.dtype);
      values[&node] = {name, node.shape, false};
    }
    for (const auto& node : functional->nodes()) {
      check_exportable(*node->layer);
      std::vector<Value> inputs;
      for (const nn::SymbolicTensor& in : node->inputs) inputs.push_back(values.at(in.node().get()));
      Value out = exporter.layer(*node->layer, inputs);
      out.shape = node->shape;
      values[node.get()] = out;
    }
    for (const nn::SymbolicTensor& out : functional->outputs()) outputs.push_back(values.at(out.node().get()));
  } else {
    STRATA_CHECK(model.class_name() == "Sequential", InvalidArgument,
                 "save_onnx: model '" << model.name()
                                      << "' is a subclassed model (its call() is C++); only Sequential "
                                         "and functional models can be exported");
    STRATA_CHECK(
        model.built() && !model.input_shapes().empty(), InvalidArgument,
        "save_onnx: model '" << model.name() << "' is not built; call build_for(input_shape) or train it first");
    const Shape& shape = model.input_shapes()[0];
    set_value_info(graph->add_input(), "input", options.input_dtype, shape);
    exporter.note_input("input", options.input_dtype);
    Value v{"input", shape, false};
    for (const auto& layer : model.layers()) {
      check_exportable(*layer);
      v = exporter.layer(*layer, {v});
    }
    outputs.push_back(v);
  }
  for (Value& out : outputs) {
    out = exporter.nhwc(out);
    set_value_info(graph->add_output(), out.name, DType::kFloat32, out.shape);
  }
  return proto;
}

}  // namespace

std::string onnx_model_bytes(const Model& model, const OnnxExportOptions& options) {
  const onnx::ModelProto proto = build_onnx(model, options);
  std::string bytes;
  STRATA_CHECK(proto.SerializeToString(&bytes), InvalidArgument,
               "save_onnx: model '" << model.name() << "' does not serialize as an ONNX ModelProto (over 2 GB?)");
  return bytes;
}

void save_onnx(const Model& model, const std::string& path, const OnnxExportOptions& options) {
  io::detail::write_file_atomically(path, onnx_model_bytes(model, options));
}

}  // namespace strata
