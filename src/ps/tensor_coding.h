// Encodes a ps message that carries one tensor into a gRPC byte buffer without copying the tensor's bytes, in the
// same protobuf wire format the generated code reads (as TensorFlow's grpc_tensor_coding does for its RecvTensor).
// Thread-safety: pure functions; the buffer keeps its own reference to the tensor's memory.
#pragma once

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>

#include "strata/tensor.h"

namespace strata::ps {

// `head` serialized, followed by a second occurrence of its TensorBytes field number `field` that holds only
// `t`'s bytes (TensorBytes.data). Protobuf merges repeated occurrences of a message field when it parses, so the
// reader sees head's TensorBytes (its shape) with `t`'s bytes as its data. Those bytes are one slice over `t`'s
// memory, kept alive by a reference the slice owns until gRPC has sent them: `t` must not be written meanwhile.
// `t` is a contiguous float32 host tensor.
grpc::ByteBuffer encode_with_tensor_bytes(const google::protobuf::MessageLite& head, int field, const Tensor& t);

}  // namespace strata::ps
