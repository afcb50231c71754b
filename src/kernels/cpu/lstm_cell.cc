// The fused LSTM cell (kernels.h): one pass over a step's gates forward and one backward, where the composed ops make
// about fourteen elementwise passes and four gate copies a step. Rows (the batch) are split over the threads.
// Thread-safety: pure functions; each call writes only the tensors it allocates.
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernel_checks.h"
#include "kernels/kernels.h"

namespace strata::kernels {
namespace {

// Rows per parallel_for chunk: a row is 4u gates.
int64_t row_grain(int64_t units) { return std::max<int64_t>(1, cpu::kGrain / (4 * units)); }

}  // namespace

LstmCellResult lstm_cell(const Tensor& z, const Tensor& c_prev) {
  const char* op = "lstm_cell";
  if (on_cuda(op, {&z})) STRATA_CUDA_KERNEL(return cuda::lstm_cell(z, c_prev));
  cpu::require_host(op, {&z});
  const LstmShape s = lstm_shape(op, z);
  const int64_t batch = s.batch, u = s.units;
  if (c_prev.defined()) {
    cpu::require_host(op, {&c_prev});
    check_lstm_c_prev(op, c_prev, s);
  }
  LstmCellResult r{Tensor::empty({batch, 4 * u}), Tensor::empty({batch, 2 * u})};
  const float* pz = z.data<float>();
  const float* pc = c_prev.defined() ? c_prev.data<float>() : nullptr;
  float* gates = r.gates.data<float>();
  float* packed = r.packed.data<float>();
  parallel_for(0, batch, row_grain(u), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const float* zr = pz + row * 4 * u;
      float* gr = gates + row * 4 * u;
      float* hr = packed + row * 2 * u;
      float* cr = hr + u;
      for (int64_t j = 0; j < u; ++j) {
        const float i = cpu::stable_sigmoid(zr[j]);
        const float f = cpu::stable_sigmoid(zr[u + j]);
        const float g = cpu::fast_tanh(zr[2 * u + j]);
        const float o = cpu::stable_sigmoid(zr[3 * u + j]);
        const float c = (pc ? f * pc[row * u + j] : 0.0f) + i * g;
        gr[j] = i;
        gr[u + j] = f;
        gr[2 * u + j] = g;
        gr[3 * u + j] = o;
        cr[j] = c;
        hr[j] = o * cpu::fast_tanh(c);
      }
    }
  });
  return r;
}

LstmCellGrads lstm_cell_backward(const Tensor& gates, const Tensor& packed, const Tensor& c_prev,
                                 const Tensor& d_packed) {
  const char* op = "lstm_cell_backward";
  if (on_cuda(op, {&gates, &packed, &d_packed})) {
    STRATA_CUDA_KERNEL(return cuda::lstm_cell_backward(gates, packed, c_prev, d_packed));
  }
  cpu::require_host(op, {&gates, &packed, &d_packed});
  cpu::require_same_shape(op, packed, "packed", d_packed, "d_packed");
  const int64_t batch = gates.dim(0), u = gates.dim(1) / 4;
  LstmCellGrads g{Tensor::empty({batch, 4 * u}), c_prev.defined() ? Tensor::empty({batch, u}) : Tensor()};
  const float* pg = gates.data<float>();
  const float* pp = packed.data<float>();
  const float* pd = d_packed.data<float>();
  const float* pc = c_prev.defined() ? c_prev.data<float>() : nullptr;
  float* dz = g.dz.data<float>();
  float* dc_prev = g.dc_prev.defined() ? g.dc_prev.data<float>() : nullptr;
  parallel_for(0, batch, row_grain(u), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const float* gr = pg + row * 4 * u;
      const float* cr = pp + row * 2 * u + u;
      const float* dh = pd + row * 2 * u;
      const float* dc_out = dh + u;
      float* dzr = dz + row * 4 * u;
      for (int64_t j = 0; j < u; ++j) {
        const float i = gr[j], f = gr[u + j], gg = gr[2 * u + j], o = gr[3 * u + j];
        const float tc = cpu::fast_tanh(cr[j]);
        const float dc = dc_out[j] + dh[j] * o * (1.0f - tc * tc);
        const float cp = pc ? pc[row * u + j] : 0.0f;
        dzr[j] = dc * gg * i * (1.0f - i);
        dzr[u + j] = dc * cp * f * (1.0f - f);
        dzr[2 * u + j] = dc * i * (1.0f - gg * gg);
        dzr[3 * u + j] = dh[j] * tc * o * (1.0f - o);
        if (dc_prev) dc_prev[row * u + j] = dc * f;
      }
    }
  });
  return g;
}

}  // namespace strata::kernels
