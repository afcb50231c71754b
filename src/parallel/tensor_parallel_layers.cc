// The tensor-parallel layers: Dense split by columns and by rows, Conv2D split by output channels, Embedding split
// by vocabulary rows, each joining its ranks' parts with the differentiable collectives of tensor_parallel.cc.
// Thread-safety: as every layer (strata/nn/layer.h); one thread per rank, each rank with its own layer objects.
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "nn/layer_util.h"
#include "parallel/tensor_parallel_ops.h"
#include "strata/error.h"
#include "strata/ops.h"
#include "strata/parallel/tensor_parallel.h"

namespace strata::parallel {

namespace {

using nn::detail::label;

// [..., features] -> [rows, features] (a view for rank 2).
Variable as_matrix(const Variable& x) { return x.shape().size() == 2 ? x : reshape(x, {-1, x.shape().back()}); }

// [rows, n] back to the leading dimensions of `like` with last dimension n.
Variable like_leading(const Variable& y, const Shape& like) {
  if (like.size() == 2) return y;
  Shape out = like;
  out.back() = y.shape().back();
  return reshape(y, out);
}

void check_dense_input(const nn::Layer& layer, const Shape& s, int64_t in) {
  STRATA_CHECK(s.size() >= 2 && s.back() == in, ShapeError,
               label(layer) << " expects input [batch, ..., " << in << "], got " << shape_str(s));
}

void check_full_dense(const nn::Layer& layer, const nn::Dense& full, int64_t units, bool use_bias) {
  STRATA_CHECK(full.built(), InvalidArgument, label(layer) << ": load_shard_of needs a built Dense");
  STRATA_CHECK(full.units() == units && full.bias().defined() == use_bias, InvalidArgument,
               label(layer) << ": load_shard_of wants a Dense of " << units << " units "
                            << (use_bias ? "with" : "without") << " bias, got " << full.units() << " units "
                            << (full.bias().defined() ? "with" : "without") << " bias");
}

}  // namespace

// ---------------------------------------------------------------- ColumnParallelDense

ColumnParallelDense::ColumnParallelDense(int64_t units, std::shared_ptr<comm::Communicator> comm,
                                         ColumnParallelDenseOptions options)
    : LayerBase(options.name), units_(units), comm_(std::move(comm)), options_(std::move(options)) {
  std::tie(rank_, world_size_) = detail::rank_and_size(comm_, "ColumnParallelDense");
  shard_range(units_, rank_, world_size_, "ColumnParallelDense units");
}

void ColumnParallelDense::build_impl(const Shape& input_shape) {
  STRATA_CHECK(input_shape.size() >= 2 && input_shape.back() > 0, ShapeError,
               "ColumnParallelDense wants an input [batch, ..., features], got " << shape_str(input_shape));
  const int64_t in = input_shape.back();
  kernel_ = add_weight("kernel", {in, local_units()},
                       detail::slice_of_whole(options_.kernel_initializer.fn(), {in, units_}, 1, rank_, world_size_));
  if (options_.use_bias) {
    bias_ = add_weight("bias", {local_units()},
                       detail::slice_of_whole(options_.bias_initializer.fn(), {units_}, 0, rank_, world_size_));
  }
}

Variable ColumnParallelDense::call(const Variable& input, bool) {
  const Shape s = input.shape();
  check_dense_input(*this, s, kernel_.shape()[0]);
  // Every rank reads the whole input: its gradient is the sum of the ranks' parts. A relu commutes with the gather: it
  // is fused into each rank's product (Dense's fused op).
  const bool relu = options_.activation.name() == "relu";
  Variable y = nn::detail::dense_op(as_matrix(detail::copy_to(input, comm_)), kernel_, bias_, relu);
  y = like_leading(y, s);
  if (options_.gather_output) y = detail::gather_from(y, comm_, -1);
  return relu ? y : options_.activation(y);
}

void ColumnParallelDense::load_shard_of(const nn::Dense& full) {
  check_full_dense(*this, full, units_, options_.use_bias);
  const int64_t in = full.kernel().shape()[0];
  build({{1, in}});
  STRATA_CHECK(kernel_.shape()[0] == in, InvalidArgument,
               label(*this) << " was built for " << kernel_.shape()[0] << " input features, the Dense has " << in);
  kernel_.assign(shard_of(full.kernel().value(), 1, rank_, world_size_));
  if (bias_.defined()) bias_.assign(shard_of(full.bias().value(), 0, rank_, world_size_));
}

// ---------------------------------------------------------------- RowParallelDense

RowParallelDense::RowParallelDense(int64_t units, std::shared_ptr<comm::Communicator> comm,
                                   RowParallelDenseOptions options)
    : LayerBase(options.name), units_(units), comm_(std::move(comm)), options_(std::move(options)) {
  std::tie(rank_, world_size_) = detail::rank_and_size(comm_, "RowParallelDense");
  STRATA_CHECK(units > 0, InvalidArgument, "RowParallelDense needs a positive number of units, got " << units);
}

void RowParallelDense::build_impl(const Shape& input_shape) {
  STRATA_CHECK(input_shape.size() >= 2 && input_shape.back() > 0, ShapeError,
               "RowParallelDense wants an input [batch, ..., features], got " << shape_str(input_shape));
  const int64_t in = options_.input_is_parallel ? input_shape.back() * world_size_ : input_shape.back();
  const ShardRange rows = shard_range(in, rank_, world_size_, "RowParallelDense input features");
  kernel_ = add_weight("kernel", {rows.size(), units_},
                       detail::slice_of_whole(options_.kernel_initializer.fn(), {in, units_}, 0, rank_, world_size_));
  if (options_.use_bias) bias_ = add_weight("bias", {units_}, options_.bias_initializer.fn());
}

Variable RowParallelDense::call(const Variable& input, bool) {
  const Shape s = input.shape();
  const int64_t local_in = kernel_.shape()[0];
  check_dense_input(*this, s, options_.input_is_parallel ? local_in : local_in * world_size_);
  const Variable x = options_.input_is_parallel ? input : detail::scatter_to(input, comm_, -1);
  // The ranks' partial products sum to the whole product; the bias joins once, after the sum.
  Variable y = detail::reduce_from(matmul(as_matrix(x), kernel_), comm_);
  if (bias_.defined()) y = y + bias_;
  return options_.activation(like_leading(y, s));
}

void RowParallelDense::load_shard_of(const nn::Dense& full) {
  check_full_dense(*this, full, units_, options_.use_bias);
  const int64_t in = full.kernel().shape()[0];
  const ShardRange rows = shard_range(in, rank_, world_size_, "RowParallelDense input features");
  build({{1, options_.input_is_parallel ? rows.size() : in}});
  STRATA_CHECK(
      kernel_.shape()[0] == rows.size(), InvalidArgument,
      label(*this) << " was built for " << kernel_.shape()[0] * world_size_ << " input features, the Dense has " << in);
  kernel_.assign(shard_of(full.kernel().value(), 0, rank_, world_size_));
  if (bias_.defined()) bias_.assign(full.bias().value());
}

// ---------------------------------------------------------------- ChannelParallelConv2D

ChannelParallelConv2D::ChannelParallelConv2D(int64_t filters, nn::Size2 kernel_size,
                                             std::shared_ptr<comm::Communicator> comm,
                                             ChannelParallelConv2DOptions options)
    : LayerBase(options.name),
      filters_(filters),
      kernel_size_(kernel_size),
      comm_(std::move(comm)),
      options_(std::move(options)) {
  std::tie(rank_, world_size_) = detail::rank_and_size(comm_, "ChannelParallelConv2D");
  shard_range(filters_, rank_, world_size_, "ChannelParallelConv2D filters");
  const auto& o = options_;
  STRATA_CHECK(kernel_size.h > 0 && kernel_size.w > 0 && o.strides.h > 0 && o.strides.w > 0 && o.dilation_rate.h > 0 &&
                   o.dilation_rate.w > 0,
               InvalidArgument, "ChannelParallelConv2D kernel_size, strides and dilation_rate must be positive");
  STRATA_CHECK(o.strides == nn::Size2(1) || o.dilation_rate == nn::Size2(1), InvalidArgument,
               "ChannelParallelConv2D: strides above 1 cannot be combined with dilation_rate above 1 (as in Keras)");
}

void ChannelParallelConv2D::build_impl(const Shape& s) {
  STRATA_CHECK(s.size() == 4 && s[3] > 0, ShapeError,
               "ChannelParallelConv2D wants an image [batch, height, width, channels], got " << shape_str(s));
  const Shape whole = {kernel_size_.h, kernel_size_.w, s[3], filters_};
  kernel_ = add_weight("kernel", {kernel_size_.h, kernel_size_.w, s[3], local_filters()},
                       detail::slice_of_whole(options_.kernel_initializer.fn(), whole, 3, rank_, world_size_));
  if (options_.use_bias) {
    bias_ = add_weight("bias", {local_filters()},
                       detail::slice_of_whole(options_.bias_initializer.fn(), {filters_}, 0, rank_, world_size_));
  }
}

Variable ChannelParallelConv2D::call(const Variable& input, bool) {
  const Shape& s = input.shape();
  const int64_t channels = kernel_.shape()[2];
  STRATA_CHECK(s.size() == 4 && s[3] == channels, ShapeError,
               label(*this) << " expects input [batch, height, width, " << channels << "], got " << shape_str(s));
  // A relu commutes with the gather: it is fused into each rank's convolution.
  const Conv2DOptions conv = nn::detail::conv2d_options(options_);
  Variable y = conv2d(detail::copy_to(input, comm_), kernel_, bias_, conv);
  if (options_.gather_output) y = detail::gather_from(y, comm_, -1);
  return conv.fused_relu ? y : options_.activation(y);
}

void ChannelParallelConv2D::load_shard_of(const nn::Conv2D& full) {
  STRATA_CHECK(full.built(), InvalidArgument, label(*this) << ": load_shard_of needs a built Conv2D");
  const auto& fo = full.options();
  const auto& o = options_;
  STRATA_CHECK(full.filters() == filters_ && full.kernel_size() == kernel_size_ && fo.strides == o.strides &&
                   fo.padding.value() == o.padding.value() && fo.dilation_rate == o.dilation_rate &&
                   full.bias().defined() == o.use_bias,
               InvalidArgument,
               label(*this) << ": load_shard_of wants a Conv2D with the same filters (" << filters_
                            << "), kernel size, strides, padding, dilation and use_bias");
  const int64_t in = full.kernel().shape()[2];
  build({{1, kernel_size_.h, kernel_size_.w, in}});
  STRATA_CHECK(kernel_.shape()[2] == in, InvalidArgument,
               label(*this) << " was built for " << kernel_.shape()[2] << " input channels, the Conv2D has " << in);
  kernel_.assign(shard_of(full.kernel().value(), 3, rank_, world_size_));
  if (bias_.defined()) bias_.assign(shard_of(full.bias().value(), 0, rank_, world_size_));
}

// ---------------------------------------------------------------- RowParallelEmbedding

RowParallelEmbedding::RowParallelEmbedding(int64_t input_dim, int64_t output_dim,
                                           std::shared_ptr<comm::Communicator> comm,
                                           RowParallelEmbeddingOptions options)
    : LayerBase(options.name),
      input_dim_(input_dim),
      output_dim_(output_dim),
      comm_(std::move(comm)),
      options_(std::move(options)) {
  std::tie(rank_, world_size_) = detail::rank_and_size(comm_, "RowParallelEmbedding");
  shard_range(input_dim_, rank_, world_size_, "RowParallelEmbedding input_dim");
  STRATA_CHECK(output_dim > 0, InvalidArgument, "RowParallelEmbedding needs a positive output_dim, got " << output_dim);
}

void RowParallelEmbedding::build_impl(const Shape&) {
  const int64_t rows = vocabulary_range().size();
  embeddings_ = add_weight(
      "embeddings", {rows, output_dim_},
      detail::slice_of_whole(options_.embeddings_initializer.fn(), {input_dim_, output_dim_}, 0, rank_, world_size_));
}

Variable RowParallelEmbedding::call(const Variable& input, bool) {
  Tensor ids = input.value();
  if (ids.dtype() != DType::kInt64) {
    STRATA_CHECK(ids.dtype() == DType::kInt32 || ids.dtype() == DType::kFloat32, InvalidArgument,
                 label(*this) << " wants integer (or float) indices, got " << dtype_name(ids.dtype()));
    ids = ids.to(DType::kInt64);
  }
  ids = ids.to(Device::cpu());
  // Local row of each id in this rank's range, 0 (masked out afterwards) for the others.
  const ShardRange range = vocabulary_range();
  Tensor local = Tensor::empty(ids.shape(), DType::kInt64);
  Shape mask_shape = ids.shape();
  mask_shape.push_back(1);
  Tensor mask = Tensor::empty(mask_shape);
  const int64_t* id = ids.data<int64_t>();
  int64_t* row = local.data<int64_t>();
  float* keep = mask.data<float>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    STRATA_CHECK(id[i] >= 0 && id[i] < input_dim_, InvalidArgument,
                 label(*this) << ": index " << id[i] << " (element " << i << " of input " << ids.shape_str()
                              << ") is outside [0, input_dim = " << input_dim_ << ")");
    const bool mine = id[i] >= range.begin && id[i] < range.end;
    row[i] = mine ? id[i] - range.begin : 0;
    keep[i] = mine ? 1.0f : 0.0f;
  }
  // Each id's row lives on exactly one rank: the sum over ranks is the lookup.
  return detail::reduce_from(gather(embeddings_, local) * Variable(mask), comm_);
}

void RowParallelEmbedding::load_shard_of(const nn::Embedding& full) {
  STRATA_CHECK(full.built(), InvalidArgument, label(*this) << ": load_shard_of needs a built Embedding");
  STRATA_CHECK(full.input_dim() == input_dim_ && full.output_dim() == output_dim_, InvalidArgument,
               label(*this) << ": load_shard_of wants an Embedding [" << input_dim_ << ", " << output_dim_ << "], got ["
                            << full.input_dim() << ", " << full.output_dim() << "]");
  build({{1}});
  embeddings_.assign(shard_of(full.embeddings().value(), 0, rank_, world_size_));
}

}  // namespace strata::parallel
