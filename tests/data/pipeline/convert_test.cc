// to_float: every supported dtype scaled in one pass, shape kept, unsupported dtypes named.
#include "strata/data/convert.h"

#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace strata::data {
namespace {

TEST(ConvertTest, EveryPixelValueAtEveryPositionOfTheVectorLoop) {
  // 16 pixels a step on AVX-512 CPUs, then the rest: a length that leaves a tail, every byte value.
  std::vector<uint8_t> bytes(16 * 40 + 7);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 37) % 256);
  const auto v = to_float(Tensor::from_vector<uint8_t>(bytes, {static_cast<int64_t>(bytes.size())}), 1.0f / 255.0f)
                     .to_vector<float>();
  ASSERT_EQ(v.size(), bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(v[i], static_cast<float>(bytes[i]) * (1.0f / 255.0f)) << i;
}

TEST(ConvertTest, ScalesEachDtypeToFloat) {
  const Tensor pixels = Tensor::from_vector<uint8_t>({0, 51, 255, 128}, {2, 2, 1});
  const Tensor f = to_float(pixels, 1.0f / 255.0f);
  EXPECT_EQ(f.dtype(), DType::kFloat32);
  EXPECT_EQ(f.shape(), (Shape{2, 2, 1}));
  const auto v = f.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], 0.0f);
  EXPECT_FLOAT_EQ(v[1], 0.2f);
  EXPECT_FLOAT_EQ(v[2], 1.0f);
  EXPECT_FLOAT_EQ(v[3], 128.0f / 255.0f);
  EXPECT_EQ(to_float(Tensor::from_vector<int64_t>({-3, 7}, {2}), 2.0f).to_vector<float>(), (std::vector<float>{-6, 14}));
  EXPECT_EQ(to_float(Tensor::from_vector<int32_t>({5}, {1})).to_vector<float>(), (std::vector<float>{5}));
  EXPECT_EQ(to_float(Tensor::from_vector<float>({1.5f}, {1}), 2.0f).to_vector<float>(), (std::vector<float>{3.0f}));
}

TEST(ConvertTest, RejectsWhatItCannotConvert) {
  EXPECT_NE(test::message_of<InvalidArgument>([] { to_float(Tensor::zeros({2}, DType::kBFloat16)); }).find("bfloat16"),
            std::string::npos);
  EXPECT_THROW(to_float(Tensor()), InvalidArgument);
}

}  // namespace
}  // namespace strata::data
