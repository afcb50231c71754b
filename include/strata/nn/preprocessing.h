// Preprocessing layers: what a job's input pipeline does to raw inputs, kept in the model so that a saved
// model takes the inputs people have (uint8 pixels) and gives what the trained model gave (Keras's
// `keras.layers.Rescaling`).
//
//   nn::Rescaling(1.0f / 255)   // uint8 [b, 28, 28, 1] -> float32 pixels / 255
//
// Thread-safety: a Rescaling has no weights and no state; calls from several threads are safe.
#pragma once

#include <string>

#include "strata/nn/layer.h"

namespace strata::nn {

// y = float32(x) * scale + offset, elementwise, for an input of any numeric dtype (uint8, int32, int64 or
// float32; an integer input is converted to float32 first, exactly as data::to_float does, so the result has
// the bits of the job's own input pipeline). No gradient flows to an integer input.
class Rescaling : public LayerBase<Rescaling> {
 public:
  explicit Rescaling(float scale, float offset = 0.0f, std::string name = "");
  std::string class_name() const override { return "Rescaling"; }
  float scale() const { return scale_; }
  float offset() const { return offset_; }

 protected:
  Variable call(const Variable& input, bool training) override;

 private:
  float scale_, offset_;
};

}  // namespace strata::nn
