// The per-example loss functions as fused ops: each forward is one pass over the predictions and
// each backward one pass that writes the gradient, instead of a chain of generic ops (each of which
// would allocate a tensor). Rows are the last axis; one loss per row. Predictions on a GPU take the same ops
// in optim/cuda/losses.cu (one launch per forward and per backward, on the device's stream); labels or targets on
// the host are copied to the predictions' device first. The sparse loss reads one value back (whether every label
// was in range), so its forward waits for the device.
// Thread-safety: pure functions; ops record on the calling thread's tapes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/node.h"
#include "optim/cuda/optim_kernels.h"
#include "strata/ops.h"
#include "strata/optim/losses.h"

namespace strata::losses {

namespace {

namespace cuda = ::strata::optim::cuda;
using detail::make_result;
using Grads = std::vector<Tensor>;
using Needs = detail::BackwardNeeds;

constexpr float kEpsilon = 1e-7f;  // keras.backend.epsilon()

void require_float(const char* op, const Tensor& t, const char* what) {
  STRATA_CHECK(t.defined(), InvalidArgument, op << ": " << what << " is undefined");
  STRATA_CHECK(t.dtype() == DType::kFloat32, InvalidArgument,
               op << ": " << what << " must be float32, got " << dtype_name(t.dtype()));
}

// Whether `t` lives on a GPU (the op then runs there); Unavailable in a build without CUDA, which cannot have made
// such a tensor anyway.
bool on_gpu(const char* op, const Tensor& t) {
  if (t.device().is_cpu()) return false;
#ifndef STRATA_WITH_CUDA
  STRATA_THROW(Unavailable, op << ": a tensor on " << t.device().str() << " in a build without CUDA");
#else
  (void)op;
  return true;
#endif
}

// `t` on `device` (a copy when it is elsewhere), as `dtype`. A conversion of a GPU tensor goes through the host
// (Tensor::to(DType) is host-only): labels and targets are small.
Tensor placed(const Tensor& t, Device device, DType dtype) {
  Tensor out = t;
  if (out.dtype() != dtype) out = (out.device().is_cpu() ? out : out.to(Device::cpu())).to(dtype);
  return out.device() == device ? out : out.to(device);
}

// [rows, n] view of a prediction tensor: rank >= 2 averages/sums over the last axis; rank 1 is one
// element per row. Returns the per-row output shape.
struct RowLayout {
  int64_t rows = 0, n = 0;
  Shape out_shape;
};
RowLayout row_layout(const char* op, const Shape& shape) {
  STRATA_CHECK(!shape.empty(), ShapeError, op << ": predictions must have rank >= 1, got a scalar");
  RowLayout l;
  if (shape.size() == 1) {
    l.rows = shape[0];
    l.n = 1;
    l.out_shape = shape;
  } else {
    l.n = shape.back();
    l.out_shape = Shape(shape.begin(), shape.end() - 1);
    l.rows = shape_numel(l.out_shape);
  }
  return l;
}

// y_true as a float tensor shaped like y_pred (Keras's squeeze_or_expand_to_same_rank).
Variable aligned_target(const char* op, const Variable& y_true, const Variable& y_pred) {
  STRATA_CHECK(y_true.defined() && y_pred.defined(), InvalidArgument, op << ": y_true and y_pred must be defined");
  Variable t = y_true;
  if (t.dtype() != DType::kFloat32 || t.value().device() != y_pred.value().device())
    t = Variable(placed(y_true.value(), y_pred.value().device(), DType::kFloat32));
  const Shape& ts = t.shape();
  const Shape& ps = y_pred.shape();
  if (ts == ps) return t;
  const bool one_more = ts.size() + 1 == ps.size() && ps.back() == 1;
  const bool one_less = ps.size() + 1 == ts.size() && ts.back() == 1;
  STRATA_CHECK((one_more || one_less) && shape_numel(ts) == shape_numel(ps), ShapeError,
               op << ": y_true " << shape_str(ts) << " does not match y_pred " << shape_str(ps));
  return strata::reshape(t, ps);
}

#ifdef STRATA_WITH_CUDA
// mean_over_last on a GPU: the loss `kind` (with `keep` for the binary ones) in one launch each way.
Variable mean_over_last_gpu(const char* op, const Variable& t, const Variable& y_pred, const RowLayout& l,
                            cuda::MeanLoss kind, float keep) {
  const Tensor tv = t.value(), pv = y_pred.value();
  const Device device = pv.device();
  Tensor out = Tensor::empty(l.out_shape, DType::kFloat32, device);
  cuda::mean_loss_forward(device.index, kind, keep, tv.data<float>(), pv.data<float>(), l.rows, l.n,
                          out.data<float>());
  return make_result(out, op, {t, y_pred}, [tv, pv, l, kind, keep](const Tensor& dy, const Needs& needs) -> Grads {
    const Device device = pv.device();
    const Tensor d = placed(dy, device, DType::kFloat32);
    Grads g(2);
    for (int which = 0; which < 2; ++which)
      if (needs[which]) g[which] = Tensor::empty(pv.shape(), DType::kFloat32, device);
    cuda::mean_loss_backward(device.index, kind, keep, tv.data<float>(), pv.data<float>(), l.rows, l.n,
                             d.data<float>(), g[0].defined() ? g[0].data<float>() : nullptr,
                             g[1].defined() ? g[1].data<float>() : nullptr);
    return g;
  });
}
#endif

// A loss that averages f(t, p) over the last axis. F has value(t, p), dp(t, p) and dt(t, p), and names its GPU form
// (kGpu, with its `keep`).
template <class F>
Variable mean_over_last(const char* op, const Variable& y_true, const Variable& y_pred, F f) {
  require_float(op, y_pred.value(), "y_pred");
  const Variable t = aligned_target(op, y_true, y_pred);
  const Tensor tv = t.value(), pv = y_pred.value();
  const RowLayout l = row_layout(op, pv.shape());
  if (on_gpu(op, pv)) {
#ifdef STRATA_WITH_CUDA
    return mean_over_last_gpu(op, t, y_pred, l, F::kGpu, f.keep);
#endif
  }
  Tensor out = Tensor::empty(l.out_shape);
  {
    const float* tp = tv.data<float>();
    const float* pp = pv.data<float>();
    float* o = out.data<float>();
    for (int64_t r = 0; r < l.rows; ++r) {
      double s = 0;
      for (int64_t k = r * l.n; k < (r + 1) * l.n; ++k) s += f.value(tp[k], pp[k]);
      o[r] = static_cast<float>(s / static_cast<double>(l.n));
    }
  }
  return make_result(out, op, {t, y_pred}, [tv, pv, l, f](const Tensor& dy, const Needs& needs) -> Grads {
    Grads g(2);
    const float* tp = tv.data<float>();
    const float* pp = pv.data<float>();
    const float* d = dy.data<float>();
    const float inv_n = 1.0f / static_cast<float>(l.n);
    for (int which = 0; which < 2; ++which) {
      if (!needs[which]) continue;
      Tensor grad = Tensor::empty(pv.shape());
      float* gp = grad.data<float>();
      for (int64_t r = 0; r < l.rows; ++r) {
        const float scale = d[r] * inv_n;
        for (int64_t k = r * l.n; k < (r + 1) * l.n; ++k) {
          gp[k] = scale * (which == 0 ? f.dt(tp[k], pp[k]) : f.dp(tp[k], pp[k]));
        }
      }
      g[which] = grad;
    }
    return g;
  });
}

struct SquaredError {
  static constexpr cuda::MeanLoss kGpu = cuda::MeanLoss::kSquared;
  float keep = 1.0f;  // (unused: only the binary losses smooth their targets)
  double value(float t, float p) const { return static_cast<double>(p - t) * (p - t); }
  float dp(float t, float p) const { return 2.0f * (p - t); }
  float dt(float t, float p) const { return -2.0f * (p - t); }
};

struct AbsoluteError {
  static constexpr cuda::MeanLoss kGpu = cuda::MeanLoss::kAbsolute;
  float keep = 1.0f;  // (unused)
  static float sign(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f); }
  double value(float t, float p) const { return std::fabs(p - t); }
  float dp(float t, float p) const { return sign(p - t); }
  float dt(float t, float p) const { return -sign(p - t); }
};

// Targets are smoothed as t' = t * keep + 0.5 * (1 - keep), keep = 1 - label_smoothing.
struct BinaryCrossentropyOfProbabilities {
  static constexpr cuda::MeanLoss kGpu = cuda::MeanLoss::kBinaryProbabilities;
  float keep = 1.0f;
  float smooth(float t) const { return t * keep + 0.5f * (1.0f - keep); }
  static float clipped(float p) { return std::min(std::max(p, kEpsilon), 1.0f - kEpsilon); }
  double value(float t, float p) const {
    const double ts = smooth(t), pc = clipped(p);
    return -(ts * std::log(pc) + (1.0 - ts) * std::log(1.0 - pc));
  }
  float dp(float t, float p) const {
    if (p < kEpsilon || p > 1.0f - kEpsilon) return 0.0f;  // the clip's gradient
    const float ts = smooth(t);
    return -(ts / p - (1.0f - ts) / (1.0f - p));
  }
  float dt(float, float p) const {
    const float pc = clipped(p);
    return -(std::log(pc) - std::log(1.0f - pc)) * keep;
  }
};

// max(x, 0) - x t' + log(1 + exp(-|x|)), as tf.nn.sigmoid_cross_entropy_with_logits.
struct BinaryCrossentropyOfLogits {
  static constexpr cuda::MeanLoss kGpu = cuda::MeanLoss::kBinaryLogits;
  float keep = 1.0f;
  float smooth(float t) const { return t * keep + 0.5f * (1.0f - keep); }
  double value(float t, float x) const {
    const double xd = x;
    return std::max(xd, 0.0) - xd * smooth(t) + std::log1p(std::exp(-std::fabs(xd)));
  }
  float dp(float t, float x) const {
    const float s = x >= 0 ? 1.0f / (1.0f + std::exp(-x)) : std::exp(x) / (1.0f + std::exp(x));
    return s - smooth(t);
  }
  float dt(float, float x) const { return -x * keep; }
};

void check_label_smoothing(const char* op, float label_smoothing) {
  STRATA_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f, InvalidArgument,
               op << ": label_smoothing must be in [0, 1], got " << label_smoothing);
}

