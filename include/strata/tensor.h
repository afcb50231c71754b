// Tensor: an n-dimensional array of one dtype on one device.
//
// A Tensor is a value type that shares reference-counted, 64-byte-aligned storage: copying a
// Tensor is cheap and both copies see the same elements. Every tensor is row-major contiguous;
// the views (`reshape`, `slice` on the first axis) keep that true and share storage, while
// `transpose` and `clone` return new storage (a copy). Kernels therefore never deal with strides.
//
// Thread-safety: distinct Tensor objects may be used from different threads even when they share
// storage, as long as no thread writes elements another one reads (like std::shared_ptr).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "strata/device.h"
#include "strata/dtype.h"
#include "strata/error.h"
#include "strata/shape.h"

namespace strata {

// Reference-counted raw memory on one device. Host memory is 64-byte aligned; device memory is
// allocated through the device's runtime (CUDA builds only). `pinned` host memory is page-locked (CUDA builds only),
// so that a copy from it to a GPU need not wait.
class Storage {
 public:
  Storage(size_t nbytes, Device device, bool pinned = false);
  // Host memory another object owns (e.g. the bytes of a received message), kept alive by `owner` (may be null when
  // the caller guarantees the memory outlives every tensor on it); never freed here. Aligned only as its owner
  // allocated it (Tensor::wrap_host checks the dtype's alignment), not to 64 bytes.
  Storage(void* data, size_t nbytes, std::shared_ptr<const void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool external_ = false;
  bool pinned_ = false;
  std::shared_ptr<const void> owner_;
};

class Tensor {
 public:
  // An undefined tensor (no storage); `defined()` is false.
  Tensor() = default;

  // Uninitialised elements.
  static Tensor empty(const Shape& shape, DType dtype = DType::kFloat32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::kFloat32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::kFloat32,
                     Device device = Device::cpu());
  // A rank-0 float32 tensor.
  static Tensor scalar(float value);
  // A host tensor over `data` (shape_numel(shape) * dtype_size(dtype) bytes) without copying it, for handing over
  // received bytes (the ps's pulls and pushes); `owner` keeps the memory alive as long as the tensor or a view of it
  // lives. InvalidArgument when `data` is not aligned to the dtype's size.
  static Tensor wrap_host(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner);
  // Copies `values` into a new host tensor of `shape` (numel must match).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, Shape{static_cast<int64_t>(values.size())});
  }
  static Tensor from_list(std::initializer_list<float> values, const Shape& shape) {
    return from_vector(std::vector<float>(values), shape);
  }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::string shape_str() const { return strata::shape_str(shape_); }
  int rank() const { return static_cast<int>(shape_.size()); }
  // Size of `axis`; negative counts from the end.
  int64_t dim(int axis) const;
  int64_t numel() const { return numel_; }
  // Row-major strides in elements (always contiguous).
  std::vector<int64_t> strides() const { return contiguous_strides(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  // Typed element pointer; throws InvalidArgument if T is not the tensor's dtype. For a tensor on a GPU it is a
  // device pointer, for kernels only: host code reads a GPU tensor through to(Device::cpu()), to_vector or item.
  template <class T>
  T* data();
  template <class T>
  const T* data() const;
  void* raw_data();
  const void* raw_data() const;

  // A view with a new shape of the same element count; one dimension may be -1 (inferred).
  Tensor reshape(const Shape& shape) const;
  // A view of rows [start, end) of the first axis.
  Tensor slice(int64_t start, int64_t end) const;
  // A copy with axes permuted (`perm` lists source axes); with no argument reverses the axes.
  Tensor transpose(const std::vector<int>& perm = {}) const;
  // A copy with its own storage.
  Tensor clone() const;
  // A copy on `device` (host <-> CUDA copies need a build with STRATA_WITH_CUDA). The call returns once the copy is
  // done, except with `non_blocking` from pinned host memory (pin_memory()) to a GPU: then it is queued on the
  // device's stream, whose later kernels see the bytes, and the call returns at once (the caller must not write
  // to this tensor's elements until the copy ran; the pinned block is kept from reuse until then).
  Tensor to(Device device, bool non_blocking = false) const;
  // A copy converted to `dtype` on the same device (float <-> integer conversions truncate toward zero).
  Tensor to(DType dtype) const;
  // A copy of this host tensor in pinned (page-locked) host memory, or this tensor when it already is pinned
  // (PyTorch's pin_memory). Unavailable without CUDA in the build or without a GPU; InvalidArgument for a GPU tensor.
  Tensor pin_memory() const;
  // Whether the elements are in pinned host memory.
  bool is_pinned() const { return storage_ && storage_->pinned(); }

  // Sets every element to `value` (on any device).
  void fill_(double value);
  // Copies the elements of `src` (same shape and dtype, any device) into this tensor's storage.
  void copy_(const Tensor& src);

  // The single element of a one-element tensor, converted to T.
  template <class T>
  T item() const;
  // All elements, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  // A short human-readable form: dtype, shape and up to `max_elements` values.
  std::string str(int64_t max_elements = 8) const;

 private:
  Tensor(std::shared_ptr<Storage> storage, size_t offset_bytes, Shape shape, DType dtype);
  void check_dtype(DType wanted) const;

  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // in bytes
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kFloat32;
  Device device_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Throws InvalidArgument naming `op` unless every tensor is defined and on the same device.
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);
// Throws InvalidArgument naming `op` unless `t` has dtype `dtype`.
void check_dtype(const char* op, const Tensor& t, DType dtype);

// ---- template definitions ----
template <class T>
T* Tensor::data() {
  check_dtype(dtype_of<T>);
  return reinterpret_cast<T*>(static_cast<char*>(storage_->data()) + offset_);
}
template <class T>
const T* Tensor::data() const {
  check_dtype(dtype_of<T>);
  return reinterpret_cast<const T*>(static_cast<const char*>(storage_->data()) + offset_);
}

}  // namespace strata
