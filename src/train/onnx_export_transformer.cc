// ONNX export of the Transformer layers (see onnx_exporter.h and strata/train/onnx_export.h): LayerNormalization
// (opset 17's op), MultiHeadAttention as MatMul/Add/Reshape/Transpose/Softmax/Mul on its EinsumDense kernels seen as
// matrices with its causal and attention_mask masks, and a TransformerEncoder as its sublayers' nodes and residual
// Adds, each matching strata's forward code in src/nn (attention.cc, normalization.cc, transformer.cc).
// Thread-safety: methods of one Exporter, used by one thread.
#include <cmath>
#include <string>
#include <vector>

#include "strata/error.h"
#include "strata/nn/nn.h"
#include "train/onnx_exporter.h"

namespace strata::onnx_detail {

namespace {
// What strata's MultiHeadAttention adds to a masked score (nn/attention.cc, Keras's value).
constexpr float kMaskedScore = -1e9f;
}  // namespace

// LayerNormalization over one feature axis: ONNX's LayerNormalization (opset 17) normalises the axes from `axis`
// on, so the last axis is used directly and another is moved last and back, as strata's layer does. ONNX's
// (x - mean) / sqrt(variance + epsilon), biased variance, is oneDNN's, which strata's kernel uses.
Value Exporter::layer_norm(const nn::LayerNormalization& l, const Value& in) {
  const std::string base = base_of(l);
  const nn::LayerNormalizationOptions& o = l.options();
  Value x = nhwc(in);
  const int rank = static_cast<int>(x.shape.size());
  const int axis = o.axis < 0 ? o.axis + rank : o.axis;
  STRATA_CHECK(axis > 0 && axis < rank, InvalidArgument,
               "cannot export " << describe(l) << " to ONNX: axis " << o.axis << " is not a feature axis of "
                                << shape_str(x.shape));
  const int64_t c = x.shape[static_cast<size_t>(axis)];
  std::vector<int64_t> perm;
  if (axis != rank - 1) {
    for (int i = 0; i < rank; ++i)
      if (i != axis) perm.push_back(i);
    perm.push_back(axis);
    onnx::NodeProto* t = g_.node("Transpose", base, {x.name});
    attr(t, "perm", perm);
    x.name = t->output(0);
  }
  const std::vector<float> gamma = o.scale ? host_floats(l.gamma()) : std::vector<float>(static_cast<size_t>(c), 1.0f);
  const std::vector<float> beta = o.center ? host_floats(l.beta()) : std::vector<float>(static_cast<size_t>(c), 0.0f);
  onnx::NodeProto* n = g_.node("LayerNormalization", base,
                               {x.name, g_.floats(base + "/gamma", {c}, gamma), g_.floats(base + "/beta", {c}, beta)});
  attr(n, "axis", static_cast<int64_t>(-1));
  attr(n, "epsilon", o.epsilon);
  Value y{n->output(0), in.shape, false};
  if (!perm.empty()) {
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    onnx::NodeProto* t = g_.node("Transpose", base, {y.name});
    attr(t, "perm", inverse);
    y.name = t->output(0);
  }
  return y;
}

// x [N, T, D] through an EinsumDense kernel [D, heads, dim] and bias [heads, dim] (as one [D, heads * dim]
// MatMul, strata's own view of it) -> [N, heads, T, dim].
std::string Exporter::project(const std::string& base, const Value& x, const Variable& kernel, const Variable& bias) {
  const Shape& k = kernel.shape();
  std::string y =
      g_.op("MatMul", base, {x.name, g_.floats(base + "/kernel", {k[0], k[1] * k[2]}, host_floats(kernel))});
  if (bias.defined()) y = g_.op("Add", base, {y, g_.floats(base + "/bias", {k[1] * k[2]}, host_floats(bias))});
  y = g_.op("Reshape", base, {y, g_.int64s(base + "/shape", {0, -1, k[1], k[2]})});
  onnx::NodeProto* t = g_.node("Transpose", base, {y});
  attr(t, "perm", std::vector<int64_t>{0, 2, 1, 3});
  return t->output(0);
}

// MultiHeadAttention as strata computes it (nn/attention.cc): q = (x Wq + bq) / sqrt(key_dim), per head
// softmax(q k^T + mask) v, the heads side by side through the output kernel [heads, value_dim, out] seen as
// [heads * value_dim, out]. Inputs [query], [query, value], [query, value, key] or [query, value, key,
// attention_mask]. The mask added to the scores is strata's: 0 where query i attends key j, -1e9 where not. The
// causal part (the layer's use_causal_mask) is a constant [T, S]; an attention_mask input ([N, S] of the keys or
// [N, T, S], nonzero attends) becomes Where(mask == 0, -1e9, 0) made [N, 1, 1 or T, S], and the two are joined by
// Min (masked by either: -1e9, as strata's single value).
Value Exporter::attention(const nn::MultiHeadAttention& l, const std::vector<Value>& inputs) {
  const std::string base = base_of(l);
  STRATA_CHECK(!inputs.empty() && inputs.size() <= 4, InvalidArgument,
               "cannot export " << describe(l) << " to ONNX: it takes [query], [query, value], [query, value, key] "
                                << "or [query, value, key, attention_mask], got " << inputs.size() << " inputs");
  const Value query = nhwc(inputs[0]);
  const Value value = inputs.size() >= 2 ? nhwc(inputs[1]) : query;
  const Value key = inputs.size() >= 3 ? nhwc(inputs[2]) : value;
  STRATA_CHECK(query.shape.size() == 3 && value.shape.size() == 3 && key.shape.size() == 3, InvalidArgument,
               "cannot export " << describe(l) << " to ONNX: it wants [batch, steps, features] inputs, got query "
                                << shape_str(query.shape));
  const int64_t t = query.shape[1], s = value.shape[1];
  const int64_t heads = l.num_heads(), vd = l.value_dim(), out = l.output_kernel().shape()[2];
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(l.key_dim())));
  const std::string q = g_.op(
      "Mul", base + "/query",
      {project(base + "/query", query, l.query_kernel(), l.query_bias()), g_.scalar(base + "/query/scale", scale)});
  const std::string k = project(base + "/key", key, l.key_kernel(), l.key_bias());
  const std::string v = project(base + "/value", value, l.value_kernel(), l.value_bias());
  onnx::NodeProto* k_t = g_.node("Transpose", base + "/key", {k});
  attr(k_t, "perm", std::vector<int64_t>{0, 1, 3, 2});
  std::string scores = g_.op("MatMul", base + "/scores", {q, k_t->output(0)});  // [N, heads, T, S]
  std::string mask;  // broadcast to [N, heads, T, S]; "" for none
  STRATA_CHECK(!l.options().use_causal_mask || (t > 0 && s > 0), InvalidArgument,
               "cannot export " << describe(l) << " to ONNX: its causal mask needs a fixed number of steps, got query "
                                << shape_str(query.shape) << " and value " << shape_str(value.shape));
  if (l.options().use_causal_mask) {  // query i attends keys j <= i; -1e9 is strata's (and Keras's) masked score
    std::vector<float> causal(static_cast<size_t>(t * s), 0.0f);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = i + 1; j < s; ++j) causal[static_cast<size_t>(i * s + j)] = kMaskedScore;
    mask = g_.floats(base + "/causal_mask", {t, s}, causal);
  }
  if (inputs.size() == 4) {
    const Value& m = inputs[3];
    const size_t rank = m.shape.size();
    STRATA_CHECK((rank == 2 || rank == 3) && m.shape.back() == s && (rank == 2 || m.shape[1] == t || m.shape[1] == 1),
                 InvalidArgument,
                 "cannot export " << describe(l) << " to ONNX: its attention_mask " << shape_str(m.shape)
                                  << " does not fit queries of " << t << " steps and keys of " << s
                                  << " steps (want [batch, " << t << ", " << s << "] or [batch, " << s << "])");
    onnx::NodeProto* cast = g_.node("Cast", base + "/attention_mask", {m.name});
    attr(cast, "to", static_cast<int64_t>(onnx::TensorProto::FLOAT));  // strata compares the float32 value to 0
    const std::string masked =
        g_.op("Equal", base + "/attention_mask", {cast->output(0), g_.scalar(base + "/attention_mask/zero", 0.0f)});
    std::string bias = g_.op("Where", base + "/attention_mask",
                             {masked, g_.scalar(base + "/attention_mask/masked_score", kMaskedScore),
                              g_.scalar(base + "/attention_mask/attended_score", 0.0f)});
    bias = g_.op("Unsqueeze", base + "/attention_mask",
                 {bias, g_.int64s(base + "/attention_mask/axes",
                                  rank == 2 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1})});
    mask = mask.empty() ? bias : g_.op("Min", base + "/attention_mask", {bias, mask});
  }
  if (!mask.empty()) scores = g_.op("Add", base + "/scores", {scores, mask});
  onnx::NodeProto* softmax = g_.node("Softmax", base, {scores});
  attr(softmax, "axis", static_cast<int64_t>(-1));
  // Attention dropout is for training calls only.
  const std::string context = g_.op("MatMul", base + "/context", {softmax->output(0), v});  // [N, heads, T, vd]
  onnx::NodeProto* merged = g_.node("Transpose", base + "/context", {context});
  attr(merged, "perm", std::vector<int64_t>{0, 2, 1, 3});
  std::string y =
      g_.op("Reshape", base + "/context", {merged->output(0), g_.int64s(base + "/context/shape", {0, -1, heads * vd})});
  y = g_.op("MatMul", base + "/attention_output",
            {y, g_.floats(base + "/attention_output/kernel", {heads * vd, out}, host_floats(l.output_kernel()))});
  if (l.output_bias().defined()) {
    y = g_.op("Add", base + "/attention_output",
              {y, g_.floats(base + "/attention_output/bias", {out}, host_floats(l.output_bias()))});
  }
  return {y, Shape{query.shape[0], t, out}, false};
}