// Label i of `labels` (any integer dtype or float holding integers) as int64.
int64_t label_at(const Tensor& labels, int64_t i) {
  switch (labels.dtype()) {
    case DType::kInt32:
      return labels.data<int32_t>()[i];
    case DType::kInt64:
      return labels.data<int64_t>()[i];
    case DType::kUInt8:
      return labels.data<uint8_t>()[i];
    case DType::kFloat32:
      return static_cast<int64_t>(std::floor(labels.data<float>()[i]));
    default:
      break;
  }
  STRATA_THROW(InvalidArgument, "sparse_categorical_crossentropy: labels must be integers or floats, got "
                                    << dtype_name(labels.dtype()));
}

}  // namespace

Variable mean_squared_error(const Variable& y_true, const Variable& y_pred) {
  return mean_over_last("mean_squared_error", y_true, y_pred, SquaredError{});
}

Variable mean_absolute_error(const Variable& y_true, const Variable& y_pred) {
  return mean_over_last("mean_absolute_error", y_true, y_pred, AbsoluteError{});
}

Variable binary_crossentropy(const Variable& y_true, const Variable& y_pred, bool from_logits, float label_smoothing) {
  check_label_smoothing("binary_crossentropy", label_smoothing);
  const float keep = 1.0f - label_smoothing;
  if (from_logits) {
    return mean_over_last("binary_crossentropy", y_true, y_pred, BinaryCrossentropyOfLogits{keep});
  }
  return mean_over_last("binary_crossentropy", y_true, y_pred, BinaryCrossentropyOfProbabilities{keep});
}

