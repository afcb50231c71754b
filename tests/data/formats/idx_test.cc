// IDX files: round trips plain and gzipped, every element type, clear errors for bad files, and
// from_idx on the Fashion-MNIST layout.
#include "strata/data/idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "data/dataset_test_util.h"

namespace strata::data {
namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "/strata_idx_" + name; }

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

TEST(IdxTest, RoundTripsPlainAndGzipped) {
  Tensor u8 = Tensor::from_vector<uint8_t>({0, 1, 2, 250, 251, 252}, {2, 3});
  Tensor i32 = Tensor::from_vector<int32_t>({-7, 65536, 3}, {3});
  Tensor f32 = Tensor::from_vector<float>({1.5f, -2.25f, 3e7f, 0.0f}, {2, 1, 2});
  for (bool gz : {false, true}) {
    for (const Tensor& t : {u8, i32, f32}) {
      const std::string path = temp_path(gz ? "t.gz" : "t");
      write_idx(path, t, gz);
      Tensor back = read_idx(path);
      EXPECT_EQ(back.dtype(), t.dtype());
      EXPECT_EQ(back.shape(), t.shape());
      EXPECT_EQ(back.to_vector<double>(), t.to_vector<double>());
      std::filesystem::remove(path);
    }
  }
}

TEST(IdxTest, ConvertsNarrowAndDoubleTypes) {
  const std::string path = temp_path("types");
  write_bytes(path, {0, 0, 0x0B, 1, 0, 0, 0, 2, 0xFF, 0xFE, 0x01, 0x00});  // int16 [-2, 256]
  EXPECT_EQ(read_idx(path).to_vector<int32_t>(), (std::vector<int32_t>{-2, 256}));
  write_bytes(path, {0, 0, 0x09, 1, 0, 0, 0, 1, 0x80});  // int8 [-128]
  EXPECT_EQ(read_idx(path).to_vector<int32_t>(), (std::vector<int32_t>{-128}));
  write_bytes(path, {0, 0, 0x0E, 1, 0, 0, 0, 1, 0x3F, 0xF8, 0, 0, 0, 0, 0, 0});  // double [1.5]
  Tensor d = read_idx(path);
  EXPECT_EQ(d.dtype(), DType::kFloat32);
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{1.5f}));
  std::filesystem::remove(path);
}

TEST(IdxTest, BadFilesNameTheFileAndTheProblem) {
  const std::string path = temp_path("bad");
  write_bytes(path, {0, 0, 0x08, 2, 0, 0, 0, 3, 0, 0, 0, 4, 1, 2, 3});  // 12 bytes promised, 3 given
  std::string msg = test::message_of<DataCorrupt>([&] { read_idx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  write_bytes(path, {'P', 'K', 3, 4});
  msg = test::message_of<DataCorrupt>([&] { read_idx(path); });
  EXPECT_NE(msg.find("not an IDX file"), std::string::npos) << msg;
  write_bytes(path, {0, 0, 0x42, 1, 0, 0, 0, 1, 0});
  msg = test::message_of<DataCorrupt>([&] { read_idx(path); });
  EXPECT_NE(msg.find("element type"), std::string::npos) << msg;
  std::filesystem::remove(path);
  msg = test::message_of<IoError>([&] { read_idx(path); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

// Found by fuzz/idx_fuzzer: a 20-byte file whose header claims 1.5 G int32 elements made read_idx allocate 6 GB
// before it read any data. What the header claims must fit in the file (plain, or gzipped at deflate's best ratio).
TEST(IdxTest, HeaderClaimingMoreThanTheFileHoldsIsCorruptNotAnAllocation) {
  const std::string path = temp_path("huge");
  write_bytes(path, {0, 0, 0x0c, 1, 0x5a, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2});
  std::string msg = test::message_of<DataCorrupt>([&] { read_idx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("claims 1509949443 elements"), std::string::npos) << msg;
  std::filesystem::remove(path);
  // Gzipped: the same header and a few bytes cannot inflate to 1.5 GB either.
  gzFile gz = gzopen((path + ".gz").c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  const unsigned char header[] = {0, 0, 0x08, 1, 0x5a, 0, 0, 3, 1, 2, 3};
  ASSERT_EQ(gzwrite(gz, header, sizeof header), static_cast<int>(sizeof header));
  ASSERT_EQ(gzclose(gz), Z_OK);
  msg = test::message_of<DataCorrupt>([&] { read_idx(path + ".gz"); });
  EXPECT_NE(msg.find("gzipped bytes can hold"), std::string::npos) << msg;
  std::filesystem::remove(path + ".gz");
}

// Found by fuzz/idx_fuzzer: dimensions whose product overflows int64 (undefined behaviour) before the element
// count was checked.
TEST(IdxTest, DimensionsWhoseProductOverflowsAreCorrupt) {
  const std::string path = temp_path("overflow");
  write_bytes(path, {0, 0, 0x0c, 3, 0x5a, 8, 3, 0, 0, 0, 2, 0, 0x5a, 8, 3, 0, 0, 0, 2, 0, 0, 2});
  const std::string msg = test::message_of<DataCorrupt>([&] { read_idx(path); });
  EXPECT_NE(msg.find("claims too many elements"), std::string::npos) << msg;
  std::filesystem::remove(path);
}

TEST(IdxTest, FromIdxReadsTheMnistLayout) {
  const std::string dir = temp_path("mnist");
  std::filesystem::create_directories(dir);
  std::vector<uint8_t> pixels(3 * 2 * 2);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 10);
  write_idx(dir + "/t10k-images-idx3-ubyte.gz", Tensor::from_vector<uint8_t>(pixels, {3, 2, 2}), true);
  write_idx(dir + "/t10k-labels-idx1-ubyte", Tensor::from_vector<uint8_t>({7, 2, 1}, {3}));
  auto ds = Dataset::from_idx(dir, Split::kTest);
  EXPECT_EQ(ds.cardinality(), 3);
  auto it = ds.make_iterator();
  it.next();
  auto e = it.next();
  EXPECT_EQ(e->names(), (std::vector<std::string>{"image", "label"}));
  EXPECT_EQ((*e)["image"].shape(), (Shape{2, 2, 1}));
  EXPECT_EQ((*e)["image"].dtype(), DType::kUInt8);
  EXPECT_EQ((*e)["image"].to_vector<int>(), (std::vector<int>{40, 50, 60, 70}));
  EXPECT_EQ((*e)["label"].dtype(), DType::kInt64);
  EXPECT_EQ((*e)["label"].item<int64_t>(), 2);
  const std::string msg = test::message_of<IoError>([&] { Dataset::from_idx(dir, Split::kTrain); });
  EXPECT_NE(msg.find("train-images-idx3-ubyte"), std::string::npos) << msg;
  std::filesystem::remove_all(dir);
}

TEST(IdxTest, FashionMnistWhenInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir + "/t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST in " << dir;
  auto ds = Dataset::from_idx(dir, Split::kTest);
  EXPECT_EQ(ds.cardinality(), 10000);
  auto batch = ds.batch(10000).make_iterator().next();
  EXPECT_EQ((*batch)["image"].shape(), (Shape{10000, 28, 28, 1}));
  const auto labels = (*batch)["label"].to_vector<int64_t>();
  std::vector<int> counts(10);
  for (int64_t l : labels) ++counts.at(static_cast<size_t>(l));
  for (int c : counts) EXPECT_EQ(c, 1000);  // the test split is balanced
}

}  // namespace
}  // namespace strata::data
