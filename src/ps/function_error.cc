// The wire form of a function's exception (function_error.h). The most derived type is tested first.
// Thread-safety: pure functions.
#include "ps/function_error.h"

#include "strata/error.h"

namespace strata::ps::detail {

FunctionError function_error_of(std::exception_ptr error) {
  const auto make = [](grpc::StatusCode code, const char* type, const char* what) {
    return FunctionError{grpc::Status(code, what), type};
  };
  try {
    std::rethrow_exception(error);
  } catch (const ShapeError& e) {
    return make(grpc::StatusCode::INVALID_ARGUMENT, "ShapeError", e.what());
  } catch (const InvalidArgument& e) {
    return make(grpc::StatusCode::INVALID_ARGUMENT, "InvalidArgument", e.what());
  } catch (const IoError& e) {
    return make(grpc::StatusCode::INTERNAL, "IoError", e.what());
  } catch (const DataCorrupt& e) {
    return make(grpc::StatusCode::DATA_LOSS, "DataCorrupt", e.what());
  } catch (const Timeout& e) {
    return make(grpc::StatusCode::DEADLINE_EXCEEDED, "Timeout", e.what());
  } catch (const Unavailable& e) {
    return make(grpc::StatusCode::UNAVAILABLE, "Unavailable", e.what());
  } catch (const std::exception& e) {
    return make(grpc::StatusCode::UNKNOWN, "Error", e.what());
  } catch (...) {
    return make(grpc::StatusCode::UNKNOWN, "Error", "a non-standard exception");
  }
}

std::exception_ptr exception_of(const std::string& type, const std::string& message) {
  if (type == "ShapeError") return std::make_exception_ptr(ShapeError(message));
  if (type == "InvalidArgument") return std::make_exception_ptr(InvalidArgument(message));
  if (type == "IoError") return std::make_exception_ptr(IoError(message));
  if (type == "DataCorrupt") return std::make_exception_ptr(DataCorrupt(message));
  if (type == "Timeout") return std::make_exception_ptr(Timeout(message));
  if (type == "Unavailable") return std::make_exception_ptr(Unavailable(message));
  return std::make_exception_ptr(Error(message));
}

}  // namespace strata::ps::detail
