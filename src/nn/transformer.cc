// PositionEmbedding and TransformerEncoder (see strata/nn/transformer.h). The encoder is a composite: its
// sublayers are made at build, when the feature size is known, and named as keras_hub names them.
// Thread-safety: as for every layer.
#include "strata/nn/transformer.h"

#include <vector>

#include "nn/encoder_block.h"
#include "nn/layer_util.h"
#include "strata/error.h"
#include "strata/ops.h"

namespace strata::nn {

using detail::label;
using detail::with_free_batch;

namespace {
void check_sequence(const Shape& s, const std::string& who) {
  STRATA_CHECK(s.size() == 3 && s[2] > 0, ShapeError,
               who << " wants an input of rank 3 [batch, steps, features], got " << shape_str(with_free_batch(s)));
}
}  // namespace

// ---------------------------------------------------------------- PositionEmbedding
PositionEmbedding::PositionEmbedding(int64_t sequence_length, PositionEmbeddingOptions options)
    : LayerBase(options.name), sequence_length_(sequence_length), options_(std::move(options)) {
  STRATA_CHECK(sequence_length > 0, InvalidArgument,
               "PositionEmbedding needs a positive sequence_length, got " << sequence_length);
}

void PositionEmbedding::build_impl(const Shape& s) {
  check_sequence(s, "PositionEmbedding");
  STRATA_CHECK(s[1] <= sequence_length_, ShapeError,
               "PositionEmbedding of sequence_length " << sequence_length_
                                                       << " got a longer sequence: " << shape_str(with_free_batch(s)));
  embeddings_ = add_weight("embeddings", {sequence_length_, s[2]}, options_.initializer.fn());
}

Variable PositionEmbedding::call(const Variable& input, bool) {
  const Shape& s = input.shape();
  check_sequence(s, label(*this));
  STRATA_CHECK(s[1] <= sequence_length_ && s[2] == embeddings_.shape()[1], ShapeError,
               label(*this) << " holds " << sequence_length_ << " positions of " << embeddings_.shape()[1]
                            << " features, got input " << shape_str(s));
  const Variable positions = s[1] == sequence_length_ ? embeddings_ : slice_axis(embeddings_, 0, 0, s[1]);
  return input + positions;
}

// ---------------------------------------------------------------- TransformerEncoder
TransformerEncoder::TransformerEncoder(int64_t intermediate_dim, int64_t num_heads, TransformerEncoderOptions options)
    : LayerBase(options.name),
      intermediate_dim_(intermediate_dim),
      num_heads_(num_heads),
      options_(std::move(options)) {
  STRATA_CHECK(intermediate_dim > 0, InvalidArgument,
               "TransformerEncoder needs a positive intermediate_dim, got " << intermediate_dim);
  STRATA_CHECK(num_heads > 0, InvalidArgument, "TransformerEncoder needs a positive num_heads, got " << num_heads);
  STRATA_CHECK(options_.dropout >= 0.0f && options_.dropout < 1.0f, InvalidArgument,
               "TransformerEncoder dropout must be in [0, 1), got " << options_.dropout);
  STRATA_CHECK(options_.layer_norm_epsilon > 0.0f, InvalidArgument,
               "TransformerEncoder layer_norm_epsilon must be positive, got " << options_.layer_norm_epsilon);
}

void TransformerEncoder::build_impl(const Shape& s) {
  check_sequence(s, "TransformerEncoder");
  hidden_dim_ = s[2];
  // keras_hub: key_dim = hidden_dim // num_heads.
  const int64_t key_dim = hidden_dim_ / num_heads_;
  STRATA_CHECK(key_dim > 0, ShapeError,
               "TransformerEncoder with " << num_heads_ << " heads needs at least as many features, got input "
                                          << shape_str(with_free_batch(s)));
  const auto& o = options_;
  // keras_hub's sublayers, with its names (and added in its order, which is the order of the weights).
  attention_norm_ = std::make_shared<LayerNormalization>(
      LayerNormalizationOptions{.epsilon = o.layer_norm_epsilon, .name = "self_attention_layer_norm"});
  attention_ =
      std::make_shared<MultiHeadAttention>(num_heads_, key_dim,
                                           MultiHeadAttentionOptions{.dropout = o.dropout,
                                                                     .kernel_initializer = o.kernel_initializer,
                                                                     .bias_initializer = o.bias_initializer,
                                                                     .name = "self_attention_layer"});
  attention_dropout_ = std::make_shared<Dropout>(o.dropout, DropoutOptions{.name = "self_attention_dropout"});
  feedforward_norm_ = std::make_shared<LayerNormalization>(
      LayerNormalizationOptions{.epsilon = o.layer_norm_epsilon, .name = "feedforward_layer_norm"});
  intermediate_dense_ =
      std::make_shared<Dense>(intermediate_dim_, DenseOptions{.activation = o.activation,
                                                              .kernel_initializer = o.kernel_initializer,
                                                              .bias_initializer = o.bias_initializer,
                                                              .name = "feedforward_intermediate_dense"});
  output_dense_ = std::make_shared<Dense>(hidden_dim_, DenseOptions{.kernel_initializer = o.kernel_initializer,
                                                                    .bias_initializer = o.bias_initializer,
                                                                    .name = "feedforward_output_dense"});
  feedforward_dropout_ = std::make_shared<Dropout>(o.dropout, DropoutOptions{.name = "feedforward_dropout"});
  for (const std::shared_ptr<Layer>& l :
       std::vector<std::shared_ptr<Layer>>{attention_, attention_norm_, attention_dropout_, feedforward_norm_,
                                           intermediate_dense_, output_dense_, feedforward_dropout_}) {
    add_layer(l);
  }
  // Build the weights now, so that they exist (and are named) before the first call, as keras_hub's build does.
  const Shape sample = {1, s[1], s[2]};
  attention_norm_->build({sample});
  attention_->build({sample});
  feedforward_norm_->build({sample});
  intermediate_dense_->build({sample});
  output_dense_->build({Shape{1, s[1], intermediate_dim_}});
}

Variable TransformerEncoder::call(const Variable& input, bool training) {
  const Shape& s = input.shape();
  check_sequence(s, label(*this));
  STRATA_CHECK(s[2] == hidden_dim_, ShapeError,
               label(*this) << " was built for " << hidden_dim_ << " features, got input " << shape_str(s));
  return detail::encoder_block({*attention_norm_, *attention_, *attention_dropout_, *feedforward_norm_,
                                *intermediate_dense_, *output_dense_, *feedforward_dropout_},
                               input, options_.normalize_first, training);
}

}  // namespace strata::nn
