// Tensor-parallel Transformer layers (Megatron-LM's split of a Transformer block), over the tensor-parallel dense
// layers and collectives of strata/parallel/tensor_parallel.h:
//
//   auto comm = ...;                                     // this rank's end of the tensor-parallel group
//   parallel::TensorParallelTransformerEncoder block(128, 4, comm, {.activation = "gelu"});
//   block.load_shard_of(full);                           // this rank's slice of an unsplit nn::TransformerEncoder
//   Variable y = block(x);                               // x and y are whole [batch, steps, features] on every rank
//
// TensorParallelMultiHeadAttention: nn::MultiHeadAttention with its heads split over the group: this rank holds heads
//   [rank * heads / size, (rank + 1) * heads / size): the query, key and value kernels [d, heads / size, dim] and
//   biases [heads / size, dim] (column-parallel by heads), and the output kernel's rows [heads / size, value_dim,
//   out] (row-parallel); the output bias is whole, added once after the sum. Forward: 1 all-reduce (the output's
//   partial products); backward: 1 all-reduce (the input's gradient, whatever the number of distinct inputs: each
//   distinct query/value/key input is one copy_to, so 1 for self-attention).
// TensorParallelTransformerEncoder: nn::TransformerEncoder (pre- or post-norm) with that attention and its
//   feed-forward as a Megatron pair: ColumnParallelDense(intermediate_dim, gather_output false, the activation) then
//   RowParallelDense(features, input_is_parallel). The layer norms, dropouts and residual sums are whole on every
//   rank. Forward 2 all-reduces, backward 2.
// num_heads and intermediate_dim must be multiples of the group's size (InvalidArgument, naming the layer, at
// construction). Weight regularizers are refused (the ranks would each add their penalty to the loss).
//
// Dropout: the attention dropout of a rank's heads draws from a generator seeded by one draw of the calling thread's
// default_generator() and the rank, so the ranks draw different masks for their different heads while their default
// generators stay in step; the block's residual dropouts draw from default_generator() and give the same mask on
// every rank when the ranks' generators start equal (TensorParallelStrategy starts them equal every step).
//
// From and to the unsplit layer: load_shard_of(full) builds this layer for full's input size and copies this rank's
// slices (and whole copies of the replicated weights); weight_shards(full) pairs every trainable weight of this layer
// with the weight of `full` it is a slice of, and the axis, so that the ranks' weights (or their gradients) are
// reassembled with unshard().
//
// Thread-safety: as the other tensor-parallel layers (strata/parallel/tensor_parallel.h): one thread per rank, each
// rank with its own layer objects; every rank makes the same calls in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/comm/communicator.h"
#include "strata/nn/attention.h"
#include "strata/nn/core_layers.h"
#include "strata/nn/layer.h"
#include "strata/nn/normalization.h"
#include "strata/nn/transformer.h"
#include "strata/parallel/tensor_parallel.h"
#include "strata/tensor.h"
#include "strata/variable.h"

namespace strata::parallel {

// A weight of a tensor-parallel layer and the unsplit layer's weight it comes from: `part` is this rank's slice of
// `whole` along `axis`, or, with axis -1, a whole copy (a replicated weight: layer norms, RowParallelDense's bias).
struct WeightShard {
  Variable whole;
  Variable part;
  int axis = -1;
};

// The ranks' parts (rank order) joined into the whole: concatenated along `axis`, or (axis -1) rank 0's part.
// InvalidArgument for no parts.
Tensor unshard(const std::vector<Tensor>& parts, int axis);
// Copies `whole`'s slice for `rank` of `world_size` (or the whole, axis -1) into every shard's part.
void load_shards(const std::vector<WeightShard>& shards, int rank, int world_size);

// The pairs for the tensor-parallel dense layers (built, as load_shard_of leaves them) and their unsplit Dense.
std::vector<WeightShard> weight_shards(const ColumnParallelDense& layer, const nn::Dense& full);
std::vector<WeightShard> weight_shards(const RowParallelDense& layer, const nn::Dense& full);

class TensorParallelMultiHeadAttention : public nn::LayerBase<TensorParallelMultiHeadAttention> {
 public:
  using Options = nn::MultiHeadAttentionOptions;
  // InvalidArgument when num_heads is not a multiple of the group's size, or for a regularizer.
  TensorParallelMultiHeadAttention(int64_t num_heads, int64_t key_dim, std::shared_ptr<comm::Communicator> comm,
                                   nn::MultiHeadAttentionOptions options = {});

