// What the service fuzz targets (coordination, ps) share: one unary RPC with a deadline, made from a request or from
// untrusted bytes that must first parse as the request (protobuf's parser is fuzzed by protobuf itself), and quieting
// protobuf's log line per non-UTF-8 string field, which the fuzzer makes thousands of a second.
// Thread-safety: the calls are made from the fuzzer's thread, one input at a time.
#pragma once

#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>

namespace strata::fuzz {

// Calls stub.*method(request), bounded by `deadline`; the status and reply are not looked at (the service's behaviour
// on bad requests is what is fuzzed: a crash, a hang or a sanitizer report is the finding).
template <class Stub, class Request, class Response>
void call(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
          const Request& request, std::chrono::milliseconds deadline) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  Response response;
  (void)(stub.*method)(&context, request, &response);
}

// The same with `bytes` parsed as the request; nothing is sent when they are not one.
template <class Stub, class Request, class Response>
void call_parsed(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                 const std::string& bytes, std::chrono::milliseconds deadline) {
  Request request;
  if (request.ParseFromString(bytes)) call(stub, method, request, deadline);
}

inline void quiet_protobuf_logs() { google::protobuf::SetLogHandler(nullptr); }

}  // namespace strata::fuzz
