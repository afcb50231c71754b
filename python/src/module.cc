// The extension module strata._strata: registers each part of the binding (bindings.h) and turns strata's errors into
// Python exceptions carrying their message: InvalidArgument (ShapeError too) -> ValueError, IoError -> OSError,
// Timeout -> TimeoutError, Unavailable -> ConnectionError, any other strata::Error (DataCorrupt, ...) -> RuntimeError.
// Thread-safety: the translator runs with the GIL held, as nanobind calls it.
#include <exception>

#include <nanobind/nanobind.h>

#include "bindings.h"
#include "strata/error.h"

namespace nb = nanobind;

namespace {

PyObject* python_type_of(strata::ErrorCode code) {
  switch (code) {
    case strata::ErrorCode::kInvalidArgument:
    case strata::ErrorCode::kShapeError:
      return PyExc_ValueError;
    case strata::ErrorCode::kIoError:
      return PyExc_OSError;
    case strata::ErrorCode::kDeadlineExceeded:
      return PyExc_TimeoutError;
    case strata::ErrorCode::kUnavailable:
      return PyExc_ConnectionError;
    case strata::ErrorCode::kUnknown:
    case strata::ErrorCode::kDataLoss:
    case strata::ErrorCode::kUnauthenticated:
      break;
  }
  return PyExc_RuntimeError;
}

void translate_strata_error(const std::exception_ptr& error, void*) {
  try {
    std::rethrow_exception(error);
  } catch (const strata::Error& e) {
    PyErr_SetString(python_type_of(e.code()), e.what());
  }
}

}  // namespace

NB_MODULE(_strata, m) {
  m.doc() = "strata's C++ core, bound for the strata Python package (import strata, not this module)";
  nb::register_exception_translator(translate_strata_error);
  strata::python::define_layers(m);
  strata::python::define_losses_and_optimizers(m);
  strata::python::define_metrics(m);
  strata::python::define_data(m);
  strata::python::define_autograd(m);
  strata::python::define_strategies(m);
  strata::python::define_parameter_server(m);
  strata::python::define_model(m);
  strata::python::define_command_line(m);
}
