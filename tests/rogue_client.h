// A rogue client for tests: calls any method of a strata gRPC service by its path, with the bytes and metadata it
// chooses (the generated messages serialized, or none), over a plaintext channel: what an outsider on the machine
// can do with the project's .proto files.
// Thread-safety: each call waits for its own completion; call from any thread.
#pragma once

#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata::testing {

// "/strata.cluster.Coordination/Set", ... for every method of the service `full_name` (from the generated pool).
inline std::vector<std::string> method_paths(const std::string& full_name) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(full_name);
  std::vector<std::string> paths;
  if (service == nullptr) return paths;
  for (int i = 0; i < service->method_count(); ++i) paths.push_back("/" + full_name + "/" + service->method(i)->name());
  return paths;
}

class RogueClient {
 public:
  explicit RogueClient(const std::string& address)
      : stub_(std::make_unique<grpc::GenericStub>(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

  // Calls `path` with `request` (serialized bytes) and `metadata`; returns the status (the reply is dropped).
  grpc::Status call(const std::string& path, const std::string& request = "",
                    const std::map<std::string, std::string>& metadata = {}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    for (const auto& [key, value] : metadata) context.AddMetadata(key, value);
    grpc::Slice slice(request);
    grpc::ByteBuffer buffer(&slice, 1);
    grpc::ByteBuffer reply;
    std::promise<grpc::Status> done;
    stub_->UnaryCall(&context, path, grpc::StubOptions(), &buffer, &reply,
                     [&done](grpc::Status status) { done.set_value(std::move(status)); });
    grpc::Status status = done.get_future().get();
    return status;
  }

 private:
  std::unique_ptr<grpc::GenericStub> stub_;
};

}  // namespace strata::testing
