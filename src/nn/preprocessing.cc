// Rescaling (see strata/nn/preprocessing.h).
#include "strata/nn/preprocessing.h"

#include <cmath>

#include "strata/error.h"
#include "strata/ops.h"

namespace strata::nn {

Rescaling::Rescaling(float scale, float offset, std::string name)
    : LayerBase(std::move(name)), scale_(scale), offset_(offset) {
  STRATA_CHECK(std::isfinite(scale) && std::isfinite(offset), InvalidArgument,
               "Rescaling needs a finite scale and offset, got scale " << scale << " and offset " << offset);
}

Variable Rescaling::call(const Variable& input, bool /*training*/) {
  // An integer input holds raw values (pixels, counts): it is data, not something to differentiate.
  const Variable x = input.value().dtype() == DType::kFloat32 ? input : Variable(input.value().to(DType::kFloat32));
  // affine computes x * scale + offset in float32; with offset 0 that is x * scale rounded once, the bits of
  // data::to_float(x, scale).
  return affine(x, scale_, offset_);
}

}  // namespace strata::nn
