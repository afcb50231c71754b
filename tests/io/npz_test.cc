// .npz archives (strata/io/npz.h) as numpy.savez (stored) and numpy.savez_compressed (deflated) write them, made
// here with libzip (tests/npz_writer.h); and read_npy_info, the header-only read of a .npy file.
#include "strata/io/npz.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "io/io_test_util.h"
#include "npz_writer.h"
#include "test_util.h"

namespace strata::io {
namespace {

using strata::test::ScratchDir;

Tensor counting(const Shape& shape, DType dtype, int start) {
  Tensor t = Tensor::empty(shape, DType::kFloat32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>((start + i * 7) % 251);
  return t.to(dtype);
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(NpzTest, ReadsStoredAndDeflatedArchivesAsNumpyLoadDoes) {
  ScratchDir dir;
  const Tensor x = counting({5, 4, 3}, DType::kUInt8, 1), y = counting({5}, DType::kInt64, 2);
  const Tensor f = counting({2, 300}, DType::kFloat32, 3), i = counting({7}, DType::kInt32, 4);
  for (bool compressed : {false, true}) {
    const std::string path = dir / (compressed ? "deflated.npz" : "stored.npz");
    test::write_npz(path, {{"y_train", y}, {"x_train", x}, {"features", f}, {"ids", i}}, compressed);
    {  // the archive really holds what it should: members deflated or stored
      int error = 0;
      zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &error);
      ASSERT_NE(z, nullptr);
      zip_stat_t st;
      ASSERT_EQ(zip_stat(z, "features.npy", 0, &st), 0);
      EXPECT_EQ(st.comp_method, compressed ? ZIP_CM_DEFLATE : ZIP_CM_STORE);
      if (compressed) {
        EXPECT_LT(st.comp_size, st.size);
      }
      zip_discard(z);
    }
    NpzFile npz(path);
    EXPECT_EQ(npz.path(), path);
    EXPECT_EQ(npz.keys(), (std::vector<std::string>{"y_train", "x_train", "features", "ids"}));  // archive order
    EXPECT_TRUE(npz.has("ids"));
    EXPECT_FALSE(npz.has("ids.npy"));
    const NpyInfo info = npz.info("x_train");
    EXPECT_EQ(info.dtype, DType::kUInt8);
    EXPECT_EQ(info.shape, (Shape{5, 4, 3}));
    EXPECT_TRUE(same(npz.read("x_train"), x));
    EXPECT_TRUE(same(npz.read("y_train"), y));
    EXPECT_TRUE(same(npz.read("features"), f));
    EXPECT_TRUE(same(npz.read("ids"), i));
    EXPECT_TRUE(same(npz.read("ids"), i)) << "a second read of a member";
  }
}

TEST(NpzTest, AMissingArrayNamesTheArchiveAndTheArraysItHolds) {
  ScratchDir dir;
  const std::string path = dir / "data.npz";
  test::write_npz(path, {{"x_train", counting({2, 2}, DType::kUInt8, 0)}, {"y_train", counting({2}, DType::kInt64, 0)}},
                  true);
  NpzFile npz(path);
  test::expect_error_containing<InvalidArgument>([&] { npz.read("x_test"); },
                                                 {path, "no array 'x_test'", "it holds x_train, y_train"});
  test::expect_error_containing<InvalidArgument>([&] { npz.info("x"); }, {"no array 'x'"});
}

TEST(NpzTest, MembersThatAreNotArraysAreNotKeys) {
  ScratchDir dir;
  const std::string path = dir / "mixed.npz";
  test::write_zip(path, {{"README.txt", "hello"}, {"a.npy", test::npy_bytes(counting({3}, DType::kFloat32, 0), dir / "a")}},
                  ZIP_CM_STORE);
  EXPECT_EQ(NpzFile(path).keys(), std::vector<std::string>{"a"});
}

TEST(NpzTest, BadArchivesAndBadMembersAreErrorsNamingTheFile) {
  ScratchDir dir;
  test::expect_error_containing<IoError>([&] { NpzFile(dir / "missing.npz"); }, {"missing.npz"});
  test::write_bytes(dir / "plain.npz", "this is not a zip archive at all, just some text");
  test::expect_error_containing<DataCorrupt>([&] { NpzFile(dir / "plain.npz"); }, {"plain.npz", "not an .npz file"});

  // A member numpy wrote as float64, which strata does not hold: the file and member are named.
  std::string f8("\x93NUMPY\x01\x00v\x00", 10);
  f8 += "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
  f8.append(128 - f8.size() - 1, ' ');
  f8 += '\n';
  f8.append(16, '\0');
  test::write_zip(dir / "f8.npz", {{"x.npy", f8}}, ZIP_CM_DEFLATE);
  NpzFile npz(dir / "f8.npz");
  test::expect_error_containing<InvalidArgument>([&] { npz.read("x"); }, {"f8.npz:x.npy", "'<f8'", "astype"});
  test::expect_error_containing<InvalidArgument>([&] { npz.info("x"); }, {"f8.npz:x.npy", "'<f8'"});

  // A member cut short: its header says more data than it has.
  std::string cut = test::npy_bytes(counting({10}, DType::kInt64, 0), dir / "cut");
  cut.resize(cut.size() - 8);
  test::write_zip(dir / "cut.npz", {{"y.npy", cut}}, ZIP_CM_STORE);
  NpzFile cut_npz(dir / "cut.npz");
  test::expect_error_containing<DataCorrupt>([&] { cut_npz.read("y"); }, {"cut.npz:y.npy", "needs 80 data bytes"});
}

TEST(NpzTest, ADamagedStoredMemberFailsItsCrc) {
  ScratchDir dir;
  const std::string path = dir / "damaged.npz";
  test::write_npz(path, {{"x", counting({4000}, DType::kUInt8, 5)}}, false);
  std::string bytes = test::read_bytes(path);
  const size_t magic = bytes.find("\x93NUMPY");
  ASSERT_NE(magic, std::string::npos);
  bytes[magic + 128 + 2000] ^= 0x10;  // inside the stored array's data
  test::write_bytes(path, bytes);
  NpzFile npz(path);
  EXPECT_EQ(npz.info("x").shape, Shape{4000});  // the header is intact
  test::expect_error_containing<DataCorrupt>([&] { npz.read("x"); }, {"damaged.npz:x.npy"});
}

TEST(NpyInfoTest, ReadsTheHeaderAloneAndChecksTheDataSize) {
  ScratchDir dir;
  write_npy(dir / "x.npy", counting({6, 28, 28}, DType::kFloat32, 0));
  const NpyInfo info = read_npy_info(dir / "x.npy");
  EXPECT_EQ(info.dtype, DType::kFloat32);
  EXPECT_EQ(info.shape, (Shape{6, 28, 28}));
  std::string bytes = test::read_bytes(dir / "x.npy");
  test::write_bytes(dir / "short.npy", bytes.substr(0, bytes.size() - 4));
  test::expect_error_containing<DataCorrupt>([&] { read_npy_info(dir / "short.npy"); }, {"short.npy", "needs"});
  test::expect_error_containing<IoError>([&] { read_npy_info(dir / "none.npy"); }, {"none.npy"});
}

}  // namespace
}  // namespace strata::io