Variable categorical_crossentropy(const Variable& y_true, const Variable& y_pred, bool from_logits,
                                  float label_smoothing) {
  const char* op = "categorical_crossentropy";
  check_label_smoothing(op, label_smoothing);
  require_float(op, y_pred.value(), "y_pred");
  STRATA_CHECK(y_pred.shape().size() >= 2, ShapeError,
               op << ": y_pred must be [batch, ..., classes], got " << shape_str(y_pred.shape()));
  const Variable t = aligned_target(op, y_true, y_pred);
  const Tensor tv = t.value(), pv = y_pred.value();
  const RowLayout l = row_layout(op, pv.shape());
  const float keep = 1.0f - label_smoothing;
  const float spread = label_smoothing / static_cast<float>(l.n);
  if (on_gpu(op, pv)) {
#ifdef STRATA_WITH_CUDA
    const Device device = pv.device();
    Tensor logq = Tensor::empty(pv.shape(), DType::kFloat32, device);
    Tensor out = Tensor::empty(l.out_shape, DType::kFloat32, device);
    cuda::categorical_xent_forward(device.index, tv.data<float>(), pv.data<float>(), l.rows, l.n, from_logits, keep,
                                   spread, logq.data<float>(), out.data<float>());
    return make_result(out, op, {t, y_pred},
                       [tv, pv, logq, l, keep, spread, from_logits](const Tensor& dy, const Needs& needs) -> Grads {
                         const Device device = pv.device();
                         const Tensor d = placed(dy, device, DType::kFloat32);
                         Grads g(2);
                         for (int which = 0; which < 2; ++which)
                           if (needs[which]) g[which] = Tensor::empty(pv.shape(), DType::kFloat32, device);
                         cuda::categorical_xent_backward(device.index, tv.data<float>(), pv.data<float>(),
                                                         logq.data<float>(), l.rows, l.n, from_logits, keep, spread,
                                                         d.data<float>(),
                                                         g[0].defined() ? g[0].data<float>() : nullptr,
                                                         g[1].defined() ? g[1].data<float>() : nullptr);
                         return g;
                       });
#endif
  }
  // Per row: logits -> log_softmax (saved as the log-probabilities); probabilities -> normalised and
  // clipped, log saved. The loss is -sum t' * logq.
  Tensor logq = Tensor::empty(pv.shape());
  Tensor out = Tensor::empty(l.out_shape);
  {
    const float* tp = tv.data<float>();
    const float* pp = pv.data<float>();
    float* lq = logq.data<float>();
    float* o = out.data<float>();
    for (int64_t r = 0; r < l.rows; ++r) {
      const float* x = pp + r * l.n;
      float* y = lq + r * l.n;
      if (from_logits) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t k = 0; k < l.n; ++k) m = std::max(m, x[k]);
        float s = 0;
        for (int64_t k = 0; k < l.n; ++k) s += std::exp(x[k] - m);
        const float lse = m + std::log(s);
        for (int64_t k = 0; k < l.n; ++k) y[k] = x[k] - lse;
      } else {
        double s = 0;
        for (int64_t k = 0; k < l.n; ++k) s += x[k];
        for (int64_t k = 0; k < l.n; ++k) {
          const float q = static_cast<float>(x[k] / s);
          y[k] = std::log(std::min(std::max(q, kEpsilon), 1.0f - kEpsilon));
        }
      }
      double loss = 0;
      for (int64_t k = 0; k < l.n; ++k) loss -= static_cast<double>(tp[r * l.n + k] * keep + spread) * y[k];
      o[r] = static_cast<float>(loss);
    }
  }
  return make_result(out, op, {t, y_pred},
                     [tv, pv, logq, l, keep, spread, from_logits](const Tensor& dy, const Needs& needs) -> Grads {
                       Grads g(2);
                       const float* tp = tv.data<float>();
                       const float* pp = pv.data<float>();
                       const float* lq = logq.data<float>();
                       const float* d = dy.data<float>();
                       if (needs[0]) {
                         g[0] = Tensor::empty(pv.shape());
                         float* gt = g[0].data<float>();
                         for (int64_t i = 0; i < pv.numel(); ++i) gt[i] = -d[i / l.n] * keep * lq[i];
                       }
                       if (!needs[1]) return g;
                       g[1] = Tensor::empty(pv.shape());
                       float* gp = g[1].data<float>();
                       for (int64_t r = 0; r < l.rows; ++r) {
                         const float* t = tp + r * l.n;
                         const float* y = lq + r * l.n;
                         float* out_row = gp + r * l.n;
                         if (from_logits) {  // softmax * sum(t') - t'
                           double total = 0;
                           for (int64_t k = 0; k < l.n; ++k) total += t[k] * keep + spread;
                           for (int64_t k = 0; k < l.n; ++k) {
                             out_row[k] = d[r] * (std::exp(y[k]) * static_cast<float>(total) - (t[k] * keep + spread));
                           }
                           continue;
                         }
                         // q = p / s, loss = -sum t' log(clip(q)): dq_k = -t'_k / q_k inside the clip;
                         // dp_j = (dq_j - sum_k dq_k q_k) / s.
                         const float* x = pp + r * l.n;
                         double s = 0;
                         for (int64_t k = 0; k < l.n; ++k) s += x[k];
                         double dot = 0;
                         for (int64_t k = 0; k < l.n; ++k) {
                           const float q = static_cast<float>(x[k] / s);
                           const bool inside = q >= kEpsilon && q <= 1.0f - kEpsilon;
                           out_row[k] = inside ? -(t[k] * keep + spread) / q : 0.0f;
                           dot += static_cast<double>(out_row[k]) * q;
                         }
                         const float scale = static_cast<float>(d[r] / s);
                         for (int64_t k = 0; k < l.n; ++k) out_row[k] = scale * (out_row[k] - static_cast<float>(dot));
                       }
                       return g;
                     });
}

