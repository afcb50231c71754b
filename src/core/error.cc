// The codes of strata's errors (strata/error.h): each code's class and name, and building an exception from
// (code, message), the one place that knows which class a code is.
// Thread-safety: pure functions.
#include "strata/error.h"

namespace strata {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUnknown:
      return "Error";
    case ErrorCode::kInvalidArgument:
      return "InvalidArgument";
    case ErrorCode::kShapeError:
      return "ShapeError";
    case ErrorCode::kIoError:
      return "IoError";
    case ErrorCode::kDataLoss:
      return "DataCorrupt";
    case ErrorCode::kDeadlineExceeded:
      return "Timeout";
    case ErrorCode::kUnavailable:
      return "Unavailable";
    case ErrorCode::kUnauthenticated:
      return "Unauthenticated";
  }
  return "Error";  // not a code of the enum: as kUnknown
}

std::optional<ErrorCode> error_code_from_name(std::string_view name) {
  for (const ErrorCode code : kErrorCodes) {
    if (name == error_code_name(code)) return code;
  }
  return std::nullopt;
}

ErrorCode error_code_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.code();
  } catch (...) {
    return ErrorCode::kUnknown;
  }
}

std::exception_ptr make_error(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::kUnknown:
      break;
    case ErrorCode::kInvalidArgument:
      return std::make_exception_ptr(InvalidArgument(message));
    case ErrorCode::kShapeError:
      return std::make_exception_ptr(ShapeError(message));
    case ErrorCode::kIoError:
      return std::make_exception_ptr(IoError(message));
    case ErrorCode::kDataLoss:
      return std::make_exception_ptr(DataCorrupt(message));
    case ErrorCode::kDeadlineExceeded:
      return std::make_exception_ptr(Timeout(message));
    case ErrorCode::kUnavailable:
      return std::make_exception_ptr(Unavailable(message));
    case ErrorCode::kUnauthenticated:
      return std::make_exception_ptr(Unauthenticated(message));
  }
  return std::make_exception_ptr(Error(message));
}

void throw_error(ErrorCode code, const std::string& message) { std::rethrow_exception(make_error(code, message)); }

void rethrow_copy(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    throw_error(e.code(), e.what());
  }
}

}  // namespace strata
