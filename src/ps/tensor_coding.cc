// See tensor_coding.h. Thread-safety: pure functions.
#include "ps/tensor_coding.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <grpcpp/support/slice.h>

#include <string>

namespace strata::ps {
namespace {

constexpr uint32_t kLengthDelimited = 2;
constexpr int kTensorBytesDataField = 2;  // TensorBytes.data in parameter_server.proto

uint32_t tag(int field) { return (static_cast<uint32_t>(field) << 3) | kLengthDelimited; }

}  // namespace

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

}  // namespace strata::ps
