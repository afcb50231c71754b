// Datasets of NumPy arrays: Dataset::from_npy (two .npy files) and Dataset::from_npz (two arrays of one archive),
// element i being (x[i], y[i]) as Keras's fit(x, y) sees them (see strata/data/dataset.h).
// Thread-safety: pure functions; the arrays are read whole before the (immutable) dataset is made.
#include "strata/data/dataset.h"
#include "strata/error.h"
#include "strata/io/npy.h"
#include "strata/io/npz.h"

namespace strata::data {

namespace {

// (x, y) read from `x_name` and `y_name` -> the dataset; `what` is the source's name for messages.
Dataset arrays_dataset(const Tensor& x, const Tensor& y, const std::string& x_name, const std::string& y_name,
                       const char* what) {
  STRATA_CHECK(x.rank() >= 1, InvalidArgument,
               what << ": " << x_name << " holds a scalar; x needs one row per record ([N, ...])");
  STRATA_CHECK(y.rank() >= 1, InvalidArgument,
               what << ": " << y_name << " holds a scalar; y needs one label per record ([N] or [N, ...])");
  STRATA_CHECK(x.dim(0) == y.dim(0), InvalidArgument,
               what << ": x and y must hold the same number of records, but " << x_name << " holds " << x.dim(0) << " "
                    << x.shape_str() << " and " << y_name << " holds " << y.dim(0) << " " << y.shape_str());
  const Tensor labels = y.dtype() == DType::kFloat32 || y.dtype() == DType::kInt64 ? y : y.to(DType::kInt64);
  return Dataset::from_tensor_slices({x, labels}, {"x", "y"});
}

}  // namespace

Dataset Dataset::from_npy(const std::string& x_path, const std::string& y_path) {
  return arrays_dataset(io::read_npy(x_path), io::read_npy(y_path), x_path, y_path, "from_npy");
}

Dataset Dataset::from_npz(const std::string& path, const std::string& x_key, const std::string& y_key) {
  io::NpzFile npz(path);
  const Tensor x = npz.read(x_key);
  const Tensor y = npz.read(y_key);
  return arrays_dataset(x, y, path + ":" + x_key, path + ":" + y_key, "from_npz");
}

}  // namespace strata::data
