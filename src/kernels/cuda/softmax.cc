// Softmax and log-softmax on a GPU, forward and backward, over any axis, through cuDNN's softmax
// (CUDNN_SOFTMAX_ACCURATE, which subtracts the maximum first, and CUDNN_SOFTMAX_LOG).
//
// The tensor is seen as [outer, n, inner] around the axis, which is cuDNN's NCHW [outer, n, inner, 1] with the
// softmax across C (CUDNN_SOFTMAX_MODE_CHANNEL): the last axis is inner == 1, any other axis the same call. cuDNN's
// backward takes the forward output y as the CPU kernel does: dx = y (dy - sum(dy y)) for softmax, and
// dx = dy - exp(y) sum(dy) for log-softmax.
// Thread-safety: as kernels.h; each call uses the calling thread's cuDNN handle on the device's stream.
#include "kernels/cpu/cpu_util.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/library_handles.h"

namespace strata::kernels::cuda {

namespace {

enum class Kind { kSoftmax, kLogSoftmax };

// A float32 NCHW descriptor of [outer, n, inner, 1], destroyed with the object.
class Descriptor {
 public:
  Descriptor(const char* op, const Shape& shape, int axis) {
    const cpu::AxisSplit s = cpu::split_at_axis(shape, axis);
    check_cudnn(cudnnCreateTensorDescriptor(&desc_), "cudnnCreateTensorDescriptor");
    // cuDNN indexes a tensor with 32-bit ints: the whole tensor must fit.
    to_int(s.outer * s.n * s.inner, op, "element count");
    check_cudnn(
        cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, to_int(s.outer, op, "outer size"),
                                   to_int(s.n, op, "axis size"), to_int(s.inner, op, "inner size"), 1),
        "cudnnSetTensor4dDescriptor");
  }
  ~Descriptor() { cudnnDestroyTensorDescriptor(desc_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

cudnnSoftmaxAlgorithm_t algorithm(Kind kind) {
  return kind == Kind::kSoftmax ? CUDNN_SOFTMAX_ACCURATE : CUDNN_SOFTMAX_LOG;
}

Tensor forward(const char* op, const Tensor& x, int axis, Kind kind) {
  cpu::require_float(op, {&x});
  const int ax = normalize_axis(axis, x.rank(), op);
  Tensor y = Tensor::empty(x.shape(), DType::kFloat32, x.device());
  if (x.numel() == 0) return y;
  const Descriptor d(op, x.shape(), ax);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnSoftmaxForward(cudnn_handle(x.device().index), algorithm(kind), CUDNN_SOFTMAX_MODE_CHANNEL, &one,
                                  d.get(), x.data<float>(), &zero, d.get(), y.data<float>()),
              kind == Kind::kSoftmax ? "softmax: cudnnSoftmaxForward" : "log_softmax: cudnnSoftmaxForward");
  return y;
}

Tensor backward(const char* op, const Tensor& y, const Tensor& dy, int axis, Kind kind) {
  check_same_device(op, {&y, &dy});
  cpu::require_float(op, {&y, &dy});
  cpu::require_same_shape(op, y, "y", dy, "dy");
  const int ax = normalize_axis(axis, y.rank(), op);
  Tensor dx = Tensor::empty(y.shape(), DType::kFloat32, y.device());
  if (y.numel() == 0) return dx;
  const Descriptor d(op, y.shape(), ax);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(
      cudnnSoftmaxBackward(cudnn_handle(y.device().index), algorithm(kind), CUDNN_SOFTMAX_MODE_CHANNEL, &one, d.get(),
                           y.data<float>(), d.get(), dy.data<float>(), &zero, d.get(), dx.data<float>()),
      kind == Kind::kSoftmax ? "softmax_backward: cudnnSoftmaxBackward" : "log_softmax_backward: cudnnSoftmaxBackward");
  return dx;
}

}  // namespace

Tensor softmax(const Tensor& x, int axis) { return forward("softmax", x, axis, Kind::kSoftmax); }

Tensor log_softmax(const Tensor& x, int axis) { return forward("log_softmax", x, axis, Kind::kLogSoftmax); }

Tensor softmax_backward(const Tensor& y, const Tensor& dy, int axis) {
  return backward("softmax_backward", y, dy, axis, Kind::kSoftmax);
}

Tensor log_softmax_backward(const Tensor& y, const Tensor& dy, int axis) {
  return backward("log_softmax_backward", y, dy, axis, Kind::kLogSoftmax);
}

}  // namespace strata::kernels::cuda
