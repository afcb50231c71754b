// encode_with_tensor_bytes: the bytes are the message followed by the TensorBytes field again holding only the data,
// in protobuf's wire format, and the buffer keeps the tensor's memory alive after every other handle is gone.
#include "ps/tensor_coding.h"

#include <google/protobuf/empty.pb.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace strata::ps {
namespace {

std::string bytes_of(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST(TensorCodingTest, TheTensorFollowsAsASecondOccurrenceOfItsField) {
  const Tensor t =
      Tensor::from_vector(std::vector<float>{1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
                                             17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32},
                          {32});  // 128 bytes: a two-byte length
  const std::string got = bytes_of(encode_with_tensor_bytes(google::protobuf::Empty(), 5, t));
  // field 5, length-delimited (5 << 3 | 2 = 0x2a), length 1 + 2 + 128 = 131 (0x83 0x01); inside it TensorBytes.data
  // (2 << 3 | 2 = 0x12), length 128 (0x80 0x01), then the floats.
  const std::string header = "\x2a\x83\x01\x12\x80\x01";
  ASSERT_EQ(got.size(), header.size() + 128);
  EXPECT_EQ(got.substr(0, header.size()), header);
  EXPECT_EQ(std::memcmp(got.data() + header.size(), t.raw_data(), 128), 0);
}

TEST(TensorCodingTest, AnEmptyTensorAddsNothing) {
  EXPECT_EQ(bytes_of(encode_with_tensor_bytes(google::protobuf::Empty(), 2, Tensor::empty({0}))), "");
}

TEST(TensorCodingTest, TheBufferKeepsTheTensorsMemoryAlive) {
  grpc::ByteBuffer buffer;
  {
    const Tensor t = Tensor::full({1000}, 2.5);
    buffer = encode_with_tensor_bytes(google::protobuf::Empty(), 2, t);
  }
  const std::string got = bytes_of(buffer);
  float last = 0;
  std::memcpy(&last, got.data() + got.size() - sizeof(float), sizeof(float));
  EXPECT_EQ(last, 2.5f);
}

}  // namespace
}  // namespace strata::ps
