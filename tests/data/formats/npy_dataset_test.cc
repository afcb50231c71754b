// Datasets of NumPy arrays (Dataset::from_npy, Dataset::from_npz): (x[i], y[i]) per element with x's dtype kept and
// integer labels as int64, from .npy files and from stored and deflated .npz archives (written with libzip,
// tests/npz_writer.h); and the errors a Keras user meets first, each naming the file.
#include <gtest/gtest.h>

#include <cstring>

#include "data/dataset_test_util.h"
#include "npz_writer.h"
#include "strata/data/dataset.h"
#include "strata/io/npy.h"

namespace strata::data {
namespace {

using test::message_of;

class NpyDatasetTest : public test::ScratchDirTest {
 protected:
  NpyDatasetTest() : ScratchDirTest("npy_dataset") {}
};

Tensor counting(const Shape& shape, DType dtype, int start) {
  Tensor t = Tensor::empty(shape, DType::kFloat32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>((start + i * 3) % 200) * 0.5f;
  return t.to(dtype);
}

// Every element of `d` against rows of x and y (y's values as int64 unless float).
void expect_rows(const Dataset& d, const Tensor& x, const Tensor& y) {
  ASSERT_EQ(d.cardinality(), x.dim(0));
  const size_t row_bytes = x.nbytes() / static_cast<size_t>(x.dim(0));
  const std::vector<double> labels = y.to_vector<double>();
  int64_t i = 0;
  for (Iterator it = d.make_iterator(); auto e = it.next(); ++i) {
    ASSERT_EQ(e->names(), (std::vector<std::string>{"x", "y"}));
    const Tensor& xi = (*e)["x"];
    EXPECT_EQ(xi.dtype(), x.dtype());
    EXPECT_EQ(xi.shape(), Shape(x.shape().begin() + 1, x.shape().end()));
    EXPECT_EQ(std::memcmp(xi.raw_data(), static_cast<const char*>(x.raw_data()) + row_bytes * i, row_bytes), 0)
        << "row " << i;
    const Tensor& yi = (*e)["y"];
    EXPECT_EQ(yi.dtype(), y.dtype() == DType::kFloat32 ? DType::kFloat32 : DType::kInt64);
    EXPECT_EQ(yi.to_vector<double>()[0], labels[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(i, x.dim(0));
}

TEST_F(NpyDatasetTest, NpyFilesGiveXAndYRowByRowWithIntegerLabelsAsInt64) {
  const Tensor x8 = counting({6, 4, 4}, DType::kUInt8, 1), xf = counting({6, 3}, DType::kFloat32, 2);
  for (DType label_dtype : {DType::kUInt8, DType::kInt32, DType::kInt64, DType::kFloat32}) {
    const Tensor y = counting({6}, label_dtype, 7);
    io::write_npy(path("y.npy"), y);
    for (const Tensor& x : {x8, xf}) {
      io::write_npy(path("x.npy"), x);
      expect_rows(Dataset::from_npy(path("x.npy"), path("y.npy")), x, y);
    }
  }
}

TEST_F(NpyDatasetTest, NpzArchivesStoredOrDeflatedGiveTheSameRows) {
  const Tensor x = counting({5, 2, 3}, DType::kFloat32, 3), y = counting({5}, DType::kInt64, 4);
  const Tensor xt = counting({2, 2, 3}, DType::kFloat32, 5), yt = counting({2}, DType::kUInt8, 6);
  for (bool compressed : {false, true}) {
    strata::test::write_npz(path("data.npz"), {{"x_train", x}, {"y_train", y}, {"x_test", xt}, {"y_test", yt}}, compressed);
    expect_rows(Dataset::from_npz(path("data.npz"), "x_train", "y_train"), x, y);
    expect_rows(Dataset::from_npz(path("data.npz"), "x_test", "y_test"), xt, yt);
  }
}

TEST_F(NpyDatasetTest, MismatchedLengthsMissingKeysAndBadDtypesNameTheFile) {
  io::write_npy(path("x.npy"), counting({4, 2}, DType::kFloat32, 0));
  io::write_npy(path("y.npy"), counting({3}, DType::kInt64, 0));
  const std::string lengths = message_of<InvalidArgument>([&] { Dataset::from_npy(path("x.npy"), path("y.npy")); });
  EXPECT_NE(lengths.find("same number of records"), std::string::npos) << lengths;
  EXPECT_NE(lengths.find(path("x.npy") + " holds 4"), std::string::npos) << lengths;
  EXPECT_NE(lengths.find(path("y.npy") + " holds 3"), std::string::npos) << lengths;

  io::write_npy(path("scalar.npy"), Tensor::zeros({}, DType::kInt64));
  EXPECT_NE(message_of<InvalidArgument>([&] { Dataset::from_npy(path("x.npy"), path("scalar.npy")); })
                .find(path("scalar.npy") + " holds a scalar"),
            std::string::npos);

  strata::test::write_npz(path("d.npz"), {{"x_train", counting({4, 2}, DType::kUInt8, 0)}, {"labels", counting({4}, DType::kInt64, 0)}},
                  true);
  const std::string missing =
      message_of<InvalidArgument>([&] { Dataset::from_npz(path("d.npz"), "x_train", "y_train"); });
  EXPECT_NE(missing.find(path("d.npz")), std::string::npos) << missing;
  EXPECT_NE(missing.find("no array 'y_train'"), std::string::npos) << missing;
  EXPECT_NE(missing.find("it holds x_train, labels"), std::string::npos) << missing;

  // float64, numpy's default float: named with the file and how to convert it.
  std::string f8("\x93NUMPY\x01\x00v\x00", 10);
  f8 += "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
  f8.append(128 - f8.size() - 1, ' ');
  f8 += '\n';
  f8.append(24, '\0');
  test::put_bytes(path("f8.npy"), f8);
  const std::string dtype = message_of<InvalidArgument>([&] { Dataset::from_npy(path("x.npy"), path("f8.npy")); });
  EXPECT_NE(dtype.find(path("f8.npy")), std::string::npos) << dtype;
  EXPECT_NE(dtype.find("'<f8'"), std::string::npos) << dtype;

  EXPECT_THROW(Dataset::from_npy(path("none.npy"), path("y.npy")), IoError);
}

}  // namespace
}  // namespace strata::data
