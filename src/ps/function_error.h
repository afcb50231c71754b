// How an exception thrown by a function a worker runs crosses the wire (private to the ps layer): the worker answers
// with a gRPC status carrying the message and names the strata error type in the trailing metadata key
// "strata-error"; the coordinator rebuilds an exception of that type. A failed call without that key is the
// transport's (a lost worker), never the function's.
// Thread-safety: pure functions.
#pragma once

#include <grpcpp/grpcpp.h>

#include <exception>
#include <string>

namespace strata::ps::detail {

inline constexpr const char* kErrorTypeKey = "strata-error";

struct FunctionError {
  grpc::Status status;  // the code that fits the type (INVALID_ARGUMENT, DATA_LOSS, ...) and the message
  std::string type;     // "InvalidArgument", "ShapeError", "IoError", "DataCorrupt", "Timeout", "Unavailable", "Error"
};

// The status and type name of the exception `error` (anything not a strata::Error is "Error").
// REQUIRES: error != nullptr.
FunctionError function_error_of(std::exception_ptr error);

// An exception of the type `type` names (as function_error_of wrote it; an unknown name is strata::Error) with
// `message`.
std::exception_ptr exception_of(const std::string& type, const std::string& message);

}  // namespace strata::ps::detail
