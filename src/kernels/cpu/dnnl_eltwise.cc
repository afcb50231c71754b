// oneDNN eltwise primitives over a tensor seen as one flat [n] vector (see dnnl_eltwise.h). A cached entry per n.
// Thread-safety: safe to call concurrently (see dnnl_util.h).
#include "kernels/cpu/dnnl_eltwise.h"

#include "kernels/cpu/dnnl_util.h"

namespace strata::kernels::cpu {

namespace {

using dnnl::memory;

memory::desc flat_desc(int64_t n) { return f32_desc({n}, memory::format_tag::a); }

dnnl::eltwise_forward::primitive_desc gelu_forward_pd(int64_t n) {
  return dnnl::eltwise_forward::primitive_desc(
      {dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_gelu_erf, flat_desc(n), 0.0f, 0.0f}, default_attr(),
      dnnl_engine());
}

struct ForwardEntry {
  dnnl::eltwise_forward::primitive_desc pd;
  dnnl::eltwise_forward prim;
};
struct BackwardEntry {
  dnnl::eltwise_backward::primitive_desc pd;
  dnnl::eltwise_backward prim;
};

}  // namespace

Tensor dnnl_gelu_erf(const Tensor& x) {
  const char* op = "gelu";
  Tensor y = Tensor::empty(x.shape());
  const int64_t n = x.numel();
  if (n == 0) return y;
  CacheKey key("gelu_erf");
  key << n;
  auto entry = cached<ForwardEntry>(key, [&] {
    return dnnl_call(op, [&] {
      auto pd = gelu_forward_pd(n);
      return std::make_shared<const ForwardEntry>(ForwardEntry{pd, dnnl::eltwise_forward(pd)});
    });
  });
  execute(op, entry->prim, entry->pd, {{DNNL_ARG_SRC, wrap(flat_desc(n), x)}, {DNNL_ARG_DST, wrap(flat_desc(n), y)}});
  return y;
}

Tensor dnnl_gelu_erf_backward(const Tensor& x, const Tensor& dy) {
  const char* op = "gelu_backward";
  Tensor dx = Tensor::empty(x.shape());
  const int64_t n = x.numel();
  if (n == 0) return dx;
  CacheKey key("gelu_erf_backward");
  key << n;
  auto entry = cached<BackwardEntry>(key, [&] {
    return dnnl_call(op, [&] {
      dnnl::eltwise_backward::primitive_desc pd(
          {dnnl::algorithm::eltwise_gelu_erf, flat_desc(n), flat_desc(n), 0.0f, 0.0f}, default_attr(), dnnl_engine(),
          gelu_forward_pd(n));
      return std::make_shared<const BackwardEntry>(BackwardEntry{pd, dnnl::eltwise_backward(pd)});
    });
  });
  execute(op, entry->prim, entry->pd,
          {{DNNL_ARG_SRC, wrap(flat_desc(n), x)},
           {DNNL_ARG_DIFF_DST, wrap(flat_desc(n), dy)},
           {DNNL_ARG_DIFF_SRC, wrap(flat_desc(n), dx)}});
  return dx;
}

}  // namespace strata::kernels::cpu
