// Fuzzes the parameter server's handlers (src/ps/server.cc, shard_state.cc, tensor_coding.cc) with untrusted
// requests: each input is a sequence of calls (a method byte, then the request's protobuf bytes) made in order to a
// server of its own, over gRPC on 127.0.0.1, so pushes and pulls meet the shards earlier calls created. The server's
// checkpoint directory is this process's scratch directory, and Save and Restore name a checkpoint number, so the
// fuzzer writes nowhere else. The replication methods (Promote, ReplicateCreate, ReplicatePush, Rebackup) reach a
// server that replicates nothing: their refusals and role checks. A request that is not valid protobuf is not sent;
// Pull and Push, raw methods on the server, get the bytes as they are.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>

#include "fuzz_util.h"
#include "ps/proto/parameter_server.grpc.pb.h"
#include "service_calls.h"
#include "strata/ps/server.h"

using namespace strata;
namespace pb = strata::ps::proto;

namespace {

constexpr int kMaxCalls = 8;
constexpr auto kCallDeadline = std::chrono::milliseconds(100);

template <class Request>
void call(pb::ParameterServer::Stub& stub, auto method, const Request& request) {
  fuzz::call(stub, method, request, kCallDeadline);
}

void call(pb::ParameterServer::Stub& stub, auto method, const std::string& bytes) {
  fuzz::call_parsed(stub, method, bytes, kCallDeadline);
}

// Sends `bytes` unparsed to a raw method ("/strata.ps.proto.ParameterServer/Push") and waits for the reply.
void call_raw(grpc::GenericStub& stub, const std::string& method, const std::string& bytes) {
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status) {
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_protobuf_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Bytes in(data, size);
  const std::string saves = fuzz::scratch_dir() + "/ps";
  std::filesystem::remove_all(saves);
  ps::ParameterServer server(1 + in.byte() % 4);
  try {
    server.start("127.0.0.1:0", {.checkpoint_directory = saves});
  } catch (const Error&) {
    return 0;
  }
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials());
  auto stub = pb::ParameterServer::NewStub(channel);
  grpc::GenericStub generic(channel);
  for (int i = 0; i < kMaxCalls && !in.empty(); ++i) {
    const int method = in.byte() % 10;
    const std::string bytes = in.string();
    using S = pb::ParameterServer::Stub;
    switch (method) {
      case 0:
        call(*stub, &S::Create, bytes);
        break;
      case 1:
        call_raw(generic, "/strata.ps.proto.ParameterServer/Pull", bytes);
        break;
      case 2:
        call_raw(generic, "/strata.ps.proto.ParameterServer/Push", bytes);
        break;
      case 3:
        call(*stub, &S::Stats, bytes);
        break;
      case 4:
        call(*stub, &S::Save, bytes);
        break;
      case 5:
        call(*stub, &S::Restore, bytes);
        break;
      case 6:
        call(*stub, &S::Promote, bytes);
        break;
      case 7:
        call(*stub, &S::ReplicateCreate, bytes);
        break;
      case 8:
        call(*stub, &S::ReplicatePush, bytes);
        break;
      case 9:
        call(*stub, &S::Rebackup, bytes);
        break;
    }
  }
  server.stop();
  return 0;
}
