// What the cuDNN kernels (conv.cc, pool.cc, batch_norm.cc) share: owning wrappers of cuDNN's descriptors, NHWC
// tensor descriptions (packed, or a window of a larger buffer), explicit padding and cropping of NHWC feature maps
// (cuDNN pads symmetrically only, Keras's SAME may not), and the checks that a shape fits cuDNN's int dimensions.
// Built only with STRATA_WITH_CUDA. Thread-safety: descriptors are plain objects owned by one call; the functions
// queue work on the device's stream through the calling thread's cuDNN handle.
#pragma once

#include <cudnn.h>

#include <cstdint>

#include "kernels/cuda/library_handles.h"
#include "strata/tensor.h"

namespace strata::kernels::cuda {

// Throws ShapeError naming `op` and `what` unless 0 <= v <= INT_MAX (cuDNN describes tensors with ints).
int to_int(int64_t v, const char* op, const char* what);

// cuDNN's answer to a call it does not support for these shapes or this mode (NOT_SUPPORTED), or to parameters that
// do not apply to the chosen algorithm (BAD_PARAM): what falling back to another algorithm or mode may cure.
bool cudnn_refused(cudnnStatus_t status);

template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { check_cudnn(Create(&d_), "creating a cuDNN descriptor"); }
  ~CudnnDescriptor() { Destroy(d_); }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};

using TensorDescriptor =
    CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor =
    CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ActivationDescriptor =
    CudnnDescriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;

// A packed float32 NHWC feature map [n, h, w, c].
void set_nhwc(const TensorDescriptor& d, const char* op, int64_t n, int64_t h, int64_t w, int64_t c);
// The [n, h, w, c] window of a float32 NHWC buffer [n, full_h, full_w, c] (the caller offsets the pointer to the
// window's first element).
void set_nhwc_window(const TensorDescriptor& d, const char* op, int64_t n, int64_t h, int64_t w, int64_t c,
                     int64_t full_h, int64_t full_w);

// Rows and columns added around a feature map.
struct Pads {
  int64_t top = 0, bottom = 0, left = 0, right = 0;
  bool any() const { return top != 0 || bottom != 0 || left != 0 || right != 0; }
  bool symmetric() const { return top == bottom && left == right; }
};

// out [n, h + top + bottom, w + left + right, c] = x [n, h, w, c] surrounded by `value`; float32 buffers on
// `device`.
void pad_nhwc(const char* op, int device, const float* x, const Shape& x_shape, const Pads& pads, float value,
              float* out);
// out [n, h, w, c] = the interior of padded [n, h + top + bottom, w + left + right, c]: what pad_nhwc added is cut.
void crop_nhwc(const char* op, int device, const float* padded, const Pads& pads, const Shape& out_shape, float* out);
// The shape of x_shape [n, h, w, c] padded by `pads`.
Shape padded_shape(const Shape& x_shape, const Pads& pads);

// Queues a zero fill of t's bytes on its device's stream.
void zero_fill(Tensor& t);

}  // namespace strata::kernels::cuda
