// Tensor: construction, views vs copies, wrapping memory another object owns, conversions and the errors bad use
// gets.
#include "strata/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device_memory.h"

namespace strata {
namespace {

TEST(TensorTest, FactoriesFillAndReportShape) {
  Tensor z = Tensor::zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.rank(), 2);
  EXPECT_EQ(z.dim(-1), 3);
  EXPECT_EQ(z.strides(), (std::vector<int64_t>{3, 1}));
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  Tensor f = Tensor::full({4}, 2.5, DType::kInt32);
  EXPECT_EQ(f.to_vector<int32_t>(), (std::vector<int32_t>{2, 2, 2, 2}));
  EXPECT_EQ(Tensor::scalar(3.0f).rank(), 0);
  EXPECT_EQ(Tensor::scalar(3.0f).item<float>(), 3.0f);
}

TEST(TensorTest, StorageIs64ByteAligned) {
  for (int n : {1, 3, 17, 1000}) {
    Tensor t = Tensor::empty({n}, DType::kUInt8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  }
}

TEST(TensorTest, CopiesShareStorageAndCloneDoesNot) {
  Tensor a = Tensor::zeros({3});
  Tensor b = a;
  b.data<float>()[1] = 7.0f;
  EXPECT_EQ(a.to_vector<float>()[1], 7.0f);
  Tensor c = a.clone();
  c.data<float>()[1] = 1.0f;
  EXPECT_EQ(a.to_vector<float>()[1], 7.0f);
  EXPECT_TRUE(a.shares_storage_with(b));
  EXPECT_FALSE(a.shares_storage_with(c));
}

TEST(TensorTest, ReshapeIsAViewAndInfersOneDimension) {
  Tensor a = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor r = a.reshape({3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_TRUE(r.shares_storage_with(a));
  EXPECT_THROW(a.reshape({4, -1}), ShapeError);
  EXPECT_THROW(a.reshape({-1, -1}), ShapeError);
  EXPECT_THROW(a.reshape({5}), ShapeError);
}

TEST(TensorTest, SliceIsAViewOfRows) {
  Tensor a = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor s = a.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  s.data<float>()[0] = 9;
  EXPECT_EQ(a.to_vector<float>()[2], 9);
  EXPECT_EQ(a.slice(3, 3).numel(), 0);
  EXPECT_THROW(a.slice(2, 4), InvalidArgument);
}

TEST(TensorTest, TransposeIsACopy) {
  Tensor a = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = a.transpose();
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_FALSE(t.shares_storage_with(a));
  // NHWC -> NCHW on a [1, 2, 2, 3] tensor.
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = float(i);
  Tensor nchw = Tensor::from_vector(v, {1, 2, 2, 3}).transpose({0, 3, 1, 2});
  EXPECT_EQ(nchw.shape(), (Shape{1, 3, 2, 2}));
  EXPECT_EQ(nchw.to_vector<float>(), (std::vector<float>{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}));
  EXPECT_THROW(a.transpose({0, 0}), InvalidArgument);
}

// A permutation that keeps the last axis copies whole runs of it (attention's heads <-> steps); every element still
// lands where the index arithmetic says, for floats and for 8-byte integers.
TEST(TensorTest, TransposeKeepingTheLastAxisMovesRuns) {
  const Shape in = {2, 3, 4, 5};
  std::vector<float> v(120);
  std::vector<int64_t> w(120);
  for (int i = 0; i < 120; ++i) v[i] = float(i), w[i] = 1000 + i;
  const Tensor f = Tensor::from_vector(v, in).transpose({0, 2, 1, 3});
  const Tensor n = Tensor::from_vector(w, in).transpose({2, 0, 1, 3});
  ASSERT_EQ(f.shape(), (Shape{2, 4, 3, 5}));
  ASSERT_EQ(n.shape(), (Shape{4, 2, 3, 5}));
  const auto fv = f.to_vector<float>();
  const auto nv = n.to_vector<int64_t>();
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 5; ++d) {
          const int src = ((a * 3 + b) * 4 + c) * 5 + d;
          EXPECT_EQ(fv[((a * 4 + c) * 3 + b) * 5 + d], float(src));
          EXPECT_EQ(nv[((c * 2 + a) * 3 + b) * 5 + d], 1000 + src);
        }
  EXPECT_EQ(Tensor::zeros({2, 0, 3}).transpose({1, 0, 2}).shape(), (Shape{0, 2, 3}));
}

TEST(TensorTest, DtypeConversionsAndBFloat16) {
  Tensor a = Tensor::from_vector<float>({1.5f, -2.75f, 3.0f}, {3});
  EXPECT_EQ(a.to(DType::kInt64).to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  Tensor b = a.to(DType::kBFloat16);
  EXPECT_EQ(b.nbytes(), 6u);
  EXPECT_EQ(b.to(DType::kFloat32).to_vector<float>(), (std::vector<float>{1.5f, -2.75f, 3.0f}));
  EXPECT_NEAR(float(BFloat16(3.14159f)), 3.14159f, 0.02f);
}

TEST(TensorTest, WrongDtypeAccessNamesBothTypes) {
  Tensor a = Tensor::zeros({2}, DType::kInt32);
  try {
    a.data<float>();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("tensor.cc"), std::string::npos) << "check macros add file:line";
  }
}

TEST(TensorTest, CudaRoundTripOrUnavailable) {
  const Tensor host = Tensor::from_vector<float>({1, 2, 3}, {3});
  if (detail::cuda_device_count() == 0) {
    // No CUDA build, or no GPU: a clear Unavailable, never a crash.
    EXPECT_THROW(Tensor::zeros({2}, DType::kFloat32, Device::cuda(0)), Unavailable);
    EXPECT_THROW(host.to(Device::cuda(0)), Unavailable);
    return;
  }
  const Tensor device = host.to(Device::cuda(0));
  EXPECT_EQ(device.device(), Device::cuda(0));
  EXPECT_EQ(device.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(Tensor::full({2}, 4.0, DType::kFloat32, Device::cuda(0)).to_vector<float>(), (std::vector<float>{4, 4}));
  EXPECT_EQ(device.clone().to(Device::cpu()).to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(TensorTest, WrapHostSharesTheMemoryAndKeepsItsOwnerAlive) {
  auto owned = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<float>> watch = owned;
  float* data = owned->data();
  Tensor t = Tensor::wrap_host(data, {2, 3}, DType::kFloat32, std::move(owned));
  EXPECT_EQ(t.data<float>(), data);  // no copy
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor view = t.slice(1, 2);
  t = Tensor();
  EXPECT_FALSE(watch.expired());  // a view still holds it
  EXPECT_EQ(view.to_vector<float>(), (std::vector<float>{4, 5, 6}));
  view = Tensor();
  EXPECT_TRUE(watch.expired());  // released with the last tensor on it, never freed by the tensor itself

  std::vector<float> buffer(4, 0.0f);
  char* odd = reinterpret_cast<char*>(buffer.data()) + 1;
  EXPECT_THROW(Tensor::wrap_host(odd, {2}, DType::kFloat32, nullptr), InvalidArgument);
  EXPECT_THROW(Tensor::wrap_host(buffer.data(), {-1}, DType::kFloat32, nullptr), ShapeError);
}

TEST(TensorTest, MixingDevicesIsAClearError) {
  Tensor a = Tensor::zeros({2});
  Tensor undefined;
  EXPECT_THROW(check_same_device("add", {&a, &undefined}), InvalidArgument);
  EXPECT_NO_THROW(check_same_device("add", {&a, &a}));
}

TEST(ShapeTest, BroadcastFollowsNumPy) {
  EXPECT_EQ(broadcast_shapes({2, 1, 3}, {4, 1}, "add"), (Shape{2, 4, 3}));
  EXPECT_EQ(broadcast_shapes({}, {5}, "add"), (Shape{5}));
  try {
    broadcast_shapes({2, 3}, {4}, "mul");
    FAIL();
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mul"), std::string::npos);
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos);
    EXPECT_NE(msg.find("[4]"), std::string::npos);
  }
}

}  // namespace
}  // namespace strata
