// numpy arrays as Tensors and back, without copies (see arrays.h).
// Thread-safety: under the GIL; a kept array is released with the GIL taken, on whichever thread drops the Tensor.
#include "arrays.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "strata/error.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace strata::python {
namespace {

using HostArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

// Keeps a numpy array alive for the Tensor over its memory; the last reference may go on any thread, so the GIL is
// taken to drop it (and not at all while the interpreter is finalizing, when the array is left to it).
std::shared_ptr<const void> keep_alive(HostArray array) {
  auto* kept = new HostArray(std::move(array));
  return std::shared_ptr<const void>(kept, [](const void* p) {
    if (!nb::is_alive()) return;
    nb::gil_scoped_acquire gil;
    delete static_cast<const HostArray*>(p);
  });
}

DType dtype_of(const HostArray& array, const char* what) {
  const nb::dlpack::dtype d = array.dtype();
  if (d == nb::dtype<float>()) return DType::kFloat32;
  if (d == nb::dtype<uint8_t>()) return DType::kUInt8;
  if (d == nb::dtype<int32_t>()) return DType::kInt32;
  if (d == nb::dtype<int64_t>()) return DType::kInt64;
  STRATA_THROW(InvalidArgument, what << ": strata takes float32, uint8, int32 or int64 arrays, got a dtype of code "
                                     << static_cast<int>(d.code) << " and " << static_cast<int>(d.bits) << " bits");
}

}  // namespace

Tensor tensor_from_numpy(nb::handle object, const char* what) {
  HostArray array;
  if (!nb::try_cast(object, array)) {
    STRATA_THROW(InvalidArgument, what << ": expected a numpy array on the CPU, got "
                                       << nb::cast<std::string>(nb::str(object.type())));
  }
  STRATA_CHECK(array.ndim() >= 1, InvalidArgument, what << ": expected an array with a batch dimension, got a scalar");
  Shape shape(array.ndim());
  for (size_t i = 0; i < array.ndim(); ++i) shape[i] = static_cast<int64_t>(array.shape(i));
  const DType dtype = dtype_of(array, what);
  void* data = const_cast<void*>(array.data());
  return Tensor::wrap_host(data, shape, dtype, keep_alive(std::move(array)));
}

nb::object numpy_from_tensor(Tensor tensor) {
  STRATA_CHECK(tensor.defined(), InvalidArgument, "expected a tensor, got an undefined one");
  if (!tensor.device().is_cpu()) tensor = tensor.to(Device::cpu());
  if (tensor.dtype() == DType::kBFloat16) tensor = tensor.to(DType::kFloat32);
  auto* owned = new Tensor(std::move(tensor));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(owned->shape().begin(), owned->shape().end());
  switch (owned->dtype()) {
    case DType::kFloat32:
      return nb::ndarray<nb::numpy, float>(owned->data<float>(), shape.size(), shape.data(), owner).cast();
    case DType::kInt32:
      return nb::ndarray<nb::numpy, int32_t>(owned->data<int32_t>(), shape.size(), shape.data(), owner).cast();
    case DType::kInt64:
      return nb::ndarray<nb::numpy, int64_t>(owned->data<int64_t>(), shape.size(), shape.data(), owner).cast();
    case DType::kUInt8:
      return nb::ndarray<nb::numpy, uint8_t>(owned->data<uint8_t>(), shape.size(), shape.data(), owner).cast();
    case DType::kBFloat16:
      break;
  }
  STRATA_THROW(InvalidArgument, "no numpy dtype for a tensor of " << dtype_name(owned->dtype()));
}

Tensor tensor_from_values(nb::handle object, const char* what) {
  nb::module_ numpy = nb::module_::import_("numpy");
  nb::object array = numpy.attr("asarray")(object);
  const nb::object dtype = array.attr("dtype");
  const auto kind = nb::cast<std::string>(dtype.attr("kind"));
  const auto name = nb::cast<std::string>(dtype.attr("name"));
  if (kind == "f" || kind == "b") {
    array = array.attr("astype")("float32");
  } else if ((kind == "i" || kind == "u") && name != "int32" && name != "int64" && name != "uint8") {
    array = array.attr("astype")("int64");
  }
  if (nb::len(nb::object(array.attr("shape"))) == 0) array = array.attr("reshape")(1);
  return tensor_from_numpy(numpy.attr("ascontiguousarray")(array), what);
}

}  // namespace strata::python
