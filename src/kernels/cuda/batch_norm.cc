// Batch normalization on NVIDIA GPUs through cuDNN, channels last, with the contracts of kernels.h
// (cuda_kernels.h): x [..., C] is normalised per channel with statistics over every other axis.
//
// x is [M, C] in memory (M = numel / C), which cuDNN sees as [M, C, 1, 1] (the same bytes in NCHW and NHWC) with
// CUDNN_BATCHNORM_SPATIAL: per-channel statistics over M. Epsilon is passed as given (cuDNN 9's minimum is 0).
// Training returns the batch mean and the biased batch variance, the one that normalised x, as the CPU kernel does.
// cuDNN hands back the mean and 1/sqrt(var + eps) as its saved statistics, and, through its running averages, the
// unbiased variance var * M / (M - 1): with an average factor of 1 the running buffers (zeroed first, since cuDNN
// scales their old contents by 0) receive exactly the batch mean and unbiased variance, and the variance is scaled
// back by (M - 1) / M, which loses no precision (recovering var from the inverse standard deviation would, when
// var is small beside eps). With one row (M = 1) the statistics are set directly and y is cuDNN's inference with them.
// Backward uses the mean and variance it is given, as the CPU kernel does, not ones recomputed from x: cuDNN takes
// them as the saved mean and inverse standard deviation, the latter computed by dnn_kernels.cu.
// Thread-safety: safe to call concurrently (per-thread cuDNN handles; no shared state).
#include <climits>
#include <cmath>

#include "core/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudnn_util.h"
#include "kernels/cuda/dnn_kernels.h"
#include "kernels/cuda/library_handles.h"
#include "strata/error.h"

namespace strata::kernels::cuda {

namespace {

struct BnShape {
  int64_t m = 0, c = 0;
};

// The checks of the CPU kernel (kernels/cpu/batch_norm.cc), with its messages.
BnShape bn_shape(const char* op, const Tensor& x) {
  STRATA_CHECK(x.rank() >= 1, ShapeError, op << ": input must have a channel axis, got " << x.shape_str());
  BnShape s;
  s.c = x.dim(-1);
  s.m = s.c == 0 ? 0 : x.numel() / s.c;
  return s;
}

void check_channel_vector(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  STRATA_CHECK(t.rank() == 1 && t.dim(0) == x.dim(-1), ShapeError,
               op << ": " << name << " " << t.shape_str() << " does not match the " << x.dim(-1)
                  << " channels of input " << x.shape_str());
}

void check_epsilon(const char* op, float epsilon) {
  STRATA_CHECK(epsilon >= 0.0f && std::isfinite(epsilon), InvalidArgument,
               op << ": epsilon must be finite and >= 0, got " << epsilon);
}

void check_float(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) check_dtype(op, *t, DType::kFloat32);
}

// x as [M, C, 1, 1] and the per-channel tensors as cuDNN derives them ([1, C, 1, 1]).
struct BnDescs {
  TensorDescriptor x, channel;
};

void describe(const char* op, const BnShape& s, BnDescs& d) {
  STRATA_CHECK(
      s.m * s.c <= INT_MAX, ShapeError,
      op << ": [" << s.m << ", " << s.c << "] is beyond cuDNN's limit of " << INT_MAX << " elements per tensor");
  check_cudnn(cudnnSetTensor4dDescriptor(d.x.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, to_int(s.m, op, "batch"),
                                         to_int(s.c, op, "channels"), 1, 1),
              "cudnnSetTensor4dDescriptor (batch norm)");
  check_cudnn(cudnnDeriveBNTensorDescriptor(d.channel.get(), d.x.get(), CUDNN_BATCHNORM_SPATIAL),
              "cudnnDeriveBNTensorDescriptor");
}

}  // namespace

BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon) {
  const char* op = "batch_norm_training";
  check_float(op, {&x, &gamma, &beta});
  check_epsilon(op, epsilon);
  const BnShape s = bn_shape(op, x);
  check_channel_vector(op, "gamma", gamma, x);
  check_channel_vector(op, "beta", beta, x);
  STRATA_CHECK(s.m > 0 || s.c == 0, ShapeError,
               op << ": input " << x.shape_str() << " has no elements to take statistics over");
  BatchNormResult r;
  r.y = Tensor::empty(x.shape(), DType::kFloat32, x.device());
  r.mean = Tensor::empty({s.c}, DType::kFloat32, x.device());
  r.variance = Tensor::empty({s.c}, DType::kFloat32, x.device());
  if (s.c == 0) return r;
  const int device = x.device().index;
  cudnnHandle_t handle = cudnn_handle(device);
  BnDescs d;
  describe(op, s, d);
  const float one = 1.0f, zero = 0.0f;
  if (s.m == 1) {
    // One value per channel: it is the mean, the biased variance is 0 (cuDNN's unbiased one would divide by
    // M - 1 = 0), and y is what inference makes of those statistics (beta, or NaN with epsilon 0, as on the CPU).
    detail::cuda::check(cudaMemcpyAsync(r.mean.data<float>(), x.data<float>(), r.mean.nbytes(),
                                        cudaMemcpyDeviceToDevice, detail::cuda::stream(device)),
                        "cudaMemcpyAsync (batch norm mean)");
    zero_fill(r.variance);
    check_cudnn(cudnnBatchNormalizationForwardInference(handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x.get(),
                                                        x.data<float>(), d.x.get(), r.y.data<float>(), d.channel.get(),
                                                        gamma.data<float>(), beta.data<float>(), r.mean.data<float>(),
                                                        r.variance.data<float>(), static_cast<double>(epsilon)),
                "cudnnBatchNormalizationForwardInference (one row)");
    return r;
  }
  // The running averages with factor 1 are the batch mean and the unbiased variance; cuDNN reads their old
  // contents (times 0), which must not be NaN.
  zero_fill(r.mean);
  zero_fill(r.variance);
  Tensor saved_mean = Tensor::empty({s.c}, DType::kFloat32, x.device());
  Tensor saved_inv_std = Tensor::empty({s.c}, DType::kFloat32, x.device());
  check_cudnn(cudnnBatchNormalizationForwardTraining(
                  handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x.get(), x.data<float>(), d.x.get(),
                  r.y.data<float>(), d.channel.get(), gamma.data<float>(), beta.data<float>(),
                  /*exponentialAverageFactor=*/1.0, r.mean.data<float>(), r.variance.data<float>(),
                  static_cast<double>(epsilon), saved_mean.data<float>(), saved_inv_std.data<float>()),
              "cudnnBatchNormalizationForwardTraining");
  const float biased = static_cast<float>(static_cast<double>(s.m - 1) / static_cast<double>(s.m));
  check_cudnn(cudnnScaleTensor(handle, d.channel.get(), r.variance.data<float>(), &biased),
              "cudnnScaleTensor (unbiased to biased variance)");
  return r;
}

Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                            const Tensor& variance, float epsilon) {
  const char* op = "batch_norm_inference";
  check_float(op, {&x, &gamma, &beta, &mean, &variance});
  check_epsilon(op, epsilon);
  const BnShape s = bn_shape(op, x);
  check_channel_vector(op, "gamma", gamma, x);
  check_channel_vector(op, "beta", beta, x);
  check_channel_vector(op, "mean", mean, x);
  check_channel_vector(op, "variance", variance, x);
  Tensor y = Tensor::empty(x.shape(), DType::kFloat32, x.device());
  if (y.numel() == 0) return y;
  cudnnHandle_t handle = cudnn_handle(x.device().index);
  BnDescs d;
  describe(op, s, d);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnBatchNormalizationForwardInference(handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x.get(),
                                                      x.data<float>(), d.x.get(), y.data<float>(), d.channel.get(),
                                                      gamma.data<float>(), beta.data<float>(), mean.data<float>(),
                                                      variance.data<float>(), static_cast<double>(epsilon)),
              "cudnnBatchNormalizationForwardInference");
  return y;
}

BatchNormGrads batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& variance,
                                   const Tensor& gamma, float epsilon) {
  const char* op = "batch_norm_backward";
  check_float(op, {&x, &dy, &mean, &variance, &gamma});
  check_epsilon(op, epsilon);
  STRATA_CHECK(
      x.shape() == dy.shape(), ShapeError,
      op << ": input " << x.shape_str() << " and output gradient " << dy.shape_str() << " must have the same shape");
  const BnShape s = bn_shape(op, x);
  check_channel_vector(op, "mean", mean, x);
  check_channel_vector(op, "variance", variance, x);
  check_channel_vector(op, "gamma", gamma, x);
  BatchNormGrads g;
  g.dx = Tensor::empty(x.shape(), DType::kFloat32, x.device());
  g.dgamma = Tensor::empty({s.c}, DType::kFloat32, x.device());
  g.dbeta = Tensor::empty({s.c}, DType::kFloat32, x.device());
  if (s.c == 0) return g;
  if (s.m == 0) {
    zero_fill(g.dgamma);
    zero_fill(g.dbeta);
    return g;
  }
  const int device = x.device().index;
  cudnnHandle_t handle = cudnn_handle(device);
  BnDescs d;
  describe(op, s, d);
  Tensor inv_std = Tensor::empty({s.c}, DType::kFloat32, x.device());
  detail::cuda::check(
      inverse_std(variance.data<float>(), epsilon, inv_std.data<float>(), s.c, detail::cuda::stream(device)),
      "inverse_std");
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnBatchNormalizationBackward(handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, d.x.get(),
                                              x.data<float>(), d.x.get(), dy.data<float>(), d.x.get(),
                                              g.dx.data<float>(), d.channel.get(), gamma.data<float>(),
                                              g.dgamma.data<float>(), g.dbeta.data<float>(),
                                              static_cast<double>(epsilon), mean.data<float>(), inv_std.data<float>()),
              "cudnnBatchNormalizationBackward");
  return g;
}

}  // namespace strata::kernels::cuda
