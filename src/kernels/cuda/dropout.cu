// Inverted dropout on a GPU with the very mask the CPU kernel draws (kernels/cpu/dropout.cc): strata's Generator is
// counter-based (Philox-4x32-10, core/random.cc), so element i's keep bit is word i % 4 of block offset + i / 4, which
// a thread computes by itself; the Generator then advances by the blocks used, as a CPU fill would. A seed therefore
// gives the same mask on either device (cuRAND's generators have their own states, which strata's checkpoints do
// not hold), hence this small kernel.
// Thread-safety: as kernels.h (the Generator is the caller's, not synchronised).
#include <thrust/execution_policy.h>
#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <cstdint>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernel_checks.h"

namespace strata::kernels::cuda {

namespace {

// Philox-4x32-10 of core/random.cc, word for word.
__device__ inline uint4 philox(uint4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * ctr.x;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * ctr.z;
    ctr = make_uint4(static_cast<uint32_t>(p1 >> 32) ^ ctr.y ^ k0, static_cast<uint32_t>(p1),
                     static_cast<uint32_t>(p0 >> 32) ^ ctr.w ^ k1, static_cast<uint32_t>(p0));
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// Block b of the draw: elements 4b .. 4b + 3 (those below n).
struct DropoutBlock {
  const float* x;
  float* y;
  float* mask;
  int64_t n;
  uint64_t seed, stream, offset;
  float keep, scale;
  __device__ void operator()(int64_t b) const {
    const uint64_t off = offset + static_cast<uint64_t>(b);
    const uint4 r = philox(make_uint4(static_cast<uint32_t>(off), static_cast<uint32_t>(off >> 32),
                                      static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)),
                           static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    const uint32_t words[4] = {r.x, r.y, r.z, r.w};
    for (int j = 0; j < 4; ++j) {
      const int64_t i = 4 * b + j;
      if (i >= n) return;
      const float unit = static_cast<float>(words[j] >> 8) * (1.0f / 16777216.0f);
      const float m = (unit < keep ? 1.0f : 0.0f) * scale;
      mask[i] = m;
      y[i] = x[i] * m;
    }
  }
};

}  // namespace

DropoutResult dropout(const Tensor& x, float rate, Generator& gen) {
  const char* op = "dropout";
  cpu::require_float(op, {&x});
  check_dropout_rate(rate);
  auto policy = thrust::cuda::par_nosync.on(stream_of(x));
  DropoutResult r;
  r.y = Tensor::empty(x.shape(), DType::kFloat32, x.device());
  r.mask = Tensor::empty(x.shape(), DType::kFloat32, x.device());
  const int64_t n = x.numel();
  if (rate == 0.0f) {
    if (n > 0) {
      detail::cuda::check(
          cudaMemcpyAsync(r.y.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToDevice, stream_of(x)),
          "cudaMemcpyAsync");
      thrust::fill_n(policy, r.mask.data<float>(), n, 1.0f);
    }
    return r;
  }
  const float keep = 1.0f - rate;
  const int64_t blocks = (n + 3) / 4;
  Generator::State s = gen.state();
  if (blocks > 0) {
    thrust::for_each_n(policy, thrust::counting_iterator<int64_t>(0), blocks,
                       DropoutBlock{x.data<float>(), r.y.data<float>(), r.mask.data<float>(), n, s.seed, s.stream,
                                    s.offset, keep, 1.0f / keep});
  }
  s.offset += static_cast<uint64_t>(blocks);
  gen.set_state(s);
  return r;
}

}  // namespace strata::kernels::cuda
