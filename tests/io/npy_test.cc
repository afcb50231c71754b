// .npy files (strata/io/npy.h): strata writes the bytes numpy.save writes (the expected headers below are numpy
// 2.4's own output), reads them back, and refuses anything malformed with an error naming the file.
#include "strata/io/npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "io/io_test_util.h"

namespace strata::io {
namespace {

using strata::test::read_bytes;
using strata::test::ScratchDir;

// numpy.save's header for `dict`: magic, version 1.0, the length 118 ('v'), the dict padded to 128 bytes in all.
std::string numpy_header(const std::string& dict) {
  std::string h("\x93NUMPY\x01\x00v\x00", 10);
  h += dict;
  h.append(128 - h.size() - 1, ' ');
  h += '\n';
  return h;
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(NpyTest, WritesTheBytesNumpyWrites) {
  ScratchDir dir;
  Tensor f = Tensor::empty({2, 3}, DType::kFloat32);
  for (int i = 0; i < 6; ++i) f.data<float>()[i] = static_cast<float>(i);
  write_npy(dir / "f.npy", f);
  std::string want = numpy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  want.append(static_cast<const char*>(f.raw_data()), f.nbytes());
  EXPECT_EQ(read_bytes(dir / "f.npy"), want);

  Tensor u = Tensor::empty({3}, DType::kUInt8);
  u.data<uint8_t>()[0] = 1, u.data<uint8_t>()[1] = 2, u.data<uint8_t>()[2] = 255;
  write_npy(dir / "u.npy", u);
  EXPECT_EQ(read_bytes(dir / "u.npy"),
            numpy_header("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }") + std::string("\x01\x02\xff", 3));

  write_npy(dir / "empty.npy", Tensor::empty({0, 4}, DType::kInt64));
  EXPECT_EQ(read_bytes(dir / "empty.npy"), numpy_header("{'descr': '<i8', 'fortran_order': False, 'shape': (0, 4), }"));
}

TEST(NpyTest, ReadsBackEveryDtypeAndShape) {
  ScratchDir dir;
  for (DType dtype : {DType::kFloat32, DType::kUInt8, DType::kInt32, DType::kInt64}) {
    Tensor t = Tensor::empty({4, 2, 3}, dtype);
    for (int64_t i = 0; i < static_cast<int64_t>(t.nbytes()); ++i) static_cast<uint8_t*>(t.raw_data())[i] = i * 7 % 251;
    write_npy(dir / "t.npy", t);
    const Tensor back = read_npy(dir / "t.npy");
    EXPECT_EQ(back.dtype(), dtype);
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(std::memcmp(back.raw_data(), t.raw_data(), t.nbytes()), 0) << dtype_name(dtype);
  }
  // A scalar, and numpy's "<u1" spelling and double-quoted keys, which the format allows.
  write_raw(dir / "s.npy", numpy_header("{\"descr\": \"<u1\", \"fortran_order\": False, \"shape\": ()}") + "\x07");
  const Tensor s = read_npy(dir / "s.npy");
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.data<uint8_t>()[0], 7);
}

// Reads `bytes` as a .npy file and returns the error's message ("" when it read).
template <class E>
std::string read_error(const ScratchDir& dir, const std::string& bytes) {
  write_raw(dir / "bad.npy", bytes);
  try {
    read_npy(dir / "bad.npy");
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

TEST(NpyTest, RefusesMalformedFilesNamingTheProblem) {
  ScratchDir dir;
  const std::string good = numpy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }");
  const std::string data(8, '\0');
  EXPECT_EQ(read_error<DataCorrupt>(dir, good + data), "");
  EXPECT_NE(read_error<DataCorrupt>(dir, "PK\x03\x04 not numpy").find("does not start with"), std::string::npos);
  EXPECT_NE(read_error<DataCorrupt>(dir, good + data.substr(0, 7)).find("needs 8 data bytes, but the file has 7"),
            std::string::npos);
  EXPECT_NE(read_error<DataCorrupt>(dir, good + data + "x").find("the file has 9"), std::string::npos);
  EXPECT_NE(read_error<DataCorrupt>(
                dir, numpy_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }") + data)
                .find("Fortran order"),
            std::string::npos);
  EXPECT_NE(read_error<DataCorrupt>(dir, numpy_header("{'descr': '<f4', 'shape': (2,), }") + data)
                .find("needs 'descr', 'fortran_order' and 'shape'"),
            std::string::npos);
  EXPECT_NE(read_error<DataCorrupt>(
                dir, numpy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}") + data)
                .find("unexpected or repeated key 'x'"),
            std::string::npos);
  EXPECT_NE(read_error<DataCorrupt>(dir, numpy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}") +
                                             data)
                .find("expected ',' or ')'"),
            std::string::npos);
  EXPECT_NE(read_error<InvalidArgument>(
                dir, numpy_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }") + data)
                .find(".npy dtype '>f4' is not one strata reads"),
            std::string::npos);
  std::string version9 = good;
  version9[6] = 9;
  EXPECT_NE(read_error<DataCorrupt>(dir, version9 + data).find("unknown .npy format version 9.0"), std::string::npos);
  std::string too_long = good;
  too_long[8] = '\xff';  // a header length past the end of the file
  EXPECT_NE(read_error<DataCorrupt>(dir, too_long + data).find("the .npy header claims"), std::string::npos);
  EXPECT_THROW(read_npy(dir / "missing.npy"), IoError);
  EXPECT_THROW(write_npy(dir / "b.npy", Tensor::empty({2}, DType::kBFloat16)), InvalidArgument);
}

}  // namespace
}  // namespace strata::io
