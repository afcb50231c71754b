// Core layers: Dense, Activation, Flatten, Reshape, Dropout and Embedding, with Keras's semantics
// and defaults. Weight layouts: Dense kernel [in, out] and bias [out]; Embedding embeddings
// [input_dim, output_dim].
//
//   nn::Dense(64, "relu")
//   nn::Dense(10, {.use_bias = false, .kernel_initializer = "he_normal", .kernel_regularizer = nn::l2(1e-4)})
//   nn::Dropout(0.5, {.seed = 7})
//
// Thread-safety: as for every layer (see nn/layer.h). A seeded Dropout draws from one generator shared
// by its copies, under a lock; an unseeded one from the calling thread's default_generator().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "strata/nn/layer.h"
#include "strata/nn/layer_options.h"

namespace strata::nn {

struct DenseOptions {
  ActivationSpec activation = {};
  bool use_bias = true;
  InitializerSpec kernel_initializer = "glorot_uniform";
  InitializerSpec bias_initializer = "zeros";
  RegularizerSpec kernel_regularizer = {};
  RegularizerSpec bias_regularizer = {};
  std::string name = "";
};

// y = activation(x @ kernel + bias) over the last axis of a rank >= 2 input [..., in] -> [..., units].
class Dense : public LayerBase<Dense> {
 public:
  using Options = DenseOptions;
  explicit Dense(int64_t units, DenseOptions options = {});
  Dense(int64_t units, ActivationSpec activation);

  std::string class_name() const override { return "Dense"; }
  int64_t units() const { return units_; }
  const DenseOptions& options() const { return options_; }
  // Undefined until built; bias() also when use_bias is false.
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  int64_t units_;
  DenseOptions options_;
  Variable kernel_, bias_;
};

// Applies an activation: nn::Activation("relu"), or any function of a Variable.
class Activation : public LayerBase<Activation> {
 public:
  explicit Activation(ActivationSpec activation, std::string name = "");
  std::string class_name() const override { return "Activation"; }
  const ActivationSpec& activation() const { return activation_; }

 protected:
  Variable call(const Variable& input, bool training) override;

 private:
  ActivationSpec activation_;
};

// [batch, d1, d2, ...] -> [batch, d1 * d2 * ...]; a rank-1 input becomes [batch, 1] (as in Keras).
class Flatten : public LayerBase<Flatten> {
 public:
  explicit Flatten(std::string name = "") : LayerBase(std::move(name)) {}
  std::string class_name() const override { return "Flatten"; }

 protected:
  Variable call(const Variable& input, bool training) override;
};

// [batch, ...] -> [batch, target_shape...]; target_shape excludes the batch and may hold one -1.
class Reshape : public LayerBase<Reshape> {
 public:
  explicit Reshape(Shape target_shape, std::string name = "");
  std::string class_name() const override { return "Reshape"; }
  const Shape& target_shape() const { return target_shape_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  // The output shape for an input of this shape, or a ShapeError naming both.
  Shape output_for(const Shape& input_shape) const;
  Shape target_shape_;
};

struct DropoutOptions {
  // Unset: draws from the calling thread's strata::default_generator().
  std::optional<uint64_t> seed = {};
  std::string name = "";
};

// Training calls zero each element with probability `rate` and scale the rest by 1 / (1 - rate);
// inference calls (training false) return the input unchanged.
class Dropout : public LayerBase<Dropout> {
 public:
  explicit Dropout(float rate, DropoutOptions options = {});
  std::string class_name() const override { return "Dropout"; }
  float rate() const { return rate_; }
  const DropoutOptions& options() const { return options_; }

 protected:
  Variable call(const Variable& input, bool training) override;

 private:
  struct SeededGenerator;
  float rate_;
  DropoutOptions options_;
  std::shared_ptr<SeededGenerator> generator_;  // set when seeded; shared by copies
};

struct EmbeddingOptions {
  InitializerSpec embeddings_initializer = "random_uniform";  // U(-0.05, 0.05), as in Keras
  RegularizerSpec embeddings_regularizer = {};
  std::string name = "";
};

// Integer indices [...] (int32 or int64; float inputs are truncated to integers, as Keras casts) ->
// rows of `embeddings` [input_dim, output_dim]: [..., output_dim]. An index outside [0, input_dim) is an
// InvalidArgument naming it.
class Embedding : public LayerBase<Embedding> {
 public:
  Embedding(int64_t input_dim, int64_t output_dim, EmbeddingOptions options = {});
  std::string class_name() const override { return "Embedding"; }
  int64_t input_dim() const { return input_dim_; }
  int64_t output_dim() const { return output_dim_; }
  const EmbeddingOptions& options() const { return options_; }
  const Variable& embeddings() const { return embeddings_; }

 protected:
  void build_impl(const Shape& input_shape) override;
  Variable call(const Variable& input, bool training) override;

 private:
  int64_t input_dim_, output_dim_;
  EmbeddingOptions options_;
  Variable embeddings_;
};

}  // namespace strata::nn