Variable sparse_categorical_crossentropy(const Tensor& y_true, const Variable& y_pred, bool from_logits) {
  const char* op = "sparse_categorical_crossentropy";
  require_float(op, y_pred.value(), "y_pred");
  STRATA_CHECK(y_true.defined(), InvalidArgument, op << ": labels are undefined");
  const Tensor pv = y_pred.value();
  STRATA_CHECK(pv.rank() >= 2, ShapeError, op << ": y_pred must be [batch, ..., classes], got " << pv.shape_str());
  const RowLayout l = row_layout(op, pv.shape());
  STRATA_CHECK(y_true.numel() == l.rows, ShapeError,
               op << ": " << l.rows << " rows of y_pred " << pv.shape_str() << " need as many labels, got y_true "
                  << y_true.shape_str());
  if (on_gpu(op, pv)) {
#ifdef STRATA_WITH_CUDA
    const DType ld = y_true.dtype();
    STRATA_CHECK(ld == DType::kInt32 || ld == DType::kInt64 || ld == DType::kUInt8 || ld == DType::kFloat32,
                 InvalidArgument, op << ": labels must be integers or floats, got " << dtype_name(ld));
    const Device device = pv.device();
    const Tensor labels = placed(y_true, device, ld);
    Tensor out = Tensor::empty(l.out_shape, DType::kFloat32, device);
    Tensor probs = from_logits ? Tensor::empty(pv.shape(), DType::kFloat32, device) : Tensor();
    Tensor row_sum = from_logits ? Tensor() : Tensor::empty({l.rows}, DType::kFloat32, device);
    Tensor bad = Tensor::empty({1}, DType::kInt64, device);
    cuda::sparse_xent_forward(device.index, pv.data<float>(), labels.raw_data(), ld, l.rows, l.n, from_logits,
                              out.data<float>(), from_logits ? probs.data<float>() : nullptr,
                              from_logits ? nullptr : row_sum.data<float>(), bad.data<int64_t>());
    const int64_t bad_row = bad.item<int64_t>();  // the step's one wait in the loss: were the labels in range
    if (bad_row >= 0) {
      const Tensor label = labels.reshape({l.rows}).slice(bad_row, bad_row + 1).to(Device::cpu());
      STRATA_THROW(InvalidArgument, op << ": label " << label_at(label, 0) << " at index " << bad_row
                                       << " is outside [0, " << l.n << ")");
    }
    return make_result(out, op, {y_pred},
                       [pv, probs, row_sum, labels, l, from_logits](const Tensor& dy, const Needs&) -> Grads {
                         const Device device = pv.device();
                         const Tensor d = placed(dy, device, DType::kFloat32);
                         Tensor g = Tensor::empty(pv.shape(), DType::kFloat32, device);
                         cuda::sparse_xent_backward(device.index, pv.data<float>(),
                                                    from_logits ? probs.data<float>() : nullptr,
                                                    from_logits ? nullptr : row_sum.data<float>(), labels.raw_data(),
                                                    labels.dtype(), l.rows, l.n, from_logits, d.data<float>(),
                                                    g.data<float>());
                         return {g};
                       });
#endif
  }
  STRATA_CHECK(y_true.device().is_cpu(), InvalidArgument,
               op << ": labels on " << y_true.device().str() << " for predictions on the host");
  std::vector<int64_t> labels(static_cast<size_t>(l.rows));
  for (int64_t r = 0; r < l.rows; ++r) {
    labels[r] = label_at(y_true, r);
    STRATA_CHECK(labels[r] >= 0 && labels[r] < l.n, InvalidArgument,
                 op << ": label " << labels[r] << " at index " << r << " is outside [0, " << l.n << ")");
  }
  Tensor out = Tensor::empty(l.out_shape);
  const float* pp = pv.data<float>();
  float* o = out.data<float>();
  if (from_logits) {
    // One pass of exps: the softmax is kept for the backward, which is then (softmax - one_hot) * d.
    Tensor probs = Tensor::empty(pv.shape());
    float* pr = probs.data<float>();
    for (int64_t r = 0; r < l.rows; ++r) {
      const float* x = pp + r * l.n;
      float* e = pr + r * l.n;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < l.n; ++k) m = std::max(m, x[k]);
      float s = 0;
      for (int64_t k = 0; k < l.n; ++k) {
        e[k] = std::exp(x[k] - m);
        s += e[k];
      }
      const float inv = 1.0f / s;
      for (int64_t k = 0; k < l.n; ++k) e[k] *= inv;
      o[r] = m + std::log(s) - x[labels[r]];
    }
    return make_result(out, op, {y_pred},
                       [probs, l, labels = std::move(labels)](const Tensor& dy, const Needs&) -> Grads {
                         Tensor g = Tensor::empty(probs.shape());
                         const float* pr = probs.data<float>();
                         const float* d = dy.data<float>();
                         float* gp = g.data<float>();
                         for (int64_t r = 0; r < l.rows; ++r) {
                           const float dr = d[r];
                           for (int64_t k = r * l.n; k < (r + 1) * l.n; ++k) gp[k] = dr * pr[k];
                           gp[r * l.n + labels[r]] -= dr;
                         }
                         return {g};
                       });
  }
  // Probabilities: loss = -log(clip(p_y / s)) with s the row's sum, which is saved.
  std::vector<float> row_sum(static_cast<size_t>(l.rows));
  for (int64_t r = 0; r < l.rows; ++r) {
    const float* x = pp + r * l.n;
    double s = 0;
    for (int64_t k = 0; k < l.n; ++k) s += x[k];
    row_sum[r] = static_cast<float>(s);
    const float q = static_cast<float>(x[labels[r]] / s);
    o[r] = -std::log(std::min(std::max(q, kEpsilon), 1.0f - kEpsilon));
  }
  return make_result(
      out, op, {y_pred},
      [pv, l, labels = std::move(labels), row_sum = std::move(row_sum)](const Tensor& dy, const Needs&) -> Grads {
        Tensor g = Tensor::empty(pv.shape());
        const float* x = pv.data<float>();
        const float* d = dy.data<float>();
        float* gp = g.data<float>();
        for (int64_t r = 0; r < l.rows; ++r) {
          const float* xr = x + r * l.n;
          float* gr = gp + r * l.n;
          const int64_t y = labels[r];
          // dp_j = dq * (δ_jy - q) / s with q = p_y / s and dq = -1 / q inside the clip.
          const float s = row_sum[r];
          const float q = xr[y] / s;
          const bool inside = q >= kEpsilon && q <= 1.0f - kEpsilon;
          const float dq = inside ? -1.0f / q : 0.0f;
          const float scale = d[r] / s;
          for (int64_t k = 0; k < l.n; ++k) gr[k] = -scale * dq * q;
          gr[y] += scale * dq;
        }
        return {g};
      });
}

