// See tensor_coding.h. Thread-safety: pure functions.
#include "ps/tensor_coding.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "ps/proto/parameter_server.pb.h"

namespace strata::ps {
namespace {

constexpr uint32_t kLengthDelimited = 2;
constexpr int kTensorBytesDataField = 2;  // TensorBytes.data in parameter_server.proto

uint32_t tag(int field) { return (static_cast<uint32_t>(field) << 3) | kLengthDelimited; }

}  // namespace

void to_bytes(const Tensor& t, proto::TensorBytes* out) {
  out->clear_shape();
  for (int64_t d : t.shape()) out->add_shape(d);
  out->set_data(t.raw_data(), t.nbytes());
}

std::string from_bytes(const proto::TensorBytes& t, Tensor* out, const std::string* data,
                       std::shared_ptr<const void> owner, bool borrow) {
  if (!data) data = &t.data();
  const Shape shape(t.shape().begin(), t.shape().end());
  // The product of the nonzero dimensions, in 128 bits, must stay below 2^62: else shape_numel (which multiplies in
  // order) overflows int64, even when a zero dimension makes the count 0. [274177, 67280421310721] is 2^64 + 1
  // elements, which passed for the one the bytes held; [615348588053760000, 101, 0] overflowed before its 0.
  constexpr unsigned __int128 kTooMany = uint64_t{1} << 62;
  unsigned __int128 nonzero = 1;
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return "a negative dimension in " + shape_str(shape);
    if (d == 0) {
      empty = true;
    } else {
      nonzero = std::min(nonzero * static_cast<uint64_t>(d), kTooMany);
    }
  }
  if (nonzero >= kTooMany) return "shape " + shape_str(shape) + " has more elements than a tensor can hold";
  const uint64_t numel = empty ? 0 : static_cast<uint64_t>(nonzero);
  if (numel * sizeof(float) != data->size()) {
    return "shape " + shape_str(shape) + " needs " + std::to_string(numel * 4) + " bytes of float32, got " +
           std::to_string(data->size());
  }
  void* bytes = const_cast<char*>(data->data());
  if ((owner || borrow) && reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0) {
    *out = Tensor::wrap_host(bytes, shape, DType::kFloat32, std::move(owner));
    return "";
  }
  *out = Tensor::empty(shape);
  std::memcpy(out->raw_data(), data->data(), data->size());
  return "";
}

grpc::ByteBuffer encode_with_tensor_bytes(const google::protobuf::MessageLite& head, int field, const Tensor& t) {
  namespace io = google::protobuf::io;
  std::string prefix = head.SerializeAsString();
  const uint64_t n = t.nbytes();
  if (n == 0) {
    grpc::Slice only(prefix);
    return grpc::ByteBuffer(&only, 1);
  }
  const uint64_t inner =
      io::CodedOutputStream::VarintSize32(tag(kTensorBytesDataField)) + io::CodedOutputStream::VarintSize64(n) + n;
  {
    io::StringOutputStream sink(&prefix);
    io::CodedOutputStream out(&sink);
    out.WriteTag(tag(field));
    out.WriteVarint64(inner);
    out.WriteTag(tag(kTensorBytesDataField));
    out.WriteVarint64(n);
  }
  auto* keep = new Tensor(t);  // released by the slice when gRPC drops its last reference
  grpc::Slice slices[2] = {grpc::Slice(prefix), grpc::Slice(
                                                    const_cast<void*>(keep->raw_data()), n,
                                                    [](void* p) { delete static_cast<Tensor*>(p); }, keep)};
  return grpc::ByteBuffer(slices, 2);
}

grpc::Status call_with_raw_bytes(grpc::GenericStub& stub, grpc::ClientContext& context, const std::string& method,
                                 const grpc::ByteBuffer& request, grpc::ByteBuffer* reply) {
  grpc::CompletionQueue queue;
  auto rpc = stub.PrepareUnaryCall(&context, method, request, &queue);
  rpc->StartCall();
  grpc::Status status;
  rpc->Finish(reply, &status, nullptr);
  void* tag = nullptr;
  bool ok = false;
  queue.Next(&tag, &ok);  // the call's one event: it finished
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return status;
}

}  // namespace strata::ps
