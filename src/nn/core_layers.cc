// Dense, Activation, Flatten, Reshape, Dropout and Embedding (see strata/nn/core_layers.h).
#include "strata/nn/core_layers.h"

#include <mutex>

#include "autograd/node.h"
#include "kernels/compute_precision.h"
#include "kernels/kernels.h"
#include "nn/layer_util.h"
#include "strata/error.h"
#include "strata/ops.h"

namespace strata::nn {

using detail::label;
using detail::with_free_batch;

// ---------------------------------------------------------------- Dense
Dense::Dense(int64_t units, DenseOptions options)
    : LayerBase(options.name), units_(units), options_(std::move(options)) {
  STRATA_CHECK(units > 0, InvalidArgument, "Dense needs a positive number of units, got " << units);
}

Dense::Dense(int64_t units, ActivationSpec activation)
    : Dense(units, DenseOptions{.activation = std::move(activation)}) {}

void Dense::build_impl(const Shape& input_shape) {
  STRATA_CHECK(input_shape.size() >= 2, ShapeError,
               "Dense wants an input of rank >= 2 [batch, ..., features], got " << shape_str(input_shape));
  const int64_t in = input_shape.back();
  STRATA_CHECK(in > 0, ShapeError, "Dense wants a positive feature size, got input " << shape_str(input_shape));
  kernel_ =
      add_weight("kernel", {in, units_}, options_.kernel_initializer.fn(), true, options_.kernel_regularizer.fn());
  if (options_.use_bias) {
    bias_ = add_weight("bias", {units_}, options_.bias_initializer.fn(), true, options_.bias_regularizer.fn());
  }
}

namespace detail {
// relu(x w + b) (relu and b optional) as one recorded op: one product and one pass forward, and backward
// one pass for relu's mask and the bias gradient beside the products. Against matmul, a broadcast add and
// relu as three ops this saved ~10 us (3%) of a 784-128-10 MLP step at batch 64 (models_bench --steps);
// the relu mask must stay branch-free (a branch on the sign cost 30 us, mispredicted half the time).
Variable dense_op(const Variable& x, const Variable& w, const Variable& b, bool relu) {
  const Tensor xv = x.value(), wv = w.value();
  Tensor y = kernels::dense(xv, wv, b.defined() ? b.value() : Tensor(), relu);
  const kernels::ComputePrecision precision = kernels::compute_precision();  // the backward computes as this did
  std::vector<Variable> inputs = {x, w};
  if (b.defined()) inputs.push_back(b);
  const Tensor relu_out = relu ? y : Tensor();
  const bool with_bias = b.defined();
  return strata::detail::make_result(
      y, relu ? "dense_relu" : "dense", std::move(inputs),
      // Not a relu fusion partner (autograd/node.h): a max pool never reads this op's 2-D output directly.
      [xv, wv, relu_out, relu, with_bias, precision](
          const Tensor& dy, const strata::detail::BackwardNeeds& needs) -> std::vector<Tensor> {
        const kernels::ComputePrecisionScope scope(precision);
        kernels::DenseGrads g =
            kernels::dense_backward(xv, wv, relu_out, dy, relu, needs[0], needs[1], with_bias && needs[2]);
        std::vector<Tensor> grads = {std::move(g.dx), std::move(g.dw)};
        if (with_bias) grads.push_back(std::move(g.db));
        return grads;
      });
}
}  // namespace detail

Variable Dense::call(const Variable& input, bool) {
  const Shape& s = input.shape();
  const int64_t in = kernel_.shape()[0];
  STRATA_CHECK(s.size() >= 2 && s.back() == in, ShapeError,
               label(*this) << " expects input [batch, ..., " << in << "], got " << shape_str(s));
  // Float inputs on the kernel's device (the host, or a GPU: kernels::dense is cuBLAS there) take the fused op;
  // anything else the general ops (which name a device mismatch).
  const bool fused =
      input.value().dtype() == DType::kFloat32 && input.value().device() == kernel_.value().device();
  const bool relu = fused && options_.activation.name() == "relu";
  const Variable x2 = s.size() == 2 ? input : reshape(input, {-1, in});
  Variable y;
  if (fused) {
    y = detail::dense_op(x2, kernel_, bias_, relu);
  } else {
    y = matmul(x2, kernel_);
    if (bias_.defined()) y = y + bias_;
  }
  if (s.size() != 2) {
    Shape out = s;
    out.back() = units_;
    y = reshape(y, out);
  }
  return relu ? y : options_.activation(y);
}

// ---------------------------------------------------------------- Activation
Activation::Activation(ActivationSpec activation, std::string name)
    : LayerBase(std::move(name)), activation_(std::move(activation)) {}

Variable Activation::call(const Variable& input, bool) { return activation_(input); }

// ---------------------------------------------------------------- Flatten
Variable Flatten::call(const Variable& input, bool) {
  const Shape& s = input.shape();
  STRATA_CHECK(!s.empty(), ShapeError, label(*this) << " wants an input with a batch dimension, got a scalar");
  return reshape(input, {s[0], s.size() == 1 ? 1 : shape_numel(Shape(s.begin() + 1, s.end()))});
}

// ---------------------------------------------------------------- Reshape
Reshape::Reshape(Shape target_shape, std::string name)
    : LayerBase(std::move(name)), target_shape_(std::move(target_shape)) {
  int unknown = 0;
  for (int64_t d : target_shape_) {
    STRATA_CHECK(d > 0 || d == -1, InvalidArgument,
                 "Reshape target shape " << shape_str(target_shape_) << " may hold only positive sizes and one -1");
    unknown += d == -1;
  }
  STRATA_CHECK(unknown <= 1, InvalidArgument,
               "Reshape target shape " << shape_str(target_shape_) << " may hold only one -1");
}

Shape Reshape::output_for(const Shape& input_shape) const {
  STRATA_CHECK(!input_shape.empty(), ShapeError,
               label(*this) << " wants an input with a batch dimension, got a scalar");
  const int64_t have = shape_numel(Shape(input_shape.begin() + 1, input_shape.end()));
  int64_t known = 1;
  int free_axis = -1;
  for (size_t i = 0; i < target_shape_.size(); ++i) {
    if (target_shape_[i] == -1) {
      free_axis = static_cast<int>(i);
    } else {
      known *= target_shape_[i];
    }
  }
  Shape out = {input_shape[0]};
  out.insert(out.end(), target_shape_.begin(), target_shape_.end());
  const bool fits = free_axis >= 0 ? (known > 0 && have % known == 0) : have == known;
  STRATA_CHECK(fits, ShapeError,
               label(*this) << " cannot reshape input " << shape_str(with_free_batch(input_shape)) << " (" << have
                            << " values per sample) to " << shape_str(with_free_batch(out)));
  if (free_axis >= 0) out[free_axis + 1] = have / known;
  return out;
}

void Reshape::build_impl(const Shape& input_shape) { output_for(input_shape); }

Variable Reshape::call(const Variable& input, bool) { return reshape(input, output_for(input.shape())); }

// ---------------------------------------------------------------- Dropout
struct Dropout::SeededGenerator {
  std::mutex mu;
  Generator gen;
};

Dropout::Dropout(float rate, DropoutOptions options)
    : LayerBase(options.name), rate_(rate), options_(std::move(options)) {
  STRATA_CHECK(rate >= 0.0f && rate < 1.0f, InvalidArgument, "Dropout rate must be in [0, 1), got " << rate);
  if (options_.seed) {
    generator_ = std::make_shared<SeededGenerator>();
    generator_->gen = Generator(*options_.seed);
  }
}

Variable Dropout::call(const Variable& input, bool training) {
  if (!training || rate_ == 0.0f) return input;
  if (generator_ == nullptr) return dropout(input, rate_, default_generator());
  std::lock_guard<std::mutex> lock(generator_->mu);
  return dropout(input, rate_, generator_->gen);
}

// ---------------------------------------------------------------- Embedding
Embedding::Embedding(int64_t input_dim, int64_t output_dim, EmbeddingOptions options)
    : LayerBase(options.name), input_dim_(input_dim), output_dim_(output_dim), options_(std::move(options)) {
  STRATA_CHECK(input_dim > 0 && output_dim > 0, InvalidArgument,
               "Embedding needs positive input_dim and output_dim, got " << input_dim << " and " << output_dim);
}

void Embedding::build_impl(const Shape&) {
  embeddings_ = add_weight("embeddings", {input_dim_, output_dim_}, options_.embeddings_initializer.fn(), true,
                           options_.embeddings_regularizer.fn());
}

namespace {
template <class T>
void check_indices(const Tensor& indices, int64_t input_dim, const std::string& who) {
  const T* p = indices.data<T>();
  for (int64_t i = 0; i < indices.numel(); ++i) {
    STRATA_CHECK(p[i] >= 0 && p[i] < input_dim, InvalidArgument,
                 who << ": index " << static_cast<int64_t>(p[i]) << " (element " << i << " of input "
                     << indices.shape_str() << ") is outside [0, input_dim = " << input_dim << ")");
  }
}
}  // namespace

Variable Embedding::call(const Variable& input, bool) {
  Tensor indices = input.value();
  if (indices.dtype() != DType::kInt32 && indices.dtype() != DType::kInt64) {
    STRATA_CHECK(indices.dtype() == DType::kFloat32, InvalidArgument,
                 label(*this) << " wants integer (or float) indices, got " << dtype_name(indices.dtype()));
    // (Tensor::to(DType) converts on the host: indices on a GPU go there and back.)
    indices = indices.device().is_cpu() ? indices.to(DType::kInt64)
                                        : indices.to(Device::cpu()).to(DType::kInt64).to(indices.device());
  }
  if (indices.device().is_cpu()) {  // on a GPU they are not read here: gather checks them there (kernels.h)
    if (indices.dtype() == DType::kInt32) {
      check_indices<int32_t>(indices, input_dim_, label(*this));
    } else {
      check_indices<int64_t>(indices, input_dim_, label(*this));
    }
  }
  return gather(embeddings_, indices);
}

}  // namespace strata::nn
