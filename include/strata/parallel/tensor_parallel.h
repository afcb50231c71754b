// Tensor parallelism (Megatron-LM's intra-layer model parallelism): one layer's weights split over the ranks of a
// group, each rank holding a slice and computing its part of the layer, the parts joined by collectives that are
// themselves differentiable ops.
//
//   auto comm = ...;                                       // this rank's end of the tensor-parallel group
//   parallel::ColumnParallelDense up(64, comm, {.activation = "gelu", .gather_output = false});
//   parallel::RowParallelDense down(16, comm, {.input_is_parallel = true});
//   Variable y = down(up(x));                              // x and y are whole (the same on every rank)
//
// The splits and the collectives each one issues per call (counted by tensor_parallel_test.cc; "backward" counts
// the collectives of tape.gradient when the layer's input wants a gradient, and none otherwise):
//   ColumnParallelDense    kernel [in, units/size], bias [units/size]: output columns.
//                          forward: 1 all-gather (gather_output), 0 without; backward: 1 all-reduce (input gradient).
//   RowParallelDense       kernel [in/size, units], bias [units] (whole, added once after the reduce): input rows.
//                          forward: 1 all-reduce; backward: 0 (input_is_parallel), 1 all-gather without it.
//   Megatron pair          ColumnParallelDense(gather_output = false) then RowParallelDense(input_is_parallel = true):
//                          forward 1 all-reduce, backward 1 all-reduce, whatever the hidden width.
//   ChannelParallelConv2D  kernel [kh, kw, in, filters/size], bias [filters/size]: output channels.
//                          forward: 1 all-gather (gather_output), 0 without; backward: 1 all-reduce (input gradient).
//   RowParallelEmbedding   embeddings [input_dim/size, output_dim]: vocabulary rows; a rank looks up the ids in its
//                          range (zeros for the others), then the rows are summed.
//                          forward: 1 all-reduce; backward: 0 (ids have no gradient).
// Sizes split over the group (units, the row split's input features, filters, input_dim) must be multiples of the
// group's size (InvalidArgument otherwise). Activations run after the gather; with gather_output false they run on
// each rank's slice, which is right for elementwise ones (relu, gelu, tanh...) and wrong for softmax.
//
// The collectives go through comm::Communicator, so the same layers run with the ranks as threads of one process
// (comm/local.h) or as processes (Gloo, MPI). Every rank of the group must make the same calls in the same order
// (forward and tape.gradient alike), as for any collective. Weights the ranks share whole (RowParallelDense's bias)
// must start equal on every rank: give them a deterministic initializer ("zeros", the default) or load them with
// load_shard_of. A split weight is initialised as this rank's slice of a whole weight drawn by the initializer (so
// fan-in and fan-out are the whole layer's); to start from a given unsplit layer, call load_shard_of.
//
// Thread-safety: a layer (and its communicator) is used by one thread at a time, the thread of its rank; the ranks'
// layers are distinct objects. The collective ops keep a reference to the communicator until the tape that recorded
// them has run its gradient: the communicator must outlive it (the layers hold theirs).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "strata/comm/communicator.h"
#include "strata/nn/conv_layers.h"
#include "strata/nn/core_layers.h"
#include "strata/nn/layer.h"
#include "strata/nn/layer_options.h"
#include "strata/tensor.h"
#include "strata/variable.h"

namespace strata::parallel {

// ---- differentiable collectives (Megatron's f and g); each rank calls them with its own end of the group, on float32
// host tensors (InvalidArgument otherwise). A group of one rank communicates nothing.

// Forward: x unchanged. Backward: the gradient summed over the ranks (all-reduce). Put on the input of a layer whose
// ranks each use the whole input to compute a part of the output.
Variable copy_to_tensor_parallel(const Variable& x, comm::Communicator& comm);
// Forward: x summed over the ranks (all-reduce). Backward: the gradient unchanged. Joins partial results.
Variable reduce_from_tensor_parallel(const Variable& x, comm::Communicator& comm);
// Forward: the ranks' x concatenated along `axis` in rank order (all-gather; every rank passes the same shape).
// Backward: this rank's slice of the gradient along `axis`.
Variable gather_from_tensor_parallel(const Variable& x, comm::Communicator& comm, int axis = -1);
// Forward: this rank's slice of x along `axis` (no communication; the size must be a multiple of the group's).
// Backward: the ranks' gradients concatenated along `axis` (all-gather).
Variable scatter_to_tensor_parallel(const Variable& x, comm::Communicator& comm, int axis = -1);

// ---- shards

// The part [begin, end) of `total` items that rank `rank` of `world_size` holds: [rank * total / world_size, ...).
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
// InvalidArgument naming `what` when world_size < 1, rank is outside [0, world_size), or total is not a positive
// multiple of world_size.
ShardRange shard_range(int64_t total, int rank, int world_size, const std::string& what = "size");
// A copy of rank `rank`'s slice of `full` along `axis` (negative counts from the end); errors as shard_range.
Tensor shard_of(const Tensor& full, int axis, int rank, int world_size);

// ---- layers

struct ColumnParallelDenseOptions {
  nn::ActivationSpec activation = {};
  bool use_bias = true;
  // True: every rank gets the whole output [..., units] (an all-gather). False: its slice [..., units / size], for a
  // RowParallelDense with input_is_parallel to take.
  bool gather_output = true;
  nn::InitializerSpec kernel_initializer = "glorot_uniform";
  nn::InitializerSpec bias_initializer = "zeros";
  std::string name = "";
};

// nn::Dense split by output units: this rank holds columns [rank * units / size, (rank + 1) * units / size).
class ColumnParallelDense : public nn::LayerBase<ColumnParallelDense> {
 public:
  using Options = ColumnParallelDenseOptions;
  ColumnParallelDense(int64_t units, std::shared_ptr<comm::Communicator> comm, ColumnParallelDenseOptions options = {});

