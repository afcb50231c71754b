// The CUDA kernels: the functions of kernels.h, with the same signatures and contracts, for tensors on a GPU.
// kernels/cpu calls them through device_dispatch.h; nothing else should. They are defined in kernels/cuda/*.cu
// (cuBLAS/cuBLASLt for products, cuDNN for convolution, pooling, batch norm and softmax, CUB/Thrust for the rest),
// built only with STRATA_WITH_CUDA; an op whose CUDA kernel has not landed is declared here but never called.
// Every kernel is queued on its device's stream (core/cuda/cuda_context.h) and returns without waiting for it.
// Thread-safety: as kernels.h.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace strata::kernels::cuda {

// (Each declaration's contract is the one of the same name in kernels.h.)
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

Tensor dense(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu);
DenseGrads dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, bool want_dx,
                          bool want_dw, bool want_db);

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor affine(const Tensor& x, float scale, float shift);
void axpy_(Tensor& y, float alpha, const Tensor& x);

Tensor unary(UnaryOp op, const Tensor& x);
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy);
Tensor leaky_relu(const Tensor& x, float alpha);
Tensor leaky_relu_backward(const Tensor& x, const Tensor& dy, float alpha);
Tensor elu(const Tensor& x, float alpha);
Tensor elu_backward(const Tensor& x, const Tensor& y, const Tensor& dy, float alpha);
Tensor clip(const Tensor& x, float low, float high);
Tensor clip_backward(const Tensor& x, const Tensor& dy, float low, float high);

Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);
Tensor softmax_backward(const Tensor& y, const Tensor& dy, int axis = -1);
Tensor log_softmax_backward(const Tensor& y, const Tensor& dy, int axis = -1);

Tensor sum(const Tensor& x, const std::vector<int>& axes = {}, bool keepdims = false);
Tensor mean(const Tensor& x, const std::vector<int>& axes = {}, bool keepdims = false);
Tensor max(const Tensor& x, const std::vector<int>& axes = {}, bool keepdims = false);
Tensor argmax(const Tensor& x, int axis = -1);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

Tensor concat(const std::vector<Tensor>& xs, int axis);
Tensor stack(const std::vector<Tensor>& xs, int axis);
Tensor slice_axis(const Tensor& x, int axis, int64_t start, int64_t end);
Tensor gather(const Tensor& params, const Tensor& indices);
Tensor scatter_add(const Tensor& indices, const Tensor& updates, int64_t num_rows);
void scatter_add_into(Tensor& out, const Tensor& indices, const Tensor& updates);
Tensor one_hot(const Tensor& indices, int64_t depth);

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2DParams& p);
Tensor conv2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, const Conv2DParams& p);
Conv2DWeightGrads conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Shape& w_shape, bool with_bias,
                                          const Conv2DParams& p);

MaxPoolResult max_pool2d(const Tensor& x, const Pool2DParams& p);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& workspace, const Shape& x_shape, const Pool2DParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2DParams& p);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2DParams& p);

BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon);
Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                            const Tensor& variance, float epsilon);
BatchNormGrads batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& variance,
                                   const Tensor& gamma, float epsilon);

LstmCellResult lstm_cell(const Tensor& z, const Tensor& c_prev);
LstmCellGrads lstm_cell_backward(const Tensor& gates, const Tensor& packed, const Tensor& c_prev,
                                 const Tensor& d_packed);

DropoutResult dropout(const Tensor& x, float rate, Generator& gen);

}  // namespace strata::kernels::cuda
