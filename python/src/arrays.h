// numpy arrays as strata Tensors and back, without copies: what fit / evaluate / predict (model.cc) and a metric's
// update_state (metrics.cc) take and return.
// Thread-safety: call with the GIL held.
#pragma once

#include <nanobind/nanobind.h>

#include "strata/tensor.h"
#include "strata/variable.h"

namespace strata::python {

// The Tensor over a numpy array's memory (no copy): C-contiguous float32, uint8, int32 or int64 on the CPU, with a
// batch dimension; the Tensor keeps the array alive. Anything else is an InvalidArgument naming `what`.
Tensor tensor_from_numpy(nanobind::handle object, const char* what);
// Any array-like (lists, float64, bool, other integer widths, a scalar) converted as Keras would: floats and bools to
// float32, other integers to int64, then tensor_from_numpy (copies only where numpy converts).
Tensor tensor_from_values(nanobind::handle object, const char* what);
// A strata.Variable as it is, a Python int or float as a float32 scalar, anything else through tensor_from_values
// (autograd.cc).
Variable variable_from(nanobind::handle value, const char* what);
// A Tensor as a numpy array that owns it: no copy for a host float32, int32, int64 or uint8 tensor (a GPU tensor is
// copied to the host, bfloat16 widened to float32). An undefined tensor is an InvalidArgument.
nanobind::object numpy_from_tensor(Tensor tensor);

}  // namespace strata::python
