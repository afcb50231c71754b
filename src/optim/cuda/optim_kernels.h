// The GPU side of the optimizers, losses and metrics (optim/cuda/*.cu, built only with STRATA_WITH_CUDA): each
// optimizer's per-element update as one pass over the variable, its gradient and its slots, each fused loss's forward
// and backward, and the accuracy-style metrics' sums, with the arithmetic of the CPU loops in optimizers.cc,
// loss_ops.cc and metrics.cc. Pointers are device memory of GPU `device`; every function queues its work on that
// device's stream (core/cuda/cuda_context.h) and returns without waiting, except where it says it returns a value to
// the host. Plain C++: the host files include it without CUDA.
// Thread-safety: functions of their arguments; concurrent calls must not write the same memory.
#pragma once

#include <cstdint>

#include "strata/dtype.h"

namespace strata::optim::cuda {

// One variable's update: var, grad and up to 4 slots of n elements each. Every gradient element is first scaled by
// grad_scale and clamped to [-clip_value, clip_value]; `keep` is 1 - decay (decoupled weight decay).
struct UpdateArgs {
  int device = 0;
  float* var = nullptr;
  const float* grad = nullptr;
  float* slots[4] = {nullptr, nullptr, nullptr, nullptr};
  int64_t n = 0;
  float grad_scale = 1.0f;
  float clip_value = 0.0f;  // +inf when unset
  float keep = 1.0f;
};

void sgd_update(const UpdateArgs& a, float lr, float momentum, bool nesterov);
// alpha = lr * sqrt(1 - b2^t) / (1 - b1^t); vhat (slot 2) only when amsgrad.
void adam_update(const UpdateArgs& a, float alpha, float one_minus_b1, float one_minus_b2, float epsilon, bool amsgrad);
// velocity is slot 0; momentum slot 1 when momentum > 0; the average gradient the next slot when centered.
void rmsprop_update(const UpdateArgs& a, float lr, float rho, float epsilon, float momentum, bool centered);
void adagrad_update(const UpdateArgs& a, float lr, float epsilon);

// The sum of x[i]^2 over n float elements, accumulated in double; waits for the device and returns it.
double sum_of_squares(int device, const float* x, int64_t n);

// ---- losses (loss_ops.cc's fused ops). Rows are `rows` x `n` row-major; labels of dtype `label_dtype` (int32,
// int64, uint8 or float32 holding integers).

// From logits: out[r] = logsumexp(x_r) - x_r[label_r] and probs = softmax(x_r); from probabilities:
// out[r] = -log(clip(x_r[label_r] / s_r)) with s_r the row's sum, saved in row_sum. *bad_label (device memory, one
// int64, set here) ends as the first row whose label is outside [0, n) (its loss is NaN), or -1 when there is none.
void sparse_xent_forward(int device, const float* x, const void* labels, DType label_dtype, int64_t rows, int64_t n,
                         bool from_logits, float* out, float* probs, float* row_sum, int64_t* bad_label);
// g = d[r] * (probs - one_hot(label)) from logits; the probabilities' gradient (loss_ops.cc) otherwise.
void sparse_xent_backward(int device, const float* x, const float* probs, const float* row_sum, const void* labels,
                          DType label_dtype, int64_t rows, int64_t n, bool from_logits, const float* d, float* g);

// Categorical crossentropy with targets t' = t * keep + spread: logq (log-softmax of logits, or the log of the
// clipped normalised probabilities) and out[r] = -sum t'_k logq_k.
void categorical_xent_forward(int device, const float* t, const float* x, int64_t rows, int64_t n, bool from_logits,
                              float keep, float spread, float* logq, float* out);
// The gradients wanted: gt (may be null) = -d[r] keep logq; gp (may be null) as loss_ops.cc's.
void categorical_xent_backward(int device, const float* t, const float* x, const float* logq, int64_t rows, int64_t n,
                               bool from_logits, float keep, float spread, const float* d, float* gt, float* gp);

// Losses averaged over the last axis: which = 0 squared error, 1 absolute error, 2 binary crossentropy of
// probabilities, 3 of logits (keep as above; binary targets t' = t keep + 0.5 (1 - keep)).
enum class MeanLoss { kSquared = 0, kAbsolute = 1, kBinaryProbabilities = 2, kBinaryLogits = 3 };
void mean_loss_forward(int device, MeanLoss which, float keep, const float* t, const float* p, int64_t rows, int64_t n,
                       float* out);
// gt / gp (either may be null): d[r] / n times the derivative by t / by p.
void mean_loss_backward(int device, MeanLoss which, float keep, const float* t, const float* p, int64_t rows, int64_t n,
                        const float* d, float* gt, float* gp);

// compute_weighted_loss: out[i] = l[i] * w[i / group] (w null: no weights), or the scalar sum of that times `scale`
// (reduce). Backward: g[i] = d[reduce ? 0 : i] * scale * w[i / group].
void weighted_loss_forward(int device, const float* l, const float* w, int64_t group, int64_t n, bool reduce,
                           double scale, float* out);
void weighted_loss_backward(int device, const float* d, const float* w, int64_t group, int64_t n, bool reduce,
                            double scale, float* g);

// ---- metrics (metrics.cc's MeanMetricWrapper scores on the device)

// Which score() of metrics.cc a row gets.
enum class MetricScore {
  kAccuracy = 0,                   // elements equal to the truth
  kSparseCategoricalAccuracy = 1,  // argmax == label (labels [rows]); width when so
  kCategoricalAccuracy = 2,        // argmax == argmax of the one-hot truth; width when so
  kBinaryAccuracy = 3,             // elements where the truth equals (p > threshold)
  kSquaredError = 4,               // sum of (t - p)^2
};
struct MetricSums {
  double total = 0;  // sum over rows of score_r / width * w_r
  double count = 0;  // sum of w_r
};
// Over the rows of p ([rows, width], float32) and t (labels of `t_dtype`: int32, int64, uint8 or float32; [rows] for
// the sparse accuracy, else shaped like p) with row weights w (null: 1): the two sums a MeanMetricWrapper adds to
// its state. Waits for the device and returns them to the host.
MetricSums metric_sums(int device, MetricScore which, const float* p, const void* t, DType t_dtype, const float* w,
                       int64_t rows, int64_t width, float threshold);

}  // namespace strata::optim::cuda