  std::string class_name() const override { return "ColumnParallelDense"; }
  int64_t units() const { return units_; }  // the whole layer's
  int64_t local_units() const { return units_ / world_size_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const ColumnParallelDenseOptions& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }  // [in, local_units]
  const Variable& bias() const { return bias_; }      // [local_units]; undefined without use_bias
  // Builds this layer (if needed) for full's input size and copies this rank's columns of full's kernel and bias.
  // InvalidArgument when full is not built or does not match (units, use_bias, input size once built).
  void load_shard_of(const nn::Dense& full);

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  int64_t units_;
  std::shared_ptr<comm::Communicator> comm_;
  int rank_, world_size_;
  ColumnParallelDenseOptions options_;
  Variable kernel_, bias_;
};

struct RowParallelDenseOptions {
  nn::ActivationSpec activation = {};
  bool use_bias = true;
  // True: the input is already this rank's slice of the features [..., in / size] (a ColumnParallelDense's output
  // with gather_output false). False: the input is whole [..., in] and each rank takes its slice.
  bool input_is_parallel = true;
  nn::InitializerSpec kernel_initializer = "glorot_uniform";
  nn::InitializerSpec bias_initializer = "zeros";  // the bias is whole on every rank: keep it deterministic
  std::string name = "";
};

// nn::Dense split by input features: this rank holds kernel rows [rank * in / size, (rank + 1) * in / size); the
// partial products are summed over the ranks (all-reduce), then the bias is added once and the activation applied.
class RowParallelDense : public nn::LayerBase<RowParallelDense> {
 public:
  using Options = RowParallelDenseOptions;
  RowParallelDense(int64_t units, std::shared_ptr<comm::Communicator> comm, RowParallelDenseOptions options = {});

  std::string class_name() const override { return "RowParallelDense"; }
  int64_t units() const { return units_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const RowParallelDenseOptions& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }  // [in / size, units]
  const Variable& bias() const { return bias_; }      // [units], whole
  void load_shard_of(const nn::Dense& full);          // as ColumnParallelDense's, rows of the kernel

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  int64_t units_;
  std::shared_ptr<comm::Communicator> comm_;
  int rank_, world_size_;
  RowParallelDenseOptions options_;
  Variable kernel_, bias_;
};

struct ChannelParallelConv2DOptions {
  nn::Size2 strides = 1;
  nn::PaddingSpec padding = "valid";
  nn::Size2 dilation_rate = 1;
  nn::ActivationSpec activation = {};
  bool use_bias = true;
  // True: every rank gets all the output channels (an all-gather). False: its slice [..., filters / size].
  bool gather_output = true;
  nn::InitializerSpec kernel_initializer = "glorot_uniform";
  nn::InitializerSpec bias_initializer = "zeros";
  std::string name = "";
};

// nn::Conv2D split by output channels (filters): this rank holds kernel [kh, kw, in, filters / size].
class ChannelParallelConv2D : public nn::LayerBase<ChannelParallelConv2D> {
 public:
  using Options = ChannelParallelConv2DOptions;
  ChannelParallelConv2D(int64_t filters, nn::Size2 kernel_size, std::shared_ptr<comm::Communicator> comm,
                        ChannelParallelConv2DOptions options = {});

  std::string class_name() const override { return "ChannelParallelConv2D"; }
  int64_t filters() const { return filters_; }
  int64_t local_filters() const { return filters_ / world_size_; }
  nn::Size2 kernel_size() const { return kernel_size_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const ChannelParallelConv2DOptions& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }
  // As ColumnParallelDense's, for a built Conv2D with the same filters, kernel size, strides, padding and dilation.
  void load_shard_of(const nn::Conv2D& full);

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  int64_t filters_;
  nn::Size2 kernel_size_;
  std::shared_ptr<comm::Communicator> comm_;
  int rank_, world_size_;
  ChannelParallelConv2DOptions options_;
  Variable kernel_, bias_;
};

struct RowParallelEmbeddingOptions {
  nn::InitializerSpec embeddings_initializer = "random_uniform";
  std::string name = "";
};

// nn::Embedding split by vocabulary rows: this rank holds rows [rank * input_dim / size, (rank + 1) * input_dim /
// size). Ids as nn::Embedding takes them (int32, int64, or float truncated); an id outside [0, input_dim) is an
// InvalidArgument naming it, on every rank.
class RowParallelEmbedding : public nn::LayerBase<RowParallelEmbedding> {
 public:
  using Options = RowParallelEmbeddingOptions;
  RowParallelEmbedding(int64_t input_dim, int64_t output_dim, std::shared_ptr<comm::Communicator> comm,
                       RowParallelEmbeddingOptions options = {});

  std::string class_name() const override { return "RowParallelEmbedding"; }
  int64_t input_dim() const { return input_dim_; }
  int64_t output_dim() const { return output_dim_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // The ids this rank holds.
  ShardRange vocabulary_range() const { return shard_range(input_dim_, rank_, world_size_, "input_dim"); }
  const Variable& embeddings() const { return embeddings_; }  // [input_dim / size, output_dim]
  void load_shard_of(const nn::Embedding& full);

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  int64_t input_dim_, output_dim_;
  std::shared_ptr<comm::Communicator> comm_;
  int rank_, world_size_;
  RowParallelEmbeddingOptions options_;
  Variable embeddings_;
};

}  // namespace strata::parallel
