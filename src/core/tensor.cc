// Tensor and Storage: allocation, views, copies and conversions. On a GPU, fill_ and to(DType) run as kernels of
// core/cuda/tensor_cuda.h; host-only operations (transpose) raise Unavailable naming the tensor's device.
// Thread-safety: see strata/tensor.h.
#include "strata/tensor.h"

#include "core/device_memory.h"
#ifdef STRATA_WITH_CUDA
#include "core/cuda/tensor_cuda.h"
#endif

#include <algorithm>
#include <cstring>
#include <numeric>
#include <ostream>
#include <sstream>

namespace strata {

namespace {
// Calls fn(T*) with the tensor's typed pointer, whatever its dtype.
template <class Fn>
void visit_dtype(DType dtype, void* p, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: fn(static_cast<float*>(p)); return;
    case DType::kInt32: fn(static_cast<int32_t*>(p)); return;
    case DType::kInt64: fn(static_cast<int64_t*>(p)); return;
    case DType::kUInt8: fn(static_cast<uint8_t*>(p)); return;
    case DType::kBFloat16: fn(static_cast<BFloat16*>(p)); return;
  }
}

template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<From, BFloat16>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return BFloat16(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

void require_host(const Tensor& t, const char* op) {
  STRATA_CHECK(t.device().is_cpu(), Unavailable,
               op << " needs a host tensor, got one on " << t.device().str());
}

void* allocate(size_t nbytes, Device device, bool pinned) {
  if (!pinned) return detail::device_alloc(nbytes, device);
  STRATA_CHECK(device.is_cpu(), InvalidArgument, "pinned memory is host memory, not memory on " << device.str());
  return detail::pinned_alloc(nbytes);
}
}  // namespace

Storage::Storage(size_t nbytes, Device device, bool pinned)
    : data_(allocate(nbytes, device, pinned)), nbytes_(nbytes), device_(device), pinned_(pinned) {}

Storage::Storage(void* data, size_t nbytes, std::shared_ptr<const void> owner)
    : data_(data), nbytes_(nbytes), device_(Device::cpu()), external_(true), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (pinned_) {
    detail::pinned_free(data_);
  } else if (!external_) {
    detail::device_free(data_, device_, nbytes_);
  }
}

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t offset_bytes, Shape shape, DType dtype)
    : storage_(std::move(storage)),
      offset_(offset_bytes),
      shape_(std::move(shape)),
      numel_(shape_numel(shape_)),
      dtype_(dtype),
      device_(storage_->device()) {}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    STRATA_CHECK(d >= 0, ShapeError, "Tensor::empty: negative dimension in " << strata::shape_str(shape));
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(std::make_shared<Storage>(bytes, device), 0, shape, dtype);
}

Tensor Tensor::wrap_host(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner) {
  for (int64_t d : shape)
    STRATA_CHECK(d >= 0, ShapeError, "Tensor::wrap_host: negative dimension in " << strata::shape_str(shape));
  STRATA_CHECK(reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0, InvalidArgument,
               "Tensor::wrap_host: memory at " << data << " is not aligned to " << dtype_size(dtype) << " bytes");
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(std::make_shared<Storage>(data, bytes, std::move(owner)), 0, shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu()) {
    std::memset(t.raw_data(), 0, t.nbytes());
  } else {
    t.fill_(0.0);
  }
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::scalar(float value) { return full({}, value); }

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  STRATA_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), ShapeError,
               "Tensor::from_vector: " << values.size() << " values do not fill shape "
                                       << strata::shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

int64_t Tensor::dim(int axis) const { return shape_[normalize_axis(axis, rank(), "Tensor::dim")]; }

void Tensor::check_dtype(DType wanted) const {
  STRATA_CHECK(defined(), InvalidArgument, "access to an undefined tensor");
  STRATA_CHECK(dtype_ == wanted, InvalidArgument,
               "tensor holds " << dtype_name(dtype_) << ", accessed as " << dtype_name(wanted));
}

