// The ps's tensor codec: a TensorBytes message (proto/parameter_server.proto) to and from a float32 Tensor, and a
// ps message that carries one tensor encoded into a gRPC byte buffer without copying the tensor's bytes, in the
// same protobuf wire format the generated code reads (as TensorFlow's grpc_tensor_coding does for its RecvTensor);
// and the receive cap those messages are held to.
// Thread-safety: pure functions; the buffer keeps its own reference to the tensor's memory.
#pragma once

#include <google/protobuf/message_lite.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "strata/tensor.h"

namespace strata::ps {
namespace proto {
class TensorBytes;  // proto/parameter_server.proto (declared here: tests include this header without the build dir)
}  // namespace proto

// `t`'s shape and bytes into `out` (a copy of the bytes).
void to_bytes(const Tensor& t, proto::TensorBytes* out);

// The float32 tensor of shape `t.shape()` over `data` (t.data() unless given) in `out`, or an error text when the
// bytes do not fit the shape ("" when they do). With `owner` (it keeps `data` alive) or `borrow` (the caller keeps it
// alive while the tensor is used), the tensor is `data`'s bytes themselves when they are float-aligned, not a copy.
std::string from_bytes(const proto::TensorBytes& t, Tensor* out, const std::string* data = nullptr,
                       std::shared_ptr<const void> owner = nullptr, bool borrow = false);

// `head` serialized, followed by a second occurrence of its TensorBytes field number `field` that holds only
// `t`'s bytes (TensorBytes.data). Protobuf merges repeated occurrences of a message field when it parses, so the
// reader sees head's TensorBytes (its shape) with `t`'s bytes as its data. Those bytes are one slice over `t`'s
// memory, kept alive by a reference the slice owns until gRPC has sent them: `t` must not be written meanwhile.
// `t` is a contiguous float32 host tensor.
grpc::ByteBuffer encode_with_tensor_bytes(const google::protobuf::MessageLite& head, int field, const Tensor& t);

// A unary call of `method` ("/package.Service/Method") with the bytes of `request` as they are (a buffer of
// encode_with_tensor_bytes), its reply's bytes into `reply`: the generic stub's call, waited for.
grpc::Status call_with_raw_bytes(grpc::GenericStub& stub, grpc::ClientContext& context, const std::string& method,
                                 const grpc::ByteBuffer& request, grpc::ByteBuffer* reply);

// gRPC's receive limit for a cap of `bytes` (0: none, -1 to gRPC), at most INT_MAX.
inline int grpc_message_cap(int64_t bytes) {
  return bytes == 0 ? -1 : static_cast<int>(bytes > INT_MAX ? INT_MAX : bytes);
}

}  // namespace strata::ps
