// BatchNormalization and LayerNormalization, with Keras's semantics.
//
// BatchNormalization: gamma, beta, moving_mean and moving_variance are [C]
// for C = the size of `axis` (default the last, channels_last).
//
//   nn::BatchNormalization()
//   nn::BatchNormalization({.momentum = 0.9f, .epsilon = 1e-5f, .center = false})
//
// A training call (training true, layer trainable) normalises with the batch's mean and biased
// variance over every axis but `axis` and then updates the moving statistics:
//   moving = moving * momentum + batch_statistic * (1 - momentum)
// An inference call, or any call of a frozen layer (set_trainable(false)), normalises with the moving
// statistics, as Keras does since TF 2.0. gamma and beta are trainable; the moving statistics are
// non-trainable weights (saved in checkpoints, never given gradients).
//
// LayerNormalization normalises each example over `axis` (default the last, as Keras) with its own mean and
// biased variance: y = (x - mean) / sqrt(var + epsilon) * gamma + beta, gamma and beta [C] for C = the size of
// `axis`; the same in training and inference. oneDNN's layer normalization on the host.
//
//   nn::LayerNormalization({.epsilon = 1e-6f})
//
// Thread-safety: a BatchNormalization training call updates the moving statistics; two threads must not make
// training calls of one layer at the same time. LayerNormalization has no state beyond its weights.
#pragma once

#include <string>

#include "strata/nn/layer.h"
#include "strata/nn/layer_options.h"

namespace strata::nn {

struct BatchNormalizationOptions {
  int axis = -1;
  float momentum = 0.99f;
  float epsilon = 1e-3f;
  bool center = true;  // learn beta
  bool scale = true;   // learn gamma
  InitializerSpec beta_initializer = "zeros";
  InitializerSpec gamma_initializer = "ones";
  InitializerSpec moving_mean_initializer = "zeros";
  InitializerSpec moving_variance_initializer = "ones";
  RegularizerSpec beta_regularizer = {};
  RegularizerSpec gamma_regularizer = {};
  std::string name = "";
};

class BatchNormalization : public LayerBase<BatchNormalization> {
 public:
  using Options = BatchNormalizationOptions;
  explicit BatchNormalization(BatchNormalizationOptions options = {});
  std::string class_name() const override { return "BatchNormalization"; }
  const BatchNormalizationOptions& options() const { return options_; }
  // Undefined until built; gamma() when scale is false, beta() when center is false.
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }
  const Variable& moving_mean() const { return moving_mean_; }
  const Variable& moving_variance() const { return moving_variance_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  BatchNormalizationOptions options_;
  int axis_ = -1;  // normalised at build
  int rank_ = 0;   // of the inputs it was built for
  Variable gamma_, beta_, moving_mean_, moving_variance_;
  Tensor ones_, zeros_;  // stand-ins for gamma / beta when scale / center is false
};

struct LayerNormalizationOptions {
  // One axis (Keras also takes a list; strata normalises over one axis for now).
  int axis = -1;
  float epsilon = 1e-3f;
  bool center = true;  // learn beta
  bool scale = true;   // learn gamma
  InitializerSpec beta_initializer = "zeros";
  InitializerSpec gamma_initializer = "ones";
  RegularizerSpec beta_regularizer = {};
  RegularizerSpec gamma_regularizer = {};
  std::string name = "";
};

class LayerNormalization : public LayerBase<LayerNormalization> {
 public:
  using Options = LayerNormalizationOptions;
  explicit LayerNormalization(LayerNormalizationOptions options = {});
  std::string class_name() const override { return "LayerNormalization"; }
  const LayerNormalizationOptions& options() const { return options_; }
  // Undefined until built; gamma() when scale is false, beta() when center is false.
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  LayerNormalizationOptions options_;
  int axis_ = -1;  // normalised at build
  int rank_ = 0;
  int64_t features_ = 0;
  Variable gamma_, beta_;
  Tensor ones_, zeros_;  // stand-ins for gamma / beta when scale / center is false
};

}  // namespace strata::nn