  std::string class_name() const override { return "TensorParallelMultiHeadAttention"; }
  int64_t num_heads() const { return num_heads_; }  // the whole layer's
  int64_t local_heads() const { return num_heads_ / world_size_; }
  int64_t key_dim() const { return key_dim_; }
  int64_t value_dim() const { return options_.value_dim > 0 ? options_.value_dim : key_dim_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const nn::MultiHeadAttentionOptions& options() const { return options_; }

  // This rank's heads of the weights (undefined until built; the biases also without use_bias).
  const Variable& query_kernel() const { return query_kernel_; }
  const Variable& key_kernel() const { return key_kernel_; }
  const Variable& value_kernel() const { return value_kernel_; }
  const Variable& output_kernel() const { return output_kernel_; }  // [local_heads, value_dim, out]
  const Variable& output_bias() const { return output_bias_; }      // [out], whole

  // Builds this layer for full's input sizes and copies this rank's heads of full's weights. InvalidArgument when
  // full is not built or does not match (heads, key_dim, value_dim, use_bias, sizes).
  void load_shard_of(const nn::MultiHeadAttention& full);
  // REQUIRES: built, and full matches (as load_shard_of checks).
  std::vector<WeightShard> weight_shards(const nn::MultiHeadAttention& full) const;

 protected:
  void build_impl(const std::vector<Shape>& input_shapes) override;
  // [query], [query, value], [query, value, key] or [query, value, key, attention_mask], as nn::MultiHeadAttention.
  Variable call(const std::vector<Variable>& inputs, bool training) override;

 private:
  void check_full(const nn::MultiHeadAttention& full) const;

  int64_t num_heads_, key_dim_;
  std::shared_ptr<comm::Communicator> comm_;
  int rank_, world_size_;
  nn::MultiHeadAttentionOptions options_;
  Variable query_kernel_, query_bias_, key_kernel_, key_bias_, value_kernel_, value_bias_, output_kernel_, output_bias_;
};

class TensorParallelTransformerEncoder : public nn::LayerBase<TensorParallelTransformerEncoder> {
 public:
  using Options = nn::TransformerEncoderOptions;
  // InvalidArgument when num_heads or intermediate_dim is not a multiple of the group's size.
  TensorParallelTransformerEncoder(int64_t intermediate_dim, int64_t num_heads,
                                   std::shared_ptr<comm::Communicator> comm,
                                   nn::TransformerEncoderOptions options = {});

  std::string class_name() const override { return "TensorParallelTransformerEncoder"; }
  int64_t intermediate_dim() const { return intermediate_dim_; }
  int64_t num_heads() const { return num_heads_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const nn::TransformerEncoderOptions& options() const { return options_; }
  // The sublayers, null until built.
  const std::shared_ptr<TensorParallelMultiHeadAttention>& attention() const { return attention_; }
  const std::shared_ptr<ColumnParallelDense>& intermediate_dense() const { return intermediate_dense_; }
  const std::shared_ptr<RowParallelDense>& output_dense() const { return output_dense_; }

  // Builds this layer for full's feature size and copies this rank's slices of full's weights (the layer norms
  // whole). InvalidArgument when full is not built or does not match (intermediate_dim, heads, normalize_first).
  void load_shard_of(const nn::TransformerEncoder& full);
  // REQUIRES: built, and full matches (as load_shard_of checks).
  std::vector<WeightShard> weight_shards(const nn::TransformerEncoder& full) const;

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  void check_full(const nn::TransformerEncoder& full) const;

  int64_t intermediate_dim_, num_heads_;
  std::shared_ptr<comm::Communicator> comm_;
  int rank_, world_size_;
  nn::TransformerEncoderOptions options_;
  int64_t hidden_dim_ = 0;
  std::shared_ptr<TensorParallelMultiHeadAttention> attention_;
  std::shared_ptr<nn::LayerNormalization> attention_norm_, feedforward_norm_;
  std::shared_ptr<ColumnParallelDense> intermediate_dense_;
  std::shared_ptr<RowParallelDense> output_dense_;
  std::shared_ptr<nn::Dropout> attention_dropout_, feedforward_dropout_;
};

}  // namespace strata::parallel
