// The tensor-parallel Transformer layers (strata/parallel/tensor_parallel_transformer.h): attention split by heads
// and the encoder block's Megatron split, on the ops nn::MultiHeadAttention runs (nn/attention_heads.h) and the
// collectives of tensor_parallel.cc. Thread-safety: as every layer; one thread per rank.
#include "strata/parallel/tensor_parallel_transformer.h"

#include <tuple>
#include <utility>

#include "nn/attention_heads.h"
#include "nn/encoder_block.h"
#include "nn/layer_util.h"
#include "parallel/tensor_parallel_ops.h"
#include "strata/error.h"
#include "strata/gradient_tape.h"
#include "strata/ops.h"

namespace strata::parallel {

namespace {

using nn::detail::label;

void check_sequence(const Shape& s, const std::string& who, const char* what) {
  STRATA_CHECK(s.size() == 3 && s[2] > 0, ShapeError,
               who << " wants its " << what << " as [batch, steps, features], got "
                   << shape_str(nn::detail::with_free_batch(s)));
}

// Pairs `full`'s trainable weights with `mine`'s, in order, as whole copies (layers that are the same on every rank).
void add_replicated(std::vector<WeightShard>& out, const nn::Layer& mine, const nn::Layer& full) {
  const std::vector<Variable> a = mine.trainable_variables(), b = full.trainable_variables();
  STRATA_CHECK(a.size() == b.size(), InvalidArgument,
               label(mine) << " has " << a.size() << " weights, its unsplit '" << full.name() << "' " << b.size());
  for (size_t i = 0; i < a.size(); ++i) out.push_back({b[i], a[i], -1});
}

}  // namespace

// ---------------------------------------------------------------- shards

Tensor unshard(const std::vector<Tensor>& parts, int axis) {
  STRATA_CHECK(!parts.empty(), InvalidArgument, "unshard: no parts");
  if (axis < 0 || parts.size() == 1) return parts[0];
  NoGradGuard no_grad;
  std::vector<Variable> vs;
  vs.reserve(parts.size());
  for (const Tensor& p : parts) vs.emplace_back(p, /*trainable=*/false);
  return concat(vs, axis).value();
}

void load_shards(const std::vector<WeightShard>& shards, int rank, int world_size) {
  for (const WeightShard& s : shards) {
    Variable part = s.part;  // a handle: assigns the layer's weight
    part.assign(s.axis < 0 ? s.whole.value() : shard_of(s.whole.value(), s.axis, rank, world_size));
  }
}

std::vector<WeightShard> weight_shards(const ColumnParallelDense& layer, const nn::Dense& full) {
  STRATA_CHECK(layer.built() && full.built(), InvalidArgument, label(layer) << ": weight_shards needs built layers");
  std::vector<WeightShard> out{{full.kernel(), layer.kernel(), 1}};
  if (layer.bias().defined()) out.push_back({full.bias(), layer.bias(), 0});
  return out;
}

std::vector<WeightShard> weight_shards(const RowParallelDense& layer, const nn::Dense& full) {
  STRATA_CHECK(layer.built() && full.built(), InvalidArgument, label(layer) << ": weight_shards needs built layers");
  std::vector<WeightShard> out{{full.kernel(), layer.kernel(), 0}};
  if (layer.bias().defined()) out.push_back({full.bias(), layer.bias(), -1});
  return out;
}

// ---------------------------------------------------------------- TensorParallelMultiHeadAttention

TensorParallelMultiHeadAttention::TensorParallelMultiHeadAttention(int64_t num_heads, int64_t key_dim,
                                                                   std::shared_ptr<comm::Communicator> comm,
                                                                   nn::MultiHeadAttentionOptions options)
    : LayerBase(options.name),
      num_heads_(num_heads),
      key_dim_(key_dim),
      comm_(std::move(comm)),
      options_(std::move(options)) {
  std::tie(rank_, world_size_) = detail::rank_and_size(comm_, "TensorParallelMultiHeadAttention");
  STRATA_CHECK(
      num_heads > 0 && key_dim > 0, InvalidArgument,
      "TensorParallelMultiHeadAttention needs positive num_heads and key_dim, got " << num_heads << " and " << key_dim);
  STRATA_CHECK(num_heads % world_size_ == 0, InvalidArgument,
               "TensorParallelMultiHeadAttention: num_heads " << num_heads << " is not a multiple of the "
                                                              << world_size_
                                                              << " tensor-parallel ranks it is split over");
  STRATA_CHECK(options_.value_dim >= 0 && options_.output_shape >= 0, InvalidArgument,
               "TensorParallelMultiHeadAttention: value_dim and output_shape must be positive or 0");
  STRATA_CHECK(!options_.kernel_regularizer.fn() && !options_.bias_regularizer.fn(), InvalidArgument,
               "TensorParallelMultiHeadAttention does not apply weight regularizers (each rank would add its "
               "penalty to the loss)");
}

void TensorParallelMultiHeadAttention::build_impl(const std::vector<Shape>& shapes) {
  STRATA_CHECK(!shapes.empty() && shapes.size() <= 4, InvalidArgument,
               "TensorParallelMultiHeadAttention takes [query], [query, value], [query, value, key] or [query, value, "
               "key, attention_mask], got "
                   << shapes.size() << " inputs");
  const Shape& q = shapes[0];
  const Shape& v = shapes.size() >= 2 ? shapes[1] : q;
  const Shape& k = shapes.size() >= 3 ? shapes[2] : v;
  check_sequence(q, "TensorParallelMultiHeadAttention", "query");
  check_sequence(v, "TensorParallelMultiHeadAttention", "value");
  check_sequence(k, "TensorParallelMultiHeadAttention", "key");
  const auto& o = options_;
  const int64_t h = num_heads_, lh = local_heads(), vd = value_dim(), out = o.output_shape > 0 ? o.output_shape : q[2];
  // Each split weight starts as this rank's heads of a whole weight drawn by the initializer (axis: the heads').
  auto kernel = [&](const char* name, const Shape& whole, int axis) {
    Shape local = whole;
    local[static_cast<size_t>(axis)] = lh;
    return add_weight(name, local, detail::slice_of_whole(o.kernel_initializer.fn(), whole, axis, rank_, world_size_));
  };
  auto bias = [&](const char* name, const Shape& whole) {
    if (!o.use_bias) return Variable();
    return add_weight(name, {lh, whole[1]},
                      detail::slice_of_whole(o.bias_initializer.fn(), whole, 0, rank_, world_size_));
  };
  query_kernel_ = kernel("query/kernel", {q[2], h, key_dim_}, 1);
  query_bias_ = bias("query/bias", {h, key_dim_});
  key_kernel_ = kernel("key/kernel", {k[2], h, key_dim_}, 1);
  key_bias_ = bias("key/bias", {h, key_dim_});
  value_kernel_ = kernel("value/kernel", {v[2], h, vd}, 1);
  value_bias_ = bias("value/bias", {h, vd});
  output_kernel_ = kernel("attention_output/kernel", {h, vd, out}, 0);
  if (o.use_bias) output_bias_ = add_weight("attention_output/bias", {out}, o.bias_initializer.fn());
}

Variable TensorParallelMultiHeadAttention::call(const std::vector<Variable>& inputs, bool training) {
  const std::string who = label(*this);
  const Variable& query = inputs[0];
  const Variable& value = inputs.size() >= 2 ? inputs[1] : query;
  const Variable& key = inputs.size() >= 3 ? inputs[2] : value;
  const Tensor mask = inputs.size() >= 4 ? inputs[3].value() : Tensor();
  check_sequence(query.shape(), who, "query");
  check_sequence(value.shape(), who, "value");
  check_sequence(key.shape(), who, "key");
  STRATA_CHECK(query.shape()[2] == query_kernel_.shape()[0] && value.shape()[2] == value_kernel_.shape()[0] &&
                   key.shape()[2] == key_kernel_.shape()[0] && value.shape()[0] == query.shape()[0] &&
                   key.shape()[0] == query.shape()[0] && key.shape()[1] == value.shape()[1],
               ShapeError,
               who << " was built for query, value and key features " << query_kernel_.shape()[0] << ", "
                   << value_kernel_.shape()[0] << " and " << key_kernel_.shape()[0]
                   << " (one batch, key and value one length), got query " << shape_str(query.shape()) << ", value "
                   << shape_str(value.shape()) << ", key " << shape_str(key.shape()));
  // Every rank reads the whole inputs: their gradients are the sums of the ranks' parts (one copy_to per distinct
  // input, so self-attention all-reduces once backward).
  const Variable q_in = detail::copy_to(query, comm_);
  const Variable v_in = value.same_as(query) ? q_in : detail::copy_to(value, comm_);
  const Variable k_in = key.same_as(query) ? q_in : key.same_as(value) ? v_in : detail::copy_to(key, comm_);
  const int64_t b = query.shape()[0], t = query.shape()[1], lh = local_heads(), vd = value_dim();
  const int64_t out = output_kernel_.shape()[2];
  // One draw of the thread's generator on every rank (they stay in step); this rank's heads get their own stream.
  Generator heads_generator;
  if (training && options_.dropout > 0.0f) {
    const std::array<uint32_t, 4> block = default_generator().next_block();
    heads_generator = Generator((static_cast<uint64_t>(block[0]) << 32) | block[1], static_cast<uint64_t>(rank_) + 1);
  }
  const nn::detail::AttentionHeads heads{query_kernel_, query_bias_, key_kernel_, key_bias_, value_kernel_,
                                         value_bias_,   lh,          key_dim_,    vd,        options_.dropout};
  const Variable context = nn::detail::attention_context(heads, q_in, v_in, k_in, mask, options_.use_causal_mask,
                                                         training, heads_generator, who);
  // The output projection's rows of this rank's heads: partial products, summed over the ranks; the bias once.
  Variable y = detail::reduce_from(matmul(context, reshape(output_kernel_, {lh * vd, out})), comm_);
  if (output_bias_.defined()) y = y + output_bias_;
  return reshape(y, {b, t, out});
}

void TensorParallelMultiHeadAttention::check_full(const nn::MultiHeadAttention& full) const {
  STRATA_CHECK(full.built(), InvalidArgument, label(*this) << ": load_shard_of needs a built MultiHeadAttention");
  STRATA_CHECK(full.num_heads() == num_heads_ && full.key_dim() == key_dim_ && full.value_dim() == value_dim() &&
                   full.query_bias().defined() == options_.use_bias,
               InvalidArgument,
               label(*this) << ": load_shard_of wants a MultiHeadAttention of " << num_heads_ << " heads, key_dim "
                            << key_dim_ << ", value_dim " << value_dim() << (options_.use_bias ? " with" : " without")
                            << " biases; '" << full.name() << "' has " << full.num_heads() << " heads, key_dim "
                            << full.key_dim() << ", value_dim " << full.value_dim());
}

void TensorParallelMultiHeadAttention::load_shard_of(const nn::MultiHeadAttention& full) {
  check_full(full);
  const Shape q{1, 1, full.query_kernel().shape()[0]}, v{1, 1, full.value_kernel().shape()[0]},
      k{1, 1, full.key_kernel().shape()[0]};
  if (!built()) build({q, v, k});
  STRATA_CHECK(query_kernel_.shape()[0] == q[2] && value_kernel_.shape()[0] == v[2] && key_kernel_.shape()[0] == k[2] &&
                   output_kernel_.shape()[2] == full.output_kernel().shape()[2],
               InvalidArgument,
               label(*this) << " was built for other sizes than '" << full.name() << "' (query kernel "
                            << shape_str(query_kernel_.shape()) << " against " << shape_str(full.query_kernel().shape())
                            << ")");
  load_shards(weight_shards(full), rank_, world_size_);
}

std::vector<WeightShard> TensorParallelMultiHeadAttention::weight_shards(const nn::MultiHeadAttention& full) const {
  check_full(full);
  STRATA_CHECK(built(), InvalidArgument, label(*this) << ": weight_shards needs a built layer");
  std::vector<WeightShard> out{{full.query_kernel(), query_kernel_, 1}};
  if (query_bias_.defined()) out.push_back({full.query_bias(), query_bias_, 0});
  out.push_back({full.key_kernel(), key_kernel_, 1});
  if (key_bias_.defined()) out.push_back({full.key_bias(), key_bias_, 0});
  out.push_back({full.value_kernel(), value_kernel_, 1});
  if (value_bias_.defined()) out.push_back({full.value_bias(), value_bias_, 0});
  out.push_back({full.output_kernel(), output_kernel_, 0});
  if (output_bias_.defined()) out.push_back({full.output_bias(), output_bias_, -1});
  return out;
}

// ---------------------------------------------------------------- TensorParallelTransformerEncoder

TensorParallelTransformerEncoder::TensorParallelTransformerEncoder(int64_t intermediate_dim, int64_t num_heads,
                                                                   std::shared_ptr<comm::Communicator> comm,
                                                                   nn::TransformerEncoderOptions options)
    : LayerBase(options.name),
      intermediate_dim_(intermediate_dim),
      num_heads_(num_heads),
      comm_(std::move(comm)),
      options_(std::move(options)) {
  std::tie(rank_, world_size_) = detail::rank_and_size(comm_, "TensorParallelTransformerEncoder");
  STRATA_CHECK(intermediate_dim > 0 && num_heads > 0, InvalidArgument,
               "TensorParallelTransformerEncoder needs positive intermediate_dim and num_heads, got "
                   << intermediate_dim << " and " << num_heads);
  STRATA_CHECK(num_heads % world_size_ == 0, InvalidArgument,
               "TensorParallelTransformerEncoder: num_heads " << num_heads << " is not a multiple of the "
                                                              << world_size_
                                                              << " tensor-parallel ranks its attention is split over");
  STRATA_CHECK(intermediate_dim % world_size_ == 0, InvalidArgument,
               "TensorParallelTransformerEncoder: intermediate_dim "
                   << intermediate_dim << " (the MLP's width) is not a multiple of the " << world_size_
                   << " tensor-parallel ranks it is split over");
  STRATA_CHECK(options_.dropout >= 0.0f && options_.dropout < 1.0f, InvalidArgument,
               "TensorParallelTransformerEncoder dropout must be in [0, 1), got " << options_.dropout);
}

void TensorParallelTransformerEncoder::build_impl(const Shape& s) {
  check_sequence(s, "TensorParallelTransformerEncoder", "input");
  hidden_dim_ = s[2];
  const int64_t key_dim = hidden_dim_ / num_heads_;  // keras_hub's, as nn::TransformerEncoder
  STRATA_CHECK(key_dim > 0, ShapeError,
               "TensorParallelTransformerEncoder with " << num_heads_ << " heads needs at least as many features, got "
                                                        << shape_str(nn::detail::with_free_batch(s)));
  const auto& o = options_;
  // nn::TransformerEncoder's sublayers, names and order, with the attention and the feed-forward split.
  attention_norm_ = std::make_shared<nn::LayerNormalization>(
      nn::LayerNormalizationOptions{.epsilon = o.layer_norm_epsilon, .name = "self_attention_layer_norm"});
  attention_ = std::make_shared<TensorParallelMultiHeadAttention>(
      num_heads_, key_dim, comm_,
      nn::MultiHeadAttentionOptions{.dropout = o.dropout,
                                    .kernel_initializer = o.kernel_initializer,
                                    .bias_initializer = o.bias_initializer,
                                    .name = "self_attention_layer"});
  attention_dropout_ = std::make_shared<nn::Dropout>(o.dropout, nn::DropoutOptions{.name = "self_attention_dropout"});
  feedforward_norm_ = std::make_shared<nn::LayerNormalization>(
      nn::LayerNormalizationOptions{.epsilon = o.layer_norm_epsilon, .name = "feedforward_layer_norm"});
  intermediate_dense_ =
      std::make_shared<ColumnParallelDense>(intermediate_dim_, comm_,
                                            ColumnParallelDenseOptions{.activation = o.activation,
                                                                       .gather_output = false,
                                                                       .kernel_initializer = o.kernel_initializer,
                                                                       .bias_initializer = o.bias_initializer,
                                                                       .name = "feedforward_intermediate_dense"});
  output_dense_ = std::make_shared<RowParallelDense>(hidden_dim_, comm_,
                                                     RowParallelDenseOptions{.input_is_parallel = true,
                                                                             .kernel_initializer = o.kernel_initializer,
                                                                             .bias_initializer = o.bias_initializer,
                                                                             .name = "feedforward_output_dense"});
  feedforward_dropout_ = std::make_shared<nn::Dropout>(o.dropout, nn::DropoutOptions{.name = "feedforward_dropout"});
  for (const std::shared_ptr<nn::Layer>& l :
       std::vector<std::shared_ptr<nn::Layer>>{attention_, attention_norm_, attention_dropout_, feedforward_norm_,
                                               intermediate_dense_, output_dense_, feedforward_dropout_}) {
    add_layer(l);
  }
  const Shape sample = {1, s[1], s[2]};
  attention_norm_->build({sample});
  attention_->build({sample});
  feedforward_norm_->build({sample});
  intermediate_dense_->build({sample});
  output_dense_->build({Shape{1, s[1], intermediate_dense_->local_units()}});
}

Variable TensorParallelTransformerEncoder::call(const Variable& input, bool training) {
  const Shape& s = input.shape();
  check_sequence(s, label(*this), "input");
  STRATA_CHECK(s[2] == hidden_dim_, ShapeError,
               label(*this) << " was built for " << hidden_dim_ << " features, got input " << shape_str(s));
  return nn::detail::encoder_block({*attention_norm_, *attention_, *attention_dropout_, *feedforward_norm_,
                                    *intermediate_dense_, *output_dense_, *feedforward_dropout_},
                                   input, options_.normalize_first, training);
}

void TensorParallelTransformerEncoder::check_full(const nn::TransformerEncoder& full) const {
  STRATA_CHECK(full.built() && full.attention(), InvalidArgument,
               label(*this) << ": load_shard_of needs a built TransformerEncoder");
  const auto& fo = full.options();
  STRATA_CHECK(
      full.intermediate_dim() == intermediate_dim_ && full.num_heads() == num_heads_ &&
          fo.normalize_first == options_.normalize_first && fo.layer_norm_epsilon == options_.layer_norm_epsilon &&
          fo.activation.name() == options_.activation.name(),
      InvalidArgument,
      label(*this) << ": load_shard_of wants a TransformerEncoder of intermediate_dim " << intermediate_dim_ << ", "
                   << num_heads_ << " heads and the same norms and activation; '" << full.name()
                   << "' has intermediate_dim " << full.intermediate_dim() << ", " << full.num_heads() << " heads");
}

void TensorParallelTransformerEncoder::load_shard_of(const nn::TransformerEncoder& full) {
  check_full(full);
  const int64_t features = full.attention()->query_kernel().shape()[0];
  if (!built()) build({Shape{1, 1, features}});
  STRATA_CHECK(
      hidden_dim_ == features, InvalidArgument,
      label(*this) << " was built for " << hidden_dim_ << " features, '" << full.name() << "' has " << features);
  load_shards(weight_shards(full), rank_, world_size_);
}

std::vector<WeightShard> TensorParallelTransformerEncoder::weight_shards(const nn::TransformerEncoder& full) const {
  check_full(full);
  STRATA_CHECK(built(), InvalidArgument, label(*this) << ": weight_shards needs a built layer");
  std::vector<WeightShard> out = attention_->weight_shards(*full.attention());
  add_replicated(out, *attention_norm_, *full.attention_norm());
  add_replicated(out, *feedforward_norm_, *full.feedforward_norm());
  for (WeightShard& s : parallel::weight_shards(*intermediate_dense_, *full.intermediate_dense())) out.push_back(s);
  for (WeightShard& s : parallel::weight_shards(*output_dense_, *full.output_dense())) out.push_back(s);
  return out;
}

}  // namespace strata::parallel
