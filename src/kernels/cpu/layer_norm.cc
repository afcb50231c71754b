// Layer normalization on the CPU through oneDNN: x [..., C] is normalised over its last axis, each of its
// M = numel / C rows with its own mean and biased variance, then scaled by gamma [C] and shifted by beta [C]
// (Keras's LayerNormalization over axis -1; the layer moves another axis last). Forward returns the rows'
// statistics, which backward takes back to give dx, dgamma and dbeta.
//
// x is [M, C] in memory; oneDNN sees it as a 2-D `ab` tensor with statistics of shape [M].
//
// Thread-safety: safe to call concurrently (see dnnl_util.h).
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/device_dispatch.h"
#include "kernels/kernels.h"

namespace strata::kernels {

namespace {

using cpu::CacheKey;
using dnnl::memory;
using dnnl::normalization_flags;
using tag = memory::format_tag;

struct LnShape {
  int64_t m = 0, c = 0;
};

LnShape ln_shape(const char* op, const Tensor& x) {
  STRATA_CHECK(x.rank() >= 1, ShapeError, op << ": input must have a feature axis, got " << x.shape_str());
  LnShape s;
  s.c = x.dim(-1);
  s.m = s.c == 0 ? 0 : x.numel() / s.c;
  return s;
}

void check_feature_vector(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  STRATA_CHECK(t.rank() == 1 && t.dim(0) == x.dim(-1), ShapeError,
               op << ": " << name << " " << t.shape_str() << " does not match the " << x.dim(-1)
                  << " features of input " << x.shape_str());
}

void check_row_vector(const char* op, const char* name, const Tensor& t, const LnShape& s) {
  STRATA_CHECK(t.rank() == 1 && t.dim(0) == s.m, ShapeError,
               op << ": " << name << " " << t.shape_str() << " does not hold one value per row (" << s.m << ")");
}

void check_epsilon(const char* op, float epsilon) {
  STRATA_CHECK(epsilon >= 0.0f && std::isfinite(epsilon), InvalidArgument,
               op << ": epsilon must be finite and >= 0, got " << epsilon);
}

memory::desc data_desc(const LnShape& s) { return cpu::f32_desc({s.m, s.c}, tag::ab); }
memory::desc stat_desc(const LnShape& s) { return cpu::f32_desc({s.m}, tag::a); }
memory::desc feature_desc(const LnShape& s) { return cpu::f32_desc({s.c}, tag::x); }

CacheKey ln_key(const char* op, const LnShape& s, float epsilon) {
  CacheKey key(op);
  key << s.m << s.c << static_cast<int64_t>(std::bit_cast<uint32_t>(epsilon));
  return key;
}

const normalization_flags kScaleShift = normalization_flags::use_scale | normalization_flags::use_shift;

dnnl::layer_normalization_forward::primitive_desc forward_pd(const LnShape& s, float epsilon) {
  return dnnl::layer_normalization_forward::primitive_desc(
      {dnnl::prop_kind::forward_training, data_desc(s), stat_desc(s), epsilon, kScaleShift}, cpu::default_attr(),
      cpu::dnnl_engine());
}

struct ForwardEntry {
  dnnl::layer_normalization_forward::primitive_desc pd;
  dnnl::layer_normalization_forward prim;
};
struct BackwardEntry {
  dnnl::layer_normalization_backward::primitive_desc pd;
  dnnl::layer_normalization_backward prim;
};

}  // namespace

LayerNormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon) {
  const char* op = "layer_norm";
  cpu::require_host(op, {&x, &gamma, &beta});
  cpu::require_float(op, {&x, &gamma, &beta});
  check_epsilon(op, epsilon);
  const LnShape s = ln_shape(op, x);
  check_feature_vector(op, "gamma", gamma, x);
  check_feature_vector(op, "beta", beta, x);
  STRATA_CHECK(s.c > 0, ShapeError, op << ": input " << x.shape_str() << " has no features to normalise over");
  LayerNormResult r;
  r.y = Tensor::empty(x.shape());
  r.mean = Tensor::empty({s.m});
  r.variance = Tensor::empty({s.m});
  if (s.m == 0) return r;
  auto entry = cpu::cached<ForwardEntry>(ln_key(op, s, epsilon), [&] {
    return cpu::dnnl_call(op, [&] {
      auto pd = forward_pd(s, epsilon);
      return std::make_shared<const ForwardEntry>(ForwardEntry{pd, dnnl::layer_normalization_forward(pd)});
    });
  });
  const memory::desc fd = feature_desc(s), sd = stat_desc(s);
  cpu::execute(op, entry->prim, entry->pd,
               {{DNNL_ARG_SRC, cpu::wrap(data_desc(s), x)},
                {DNNL_ARG_SCALE, cpu::wrap(fd, gamma)},
                {DNNL_ARG_SHIFT, cpu::wrap(fd, beta)},
                {DNNL_ARG_DST, cpu::wrap(data_desc(s), r.y)},
                {DNNL_ARG_MEAN, cpu::wrap(sd, r.mean)},
                {DNNL_ARG_VARIANCE, cpu::wrap(sd, r.variance)}});
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& variance,
                                   const Tensor& gamma, float epsilon) {
  const char* op = "layer_norm_backward";
  cpu::require_host(op, {&x, &dy, &mean, &variance, &gamma});
  cpu::require_float(op, {&x, &dy, &mean, &variance, &gamma});
  check_epsilon(op, epsilon);
  cpu::require_same_shape(op, x, "input", dy, "output gradient");
  const LnShape s = ln_shape(op, x);
  STRATA_CHECK(s.c > 0, ShapeError, op << ": input " << x.shape_str() << " has no features to normalise over");
  check_row_vector(op, "mean", mean, s);
  check_row_vector(op, "variance", variance, s);
  check_feature_vector(op, "gamma", gamma, x);
  LayerNormGrads g;
  g.dx = Tensor::empty(x.shape());
  g.dgamma = Tensor::empty({s.c});
  g.dbeta = Tensor::empty({s.c});
  if (s.m == 0) {
    g.dgamma.fill_(0.0);
    g.dbeta.fill_(0.0);
    return g;
  }
  auto entry = cpu::cached<BackwardEntry>(ln_key(op, s, epsilon), [&] {
    return cpu::dnnl_call(op, [&] {
      const auto hint = forward_pd(s, epsilon);
      dnnl::layer_normalization_backward::primitive_desc pd(
          {dnnl::prop_kind::backward, data_desc(s), data_desc(s), stat_desc(s), epsilon, kScaleShift},
          cpu::default_attr(), cpu::dnnl_engine(), hint);
      return std::make_shared<const BackwardEntry>(BackwardEntry{pd, dnnl::layer_normalization_backward(pd)});
    });
  });
  const memory::desc fd = feature_desc(s), sd = stat_desc(s);
  // As for batch norm (batch_norm.cc), oneDNN 2.6 may want a shift argument in backward though the gradient does
  // not depend on it.
  const memory unused_shift = cpu::scratch_memory(fd, 1);
  std::memset(unused_shift.get_data_handle(), 0, fd.get_size());
  cpu::execute(op, entry->prim, entry->pd,
               {{DNNL_ARG_SRC, cpu::wrap(data_desc(s), x)},
                {DNNL_ARG_SHIFT, unused_shift},
                {DNNL_ARG_DIFF_DST, cpu::wrap(data_desc(s), dy)},
                {DNNL_ARG_MEAN, cpu::wrap(sd, mean)},
                {DNNL_ARG_VARIANCE, cpu::wrap(sd, variance)},
                {DNNL_ARG_SCALE, cpu::wrap(fd, gamma)},
                {DNNL_ARG_DIFF_SRC, cpu::wrap(data_desc(s), g.dx)},
                {DNNL_ARG_DIFF_SCALE, cpu::wrap(fd, g.dgamma)},
                {DNNL_ARG_DIFF_SHIFT, cpu::wrap(fd, g.dbeta)}});
  return g;
}

}  // namespace strata::kernels
