// Initializers: new float32 tensors filled the way Keras initializers fill them.
//
// Fans follow Keras: a [in, out] matrix has fan_in = in, fan_out = out; a convolution kernel
// [kh, kw, in, out] has fan_in = kh*kw*in and fan_out = kh*kw*out. The Glorot/He normal variants
// draw from a truncated normal whose standard deviation is corrected for the truncation, as Keras does.
// Thread-safety: each call uses only the generator it is given.
#pragma once

#include <functional>
#include <string>

#include "strata/random.h"
#include "strata/tensor.h"

namespace strata::init {

Tensor zeros(const Shape& shape);
Tensor ones(const Shape& shape);
Tensor constant(const Shape& shape, float value);
Tensor uniform(const Shape& shape, Generator& gen, float low = -0.05f, float high = 0.05f);
Tensor normal(const Shape& shape, Generator& gen, float mean = 0.0f, float stddev = 0.05f);
Tensor truncated_normal(const Shape& shape, Generator& gen, float mean = 0.0f, float stddev = 0.05f);
Tensor glorot_uniform(const Shape& shape, Generator& gen);
Tensor glorot_normal(const Shape& shape, Generator& gen);
Tensor he_uniform(const Shape& shape, Generator& gen);
Tensor he_normal(const Shape& shape, Generator& gen);
// A matrix with orthonormal rows or columns (whichever are fewer), times `gain`; a shape of rank > 2 is
// seen as [every axis but the last, last], as Keras's Orthogonal does. The recurrent kernels' default.
Tensor orthogonal(const Shape& shape, Generator& gen, float gain = 1.0f);

// {fan_in, fan_out} of a weight shape, as Keras computes them.
std::pair<double, double> compute_fans(const Shape& shape);

// An initializer chosen by its Keras name ("zeros", "ones", "random_uniform", "random_normal",
// "truncated_normal", "glorot_uniform", "glorot_normal", "he_uniform", "he_normal", "orthogonal"); an unknown name
// is an InvalidArgument listing the known ones.
using Initializer = std::function<Tensor(const Shape&, Generator&)>;
Initializer by_name(const std::string& name);

}  // namespace strata::init
