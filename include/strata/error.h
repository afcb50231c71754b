// Errors: the one exception hierarchy strata raises, and the check macros that raise it.
//
// Every message names the thing that went wrong (the op and shapes, the file and record, the task
// and what it waited for) and ends with the source location " [file:line]".
// Thread-safety: exception types are values; the macros are safe from any thread.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A caller passed a value the callee cannot accept.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};
// Shapes that do not fit an op; the message names the op and both shapes.
class ShapeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};
// Reading or writing a file failed.
class IoError : public Error {
 public:
  using Error::Error;
};
// Bytes were read but are not what they claim to be (bad CRC, truncated record, bad header).
class DataCorrupt : public Error {
 public:
  using Error::Error;
};
// Something waited longer than it was allowed to.
class Timeout : public Error {
 public:
  using Error::Error;
};
// A device, backend or peer is not available (e.g. a CUDA tensor in a build without CUDA).
class Unavailable : public Error {
 public:
  using Error::Error;
};

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
#define STRATA_THROW(ExceptionType, stream_expr)                                        \
  do {                                                                                  \
    std::ostringstream strata_msg_;                                                     \
    strata_msg_ << stream_expr;                                                         \
    throw ExceptionType(::strata::detail::with_location(strata_msg_.str(), __FILE__, __LINE__)); \
  } while (0)

// STRATA_CHECK(a.rank() == 2, ShapeError, "matmul wants rank 2, got " << a.shape_str());
#define STRATA_CHECK(condition, ExceptionType, stream_expr) \
  do {                                                      \
    if (!(condition)) STRATA_THROW(ExceptionType, stream_expr); \
  } while (0)
