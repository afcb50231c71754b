// The optimizers' updates on a GPU (optim_kernels.h): each one pass over a variable with Thrust's for_each_n, queued
// on the device's stream without waiting (thrust::cuda::par_nosync), with the arithmetic of the CPU loops of
// optimizers.cc element for element (sqrt and division are IEEE-rounded on the GPU too; the CPU's AVX-512 Adam
// differs from exact division by at most an ulp). The norm of a gradient (clipping) is a Thrust reduction that
// returns to the host. Thread-safety: see optim_kernels.h.
#include <cuda_runtime_api.h>
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include "core/cuda/cuda_context.h"
#include "optim/cuda/optim_kernels.h"

namespace strata::optim::cuda {

namespace {

// Calls f(i) for i in [0, n) on `device`'s stream, without waiting for it.
template <class F>
void for_n(int device, int64_t n, const char* what, F f) {
  if (n <= 0) return;
  cudaStream_t stream = ::strata::detail::cuda::stream(device);
  thrust::for_each_n(thrust::cuda::par_nosync.on(stream), thrust::counting_iterator<int64_t>(0), n, f);
  ::strata::detail::cuda::check(cudaGetLastError(), what);
}

// std::min(std::max(g * scale, -clip), clip) as the CPU loops write it, NaN included: std::max(a, b) is
// (a < b ? b : a), so a NaN gradient stays NaN (fmaxf would turn it into -clip).
__device__ __forceinline__ float clipped(float g, float scale, float clip) {
  const float x = g * scale;
  const float low = x < -clip ? -clip : x;
  return clip < low ? clip : low;
}

}  // namespace

void sgd_update(const UpdateArgs& a, float lr, float momentum, bool nesterov) {
  float* var = a.var;
  const float* grad = a.grad;
  float* m = a.slots[0];
  const float keep = a.keep, scale = a.grad_scale, clip = a.clip_value, mu = momentum;
  if (momentum == 0.0f) {
    for_n(a.device, a.n, "SGD update",
          [=] __device__(int64_t i) { var[i] = var[i] * keep - lr * clipped(grad[i], scale, clip); });
  } else if (nesterov) {
    for_n(a.device, a.n, "SGD update", [=] __device__(int64_t i) {
      const float g = clipped(grad[i], scale, clip);
      const float mi = mu * m[i] - lr * g;
      m[i] = mi;
      var[i] = var[i] * keep + (mu * mi - lr * g);
    });
  } else {
    for_n(a.device, a.n, "SGD update", [=] __device__(int64_t i) {
      const float mi = mu * m[i] - lr * clipped(grad[i], scale, clip);
      m[i] = mi;
      var[i] = var[i] * keep + mi;
    });
  }
}

void adam_update(const UpdateArgs& a, float alpha, float one_minus_b1, float one_minus_b2, float epsilon,
                 bool amsgrad) {
  float* var = a.var;
  const float* grad = a.grad;
  float* m = a.slots[0];
  float* v = a.slots[1];
  float* vhat = amsgrad ? a.slots[2] : nullptr;
  const float keep = a.keep, scale = a.grad_scale, clip = a.clip_value;
  for_n(a.device, a.n, "Adam update", [=] __device__(int64_t i) {
    const float g = clipped(grad[i], scale, clip);
    const float mi = m[i] + (g - m[i]) * one_minus_b1;
    const float vi = v[i] + (g * g - v[i]) * one_minus_b2;
    m[i] = mi;
    v[i] = vi;
    float denominator_v = vi;
    if (vhat != nullptr) {
      denominator_v = vhat[i] < vi ? vi : vhat[i];  // std::max(vhat, v)
      vhat[i] = denominator_v;
    }
    var[i] = var[i] * keep - alpha * mi / (sqrtf(denominator_v) + epsilon);
  });
}

void rmsprop_update(const UpdateArgs& a, float lr, float rho, float epsilon, float momentum, bool centered) {
  float* var = a.var;
  const float* grad = a.grad;
  const bool with_momentum = momentum > 0.0f;
  float* vel = a.slots[0];
  float* mom = with_momentum ? a.slots[1] : nullptr;
  float* avg = centered ? a.slots[with_momentum ? 2 : 1] : nullptr;
  const float keep = a.keep, scale = a.grad_scale, clip = a.clip_value, one_minus_rho = 1.0f - rho, mu = momentum;
  for_n(a.device, a.n, "RMSprop update", [=] __device__(int64_t i) {
    const float g = clipped(grad[i], scale, clip);
    const float vi = rho * vel[i] + one_minus_rho * g * g;
    vel[i] = vi;
    float denominator = vi;
    if (avg != nullptr) {
      const float ai = rho * avg[i] + one_minus_rho * g;
      avg[i] = ai;
      denominator -= ai * ai;
    }
    const float increment = lr * g / sqrtf(denominator + epsilon);
    if (mom != nullptr) {
      const float mo = mu * mom[i] + increment;
      mom[i] = mo;
      var[i] = var[i] * keep - mo;
    } else {
      var[i] = var[i] * keep - increment;
    }
  });
}

void adagrad_update(const UpdateArgs& a, float lr, float epsilon) {
  float* var = a.var;
  const float* grad = a.grad;
  float* acc = a.slots[0];
  const float keep = a.keep, scale = a.grad_scale, clip = a.clip_value;
  for_n(a.device, a.n, "Adagrad update", [=] __device__(int64_t i) {
    const float g = clipped(grad[i], scale, clip);
    const float ai = acc[i] + g * g;
    acc[i] = ai;
    var[i] = var[i] * keep - lr * g / sqrtf(ai + epsilon);
  });
}

double sum_of_squares(int device, const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  cudaStream_t stream = ::strata::detail::cuda::stream(device);
  const double s = thrust::transform_reduce(
      thrust::cuda::par.on(stream), x, x + n,
      [] __device__(float v) -> double { return static_cast<double>(v) * static_cast<double>(v); }, 0.0,
      thrust::plus<double>());
  ::strata::detail::cuda::check(cudaGetLastError(), "sum of squares");
  return s;
}

}  // namespace strata::optim::cuda
