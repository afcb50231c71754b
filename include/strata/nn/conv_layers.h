// Convolution and pooling layers on NHWC images ([batch, height, width, channels]) and on sequences
// ([batch, steps, channels]), as Keras's channels_last. Conv2D's kernel is [kh, kw, in, out], Conv1D's
// [k, in, out]; their bias is [out].
//
//   nn::Conv1D(64, 3, {.padding = "causal", .dilation_rate = 2})   // [b, steps, c] -> [b, steps, 64]
//   nn::Conv2D(32, 3, "relu")
//   nn::Conv2D(64, {3, 3}, {.strides = 2, .padding = "same", .activation = "relu", .use_bias = false})
//   nn::MaxPool2D(2)                       // pool 2x2, strides = pool size
//   nn::AveragePooling2D(3, {.strides = 1, .padding = "same"})
//   nn::GlobalAveragePooling2D()           // [b, h, w, c] -> [b, c]
//   nn::GlobalAveragePooling1D()           // sequences: [b, steps, features] -> [b, features]
//
// Thread-safety: as for every layer (see nn/layer.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "strata/nn/layer.h"
#include "strata/nn/layer_options.h"

namespace strata::nn {

struct Conv2DLayerOptions {
  Size2 strides = 1;
  PaddingSpec padding = "valid";
  Size2 dilation_rate = 1;  // strides must be 1 when dilation is above 1, as in Keras
  ActivationSpec activation = {};
  bool use_bias = true;
  InitializerSpec kernel_initializer = "glorot_uniform";
  InitializerSpec bias_initializer = "zeros";
  RegularizerSpec kernel_regularizer = {};
  RegularizerSpec bias_regularizer = {};
  std::string name = "";
};

// 2-D convolution (cross-correlation, as Keras): [b, h, w, in] -> [b, oh, ow, filters], then activation.
class Conv2D : public LayerBase<Conv2D> {
 public:
  using Options = Conv2DLayerOptions;
  Conv2D(int64_t filters, Size2 kernel_size, Conv2DLayerOptions options = {});
  Conv2D(int64_t filters, Size2 kernel_size, ActivationSpec activation);

  std::string class_name() const override { return "Conv2D"; }
  int64_t filters() const { return filters_; }
  Size2 kernel_size() const { return kernel_size_; }
  const Conv2DLayerOptions& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  int64_t filters_;
  Size2 kernel_size_;
  Conv2DLayerOptions options_;
  Variable kernel_, bias_;
};

struct Conv1DLayerOptions {
  int strides = 1;
  Conv1DPaddingSpec padding = "valid";  // "valid", "same" or "causal"
  int dilation_rate = 1;                // strides must be 1 when dilation is above 1, as in Keras
  ActivationSpec activation = {};
  bool use_bias = true;
  InitializerSpec kernel_initializer = "glorot_uniform";
  InitializerSpec bias_initializer = "zeros";
  RegularizerSpec kernel_regularizer = {};
  RegularizerSpec bias_regularizer = {};
  std::string name = "";
};

// 1-D convolution over the steps of a sequence (cross-correlation, as Keras):
// [b, steps, in] -> [b, out_steps, filters], then activation. It runs as Conv2D's op on a height of one
// (oneDNN's convolution on the host), "causal" first prepending (kernel_size - 1) * dilation_rate zero steps.
class Conv1D : public LayerBase<Conv1D> {
 public:
  using Options = Conv1DLayerOptions;
  Conv1D(int64_t filters, int kernel_size, Conv1DLayerOptions options = {});
  Conv1D(int64_t filters, int kernel_size, ActivationSpec activation);

  std::string class_name() const override { return "Conv1D"; }
  int64_t filters() const { return filters_; }
  int kernel_size() const { return kernel_size_; }
  const Conv1DLayerOptions& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }
  // The zero steps "causal" padding prepends: (kernel_size - 1) * dilation_rate, else 0.
  int64_t causal_padding() const;

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  int64_t filters_;
  int kernel_size_;
  Conv1DLayerOptions options_;
  Variable kernel_, bias_;
};

struct Pooling2DOptions {
  std::optional<Size2> strides = {};  // default: the pool size
  PaddingSpec padding = "valid";
  std::string name = "";
};

namespace detail {
// What MaxPooling2D and AveragePooling2D share: options, input checks and the output shape.
class Pooling2D : public Layer {
 public:
  Pooling2D(Size2 pool_size, Pooling2DOptions options);
  Size2 pool_size() const { return pool_size_; }
  Size2 strides() const { return strides_; }
  Padding padding() const { return padding_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  // REQUIRES: input is rank 4 (checked here, naming the layer).
  Pool2DOptions checked_options(const Variable& input) const;

 private:
  Size2 pool_size_, strides_;
  Padding padding_;
};
}  // namespace detail

// Max over each pool window. Keras's class name is MaxPooling2D; MaxPool2D is its alias.
class MaxPooling2D : public detail::Pooling2D {
 public:
  explicit MaxPooling2D(Size2 pool_size = 2, Pooling2DOptions options = {})
      : Pooling2D(pool_size, std::move(options)) {}
  std::string class_name() const override { return "MaxPooling2D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<MaxPooling2D>(*this); }

 protected:
  Variable call(const Variable& input, bool training) override;
};
using MaxPool2D = MaxPooling2D;

// Mean over each pool window (padding excluded from the count, as in Keras). Alias AvgPool2D.
class AveragePooling2D : public detail::Pooling2D {
 public:
  explicit AveragePooling2D(Size2 pool_size = 2, Pooling2DOptions options = {})
      : Pooling2D(pool_size, std::move(options)) {}
  std::string class_name() const override { return "AveragePooling2D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<AveragePooling2D>(*this); }

 protected:
  Variable call(const Variable& input, bool training) override;
};
using AvgPool2D = AveragePooling2D;

struct GlobalPoolingOptions {
  bool keepdims = false;  // true: [b, 1, 1, c] (2D), [b, 1, c] (1D)
  std::string name = "";
};

// Mean over height and width: [b, h, w, c] -> [b, c].
class GlobalAveragePooling2D : public LayerBase<GlobalAveragePooling2D> {
 public:
  explicit GlobalAveragePooling2D(GlobalPoolingOptions options = {});
  std::string class_name() const override { return "GlobalAveragePooling2D"; }
  bool keepdims() const { return keepdims_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  bool keepdims_;
};
using GlobalAvgPool2D = GlobalAveragePooling2D;

// Mean over the steps of a sequence (Keras's channels_last): [b, steps, features] -> [b, features].
class GlobalAveragePooling1D : public LayerBase<GlobalAveragePooling1D> {
 public:
  explicit GlobalAveragePooling1D(GlobalPoolingOptions options = {});
  std::string class_name() const override { return "GlobalAveragePooling1D"; }
  bool keepdims() const { return keepdims_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  bool keepdims_;
};
using GlobalAvgPool1D = GlobalAveragePooling1D;

}  // namespace strata::nn
