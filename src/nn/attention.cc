// MultiHeadAttention (see strata/nn/attention.h), composed from recorded ops: each projection is one dense product
// on the kernel viewed as a matrix, the heads are a batch of rank-3 products, and the mask is a constant added to
// the scores. Thread-safety: as for every layer.
#include "strata/nn/attention.h"

#include <cmath>
#include <vector>

#include "nn/attention_heads.h"
#include "nn/layer_util.h"
#include "strata/error.h"
#include "strata/ops.h"

namespace strata::nn {

using detail::label;
using detail::with_free_batch;

namespace {

// What Keras adds to a masked score (keras.layers.Softmax's large negative number for float32).
constexpr float kMaskedScore = -1e9f;

void check_sequence(const Shape& s, const std::string& who, const char* what) {
  STRATA_CHECK(s.size() == 3 && s[2] > 0, ShapeError,
               who << " wants its " << what << " as [batch, steps, features], got " << shape_str(with_free_batch(s)));
}

}  // namespace

namespace detail {

Variable linear(const Variable& x2, const Variable& w2, const Variable& b) {
  if (x2.value().dtype() == DType::kFloat32 && x2.value().device() == w2.value().device()) {
    return detail::dense_op(x2, w2, b, false);
  }
  Variable y = matmul(x2, w2);
  return b.defined() ? y + b : y;
}

Variable project(const Variable& x, const Variable& kernel, const Variable& bias, int64_t heads, int64_t dim) {
  const int64_t b = x.shape()[0], t = x.shape()[1], d = x.shape()[2];
  Variable y = linear(reshape(x, {b * t, d}), reshape(kernel, {d, heads * dim}),
                      bias.defined() ? reshape(bias, {heads * dim}) : Variable());
  y = transpose(reshape(y, {b, t, heads, dim}), {0, 2, 1, 3});
  return reshape(y, {b * heads, t, dim});
}

Tensor mask_bias(const Tensor& mask, bool causal, int64_t batch, int64_t t, int64_t s, const std::string& who,
                 Device device) {
  if (!mask.defined() && !causal) return Tensor();
  int64_t mb = 1, mt = 1;
  std::vector<float> m;
  if (mask.defined()) {
    const Shape& ms = mask.shape();
    const bool ok = (ms.size() == 2 || ms.size() == 3) && (ms[0] == batch || ms[0] == 1) && ms.back() == s &&
                    (ms.size() == 2 || ms[1] == t || ms[1] == 1);
    STRATA_CHECK(ok, ShapeError,
                 who << ": attention_mask " << shape_str(ms) << " does not fit queries of " << t
                     << " steps and keys of " << s << " steps in a batch of " << batch << " (want [batch, " << t << ", "
                     << s << "] or a padding mask [batch, " << s << "])");
    mb = ms[0];
    mt = ms.size() == 3 ? ms[1] : 1;
    m = (mask.dtype() == DType::kFloat32 ? mask : mask.to(DType::kFloat32)).to(Device::cpu()).to_vector<float>();
  }
  std::vector<float> bias(static_cast<size_t>(mb * t * s), 0.0f);
  for (int64_t b = 0; b < mb; ++b) {
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < s; ++j) {
        bool attend = !causal || i >= j;
        if (!m.empty()) attend = attend && m[static_cast<size_t>((b * mt + (mt == 1 ? 0 : i)) * s + j)] != 0.0f;
        if (!attend) bias[static_cast<size_t>((b * t + i) * s + j)] = kMaskedScore;
      }
    }
  }
  Tensor out = Tensor::from_vector(bias, {mb, 1, t, s});
  return device.is_cpu() ? out : out.to(device);
}

Variable attention_context(const AttentionHeads& h, const Variable& query, const Variable& value, const Variable& key,
                           const Tensor& attention_mask, bool use_causal_mask, bool training, Generator& generator,
                           const std::string& who) {
  const int64_t b = query.shape()[0], t = query.shape()[1], s = value.shape()[1];
  // Keras scales the projected query by 1 / sqrt(key_dim) before the product.
  const Variable q = project(query, h.query_kernel, h.query_bias, h.heads, h.key_dim) *
                     static_cast<float>(1.0 / std::sqrt(static_cast<double>(h.key_dim)));
  const Variable k = project(key, h.key_kernel, h.key_bias, h.heads, h.key_dim);
  const Variable v = project(value, h.value_kernel, h.value_bias, h.heads, h.value_dim);
  Variable scores = matmul(q, k, false, true);  // [B * heads, T, S]
  const Tensor bias = mask_bias(attention_mask, use_causal_mask, b, t, s, who, query.value().device());
  Variable probs;
  if (bias.defined()) {
    probs = reshape(softmax(reshape(scores, {b, h.heads, t, s}) + Variable(bias), -1), {b * h.heads, t, s});
  } else {
    probs = softmax(scores, -1);
  }
  if (training && h.dropout > 0.0f) probs = dropout(probs, h.dropout, generator);
  Variable context = matmul(probs, v);  // [B * heads, T, vd]
  return reshape(transpose(reshape(context, {b, h.heads, t, h.value_dim}), {0, 2, 1, 3}),
                 {b * t, h.heads * h.value_dim});
}

}  // namespace detail

