// Helpers the concrete layers share (and the tensor-parallel layers of src/parallel): naming a layer in messages,
// checking input shapes, the fused dense op, and the conv2d op's options from a convolution layer's Keras-style
// options.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "strata/error.h"
#include "strata/nn/layer.h"
#include "strata/nn/layer_options.h"
#include "strata/ops.h"

namespace strata::nn::detail {

// "Conv2D 'model/conv2d'": how messages name a layer.
inline std::string label(const Layer& layer) { return layer.class_name() + " '" + layer.path() + "'"; }

// A shape with the batch dimension shown as -1, for messages about a layer's expected input.
inline Shape with_free_batch(Shape s) {
  if (!s.empty()) s[0] = -1;
  return s;
}

// relu(x w + b) (relu and b optional) as one recorded op, float32 on the host: x [M, K], w [K, N], b [N]
// (core_layers.cc).
Variable dense_op(const Variable& x, const Variable& w, const Variable& b, bool relu);

// The conv2d op's options for a convolution layer's strides, padding, dilation and activation: a relu activation is
// fused into the convolution. Conv1D runs as a conv2d over a height of one, so it passes {1, its stride}.
inline Conv2DOptions conv2d_options(Size2 strides, Padding padding, Size2 dilation_rate,
                                    const ActivationSpec& activation) {
  return {.stride_h = strides.h,
          .stride_w = strides.w,
          .padding = padding,
          .dilation_h = dilation_rate.h,
          .dilation_w = dilation_rate.w,
          .fused_relu = activation.name() == "relu"};
}
// The same from a 2-D layer's Keras-style options (Conv2D, ChannelParallelConv2D).
template <class LayerOptions>
Conv2DOptions conv2d_options(const LayerOptions& o) {
  return conv2d_options(o.strides, o.padding.value(), o.dilation_rate, o.activation);
}

}  // namespace strata::nn::detail
