// The gRPC status <-> strata error mapping (src/cluster/rpc_status.h): both tables for every code, round trips, the
// class a server names in the status details, and what a client's error says (the RPC, the peer's address, the
// deadline waited for, the caller's location). The details crossing a real call are checked by worker_server_test.
#include "cluster/rpc_status.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <typeindex>
#include <vector>

#include "test_util.h"

namespace strata::cluster {
namespace {

using std::chrono::milliseconds;

// Every gRPC code but OK, with the strata code a status of it (made by no strata error) becomes.
const std::vector<std::pair<grpc::StatusCode, ErrorCode>>& from_grpc() {
  static const std::vector<std::pair<grpc::StatusCode, ErrorCode>> table = {
      {grpc::StatusCode::CANCELLED, ErrorCode::kUnavailable},
      {grpc::StatusCode::UNKNOWN, ErrorCode::kUnknown},
      {grpc::StatusCode::INVALID_ARGUMENT, ErrorCode::kInvalidArgument},
      {grpc::StatusCode::DEADLINE_EXCEEDED, ErrorCode::kDeadlineExceeded},
      {grpc::StatusCode::NOT_FOUND, ErrorCode::kInvalidArgument},
      {grpc::StatusCode::ALREADY_EXISTS, ErrorCode::kInvalidArgument},
      {grpc::StatusCode::PERMISSION_DENIED, ErrorCode::kUnknown},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, ErrorCode::kUnknown},
      {grpc::StatusCode::FAILED_PRECONDITION, ErrorCode::kInvalidArgument},
      {grpc::StatusCode::ABORTED, ErrorCode::kUnavailable},
      {grpc::StatusCode::OUT_OF_RANGE, ErrorCode::kInvalidArgument},
      {grpc::StatusCode::UNIMPLEMENTED, ErrorCode::kUnknown},
      {grpc::StatusCode::INTERNAL, ErrorCode::kUnknown},
      {grpc::StatusCode::UNAVAILABLE, ErrorCode::kUnavailable},
      {grpc::StatusCode::DATA_LOSS, ErrorCode::kDataLoss},
      {grpc::StatusCode::UNAUTHENTICATED, ErrorCode::kUnauthenticated},
  };
  return table;
}

// Every strata code with its gRPC code.
const std::vector<std::pair<ErrorCode, grpc::StatusCode>>& to_grpc() {
  static const std::vector<std::pair<ErrorCode, grpc::StatusCode>> table = {
      {ErrorCode::kUnknown, grpc::StatusCode::UNKNOWN},
      {ErrorCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {ErrorCode::kShapeError, grpc::StatusCode::INVALID_ARGUMENT},
      {ErrorCode::kIoError, grpc::StatusCode::INTERNAL},
      {ErrorCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
      {ErrorCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {ErrorCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {ErrorCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
  };
  return table;
}

const RpcCall kCall{.rpc = "coordination Get of key 'k'",
                    .peer = "the coordination service at 10.0.0.7:2222",
                    .deadline = milliseconds(250)};

std::type_index type_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return typeid(e);
  } catch (...) {
    return typeid(void);
  }
}

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

TEST(RpcStatusTest, EveryStrataCodeHasItsGrpcCode) {
  ASSERT_EQ(to_grpc().size(), std::size(kErrorCodes));
  for (const auto& [code, grpc_code] : to_grpc()) {
    SCOPED_TRACE(error_code_name(code));
    EXPECT_EQ(grpc_code_of(code), grpc_code);
    const grpc::Status status = to_grpc_status(code, "the message");
    EXPECT_EQ(status.error_code(), grpc_code);
    EXPECT_EQ(status.error_message(), "the message");
  }
}

TEST(RpcStatusTest, EveryGrpcCodeHasItsStrataCodeForEveryClient) {
  ASSERT_EQ(from_grpc().size(), 16u);  // every code but OK
  for (const auto& [grpc_code, code] : from_grpc()) {
    SCOPED_TRACE(grpc_code_name(grpc_code));
    const grpc::Status status(grpc_code, "from the transport");
    EXPECT_EQ(error_code_of(status), code);
    EXPECT_EQ(raised_by_server(status), std::nullopt);
    EXPECT_EQ(type_of(rpc_error(status, kCall)), type_of(make_error(code, "")));
  }
}

TEST(RpcStatusTest, AStrataErrorRoundTripsExactlyThroughItsStatus) {
  for (const ErrorCode code : kErrorCodes) {
    SCOPED_TRACE(error_code_name(code));
    const grpc::Status status = to_grpc_status(make_error(code, "lost in transit?"));
    EXPECT_EQ(raised_by_server(status), code);
    EXPECT_EQ(error_code_of(status), code);  // ShapeError and IoError too, which share or lack a gRPC code
    const std::exception_ptr back = rpc_error(status, kCall);
    EXPECT_EQ(type_of(back), type_of(make_error(code, "")));
    EXPECT_NE(what_of(back).find("lost in transit?"), std::string::npos) << what_of(back);
  }
}

TEST(RpcStatusTest, AGrpcCodeWithAStrataClassRoundTripsThroughIt) {
  for (const auto& [grpc_code, code] : from_grpc()) {
    const bool own = grpc_code == grpc::StatusCode::UNKNOWN || grpc_code == grpc::StatusCode::INVALID_ARGUMENT ||
                     grpc_code == grpc::StatusCode::DEADLINE_EXCEEDED || grpc_code == grpc::StatusCode::UNAVAILABLE ||
                     grpc_code == grpc::StatusCode::DATA_LOSS;
    if (own) {
      EXPECT_EQ(grpc_code_of(error_code_of(grpc::Status(grpc_code, ""))), grpc_code) << grpc_code_name(grpc_code);
    }
  }
}

TEST(RpcStatusTest, DetailsThatNameNoClassAreTheTransports) {
  EXPECT_EQ(raised_by_server(grpc::Status(grpc::StatusCode::INTERNAL, "m", "strata-error:NoSuchClass")), std::nullopt);
  EXPECT_EQ(raised_by_server(grpc::Status(grpc::StatusCode::INTERNAL, "m", "\x08\x03")), std::nullopt);
  EXPECT_EQ(raised_by_server(grpc::Status(grpc::StatusCode::INTERNAL, "m", "strata-error:")), std::nullopt);
  EXPECT_EQ(error_code_of(grpc::Status(grpc::StatusCode::INTERNAL, "m", "strata-error:NoSuchClass")),
            ErrorCode::kUnknown);
  EXPECT_EQ(raised_by_server(grpc::Status::OK), std::nullopt);
}

TEST(RpcStatusTest, AnyExceptionBecomesAStatusWithThePrefix) {
  grpc::Status s = to_grpc_status(std::make_exception_ptr(ShapeError("[2] vs [3]")), "Push w: ");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "Push w: [2] vs [3]");
  EXPECT_EQ(raised_by_server(s), ErrorCode::kShapeError);
  s = to_grpc_status(std::make_exception_ptr(std::runtime_error("oops")));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(s.error_message(), "oops");
  EXPECT_EQ(raised_by_server(s), ErrorCode::kUnknown);
  s = to_grpc_status(std::make_exception_ptr(42));
  EXPECT_EQ(s.error_message(), "a non-standard exception");
  EXPECT_EQ(raised_by_server(s), ErrorCode::kUnknown);
}

TEST(RpcStatusTest, ADeadlineIsATimeoutNamingTheRpcThePeerAndTheWait) {
  const std::string m = test::message_of<Timeout>(
      [] { throw_rpc_error(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"), kCall); });
  EXPECT_EQ(m.rfind("coordination Get of key 'k' timed out: no reply within 250 ms from the coordination service at "
                    "10.0.0.7:2222 [",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("rpc_status_test.cc:"), std::string::npos) << m;  // the caller's location, not the mapping's
}

TEST(RpcStatusTest, AnUnreachableOrCancellingPeerIsUnavailableWithTheTransportsReason) {
  std::string m = test::message_of<Unavailable>([] {
    throw_rpc_error(grpc::Status(grpc::StatusCode::UNAVAILABLE, "failed to connect to all addresses"), kCall);
  });
  EXPECT_NE(m.find("coordination Get of key 'k' failed: the coordination service at 10.0.0.7:2222 is unavailable "
                   "(UNAVAILABLE: failed to connect to all addresses)"),
            std::string::npos)
      << m;
  m = test::message_of<Unavailable>(
      [] { throw_rpc_error(grpc::Status(grpc::StatusCode::CANCELLED, "server shutting down"), kCall); });
  EXPECT_NE(m.find("is unavailable (CANCELLED: server shutting down)"), std::string::npos) << m;
}

TEST(RpcStatusTest, OtherStatusesNameTheirCodeAndTheServersMessage) {
  std::string m = test::message_of<InvalidArgument>(
      [] { throw_rpc_error(grpc::Status(grpc::StatusCode::NOT_FOUND, "no shard named 'w'"), kCall); });
  EXPECT_NE(m.find("coordination Get of key 'k' refused by the coordination service at 10.0.0.7:2222: NOT_FOUND: no "
                   "shard named 'w'"),
            std::string::npos)
      << m;
  m = test::message_of<Error>([] { throw_rpc_error(grpc::Status(grpc::StatusCode::INTERNAL, "bad frame"), kCall); });
  EXPECT_NE(m.find("failed at the coordination service at 10.0.0.7:2222: INTERNAL: bad frame"), std::string::npos) << m;
  m = test::message_of<DataCorrupt>(
      [] { throw_rpc_error(grpc::Status(grpc::StatusCode::DATA_LOSS, "Pull: a malformed response"), kCall); });
  EXPECT_NE(m.find("DATA_LOSS: Pull: a malformed response"), std::string::npos) << m;
}

TEST(RpcStatusTest, AnErrorTheServerRaisedKeepsItsClassAndMessage) {
  // A Timeout the server raised is its own wait, not this call's deadline: it says what the server said.
  const std::string m = test::message_of<Timeout>([] {
    throw_rpc_error(to_grpc_status(ErrorCode::kDeadlineExceeded, "barrier 'b' timed out after 500 ms"), kCall);
  });
  EXPECT_NE(m.find("coordination Get of key 'k' failed at the coordination service at 10.0.0.7:2222: barrier 'b' "
                   "timed out after 500 ms"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("no reply within"), std::string::npos) << m;
  EXPECT_EQ(type_of(rpc_error(to_grpc_status(ErrorCode::kShapeError, "[2] vs [3]"), kCall)),
            std::type_index(typeid(ShapeError)));
}

TEST(RpcStatusTest, CodeNames) {
  EXPECT_EQ(grpc_code_name(grpc::StatusCode::OK), "OK");
  EXPECT_EQ(grpc_code_name(grpc::StatusCode::DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
  EXPECT_EQ(grpc_code_name(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_EQ(grpc_code_name(static_cast<grpc::StatusCode>(99)), "gRPC status 99");
  for (const auto& [grpc_code, code] : from_grpc()) {
    EXPECT_EQ(grpc_code_name(grpc_code).find("gRPC status"), std::string::npos) << static_cast<int>(grpc_code);
  }
}

}  // namespace
}  // namespace strata::cluster
