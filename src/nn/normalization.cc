// BatchNormalization and LayerNormalization (see strata/nn/normalization.h).
#include "strata/nn/normalization.h"

#include "kernels/kernels.h"
#include "nn/layer_util.h"
#include "strata/error.h"
#include "strata/ops.h"

namespace strata::nn {

using detail::label;
using detail::with_free_batch;

namespace {
// The permutation that moves `axis` last (the kernels normalise the last axis), and its inverse.
std::vector<int> axis_last(int rank, int axis) {
  std::vector<int> perm;
  for (int i = 0; i < rank; ++i)
    if (i != axis) perm.push_back(i);
  perm.push_back(axis);
  return perm;
}
std::vector<int> inverse_of(const std::vector<int>& perm) {
  std::vector<int> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int>(i);
  return inverse;
}
// The feature axis `axis` (Keras's: negative counts from the end; never the batch axis) of an input of shape `s`
// for layer `layer`; a ShapeError naming it when the input has no such axis.
int resolve_feature_axis(const char* layer, const char* what, int axis, const Shape& s) {
  STRATA_CHECK(s.size() >= 2, ShapeError,
               layer << " wants an input of rank >= 2 [batch, ..., " << what << "], got " << shape_str(s));
  const int rank = static_cast<int>(s.size());
  STRATA_CHECK(axis >= -rank && axis < rank && axis != 0 && axis != -rank, ShapeError,
               layer << " axis " << axis << " is not a feature axis of input " << shape_str(with_free_batch(s)));
  return axis < 0 ? axis + rank : axis;
}
}  // namespace

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : LayerBase(options.name), options_(std::move(options)) {
  STRATA_CHECK(options_.momentum >= 0.0f && options_.momentum <= 1.0f, InvalidArgument,
               "BatchNormalization momentum must be in [0, 1], got " << options_.momentum);
  STRATA_CHECK(options_.epsilon > 0.0f, InvalidArgument,
               "BatchNormalization epsilon must be positive, got " << options_.epsilon);
}

void BatchNormalization::build_impl(const Shape& s) {
  axis_ = resolve_feature_axis("BatchNormalization", "channels", options_.axis, s);
  rank_ = static_cast<int>(s.size());
  const Shape channels = {s[axis_]};
  const auto& o = options_;
  if (o.scale) gamma_ = add_weight("gamma", channels, o.gamma_initializer.fn(), true, o.gamma_regularizer.fn());
  if (o.center) beta_ = add_weight("beta", channels, o.beta_initializer.fn(), true, o.beta_regularizer.fn());
  moving_mean_ = add_weight("moving_mean", channels, o.moving_mean_initializer.fn(), /*trainable=*/false);
  moving_variance_ = add_weight("moving_variance", channels, o.moving_variance_initializer.fn(), /*trainable=*/false);
  const Device device = moving_mean_.value().device();  // where the strategy placed the variables (a GPU, say)
  if (!o.scale) ones_ = Tensor::ones(channels, DType::kFloat32, device);
  if (!o.center) zeros_ = Tensor::zeros(channels, DType::kFloat32, device);
}

Variable BatchNormalization::call(const Variable& input, bool training) {
  const Shape& s = input.shape();
  const int64_t channels = moving_mean_.shape()[0];
  const int rank = static_cast<int>(s.size());
  STRATA_CHECK(rank == rank_ && s[axis_] == channels, ShapeError,
               label(*this) << " was built for rank-" << rank_ << " inputs with " << channels << " channels on axis "
                            << axis_ << ", got input " << shape_str(s));
  // The kernels normalise the last axis; another axis is moved there and back.
  const bool last = axis_ == rank - 1;
  const std::vector<int> perm = axis_last(rank, axis_);
  const Variable x = last ? input : transpose(input, perm);
  const Variable gamma = options_.scale ? gamma_ : Variable(ones_);
  const Variable beta = options_.center ? beta_ : Variable(zeros_);

  Variable y;
  if (training && trainable()) {
    BatchNormOutput r = batch_norm(x, gamma, beta, options_.epsilon);
    // moving -= (1 - momentum) * (moving - batch), i.e. moving * momentum + batch * (1 - momentum).
    const float rate = 1.0f - options_.momentum;
    moving_mean_.assign_sub(kernels::sub(moving_mean_.value(), r.batch_mean), rate);
    moving_variance_.assign_sub(kernels::sub(moving_variance_.value(), r.batch_variance), rate);
    y = r.y;
  } else {
    y = batch_norm_inference(x, gamma, beta, moving_mean_.value(), moving_variance_.value(), options_.epsilon);
  }
  if (last) return y;
  return transpose(y, inverse_of(perm));
}

// ---------------------------------------------------------------- LayerNormalization
LayerNormalization::LayerNormalization(LayerNormalizationOptions options)
    : LayerBase(options.name), options_(std::move(options)) {
  STRATA_CHECK(options_.epsilon > 0.0f, InvalidArgument,
               "LayerNormalization epsilon must be positive, got " << options_.epsilon);
}

void LayerNormalization::build_impl(const Shape& s) {
  axis_ = resolve_feature_axis("LayerNormalization", "features", options_.axis, s);
  rank_ = static_cast<int>(s.size());
  const Shape features = {s[axis_]};
  STRATA_CHECK(s[axis_] > 0, ShapeError,
               "LayerNormalization wants a positive size on axis " << axis_ << ", got input " << shape_str(s));
  const auto& o = options_;
  if (o.scale) gamma_ = add_weight("gamma", features, o.gamma_initializer.fn(), true, o.gamma_regularizer.fn());
  if (o.center) beta_ = add_weight("beta", features, o.beta_initializer.fn(), true, o.beta_regularizer.fn());
  features_ = s[axis_];
  // Where the strategy placed the weights (the host when there are none).
  const Device device = o.scale ? gamma_.value().device() : o.center ? beta_.value().device() : Device::cpu();
  if (!o.scale) ones_ = Tensor::ones(features, DType::kFloat32, device);
  if (!o.center) zeros_ = Tensor::zeros(features, DType::kFloat32, device);
}

Variable LayerNormalization::call(const Variable& input, bool) {
  const Shape& s = input.shape();
  const int rank = static_cast<int>(s.size());
  STRATA_CHECK(rank == rank_ && s[axis_] == features_, ShapeError,
               label(*this) << " was built for rank-" << rank_ << " inputs with " << features_ << " features on axis "
                            << axis_ << ", got input " << shape_str(s));
  const bool last = axis_ == rank - 1;
  const std::vector<int> perm = axis_last(rank, axis_);
  const Variable x = last ? input : transpose(input, perm);
  const Variable gamma = options_.scale ? gamma_ : Variable(ones_);
  const Variable beta = options_.center ? beta_ : Variable(zeros_);
  const Variable y = layer_norm(x, gamma, beta, options_.epsilon);
  if (last) return y;
  return transpose(y, inverse_of(perm));
}

}  // namespace strata::nn