void* Tensor::raw_data() {
  STRATA_CHECK(defined(), InvalidArgument, "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_;
}
const void* Tensor::raw_data() const { return const_cast<Tensor*>(this)->raw_data(); }

Tensor Tensor::reshape(const Shape& shape) const {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      STRATA_CHECK(infer < 0, ShapeError, "reshape: more than one -1 in " << strata::shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      STRATA_CHECK(out[i] >= 0, ShapeError, "reshape: negative dimension in " << strata::shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    STRATA_CHECK(known > 0 && numel_ % known == 0, ShapeError,
                 "reshape: cannot reshape " << shape_str() << " into " << strata::shape_str(shape));
    out[infer] = numel_ / known;
  }
  STRATA_CHECK(shape_numel(out) == numel_, ShapeError,
               "reshape: cannot reshape " << shape_str() << " (" << numel_ << " elements) into "
                                          << strata::shape_str(shape));
  return Tensor(storage_, offset_, out, dtype_);
}

Tensor Tensor::slice(int64_t start, int64_t end) const {
  STRATA_CHECK(rank() >= 1, ShapeError, "slice: a scalar has no first axis");
  STRATA_CHECK(0 <= start && start <= end && end <= shape_[0], InvalidArgument,
               "slice: [" << start << ", " << end << ") is outside the first axis of " << shape_str());
  Shape out = shape_;
  out[0] = end - start;
  const size_t row_bytes = static_cast<size_t>(numel_ / std::max<int64_t>(shape_[0], 1)) * dtype_size(dtype_);
  return Tensor(storage_, offset_ + static_cast<size_t>(start) * row_bytes, out, dtype_);
}

Tensor Tensor::transpose(const std::vector<int>& perm_in) const {
  require_host(*this, "transpose");
  std::vector<int> perm = perm_in;
  if (perm.empty()) {
    perm.resize(rank());
    for (int i = 0; i < rank(); ++i) perm[i] = rank() - 1 - i;
  }
  STRATA_CHECK(static_cast<int>(perm.size()) == rank(), InvalidArgument,
               "transpose: permutation of " << perm.size() << " axes for rank " << rank());
  std::vector<bool> seen(rank(), false);
  Shape out_shape(rank());
  for (int i = 0; i < rank(); ++i) {
    const int p = normalize_axis(perm[i], rank(), "transpose");
    STRATA_CHECK(!seen[p], InvalidArgument, "transpose: axis " << p << " appears twice");
    seen[p] = true;
    perm[i] = p;
    out_shape[i] = shape_[p];
  }
  Tensor out = empty(out_shape, dtype_, device_);
  const auto in_strides = strides();
  std::vector<int64_t> src_stride(rank());  // source stride for each output axis
  for (int i = 0; i < rank(); ++i) src_stride[i] = in_strides[perm[i]];
  const size_t esize = dtype_size(dtype_);
  const char* src = static_cast<const char*>(raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  // When the last axis stays last, each run of it is contiguous on both sides and is copied whole (attention's
  // [b, t, heads, d] <-> [b, heads, t, d] moves runs of d); the walk below then steps over runs.
  const bool runs = rank() > 0 && perm.back() == rank() - 1;
  const int64_t run = runs ? out_shape.back() : 1;
  const int walk_rank = runs ? rank() - 1 : rank();
  std::vector<int64_t> idx(rank(), 0);
  int64_t src_off = 0;
  for (int64_t n = 0; run > 0 && n < numel_; n += run) {
    std::memcpy(dst + n * esize, src + src_off * esize, esize * run);
    for (int ax = walk_rank - 1; ax >= 0; --ax) {
      if (++idx[ax] < out_shape[ax]) {
        src_off += src_stride[ax];
        break;
      }
      src_off -= src_stride[ax] * (out_shape[ax] - 1);
      idx[ax] = 0;
    }
  }
  return out;
}

Tensor Tensor::clone() const { return to(device_); }

Tensor Tensor::to(Device device, bool non_blocking) const {
  Tensor out = empty(shape_, dtype_, device);
  if (non_blocking && is_pinned() && !device.is_cpu()) {
    detail::copy_to_device_async(out.raw_data(), device, raw_data(), storage_->data(), nbytes());
  } else {
    detail::copy_bytes(out.raw_data(), device, raw_data(), device_, nbytes());
  }
  return out;
}

Tensor Tensor::pin_memory() const {
  STRATA_CHECK(defined(), InvalidArgument, "pin_memory: the tensor is undefined");
  STRATA_CHECK(device_.is_cpu(), InvalidArgument,
               "pin_memory: the tensor is on " << device_.str() << "; only host memory can be pinned");
  if (is_pinned()) return *this;
  Tensor out(std::make_shared<Storage>(nbytes(), Device::cpu(), /*pinned=*/true), 0, shape_, dtype_);
  if (nbytes() > 0) std::memcpy(out.raw_data(), raw_data(), nbytes());
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return clone();
  if (!device_.is_cpu()) {
    STRATA_CHECK(defined(), InvalidArgument, "Tensor::to: the tensor is undefined");
#ifdef STRATA_WITH_CUDA
    Tensor out = empty(shape_, dtype, device_);
    detail::cuda_convert(raw_data(), dtype_, out.raw_data(), dtype, numel_, device_.index);
    return out;
#else
    require_host(*this, "Tensor::to");
#endif
  }
  Tensor out = empty(shape_, dtype, device_);
  const int64_t n = numel_;
  visit_dtype(dtype_, const_cast<void*>(raw_data()), [&](auto* src) {
    visit_dtype(dtype, out.raw_data(), [&](auto* dst) {
      using To = std::remove_pointer_t<decltype(dst)>;
      for (int64_t i = 0; i < n; ++i) dst[i] = convert<To>(src[i]);
    });
  });
  return out;
}

void Tensor::fill_(double value) {
  STRATA_CHECK(defined(), InvalidArgument, "fill_: the tensor is undefined");
  const int64_t n = numel_;
  if (!device_.is_cpu()) {
#ifdef STRATA_WITH_CUDA
    // The element's bytes as the host converts `value`, written by the device.
    uint64_t pattern = 0;
    visit_dtype(dtype_, &pattern, [&](auto* p) {
      using T = std::remove_pointer_t<decltype(p)>;
      const T v = convert<T>(value);
      std::memcpy(&pattern, &v, sizeof v);
    });
    detail::cuda_fill(raw_data(), dtype_size(dtype_), pattern, n, device_.index);
    return;
#else
    require_host(*this, "fill_");
#endif
  }
  visit_dtype(dtype_, raw_data(), [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    const T v = convert<T>(value);
    std::fill(p, p + n, v);
  });
}

void Tensor::copy_(const Tensor& src) {
  STRATA_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, InvalidArgument,
               "copy_: source " << dtype_name(src.dtype_) << src.shape_str() << " does not match destination "
                                << dtype_name(dtype_) << shape_str());
  detail::copy_bytes(raw_data(), device_, src.raw_data(), src.device_, nbytes());
}

template <class T>
T Tensor::item() const {
  STRATA_CHECK(numel_ == 1, InvalidArgument, "item: tensor of shape " << shape_str() << " is not one element");
  return to_vector<T>()[0];
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  if (!device_.is_cpu()) return to(Device::cpu()).to_vector<T>();
  std::vector<T> out(static_cast<size_t>(numel_));
  visit_dtype(dtype_, const_cast<void*>(raw_data()), [&](auto* src) {
    for (int64_t i = 0; i < numel_; ++i) out[i] = convert<T>(src[i]);
  });
  return out;
}

std::string Tensor::str(int64_t max_elements) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << dtype_name(dtype_) << shape_str();
  if (!device_.is_cpu()) os << " on " << device_.str();
  const auto v = to_vector<double>();
  os << " {";
  for (int64_t i = 0; i < std::min<int64_t>(numel_, max_elements); ++i) os << (i ? ", " : "") << v[i];
  if (numel_ > max_elements) os << ", ...";
  os << "}";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    STRATA_CHECK(t->defined(), InvalidArgument, op << ": an input tensor is undefined");
    if (!first) first = t;
    STRATA_CHECK(t->device() == first->device(), InvalidArgument,
                 op << ": tensors on different devices (" << first->device().str() << " and "
                    << t->device().str() << "); move them to one device first");
  }
}

void check_dtype(const char* op, const Tensor& t, DType dtype) {
  STRATA_CHECK(t.defined(), InvalidArgument, op << ": input tensor is undefined");
  STRATA_CHECK(t.dtype() == dtype, InvalidArgument,
               op << ": expected " << dtype_name(dtype) << ", got " << dtype_name(t.dtype()) << t.shape_str());
}

#define STRATA_INSTANTIATE_FROM(T) template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&);
STRATA_INSTANTIATE_FROM(float)
STRATA_INSTANTIATE_FROM(int32_t)
STRATA_INSTANTIATE_FROM(int64_t)
STRATA_INSTANTIATE_FROM(uint8_t)
#define STRATA_INSTANTIATE_TO(T)         \
  template T Tensor::item<T>() const; \
  template std::vector<T> Tensor::to_vector<T>() const;
STRATA_INSTANTIATE_TO(float)
STRATA_INSTANTIATE_TO(double)
STRATA_INSTANTIATE_TO(int32_t)
STRATA_INSTANTIATE_TO(int64_t)
STRATA_INSTANTIATE_TO(uint8_t)

}  // namespace strata
