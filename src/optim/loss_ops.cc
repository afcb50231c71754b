// The per-example loss functions as fused ops: each forward is one pass over the predictions and
// each backward one pass that writes the gradient, instead of a chain of generic ops (each of which
// would allocate a tensor). Rows are the last axis; one loss per row.
// Thread-safety: pure functions; ops record on the calling thread's tapes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/node.h"
#include "strata/ops.h"
#include "strata/optim/losses.h"

namespace strata::losses {

namespace {

using detail::make_result;
using Grads = std::vector<Tensor>;
using Needs = detail::BackwardNeeds;

constexpr float kEpsilon = 1e-7f;  // keras.backend.epsilon()

void require_host_float(const char* op, const Tensor& t, const char* what) {
  STRATA_CHECK(t.defined(), InvalidArgument, op << ": " << what << " is undefined");
  STRATA_CHECK(t.device().is_cpu(), Unavailable,
               op << ": no kernel for " << what << " on " << t.device().str() << " in this build");
  STRATA_CHECK(t.dtype() == DType::kFloat32, InvalidArgument,
               op << ": " << what << " must be float32, got " << dtype_name(t.dtype()));
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
  if (t.dtype() != DType::kFloat32) t = Variable(y_true.value().to(DType::kFloat32));
  const Shape& ts = t.shape();
  const Shape& ps = y_pred.shape();
  if (ts == ps) return t;
  const bool one_more = ts.size() + 1 == ps.size() && ps.back() == 1;
  const bool one_less = ps.size() + 1 == ts.size() && ts.back() == 1;
  STRATA_CHECK((one_more || one_less) && shape_numel(ts) == shape_numel(ps), ShapeError,
               op << ": y_true " << shape_str(ts) << " does not match y_pred " << shape_str(ps));
  return strata::reshape(t, ps);
}

// A loss that averages f(t, p) over the last axis. F has value(t, p), dp(t, p) and dt(t, p).
template <class F>
Variable mean_over_last(const char* op, const Variable& y_true, const Variable& y_pred, F f) {
  require_host_float(op, y_pred.value(), "y_pred");
  const Variable t = aligned_target(op, y_true, y_pred);
  const Tensor tv = t.value(), pv = y_pred.value();
  const RowLayout l = row_layout(op, pv.shape());
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
  double value(float t, float p) const { return static_cast<double>(p - t) * (p - t); }
  float dp(float t, float p) const { return 2.0f * (p - t); }
  float dt(float t, float p) const { return -2.0f * (p - t); }
};

struct AbsoluteError {
  static float sign(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f); }
  double value(float t, float p) const { return std::fabs(p - t); }
  float dp(float t, float p) const { return sign(p - t); }
  float dt(float t, float p) const { return -sign(p - t); }
};

// Targets are smoothed as t' = t * keep + 0.5 * (1 - keep), keep = 1 - label_smoothing.
struct BinaryCrossentropyOfProbabilities {
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
  require_host_float(op, y_pred.value(), "y_pred");
  STRATA_CHECK(y_pred.shape().size() >= 2, ShapeError,
               op << ": y_pred must be [batch, ..., classes], got " << shape_str(y_pred.shape()));
  const Variable t = aligned_target(op, y_true, y_pred);
  const Tensor tv = t.value(), pv = y_pred.value();
  const RowLayout l = row_layout(op, pv.shape());
  const float keep = 1.0f - label_smoothing;
  const float spread = label_smoothing / static_cast<float>(l.n);
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
  require_host_float(op, y_pred.value(), "y_pred");
  STRATA_CHECK(y_true.defined(), InvalidArgument, op << ": labels are undefined");
  STRATA_CHECK(y_true.device().is_cpu(), Unavailable, op << ": labels on " << y_true.device().str());
  const Tensor pv = y_pred.value();
  STRATA_CHECK(pv.rank() >= 2, ShapeError, op << ": y_pred must be [batch, ..., classes], got " << pv.shape_str());
  const RowLayout l = row_layout(op, pv.shape());
  STRATA_CHECK(y_true.numel() == l.rows, ShapeError,
               op << ": " << l.rows << " rows of y_pred " << pv.shape_str() << " need as many labels, got y_true "
                  << y_true.shape_str());
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
  require_host_float(op, losses.value(), "losses");
  const Tensor lv = losses.value();
  const int64_t n = lv.numel();
  // Each loss element i has weight w[i / group] (group = 1 when the weights match elementwise).
  Tensor w;
  int64_t group = 1;
  if (sample_weight.defined()) {
    w = sample_weight.dtype() == DType::kFloat32 ? sample_weight : sample_weight.to(DType::kFloat32);
    STRATA_CHECK(w.device().is_cpu(), Unavailable, op << ": sample_weight on " << w.device().str());
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
