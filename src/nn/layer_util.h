// Helpers the concrete layers share (and the tensor-parallel layers of src/parallel): naming a layer in messages,
// checking input shapes, the fused dense op, and the conv2d op's options from a layer's Keras-style options.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "strata/error.h"
#include "strata/nn/layer.h"
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

// The conv2d op's options for a layer's options (strides, padding, dilation_rate, activation): a relu activation is
// fused into the convolution.
template <class LayerOptions>
Conv2DOptions conv2d_options(const LayerOptions& o) {
  return {.stride_h = o.strides.h,
          .stride_w = o.strides.w,
          .padding = o.padding.value(),
          .dilation_h = o.dilation_rate.h,
          .dilation_w = o.dilation_rate.w,
          .fused_relu = o.activation.name() == "relu"};
}

}  // namespace strata::nn::detail
