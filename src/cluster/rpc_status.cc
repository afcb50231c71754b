// The gRPC status <-> strata error mapping (rpc_status.h): the two tables, the class named in a status's details, and
// the wording of a failed call.
// Thread-safety: pure functions.
#include "cluster/rpc_status.h"

#include <string_view>

namespace strata::cluster {
namespace {

// The details of a status made from a strata error: this prefix, then the class (error_code_name).
constexpr std::string_view kDetailsPrefix = "strata-error:";

// The table's code for a status no strata error made.
ErrorCode code_of_grpc(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return ErrorCode::kInvalidArgument;  // the peer cannot accept the request as it is
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return ErrorCode::kDeadlineExceeded;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:  // the peer cut the call off (it is shutting down): the work was not done
    case grpc::StatusCode::ABORTED:    // the peer gave up on a conflict: the call may be tried again
      return ErrorCode::kUnavailable;
    case grpc::StatusCode::DATA_LOSS:
      return ErrorCode::kDataLoss;
    case grpc::StatusCode::UNAUTHENTICATED:
      return ErrorCode::kUnauthenticated;
    default:  // OK (no error to name), UNKNOWN, PERMISSION_DENIED, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL, ...
      return ErrorCode::kUnknown;
  }
}

std::string message_of(const grpc::Status& status, const RpcCall& call) {
  const std::string ms = std::to_string(call.deadline.count());
  if (raised_by_server(status)) return call.rpc + " failed at " + call.peer + ": " + status.error_message();
  const std::string code_and_message = grpc_code_name(status.error_code()) + ": " + status.error_message();
  switch (code_of_grpc(status.error_code())) {
    case ErrorCode::kDeadlineExceeded:
      return call.rpc + " timed out: no reply within " + ms + " ms from " + call.peer;
    case ErrorCode::kUnavailable:
      return call.rpc + " failed: " + call.peer + " is unavailable (" + code_and_message + ")";
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnauthenticated:
      return call.rpc + " refused by " + call.peer + ": " + code_and_message;
    default:
      return call.rpc + " failed at " + call.peer + ": " + code_and_message;
  }
}

}  // namespace

grpc::StatusCode grpc_code_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUnknown:
      return grpc::StatusCode::UNKNOWN;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kShapeError:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case ErrorCode::kIoError:
      return grpc::StatusCode::INTERNAL;
    case ErrorCode::kDataLoss:
      return grpc::StatusCode::DATA_LOSS;
    case ErrorCode::kDeadlineExceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case ErrorCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case ErrorCode::kUnauthenticated:
      return grpc::StatusCode::UNAUTHENTICATED;
  }
  return grpc::StatusCode::UNKNOWN;
}

grpc::Status to_grpc_status(ErrorCode code, const std::string& message) {
  return grpc::Status(grpc_code_of(code), message, std::string(kDetailsPrefix) + error_code_name(code));
}

grpc::Status to_grpc_status(const std::exception_ptr& error, const std::string& prefix) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return to_grpc_status(e.code(), prefix + e.what());
  } catch (const std::exception& e) {
    return to_grpc_status(ErrorCode::kUnknown, prefix + e.what());
  } catch (...) {
    return to_grpc_status(ErrorCode::kUnknown, prefix + "a non-standard exception");
  }
}

std::optional<ErrorCode> raised_by_server(const grpc::Status& status) {
  const std::string& details = status.error_details();
  if (status.ok() || details.compare(0, kDetailsPrefix.size(), kDetailsPrefix) != 0) return std::nullopt;
  return error_code_from_name(std::string_view(details).substr(kDetailsPrefix.size()));
}

ErrorCode error_code_of(const grpc::Status& status) {
  if (const auto named = raised_by_server(status)) return *named;
  return code_of_grpc(status.error_code());
}

std::string grpc_code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "gRPC status " + std::to_string(static_cast<int>(code));
  }
}

std::exception_ptr rpc_error(const grpc::Status& status, const RpcCall& call, const char* file, int line) {
  return make_error(error_code_of(status), detail::with_location(message_of(status, call), file, line));
}

void throw_rpc_error(const grpc::Status& status, const RpcCall& call, const char* file, int line) {
  std::rethrow_exception(rpc_error(status, call, file, line));
}

}  // namespace strata::cluster
