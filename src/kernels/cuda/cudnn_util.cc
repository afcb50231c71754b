// cuDNN helpers of the convolution, pooling and batch-norm kernels (cudnn_util.h). Padding and cropping are one
// cudnnSetTensor and one cudnnTransformTensor between a packed description and a window of the padded buffer, both
// on the calling thread's cuDNN handle, so on the device's stream. Thread-safety: no shared state.
#include "kernels/cuda/cudnn_util.h"

#include <climits>

#include "core/cuda/cuda_context.h"
#include "strata/error.h"

namespace strata::kernels::cuda {

int to_int(int64_t v, const char* op, const char* what) {
  STRATA_CHECK(v >= 0 && v <= INT_MAX, ShapeError,
               op << ": " << what << " of " << v << " is beyond cuDNN's limit of " << INT_MAX);
  return static_cast<int>(v);
}

bool cudnn_refused(cudnnStatus_t status) {
  return CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED ||
         CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_BAD_PARAM;
}

void set_nhwc(const TensorDescriptor& d, const char* op, int64_t n, int64_t h, int64_t w, int64_t c) {
  STRATA_CHECK(n * h * w * c <= INT_MAX, ShapeError,
               op << ": [" << n << ", " << h << ", " << w << ", " << c << "] is beyond cuDNN's limit of " << INT_MAX
                  << " elements per tensor");
  check_cudnn(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, to_int(n, op, "batch"),
                                         to_int(c, op, "channels"), to_int(h, op, "height"), to_int(w, op, "width")),
              "cudnnSetTensor4dDescriptor");
}

void set_nhwc_window(const TensorDescriptor& d, const char* op, int64_t n, int64_t h, int64_t w, int64_t c,
                     int64_t full_h, int64_t full_w) {
  STRATA_CHECK(n * full_h * full_w * c <= INT_MAX, ShapeError,
               op << ": [" << n << ", " << full_h << ", " << full_w << ", " << c << "] is beyond cuDNN's limit of "
                  << INT_MAX << " elements per tensor");
  check_cudnn(cudnnSetTensor4dDescriptorEx(d.get(), CUDNN_DATA_FLOAT, to_int(n, op, "batch"), to_int(c, op, "channels"),
                                           to_int(h, op, "height"), to_int(w, op, "width"),
                                           /*nStride=*/static_cast<int>(full_h * full_w * c), /*cStride=*/1,
                                           /*hStride=*/static_cast<int>(full_w * c), /*wStride=*/static_cast<int>(c)),
              "cudnnSetTensor4dDescriptorEx");
}

namespace {

// A window of the padded buffer [n, h + top + bottom, w + left + right, c] that holds the map [n, h, w, c]: its
// description (with the padded buffer's strides) and the element offset of its first element.
int64_t describe_window(const TensorDescriptor& window, const char* op, const Shape& small, const Pads& pads) {
  const int64_t n = small[0], h = small[1], w = small[2], c = small[3];
  const int64_t full_w = w + pads.left + pads.right;
  set_nhwc_window(window, op, n, h, w, c, h + pads.top + pads.bottom, full_w);
  return (pads.top * full_w + pads.left) * c;
}

}  // namespace

Shape padded_shape(const Shape& x_shape, const Pads& pads) {
  return {x_shape[0], x_shape[1] + pads.top + pads.bottom, x_shape[2] + pads.left + pads.right, x_shape[3]};
}

void pad_nhwc(const char* op, int device, const float* x, const Shape& x_shape, const Pads& pads, float value,
              float* out) {
  const Shape full = padded_shape(x_shape, pads);
  if (shape_numel(full) == 0) return;
  cudnnHandle_t handle = cudnn_handle(device);
  TensorDescriptor full_desc;
  set_nhwc(full_desc, op, full[0], full[1], full[2], full[3]);
  check_cudnn(cudnnSetTensor(handle, full_desc.get(), out, &value), "cudnnSetTensor (padding)");
  if (shape_numel(x_shape) == 0) return;
  TensorDescriptor packed, window;
  set_nhwc(packed, op, x_shape[0], x_shape[1], x_shape[2], x_shape[3]);
  const int64_t offset = describe_window(window, op, x_shape, pads);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnTransformTensor(handle, &one, packed.get(), x, &zero, window.get(), out + offset),
              "cudnnTransformTensor (padding)");
}

void crop_nhwc(const char* op, int device, const float* padded, const Pads& pads, const Shape& out_shape, float* out) {
  if (shape_numel(out_shape) == 0) return;
  cudnnHandle_t handle = cudnn_handle(device);
  TensorDescriptor packed, window;
  set_nhwc(packed, op, out_shape[0], out_shape[1], out_shape[2], out_shape[3]);
  const int64_t offset = describe_window(window, op, out_shape, pads);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnTransformTensor(handle, &one, window.get(), padded + offset, &zero, packed.get(), out),
              "cudnnTransformTensor (cropping)");
}

void zero_fill(Tensor& t) {
  if (t.nbytes() == 0) return;
  const int device = t.device().index;
  detail::cuda::check(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), detail::cuda::stream(device)), "cudaMemsetAsync");
}

}  // namespace strata::kernels::cuda
