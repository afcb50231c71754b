// Internal to nn and parallel: the heads of a multi-head attention as MultiHeadAttention computes them, given its
// projection weights, so that the tensor-parallel attention (strata/parallel/tensor_parallel_transformer.h) runs the
// same ops on its rank's heads. Thread-safety: free functions of their arguments.
#pragma once

#include <cstdint>
#include <string>

#include "strata/random.h"
#include "strata/tensor.h"
#include "strata/variable.h"

namespace strata::nn::detail {

// The projections of `heads` heads, in Keras's layouts: query/key kernels [d, heads, key_dim], value kernel
// [d, heads, value_dim], biases [heads, dim] (undefined: none).
struct AttentionHeads {
  Variable query_kernel, query_bias, key_kernel, key_bias, value_kernel, value_bias;
  int64_t heads = 0, key_dim = 0, value_dim = 0;
  float dropout = 0.0f;  // on the attention probabilities, in training calls
};

// x2 [M, K] times w2 [K, N] plus b [N] (undefined: none), as Dense does it: the fused op for float inputs on the
// kernel's device, the general ops otherwise.
Variable linear(const Variable& x2, const Variable& w2, const Variable& b);
// x [B, T, D] through kernel [D, heads, dim] and bias [heads, dim] -> [B * heads, T, dim].
Variable project(const Variable& x, const Variable& kernel, const Variable& bias, int64_t heads, int64_t dim);
// The constant added to the scores [B, heads, T, S]: [Bm, 1, T, S] (Bm = the mask's batch, or 1) holding 0 where a
// query attends and -1e9 where not. Undefined when there is no mask. ShapeError naming `who` for a mask that does
// not fit.
Tensor mask_bias(const Tensor& mask, bool causal, int64_t batch, int64_t t, int64_t s, const std::string& who,
                 Device device);
// The heads' context, softmax(q k^T / sqrt(key_dim) + mask) v, as [B * T, heads * value_dim] (head-major features),
// for query [B, T, Dq], value [B, S, Dv] and key [B, S, Dk] whose shapes the caller checked. Attention dropout draws
// from `generator`.
Variable attention_context(const AttentionHeads& heads, const Variable& query, const Variable& value,
                           const Variable& key, const Tensor& attention_mask, bool use_causal_mask, bool training,
                           Generator& generator, const std::string& who);

}  // namespace strata::nn::detail
