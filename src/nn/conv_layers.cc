// Conv2D, Conv1D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D and GlobalAveragePooling1D
// (see strata/nn/conv_layers.h).
#include "strata/nn/conv_layers.h"

#include "nn/layer_util.h"
#include "strata/error.h"
#include "strata/ops.h"

namespace strata::nn {

using detail::label;
using detail::with_free_batch;

namespace {
constexpr const char* kImageLayout = "[batch, height, width, channels]";

// Output size along one axis, as Keras computes it; <= 0 when the window does not fit.
int64_t out_size(int64_t in, int window, int stride, int dilation, Padding padding) {
  if (padding == Padding::kSame) return (in + stride - 1) / stride;
  const int64_t span = static_cast<int64_t>(window - 1) * dilation + 1;
  return in < span ? 0 : (in - span) / stride + 1;
}

void check_image(const Shape& s, const std::string& who) {
  STRATA_CHECK(s.size() == 4, ShapeError,
               who << " wants an input of rank 4 " << kImageLayout << ", got " << shape_str(with_free_batch(s)));
}

void check_sequence(const Shape& s, const std::string& who) {
  STRATA_CHECK(s.size() == 3, ShapeError,
               who << " wants an input of rank 3 [batch, steps, features], got " << shape_str(with_free_batch(s)));
}
}  // namespace

// ---------------------------------------------------------------- Conv2D
Conv2D::Conv2D(int64_t filters, Size2 kernel_size, Conv2DLayerOptions options)
    : LayerBase(options.name), filters_(filters), kernel_size_(kernel_size), options_(std::move(options)) {
  const auto& o = options_;
  STRATA_CHECK(filters > 0, InvalidArgument, "Conv2D needs a positive number of filters, got " << filters);
  STRATA_CHECK(kernel_size.h > 0 && kernel_size.w > 0, InvalidArgument,
               "Conv2D kernel_size must be positive, got {" << kernel_size.h << ", " << kernel_size.w << "}");
  STRATA_CHECK(o.strides.h > 0 && o.strides.w > 0 && o.dilation_rate.h > 0 && o.dilation_rate.w > 0, InvalidArgument,
               "Conv2D strides and dilation_rate must be positive, got {"
                   << o.strides.h << ", " << o.strides.w << "} and {" << o.dilation_rate.h << ", " << o.dilation_rate.w
                   << "}");
  STRATA_CHECK(o.strides == Size2(1) || o.dilation_rate == Size2(1), InvalidArgument,
               "Conv2D: strides above 1 cannot be combined with dilation_rate above 1 (as in Keras)");
}

Conv2D::Conv2D(int64_t filters, Size2 kernel_size, ActivationSpec activation)
    : Conv2D(filters, kernel_size, Conv2DLayerOptions{.activation = std::move(activation)}) {}

void Conv2D::build_impl(const Shape& s) {
  check_image(s, "Conv2D");
  const auto& o = options_;
  const Padding pad = o.padding.value();
  STRATA_CHECK(out_size(s[1], kernel_size_.h, o.strides.h, o.dilation_rate.h, pad) > 0 &&
                   out_size(s[2], kernel_size_.w, o.strides.w, o.dilation_rate.w, pad) > 0,
               ShapeError,
               "Conv2D kernel {" << kernel_size_.h << ", " << kernel_size_.w << "} (dilation {" << o.dilation_rate.h
                                 << ", " << o.dilation_rate.w << "}) does not fit input "
                                 << shape_str(with_free_batch(s)) << " with 'valid' padding");
  kernel_ = add_weight("kernel", {kernel_size_.h, kernel_size_.w, s[3], filters_}, o.kernel_initializer.fn(), true,
                       o.kernel_regularizer.fn());
  if (o.use_bias) bias_ = add_weight("bias", {filters_}, o.bias_initializer.fn(), true, o.bias_regularizer.fn());
}

Variable Conv2D::call(const Variable& input, bool) {
  const Shape& s = input.shape();
  check_image(s, label(*this));
  const int64_t channels = kernel_.shape()[2];
  STRATA_CHECK(s[3] == channels, ShapeError,
               label(*this) << " expects input [batch, height, width, " << channels << "], got " << shape_str(s));
  const Conv2DOptions conv = detail::conv2d_options(options_);
  Variable y = conv2d(input, kernel_, bias_, conv);
  return conv.fused_relu ? y : options_.activation(y);
}

// ---------------------------------------------------------------- Conv1D
Conv1D::Conv1D(int64_t filters, int kernel_size, Conv1DLayerOptions options)
    : LayerBase(options.name), filters_(filters), kernel_size_(kernel_size), options_(std::move(options)) {
  const auto& o = options_;
  STRATA_CHECK(filters > 0, InvalidArgument, "Conv1D needs a positive number of filters, got " << filters);
  STRATA_CHECK(kernel_size > 0, InvalidArgument, "Conv1D kernel_size must be positive, got " << kernel_size);
  STRATA_CHECK(o.strides > 0 && o.dilation_rate > 0, InvalidArgument,
               "Conv1D strides and dilation_rate must be positive, got " << o.strides << " and " << o.dilation_rate);
  STRATA_CHECK(o.strides == 1 || o.dilation_rate == 1, InvalidArgument,
               "Conv1D: strides above 1 cannot be combined with dilation_rate above 1 (as in Keras)");
}

Conv1D::Conv1D(int64_t filters, int kernel_size, ActivationSpec activation)
    : Conv1D(filters, kernel_size, Conv1DLayerOptions{.activation = std::move(activation)}) {}

int64_t Conv1D::causal_padding() const {
  return options_.padding.is_causal() ? static_cast<int64_t>(kernel_size_ - 1) * options_.dilation_rate : 0;
}

void Conv1D::build_impl(const Shape& s) {
  check_sequence(s, "Conv1D");
  const auto& o = options_;
  STRATA_CHECK(out_size(s[1] + causal_padding(), kernel_size_, o.strides, o.dilation_rate, o.padding.value()) > 0,
               ShapeError,
               "Conv1D kernel_size " << kernel_size_ << " (dilation_rate " << o.dilation_rate << ") does not fit input "
                                     << shape_str(with_free_batch(s)) << " with 'valid' padding");
  kernel_ =
      add_weight("kernel", {kernel_size_, s[2], filters_}, o.kernel_initializer.fn(), true, o.kernel_regularizer.fn());
  if (o.use_bias) bias_ = add_weight("bias", {filters_}, o.bias_initializer.fn(), true, o.bias_regularizer.fn());
}

Variable Conv1D::call(const Variable& input, bool) {
  const Shape& s = input.shape();
  check_sequence(s, label(*this));
  const Shape& k = kernel_.shape();
  STRATA_CHECK(s[2] == k[1], ShapeError,
               label(*this) << " expects input [batch, steps, " << k[1] << "], got " << shape_str(s));
  Variable x = input;
  if (const int64_t pad = causal_padding(); pad > 0) {
    x = concat({Variable(Tensor::zeros({s[0], pad, s[2]}, input.value().dtype(), input.value().device())), x}, 1);
  }
  const auto& o = options_;
  const Conv2DOptions conv =
      detail::conv2d_options(Size2(1, o.strides), o.padding.value(), Size2(1, o.dilation_rate), o.activation);
  // [b, steps, in] as [b, 1, steps, in] images and the kernel as [1, k, in, filters]: views, no copies.
  Variable y = conv2d(reshape(x, {s[0], 1, x.shape()[1], s[2]}), reshape(kernel_, {1, k[0], k[1], k[2]}), bias_, conv);
  y = reshape(y, {s[0], y.shape()[2], filters_});
  return conv.fused_relu ? y : o.activation(y);
}

// ---------------------------------------------------------------- pooling
namespace detail {

Pooling2D::Pooling2D(Size2 pool_size, Pooling2DOptions options)
    : Layer(options.name),
      pool_size_(pool_size),
      strides_(options.strides.value_or(pool_size)),
      padding_(options.padding.value()) {
  STRATA_CHECK(pool_size.h > 0 && pool_size.w > 0 && strides_.h > 0 && strides_.w > 0, InvalidArgument,
               "pooling needs positive pool_size and strides, got {" << pool_size.h << ", " << pool_size.w << "} and {"
                                                                     << strides_.h << ", " << strides_.w << "}");
}

void Pooling2D::build_impl(const Shape& s) {
  check_image(s, class_name());
  STRATA_CHECK(out_size(s[1], pool_size_.h, strides_.h, 1, padding_) > 0 &&
                   out_size(s[2], pool_size_.w, strides_.w, 1, padding_) > 0,
               ShapeError,
               class_name() << " pool {" << pool_size_.h << ", " << pool_size_.w << "} does not fit input "
                            << shape_str(with_free_batch(s)) << " with 'valid' padding");
}

Pool2DOptions Pooling2D::checked_options(const Variable& input) const {
  check_image(input.shape(), label(*this));
  return {.pool_h = pool_size_.h,
          .pool_w = pool_size_.w,
          .stride_h = strides_.h,
          .stride_w = strides_.w,
          .padding = padding_};
}

}  // namespace detail

Variable MaxPooling2D::call(const Variable& input, bool) { return max_pool2d(input, checked_options(input)); }

Variable AveragePooling2D::call(const Variable& input, bool) { return avg_pool2d(input, checked_options(input)); }

GlobalAveragePooling2D::GlobalAveragePooling2D(GlobalPoolingOptions options)
    : LayerBase(options.name), keepdims_(options.keepdims) {}

void GlobalAveragePooling2D::build_impl(const Shape& s) { check_image(s, "GlobalAveragePooling2D"); }

Variable GlobalAveragePooling2D::call(const Variable& input, bool) {
  check_image(input.shape(), label(*this));
  return mean(input, {1, 2}, keepdims_);
}

// ---------------------------------------------------------------- GlobalAveragePooling1D
GlobalAveragePooling1D::GlobalAveragePooling1D(GlobalPoolingOptions options)
    : LayerBase(options.name), keepdims_(options.keepdims) {}

void GlobalAveragePooling1D::build_impl(const Shape& s) { check_sequence(s, "GlobalAveragePooling1D"); }

Variable GlobalAveragePooling1D::call(const Variable& input, bool) {
  check_sequence(input.shape(), label(*this));
  return mean(input, {1}, keepdims_);
}

}  // namespace strata::nn
