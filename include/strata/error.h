// Errors: the one exception hierarchy strata raises, and the check macros that raise it.
//
// Every message names the thing that went wrong (the op and shapes, the file and record, the task
// and what it waited for) and ends with the source location " [file:line]".
// Every class reports its ErrorCode (Error::code()), and make_error/throw_error build the class of a code, so an
// error crosses a boundary (a thread, an RPC: src/cluster/rpc_status.h maps codes to gRPC statuses and back) as
// (code, message) without a chain of catch clauses.
// Thread-safety: exception types are values; the functions and macros are safe from any thread.
#pragma once

#include <exception>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace strata {

// What kind of error, one code per class below (a class derived elsewhere reports its base's code). Named after
// absl's canonical codes where one fits; kShapeError and kIoError are strata's own.
enum class ErrorCode {
  kUnknown,           // Error itself, and any exception that is not a strata::Error
  kInvalidArgument,   // InvalidArgument
  kShapeError,        // ShapeError (an InvalidArgument)
  kIoError,           // IoError
  kDataLoss,          // DataCorrupt
  kDeadlineExceeded,  // Timeout
  kUnavailable,       // Unavailable
  kUnauthenticated,   // Unauthenticated
};
inline constexpr ErrorCode kErrorCodes[] = {
    ErrorCode::kUnknown,  ErrorCode::kInvalidArgument,  ErrorCode::kShapeError, ErrorCode::kIoError,
    ErrorCode::kDataLoss, ErrorCode::kDeadlineExceeded, ErrorCode::kUnavailable, ErrorCode::kUnauthenticated};

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  virtual ErrorCode code() const noexcept { return ErrorCode::kUnknown; }
};
// A caller passed a value the callee cannot accept.
class InvalidArgument : public Error {
 public:
  using Error::Error;
  ErrorCode code() const noexcept override { return ErrorCode::kInvalidArgument; }
};
// Shapes that do not fit an op; the message names the op and both shapes.
class ShapeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
  ErrorCode code() const noexcept override { return ErrorCode::kShapeError; }
};
// Reading or writing a file failed.
class IoError : public Error {
 public:
  using Error::Error;
  ErrorCode code() const noexcept override { return ErrorCode::kIoError; }
};
// Bytes were read but are not what they claim to be (bad CRC, truncated record, bad header).
class DataCorrupt : public Error {
 public:
  using Error::Error;
  ErrorCode code() const noexcept override { return ErrorCode::kDataLoss; }
};
// Something waited longer than it was allowed to.
class Timeout : public Error {
 public:
  using Error::Error;
  ErrorCode code() const noexcept override { return ErrorCode::kDeadlineExceeded; }
};
// A device, backend or peer is not available (e.g. a CUDA tensor in a build without CUDA).
class Unavailable : public Error {
 public:
  using Error::Error;
  ErrorCode code() const noexcept override { return ErrorCode::kUnavailable; }
};
// A device has no room for an allocation (the message names the device, the request and what is in use and free).
// An Unavailable (its code is kUnavailable), so it crosses threads and RPCs as one; catch it to retry smaller.
class OutOfMemory : public Unavailable {
 public:
  using Unavailable::Unavailable;
};
// A call did not prove that it comes from this job (no job secret, a wrong one, another job's): nothing was done.
class Unauthenticated : public Error {
 public:
  using Error::Error;
  ErrorCode code() const noexcept override { return ErrorCode::kUnauthenticated; }
};

// The name of the class of `code`: "Error", "InvalidArgument", "ShapeError", "IoError", "DataCorrupt", "Timeout",
// "Unavailable", "Unauthenticated".
const char* error_code_name(ErrorCode code);
// The code whose error_code_name is `name`; nullopt for any other name.
std::optional<ErrorCode> error_code_from_name(std::string_view name);
// The code of `error`: its code() when it is a strata::Error, else kUnknown. REQUIRES: error != nullptr.
ErrorCode error_code_of(const std::exception_ptr& error);
// A new exception of the class of `code` whose what() is `message` as given (it adds no location).
std::exception_ptr make_error(ErrorCode code, const std::string& message);
[[noreturn]] void throw_error(ErrorCode code, const std::string& message);
// Throws a new exception of the strata class and message of `error` (a strata::Error), so that each thread that
// rethrows an error shared between threads owns what it catches; anything else is rethrown as it is.
// REQUIRES: error != nullptr.
[[noreturn]] void rethrow_copy(const std::exception_ptr& error);

namespace detail {
// Builds "message [file:line]" for the macros below.
inline std::string with_location(const std::string& message, const char* file, int line) {
  std::string f = file;
  const auto pos = f.rfind("/src/");
  if (pos != std::string::npos) f = f.substr(pos + 1);
  return message + " [" + f + ":" + std::to_string(line) + "]";
}
}  // namespace detail

}  // namespace strata

// STRATA_THROW(ShapeError, "matmul: " << a << " vs " << b);
#define STRATA_THROW(ExceptionType, stream_expr)                                                 \
  do {                                                                                           \
    std::ostringstream strata_msg_;                                                              \
    strata_msg_ << stream_expr;                                                                  \
    throw ExceptionType(::strata::detail::with_location(strata_msg_.str(), __FILE__, __LINE__)); \
  } while (0)

// STRATA_THROW_CODE(e.code(), "saving " << what << ": " << e.what()): the class is known only when it runs.
#define STRATA_THROW_CODE(code, stream_expr)                                                             \
  do {                                                                                                   \
    std::ostringstream strata_msg_;                                                                      \
    strata_msg_ << stream_expr;                                                                          \
    ::strata::throw_error(code, ::strata::detail::with_location(strata_msg_.str(), __FILE__, __LINE__)); \
  } while (0)

// STRATA_CHECK(a.rank() == 2, ShapeError, "matmul wants rank 2, got " << a.shape_str());
#define STRATA_CHECK(condition, ExceptionType, stream_expr)     \
  do {                                                          \
    if (!(condition)) STRATA_THROW(ExceptionType, stream_expr); \
  } while (0)
