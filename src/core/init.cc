// Keras-compatible initializers.
#include "strata/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "strata/error.h"

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

Tensor orthogonal(const Shape& shape, Generator& gen, float gain) {
  STRATA_CHECK(shape.size() >= 2, InvalidArgument,
               "the orthogonal initializer needs a shape of rank >= 2, got " << shape_str(shape));
  // Keras: a [rows, cols] view (rows = every axis but the last); Q of the QR decomposition of a normal
  // [max, min] matrix, with R's diagonal made positive (what Gram-Schmidt gives), transposed when rows < cols.
  const int64_t cols = shape.back(), rows = shape_numel(shape) / std::max<int64_t>(cols, 1);
  const int64_t tall = std::max(rows, cols), narrow = std::min(rows, cols);
  Tensor draws = normal({tall, narrow}, gen, 0.0f, 1.0f);
  const float* d = draws.data<float>();
  std::vector<double> q(d, d + tall * narrow);  // row-major [tall, narrow]; columns become orthonormal
  for (int64_t j = 0; j < narrow; ++j) {
    for (int pass = 0; pass < 2; ++pass) {  // twice: modified Gram-Schmidt stays orthogonal in floats
      for (int64_t k = 0; k < j; ++k) {
        double dot = 0;
        for (int64_t i = 0; i < tall; ++i) dot += q[i * narrow + j] * q[i * narrow + k];
        for (int64_t i = 0; i < tall; ++i) q[i * narrow + j] -= dot * q[i * narrow + k];
      }
    }
    double norm = 0;
    for (int64_t i = 0; i < tall; ++i) norm += q[i * narrow + j] * q[i * narrow + j];
    norm = std::sqrt(norm);
    STRATA_CHECK(norm > 0, InvalidArgument, "the orthogonal initializer drew a singular matrix");
    for (int64_t i = 0; i < tall; ++i) q[i * narrow + j] /= norm;
  }
  Tensor t = Tensor::empty(shape);
  float* out = t.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double v = rows >= cols ? q[r * narrow + c] : q[c * narrow + r];
      out[r * cols + c] = static_cast<float>(gain * v);
    }
  }
  return t;
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
  if (name == "orthogonal") return [](const Shape& s, Generator& g) { return orthogonal(s, g); };
  STRATA_THROW(InvalidArgument, "unknown initializer '" << name
                                << "'; known: zeros, ones, random_uniform, random_normal, truncated_normal, "
                                   "glorot_uniform, glorot_normal, he_uniform, he_normal, orthogonal");
}

}  // namespace strata::init
