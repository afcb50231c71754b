// Ops written as compositions of other differentiable ops, for devices that lack a fused kernel: the same math the
// fused op computes, so the two can be checked against each other on the host.
// Thread-safety: as for every op (strata/ops.h).
#pragma once

#include "strata/variable.h"

namespace strata::detail {

// layer_norm (strata/ops.h) from mean, square, sqrt and broadcasting arithmetic: what it runs off the host.
Variable layer_norm_composed(const Variable& x, const Variable& gamma, const Variable& beta, float epsilon);

}  // namespace strata::detail
