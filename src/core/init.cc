// Keras-compatible initializers.
#include "strata/init.h"

#include <cmath>

namespace strata::init {

namespace {
// Keras: stddev of a unit normal truncated to [-2, 2].
constexpr float kTruncatedStddev = 0.87962566103423978f;
}  // namespace

Tensor zeros(const Shape& shape) { return Tensor::zeros(shape); }
Tensor ones(const Shape& shape) { return Tensor::ones(shape); }
Tensor constant(const Shape& shape, float value) { return Tensor::full(shape, value); }

Tensor uniform(const Shape& shape, Generator& gen, float low, float high) {
  Tensor t = Tensor::empty(shape);
  gen.fill_uniform(t.data<float>(), t.numel(), low, high);
  return t;
}
Tensor normal(const Shape& shape, Generator& gen, float mean, float stddev) {
  Tensor t = Tensor::empty(shape);
  gen.fill_normal(t.data<float>(), t.numel(), mean, stddev);
  return t;
}
Tensor truncated_normal(const Shape& shape, Generator& gen, float mean, float stddev) {
  Tensor t = Tensor::empty(shape);
  gen.fill_truncated_normal(t.data<float>(), t.numel(), mean, stddev);
  return t;
}

std::pair<double, double> compute_fans(const Shape& shape) {
  if (shape.empty()) return {1.0, 1.0};
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  if (shape.size() == 2) return {double(shape[0]), double(shape[1])};
  double receptive = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) receptive *= double(shape[i]);
  return {receptive * double(shape[shape.size() - 2]), receptive * double(shape.back())};
}

Tensor glorot_uniform(const Shape& shape, Generator& gen) {
  const auto [fan_in, fan_out] = compute_fans(shape);
  const float limit = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
  return uniform(shape, gen, -limit, limit);
}
Tensor glorot_normal(const Shape& shape, Generator& gen) {
  const auto [fan_in, fan_out] = compute_fans(shape);
  return truncated_normal(shape, gen, 0.0f,
                          static_cast<float>(std::sqrt(2.0 / (fan_in + fan_out))) / kTruncatedStddev);
}
Tensor he_uniform(const Shape& shape, Generator& gen) {
  const float limit = static_cast<float>(std::sqrt(6.0 / compute_fans(shape).first));
  return uniform(shape, gen, -limit, limit);
}
Tensor he_normal(const Shape& shape, Generator& gen) {
  return truncated_normal(shape, gen, 0.0f,
                          static_cast<float>(std::sqrt(2.0 / compute_fans(shape).first)) / kTruncatedStddev);
}

Initializer by_name(const std::string& name) {
  if (name == "zeros") return [](const Shape& s, Generator&) { return zeros(s); };
  if (name == "ones") return [](const Shape& s, Generator&) { return ones(s); };
  if (name == "random_uniform") return [](const Shape& s, Generator& g) { return uniform(s, g); };
  if (name == "random_normal") return [](const Shape& s, Generator& g) { return normal(s, g); };
  if (name == "truncated_normal") return [](const Shape& s, Generator& g) { return truncated_normal(s, g); };
  if (name == "glorot_uniform") return glorot_uniform;
  if (name == "glorot_normal") return glorot_normal;
  if (name == "he_uniform") return he_uniform;
  if (name == "he_normal") return he_normal;
  STRATA_THROW(InvalidArgument, "unknown initializer '" << name
                                << "'; known: zeros, ones, random_uniform, random_normal, truncated_normal, "
                                   "glorot_uniform, glorot_normal, he_uniform, he_normal");
}

}  // namespace strata::init
