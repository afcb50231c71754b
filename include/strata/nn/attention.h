// MultiHeadAttention, with Keras's arguments and weight layouts (keras.layers.MultiHeadAttention):
//
//   nn::MultiHeadAttention mha(4, 16);                        // num_heads 4, key_dim 16
//   Variable y = mha({x});                                     // self-attention: query = value = key = x
//   Variable z = mha.attend(q, v, {}, padding_mask, true);     // key = value, a padding mask and a causal mask
//   auto out = mha({query_input, value_input});                // in a functional model (nn/functional.h)
//
// The projections are Keras's EinsumDense kernels: query/kernel [d_query, heads, key_dim], key/kernel
// [d_key, heads, key_dim], value/kernel [d_value, heads, value_dim] with biases [heads, dim], and
// attention_output/kernel [heads, value_dim, d_out] with bias [d_out], d_out = output_shape or the query's feature
// size. Inputs are [batch, steps, features]. Per head, softmax(q k^T / sqrt(key_dim) + mask) v; attention dropout
// (training calls) on the probabilities, as Keras.
//
// Masks: attention_mask [batch, target, source] (or [batch, source], a padding mask of the keys) holds 1 where a
// query may attend a key and 0 where not; a masked score gets -1e9 added before the softmax, as Keras. A causal mask
// lets target position i attend source positions j <= i. As a layer call, the inputs are [query], [query, value],
// [query, value, key] or [query, value, key, attention_mask] (the mask gets no gradient); the causal mask is then
// the layer's use_causal_mask option (Keras takes it per call, which attend() does).
//
// Thread-safety: as for every layer (see nn/layer.h); an attention-dropout call draws from the calling thread's
// default_generator().
#pragma once

#include <cstdint>
#include <string>

#include "strata/nn/layer.h"
#include "strata/nn/layer_options.h"

namespace strata::nn {

struct MultiHeadAttentionOptions {
  int64_t value_dim = 0;  // 0: key_dim (Keras's None)
  float dropout = 0.0f;   // on the attention probabilities
  bool use_bias = true;
  int64_t output_shape = 0;  // the output's feature size; 0: the query's (Keras's None)
  InitializerSpec kernel_initializer = "glorot_uniform";
  InitializerSpec bias_initializer = "zeros";
  RegularizerSpec kernel_regularizer = {};
  RegularizerSpec bias_regularizer = {};
  // What layer calls (operator()) use; attend() takes it per call, as Keras's call does.
  bool use_causal_mask = false;
  std::string name = "";
};

class MultiHeadAttention : public LayerBase<MultiHeadAttention> {
 public:
  using Options = MultiHeadAttentionOptions;
  MultiHeadAttention(int64_t num_heads, int64_t key_dim, MultiHeadAttentionOptions options = {});
  std::string class_name() const override { return "MultiHeadAttention"; }
  int64_t num_heads() const { return num_heads_; }
  int64_t key_dim() const { return key_dim_; }
  int64_t value_dim() const { return options_.value_dim > 0 ? options_.value_dim : key_dim_; }
  const MultiHeadAttentionOptions& options() const { return options_; }

  // Keras's call(query, value, key=None, attention_mask=None, use_causal_mask=False, training=False): builds on
  // first use. `key` undefined: value. `attention_mask` undefined: none (any float or integer dtype; nonzero
  // attends).
  Variable attend(const Variable& query, const Variable& value, const Variable& key = {},
                  const Tensor& attention_mask = {}, bool use_causal_mask = false, bool training = false);

  // Undefined until built (the biases also when use_bias is false).
  const Variable& query_kernel() const { return query_kernel_; }
  const Variable& query_bias() const { return query_bias_; }
  const Variable& key_kernel() const { return key_kernel_; }
  const Variable& key_bias() const { return key_bias_; }
  const Variable& value_kernel() const { return value_kernel_; }
  const Variable& value_bias() const { return value_bias_; }
  const Variable& output_kernel() const { return output_kernel_; }
  const Variable& output_bias() const { return output_bias_; }

 protected:
  void build_impl(const std::vector<Shape>& input_shapes) override;
  Variable call(const std::vector<Variable>& inputs, bool training) override;

 private:
  Variable compute(const Variable& query, const Variable& value, const Variable& key, const Tensor& attention_mask,
                   bool use_causal_mask, bool training) const;

  int64_t num_heads_, key_dim_;
  MultiHeadAttentionOptions options_;
  Variable query_kernel_, query_bias_, key_kernel_, key_bias_, value_kernel_, value_bias_, output_kernel_, output_bias_;
};

}  // namespace strata::nn