MultiHeadAttention::MultiHeadAttention(int64_t num_heads, int64_t key_dim, MultiHeadAttentionOptions options)
    : LayerBase(options.name), num_heads_(num_heads), key_dim_(key_dim), options_(std::move(options)) {
  STRATA_CHECK(num_heads > 0, InvalidArgument, "MultiHeadAttention needs a positive num_heads, got " << num_heads);
  STRATA_CHECK(key_dim > 0, InvalidArgument, "MultiHeadAttention needs a positive key_dim, got " << key_dim);
  STRATA_CHECK(options_.value_dim >= 0, InvalidArgument,
               "MultiHeadAttention value_dim must be positive (or 0 for key_dim), got " << options_.value_dim);
  STRATA_CHECK(
      options_.output_shape >= 0, InvalidArgument,
      "MultiHeadAttention output_shape must be positive (or 0 for the query's size), got " << options_.output_shape);
  STRATA_CHECK(options_.dropout >= 0.0f && options_.dropout < 1.0f, InvalidArgument,
               "MultiHeadAttention dropout must be in [0, 1), got " << options_.dropout);
}

void MultiHeadAttention::build_impl(const std::vector<Shape>& shapes) {
  STRATA_CHECK(!shapes.empty() && shapes.size() <= 4, InvalidArgument,
               "MultiHeadAttention takes [query], [query, value], [query, value, key] or [query, value, key, "
               "attention_mask], got "
                   << shapes.size() << " inputs");
  const Shape& q = shapes[0];
  const Shape& v = shapes.size() >= 2 ? shapes[1] : q;
  const Shape& k = shapes.size() >= 3 ? shapes[2] : v;
  check_sequence(q, "MultiHeadAttention", "query");
  check_sequence(v, "MultiHeadAttention", "value");
  check_sequence(k, "MultiHeadAttention", "key");
  const auto& o = options_;
  const int64_t vd = value_dim(), out = o.output_shape > 0 ? o.output_shape : q[2];
  auto kernel = [&](const char* name, const Shape& shape) {
    return add_weight(name, shape, o.kernel_initializer.fn(), true, o.kernel_regularizer.fn());
  };
  auto bias = [&](const char* name, const Shape& shape) {
    return o.use_bias ? add_weight(name, shape, o.bias_initializer.fn(), true, o.bias_regularizer.fn()) : Variable();
  };
  // Keras's order and names: query, key, value, attention_output.
  query_kernel_ = kernel("query/kernel", {q[2], num_heads_, key_dim_});
  query_bias_ = bias("query/bias", {num_heads_, key_dim_});
  key_kernel_ = kernel("key/kernel", {k[2], num_heads_, key_dim_});
  key_bias_ = bias("key/bias", {num_heads_, key_dim_});
  value_kernel_ = kernel("value/kernel", {v[2], num_heads_, vd});
  value_bias_ = bias("value/bias", {num_heads_, vd});
  output_kernel_ = kernel("attention_output/kernel", {num_heads_, vd, out});
  output_bias_ = bias("attention_output/bias", {out});
}

Variable MultiHeadAttention::call(const std::vector<Variable>& inputs, bool training) {
  const Variable& query = inputs[0];
  const Variable& value = inputs.size() >= 2 ? inputs[1] : query;
  const Variable& key = inputs.size() >= 3 ? inputs[2] : value;
  const Tensor mask = inputs.size() >= 4 ? inputs[3].value() : Tensor();
  return compute(query, value, key, mask, options_.use_causal_mask, training);
}

Variable MultiHeadAttention::attend(const Variable& query, const Variable& value, const Variable& key,
                                    const Tensor& attention_mask, bool use_causal_mask, bool training) {
  STRATA_CHECK(query.defined() && value.defined(), InvalidArgument,
               label(*this) << ": attend() needs a query and a value");
  const Variable& k = key.defined() ? key : value;
  if (!built()) build({query.shape(), value.shape(), k.shape()});
  return compute(query, value, k, attention_mask, use_causal_mask, training);
}

Variable MultiHeadAttention::compute(const Variable& query, const Variable& value, const Variable& key,
                                     const Tensor& attention_mask, bool use_causal_mask, bool training) const {
  const std::string who = label(*this);
  check_sequence(query.shape(), who, "query");
  check_sequence(value.shape(), who, "value");
  check_sequence(key.shape(), who, "key");
  const int64_t b = query.shape()[0], t = query.shape()[1], s = value.shape()[1];
  const int64_t heads = num_heads_, vd = value_dim(), out = output_kernel_.shape()[2];
  STRATA_CHECK(query.shape()[2] == query_kernel_.shape()[0] && value.shape()[2] == value_kernel_.shape()[0] &&
                   key.shape()[2] == key_kernel_.shape()[0],
               ShapeError,
               who << " was built for query, value and key features " << query_kernel_.shape()[0] << ", "
                   << value_kernel_.shape()[0] << " and " << key_kernel_.shape()[0] << ", got query "
                   << shape_str(query.shape()) << ", value " << shape_str(value.shape()) << ", key "
                   << shape_str(key.shape()));
  STRATA_CHECK(value.shape()[0] == b && key.shape()[0] == b && key.shape()[1] == s, ShapeError,
               who << ": query " << shape_str(query.shape()) << ", value " << shape_str(value.shape()) << " and key "
                   << shape_str(key.shape()) << " must share the batch, and key and value their steps");

  const detail::AttentionHeads h{query_kernel_, query_bias_, key_kernel_, key_bias_, value_kernel_,
                                 value_bias_,   heads,       key_dim_,    vd,        options_.dropout};
  const Variable context = detail::attention_context(h, query, value, key, attention_mask, use_causal_mask, training,
                                                     default_generator(), who);
  const Variable y = detail::linear(context, reshape(output_kernel_, {heads * vd, out}), output_bias_);
  return reshape(y, {b, t, out});
}

}  // namespace strata::nn
