// Fuzzes the coordination service's handlers (src/cluster/coordination_service.cc) with untrusted requests: each
// input is a sequence of calls (a method byte, then the request's protobuf bytes) made in order to a service of its
// own, over gRPC on 127.0.0.1, so the key/value store, barriers and heartbeats see the state the earlier calls left.
// A request that is not valid protobuf is not sent (protobuf's parser is fuzzed by protobuf itself). Waits are cut
// short by the client's deadline and by the service's stop at the end of the input.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

#include "cluster/proto/coordination.grpc.pb.h"
#include "fuzz_util.h"
#include "service_calls.h"
#include "strata/cluster/coordination.h"

using namespace strata;
namespace pb = strata::cluster;

namespace {

constexpr int kMaxCalls = 8;
constexpr auto kCallDeadline = std::chrono::milliseconds(20);

void call(pb::Coordination::Stub& stub, auto method, const std::string& bytes) {
  fuzz::call_parsed(stub, method, bytes, kCallDeadline);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_protobuf_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Bytes in(data, size);
  cluster::CoordinationService service;
  cluster::CoordinationService::Options options;
  options.heartbeat_timeout = std::chrono::milliseconds(1 + in.byte() % 51);
  if ((in.byte() & 1) != 0) options.tasks = {"chief:0", "worker:0", "worker:1"};
  try {
    service.start("127.0.0.1:0", options);
  } catch (const Error&) {
    return 0;
  }
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(service.port()), grpc::InsecureChannelCredentials());
  auto stub = pb::Coordination::NewStub(channel);
  for (int i = 0; i < kMaxCalls && !in.empty(); ++i) {
    const int method = in.byte() % 12;
    const std::string bytes = in.string();
    using S = pb::Coordination::Stub;
    switch (method) {
      case 0:
        call(*stub, &S::Set, bytes);
        break;
      case 1:
        call(*stub, &S::Get, bytes);
        break;
      case 2:
        call(*stub, &S::Add, bytes);
        break;
      case 3:
        call(*stub, &S::CompareSet, bytes);
        break;
      case 4:
        call(*stub, &S::Check, bytes);
        break;
      case 5:
        call(*stub, &S::Wait, bytes);
        break;
      case 6:
        call(*stub, &S::Delete, bytes);
        break;
      case 7:
        call(*stub, &S::NumKeys, bytes);
        break;
      case 8:
        call(*stub, &S::Barrier, bytes);
        break;
      case 9:
        call(*stub, &S::Heartbeat, bytes);
        break;
      case 10:
        call(*stub, &S::GetLostTasks, bytes);
        break;
      case 11:
        call(*stub, &S::Disconnect, bytes);
        break;
    }
  }
  service.stop();
  return 0;
}