// strata's TransformerEncoder (nn/transformer.cc), its sublayers' nodes named under the encoder's name. Pre-norm:
//   x = x + MHA(LN(x));  x = x + Dense(Dense_act(LN(x)))
// post-norm: x = LN(x + MHA(x)); x = LN(x + FFN(x)). Its dropouts are identities at inference and are left out.
Value Exporter::transformer_encoder(const nn::TransformerEncoder& l, const Value& in) {
  const std::string base = base_of(l);
  STRATA_CHECK(l.attention() != nullptr, InvalidArgument,
               "cannot export " << describe(l) << " to ONNX: it is not built");
  const bool pre = l.options().normalize_first;
  const Value input = nhwc(in);
  const std::string outer = scope_;
  scope_ = base + "/";
  Value x = pre ? layer_norm(*l.attention_norm(), input) : input;
  x = attention(*l.attention(), {x});
  x.name = g_.op("Add", base + "/attention_residual", {x.name, input.name});
  if (!pre) x = layer_norm(*l.attention_norm(), x);
  const Value residual = x;
  Value h = pre ? layer_norm(*l.feedforward_norm(), x) : x;
  h = dense(*l.output_dense(), dense(*l.intermediate_dense(), h));
  h.name = g_.op("Add", base + "/feedforward_residual", {h.name, residual.name});
  if (!pre) h = layer_norm(*l.feedforward_norm(), h);
  scope_ = outer;
  return {h.name, l.output_shape(), false};
}

}  // namespace strata::onnx_detail