Variable compute_weighted_loss(const Variable& losses, const Tensor& sample_weight, Reduction reduction) {
  const char* op = "compute_weighted_loss";
  require_float(op, losses.value(), "losses");
  const Tensor lv = losses.value();
  const int64_t n = lv.numel();
  // Each loss element i has weight w[i / group] (group = 1 when the weights match elementwise).
  Tensor w;
  int64_t group = 1;
  if (sample_weight.defined()) {
    w = placed(sample_weight, lv.device(), DType::kFloat32);  // on the losses' device
    const int64_t batch = lv.rank() == 0 ? 1 : lv.dim(0);
    if (w.numel() == n) {
      group = 1;
    } else if (w.numel() == batch && batch > 0) {
      group = n / batch;
    } else {
      STRATA_THROW(ShapeError, op << ": sample_weight " << w.shape_str() << " matches neither the losses "
                                  << lv.shape_str() << " nor their first axis");
    }
  }
  if (on_gpu(op, lv)) {
#ifdef STRATA_WITH_CUDA
    if (reduction == Reduction::kNone && !w.defined()) return losses;
    const Device device = lv.device();
    const bool reduce = reduction != Reduction::kNone;
    const double scale = reduction == Reduction::kSumOverBatchSize ? (n > 0 ? 1.0 / static_cast<double>(n) : 0.0)
                                                                   : 1.0;
    Tensor out = Tensor::empty(reduce ? Shape{} : lv.shape(), DType::kFloat32, device);
    cuda::weighted_loss_forward(device.index, lv.data<float>(), w.defined() ? w.data<float>() : nullptr, group, n,
                                reduce, scale, out.data<float>());
    const Shape shape = lv.shape();
    return make_result(out, op, {losses}, [w, group, n, reduce, scale, shape](const Tensor& dy, const Needs&) -> Grads {
      const Device device = dy.device();
      Tensor g = Tensor::empty(shape, DType::kFloat32, device);
      cuda::weighted_loss_backward(device.index, dy.data<float>(), w.defined() ? w.data<float>() : nullptr, group,
                                   n, reduce, scale, g.data<float>());
      return {g};
    });
#endif
  }
  const float* wp = w.defined() ? w.data<float>() : nullptr;
  const float* lp = lv.data<float>();
  if (reduction == Reduction::kNone) {
    if (!w.defined()) return losses;
    Tensor out = Tensor::empty(lv.shape());
    float* o = out.data<float>();
    for (int64_t i = 0; i < n; ++i) o[i] = lp[i] * wp[i / group];
    return make_result(out, op, {losses}, [w, group, n](const Tensor& dy, const Needs&) -> Grads {
      Tensor g = Tensor::empty(dy.shape());
      const float* d = dy.data<float>();
      const float* wq = w.data<float>();
      float* gp = g.data<float>();
      for (int64_t i = 0; i < n; ++i) gp[i] = d[i] * wq[i / group];
      return {g};
    });
  }
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>(lp[i]) * (wp ? wp[i / group] : 1.0f);
  // Keras divides by the number of losses (divide_no_nan: an empty batch gives 0).
  const double scale = reduction == Reduction::kSum ? 1.0 : (n > 0 ? 1.0 / static_cast<double>(n) : 0.0);
  const Shape shape = lv.shape();
  return make_result(Tensor::scalar(static_cast<float>(total * scale)), op, {losses},
                     [w, group, n, scale, shape](const Tensor& dy, const Needs&) -> Grads {
                       Tensor g = Tensor::empty(shape);
                       const float base = dy.data<float>()[0] * static_cast<float>(scale);
                       float* gp = g.data<float>();
                       if (!w.defined()) {
                         for (int64_t i = 0; i < n; ++i) gp[i] = base;
                       } else {
                         const float* wq = w.data<float>();
                         for (int64_t i = 0; i < n; ++i) gp[i] = base * wq[i / group];
                       }
                       return {g};
                     });
}

}  // namespace strata::losses
