// Internal to nn and parallel: the order of a Transformer encoder block's sublayers (keras_hub's TransformerEncoder:
// self-attention then feed-forward, each with dropout and a residual, the layer norms first or after), so that
// nn::TransformerEncoder and the tensor-parallel block (strata/parallel/tensor_parallel_transformer.h) run the same
// block over their own layers. Thread-safety: a free function; the layers are used by the calling thread only.
#pragma once

#include "strata/nn/layer.h"
#include "strata/variable.h"

namespace strata::nn::detail {

struct EncoderBlockLayers {
  Layer& attention_norm;
  Layer& attention;
  Layer& attention_dropout;
  Layer& feedforward_norm;
  Layer& intermediate_dense;
  Layer& output_dense;
  Layer& feedforward_dropout;
};

inline Variable encoder_block(const EncoderBlockLayers& l, const Variable& input, bool normalize_first,
                              bool training) {
  // Self-attention sublayer.
  Variable x = normalize_first ? l.attention_norm(input, training) : input;
  x = l.attention(x, training);
  x = l.attention_dropout(x, training) + input;
  if (!normalize_first) x = l.attention_norm(x, training);
  // Feed-forward sublayer.
  const Variable residual = x;
  Variable h = normalize_first ? l.feedforward_norm(x, training) : x;
  h = l.output_dense(l.intermediate_dense(h, training), training);
  h = l.feedforward_dropout(h, training) + residual;
  if (!normalize_first) h = l.feedforward_norm(h, training);
  return h;
}

}  // namespace strata::nn::detail
