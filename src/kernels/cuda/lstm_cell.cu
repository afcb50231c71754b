// The fused LSTM cell on a GPU (kernels.h): one Thrust pass over a step's batch x units forward and one backward,
// with the CPU kernel's formulas (kernels/cpu/lstm_cell.cc; tanhf where the CPU uses its fast tanh, within 2e-7).
// No library offers this cell with Keras's gate order and packed outputs, hence the two small functors.
// Thread-safety: as kernels.h; each call queues on the device's stream and writes only what it allocates.
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <cstdint>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernel_checks.h"

namespace strata::kernels::cuda {

namespace {

__device__ inline float sigmoid(float x) {
  const float z = expf(-fabsf(x));
  const float r = 1.0f / (1.0f + z);
  return x >= 0.0f ? r : z * r;
}

// Element (row, j) of a [batch, u] step.
struct CellForward {
  const float* z;
  const float* c_prev;  // null: zeros
  float* gates;
  float* packed;
  int64_t u;
  __device__ void operator()(int64_t t) const {
    const int64_t row = t / u, j = t - row * u;
    const float* zr = z + row * 4 * u;
    const float i = sigmoid(zr[j]);
    const float f = sigmoid(zr[u + j]);
    const float g = tanhf(zr[2 * u + j]);
    const float o = sigmoid(zr[3 * u + j]);
    const float c = (c_prev != nullptr ? f * c_prev[t] : 0.0f) + i * g;
    float* gr = gates + row * 4 * u;
    gr[j] = i;
    gr[u + j] = f;
    gr[2 * u + j] = g;
    gr[3 * u + j] = o;
    float* hr = packed + row * 2 * u;
    hr[u + j] = c;
    hr[j] = o * tanhf(c);
  }
};

struct CellBackward {
  const float* gates;
  const float* packed;
  const float* c_prev;  // null: zeros
  const float* d_packed;
  float* dz;
  float* dc_prev;  // null: not wanted
  int64_t u;
  __device__ void operator()(int64_t t) const {
    const int64_t row = t / u, j = t - row * u;
    const float* gr = gates + row * 4 * u;
    const float i = gr[j], f = gr[u + j], gg = gr[2 * u + j], o = gr[3 * u + j];
    const float tc = tanhf(packed[row * 2 * u + u + j]);
    const float dh = d_packed[row * 2 * u + j];
    const float dc = d_packed[row * 2 * u + u + j] + dh * o * (1.0f - tc * tc);
    const float cp = c_prev != nullptr ? c_prev[t] : 0.0f;
    float* dzr = dz + row * 4 * u;
    dzr[j] = dc * gg * i * (1.0f - i);
    dzr[u + j] = dc * cp * f * (1.0f - f);
    dzr[2 * u + j] = dc * i * (1.0f - gg * gg);
    dzr[3 * u + j] = dh * tc * o * (1.0f - o);
    if (dc_prev != nullptr) dc_prev[t] = dc * f;
  }
};

}  // namespace

LstmCellResult lstm_cell(const Tensor& z, const Tensor& c_prev) {
  const char* op = "lstm_cell";
  const LstmShape s = lstm_shape(op, z);  // the CPU kernel's checks and messages
  const int64_t batch = s.batch, u = s.units;
  if (c_prev.defined()) {
    check_same_device(op, {&z, &c_prev});
    check_lstm_c_prev(op, c_prev, s);
  }
  LstmCellResult r{Tensor::empty({batch, 4 * u}, DType::kFloat32, z.device()),
                   Tensor::empty({batch, 2 * u}, DType::kFloat32, z.device())};
  if (batch == 0) return r;
  thrust::for_each_n(thrust::cuda::par_nosync.on(stream_of(z)), thrust::counting_iterator<int64_t>(0), batch * u,
                     CellForward{z.data<float>(), c_prev.defined() ? c_prev.data<float>() : nullptr,
                                 r.gates.data<float>(), r.packed.data<float>(), u});
  return r;
}

LstmCellGrads lstm_cell_backward(const Tensor& gates, const Tensor& packed, const Tensor& c_prev,
                                 const Tensor& d_packed) {
  const char* op = "lstm_cell_backward";
  check_same_device(op, {&gates, &packed, &d_packed});
  cpu::require_float(op, {&gates, &packed, &d_packed});
  cpu::require_same_shape(op, packed, "packed", d_packed, "d_packed");
  STRATA_CHECK(gates.rank() == 2 && gates.dim(1) % 4 == 0 && packed.shape() == (Shape{gates.dim(0), gates.dim(1) / 2}),
               ShapeError,
               op << ": gates " << gates.shape_str() << " and packed " << packed.shape_str()
                  << " must be [batch, 4 * units] and [batch, 2 * units]");
  const int64_t batch = gates.dim(0), u = gates.dim(1) / 4;
  if (c_prev.defined()) {
    check_same_device(op, {&gates, &c_prev});
    check_lstm_c_prev(op, c_prev, LstmShape{batch, u});
  }
  LstmCellGrads g{Tensor::empty({batch, 4 * u}, DType::kFloat32, gates.device()),
                  c_prev.defined() ? Tensor::empty({batch, u}, DType::kFloat32, gates.device()) : Tensor()};
  if (batch * u == 0) return g;
  thrust::for_each_n(thrust::cuda::par_nosync.on(stream_of(gates)), thrust::counting_iterator<int64_t>(0), batch * u,
                     CellBackward{gates.data<float>(), packed.data<float>(),
                                  c_prev.defined() ? c_prev.data<float>() : nullptr, d_packed.data<float>(),
                                  g.dz.data<float>(), g.dc_prev.defined() ? g.dc_prev.data<float>() : nullptr, u});
  return g;
}

}  // namespace strata::kernels::cuda
