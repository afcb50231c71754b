// The one mapping between gRPC statuses and strata errors, both ways, for every gRPC client and server of strata
// (the coordination service in cluster, the ps and worker services in ps; private to those layers). Anchor:
// TensorFlow's grpc_util.h (FromGrpcStatus / ToGrpcStatus).
//
// strata -> gRPC: Error (kUnknown) UNKNOWN; InvalidArgument and ShapeError INVALID_ARGUMENT; IoError INTERNAL;
// DataCorrupt (kDataLoss) DATA_LOSS; Timeout (kDeadlineExceeded) DEADLINE_EXCEEDED; Unavailable UNAVAILABLE;
// Unauthenticated UNAUTHENTICATED.
// gRPC -> strata:
//   INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,     InvalidArgument (the peer cannot accept the request as it is)
//   FAILED_PRECONDITION, OUT_OF_RANGE
//   DEADLINE_EXCEEDED                                Timeout (for every client)
//   UNAVAILABLE                                      Unavailable
//   CANCELLED                                        Unavailable (the peer cut the call off: it is shutting down)
//   ABORTED                                          Unavailable (the peer gave up on a conflict: try again)
//   DATA_LOSS                                        DataCorrupt
//   UNAUTHENTICATED                                  Unauthenticated (the call did not prove it is the job's)
//   UNKNOWN, INTERNAL, UNIMPLEMENTED,                Error
//   PERMISSION_DENIED, RESOURCE_EXHAUSTED
// A status made from a strata error (to_grpc_status) also names its class in the status details
// ("strata-error:ShapeError"), so the class arrives exactly (ShapeError and IoError have no gRPC code of their own)
// and a caller tells an error the server raised from one of the transport (raised_by_server).
// Thread-safety: pure functions.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <exception>
#include <optional>
#include <string>

#include "strata/error.h"

namespace strata::cluster {

// strata -> gRPC.
grpc::StatusCode grpc_code_of(ErrorCode code);
// The status a handler answers for an error of `code` with `message`: the code's gRPC code, `message`, and the class
// in the details.
grpc::Status to_grpc_status(ErrorCode code, const std::string& message);
// The status of `error` (any exception: one that is not a strata::Error is kUnknown), its message `prefix` + what().
// REQUIRES: error != nullptr.
grpc::Status to_grpc_status(const std::exception_ptr& error, const std::string& prefix = "");

// gRPC -> strata.
// The code of a failed `status`: the class the server named (to_grpc_status), else the table's for its gRPC code.
ErrorCode error_code_of(const grpc::Status& status);
// The class a server named in `status` (to_grpc_status); nullopt for a status it did not make from a strata error
// (the transport's: unreachable, cancelled, past the deadline; or a handler's own status code).
std::optional<ErrorCode> raised_by_server(const grpc::Status& status);
// "OK", "CANCELLED", ..., "UNAUTHENTICATED"; "gRPC status N" for a number that is no code.
std::string grpc_code_name(grpc::StatusCode code);

// One call a client made, as its error names it.
struct RpcCall {
  std::string rpc;   // the call and what it is about: "coordination Get of key 'k'", "ps Pull of shard 'w'"
  std::string peer;  // who was called, with the address: "the coordination service at 10.0.0.1:2222"
  std::chrono::milliseconds deadline{0};  // how long the call waited at most for the reply
};
// The strata error (of class error_code_of(status)) for the failed `status` of `call`, naming the call and the peer:
//   Timeout          "<rpc> timed out: no reply within <deadline> ms from <peer>"
//   Unavailable      "<rpc> failed: <peer> is unavailable (<CODE>: <message>)"
//   InvalidArgument  "<rpc> refused by <peer>: <CODE>: <message>"
//   Error, DataCorrupt "<rpc> failed at <peer>: <CODE>: <message>"
//   a class the server named: "<rpc> failed at <peer>: <message>" (the server's own error, e.g. its own wait)
// and the location " [file:line]" of the caller (the defaults are the call's: __builtin_FILE and __builtin_LINE,
// which GCC and clang have; std::source_location needs a newer clang than the fuzz build's). REQUIRES: !status.ok().
std::exception_ptr rpc_error(const grpc::Status& status, const RpcCall& call, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE());
[[noreturn]] void throw_rpc_error(const grpc::Status& status, const RpcCall& call, const char* file = __builtin_FILE(),
                                  int line = __builtin_LINE());

}  // namespace strata::cluster
