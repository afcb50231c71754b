// Mixed precision (strata/nn/policy.h): under mixed_bfloat16, Dense, Conv2D, Conv1D and MultiHeadAttention compute
// in bf16 and their outputs and gradients match float32 to bf16's tolerance; variables and gradients stay float32;
// unknown policy names are refused with the choices; on a CPU without bf16 instructions the first layer call warns
// once and layers compute float32, while layers on a GPU compute bf16 (policy-level here; tests/cuda run the kernels).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/compute_precision.h"
#include "strata/gradient_tape.h"
#include "strata/init.h"
#include "strata/nn/nn.h"
#include "strata/ops.h"
#include "test_util.h"

namespace strata {
namespace {

using test::message_of;
using test::random_tensor;
using ::testing::HasSubstr;

class MixedPrecisionTest : public ::testing::Test {
 protected:
  void TearDown() override {
    nn::detail::reset_cpu_bf16_for_testing();
    nn::set_global_policy("float32");
  }
};

// A layer's output and the gradients of sum(output * R) with respect to its float inputs and trainable weights.
struct Result {
  std::vector<Tensor> tensors;  // output, then the gradients
};

Result forward_backward(nn::Layer& layer, const std::vector<Tensor>& inputs, bool check_dtypes) {
  std::vector<Variable> xs, sources;
  for (size_t i = 0; i < inputs.size(); ++i) {
    xs.emplace_back(inputs[i], /*trainable=*/true, "x" + std::to_string(i));
    sources.push_back(xs.back());
  }
  GradientTape tape;
  const Variable out = layer(xs, /*training=*/false);
  for (const Variable& w : layer.trainable_variables()) sources.push_back(w);
  Generator gen(99);
  const Tensor r = init::uniform(out.shape(), gen, -1.0f, 1.0f);
  const std::vector<Tensor> grads = tape.gradient(out, sources, r, UnconnectedGradients::kZero);
  Result res;
  res.tensors.push_back(out.value());
  for (const Tensor& g : grads) res.tensors.push_back(g);
  if (check_dtypes) {
    // Master weights and everything the optimizer sees stay float32.
    for (const Variable& v : layer.variables()) EXPECT_EQ(v.value().dtype(), DType::kFloat32) << v.name();
    for (const Tensor& t : res.tensors) EXPECT_EQ(t.dtype(), DType::kFloat32);
  }
  return res;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

// The largest difference between a and b relative to `scale`.
double relative_difference(const Tensor& a, const Tensor& b, double scale) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double diff = 0;
  for (size_t i = 0; i < va.size(); ++i) diff = std::max(diff, std::fabs(va[i] - vb[i]));
  return diff / scale;
}

// Runs `layer` in float32 and in mixed_bfloat16 on the same weights: every tensor matches to 2e-2 of its scale, and
// where the CPU computes bf16 natively they differ (so bf16 really ran).
void expect_bf16_matches_float32(nn::Layer& layer, const std::vector<Tensor>& inputs) {
  nn::set_global_policy("float32");
  const Result f32 = forward_backward(layer, inputs, true);
  nn::set_global_policy("mixed_bfloat16");
  const Result bf16 = forward_backward(layer, inputs, true);
  nn::set_global_policy("float32");
  ASSERT_EQ(f32.tensors.size(), bf16.tensors.size());
  // Each tensor to 2e-2 of its largest magnitude, or of a hundredth of the largest of them all for a gradient that is
  // zero in exact arithmetic (attention's key bias: softmax ignores a constant added to a row of scores).
  double overall = 0;
  for (const Tensor& t : f32.tensors) overall = std::max(overall, max_abs(t));
  double largest = 0;
  for (size_t i = 0; i < f32.tensors.size(); ++i) {
    ASSERT_EQ(bf16.tensors[i].shape(), f32.tensors[i].shape()) << i;
    const double d =
        relative_difference(bf16.tensors[i], f32.tensors[i], std::max(max_abs(f32.tensors[i]), 1e-2 * overall));
    EXPECT_LT(d, 2e-2) << layer.name() << ": " << (i == 0 ? "output" : "gradient " + std::to_string(i - 1))
                       << " (largest float32 magnitude " << max_abs(f32.tensors[i]) << ")";
    largest = std::max(largest, d);
  }
  if (kernels::cpu_has_native_bf16()) {
    EXPECT_GT(largest, 1e-5) << layer.name() << ": bf16 gave float32's results, so it did not compute in bf16";
  }
}

TEST_F(MixedPrecisionTest, PolicyNamesAreKerasAndUnknownOnesListTheChoices) {
  EXPECT_EQ(nn::global_policy().name(), "float32");
  const nn::DTypePolicy bf16("bf16");
  EXPECT_EQ(bf16.name(), "mixed_bfloat16");
  EXPECT_EQ(bf16.compute_dtype(), DType::kBFloat16);
  EXPECT_EQ(bf16.variable_dtype(), DType::kFloat32);
  EXPECT_EQ(nn::DTypePolicy("mixed_bfloat16").compute_dtype(), DType::kBFloat16);
  EXPECT_EQ(nn::DTypePolicy("float32").compute_dtype(), DType::kFloat32);
  EXPECT_THAT(message_of<InvalidArgument>([] { nn::set_global_policy("bfloat32"); }),
              HasSubstr("unknown dtype policy 'bfloat32'; choices: float32, mixed_bfloat16 (or bf16)"));
  EXPECT_THAT(message_of<InvalidArgument>([] { nn::set_global_policy("mixed_float16"); }),
              HasSubstr("float16 compute is not built"));
  EXPECT_EQ(nn::global_policy().name(), "float32");  // a refused name changes nothing
  nn::set_global_policy("bf16");
  EXPECT_EQ(nn::global_policy().name(), "mixed_bfloat16");
  EXPECT_EQ(nn::effective_compute_dtype(),
            kernels::cpu_has_native_bf16() ? DType::kBFloat16 : DType::kFloat32);
}

TEST_F(MixedPrecisionTest, DenseMatchesFloat32) {
  // gelu, not relu: bf16 moves pre-activations near 0 across relu's kink, which changes the bias gradient by whole
  // elements of dy (the kernel test checks relu's fused path with one mask for both).
  nn::Dense dense(24, {.activation = "gelu", .bias_initializer = "random_uniform"});
  expect_bf16_matches_float32(dense, {random_tensor({16, 40}, 1)});
  nn::Dense rank3(7);  // [b, t, f] inputs go through the same fused op, reshaped
  expect_bf16_matches_float32(rank3, {random_tensor({3, 5, 12}, 2)});
}

TEST_F(MixedPrecisionTest, Conv2DAndConv1DMatchFloat32) {
  // 6 input channels: the input gradient takes oneDNN's bf16 backward-data path (not the C <= 4 sgemm one).
  nn::Conv2D conv(5, 3, {.padding = "same", .activation = "relu", .bias_initializer = "random_uniform"});
  expect_bf16_matches_float32(conv, {random_tensor({2, 7, 7, 6}, 3)});
  nn::Conv2D strided(4, 3, {.strides = 2});
  expect_bf16_matches_float32(strided, {random_tensor({2, 9, 9, 8}, 4)});
  nn::Conv1D conv1d(6, 3, {.padding = "same"});
  expect_bf16_matches_float32(conv1d, {random_tensor({2, 9, 8}, 5)});
}

TEST_F(MixedPrecisionTest, MultiHeadAttentionMatchesFloat32) {
  // Projections (dense products) and the batched score and context products, with a causal mask.
  nn::MultiHeadAttention self(2, 4, {.bias_initializer = "random_uniform", .use_causal_mask = true});
  expect_bf16_matches_float32(self, {random_tensor({2, 5, 6}, 6)});
  nn::MultiHeadAttention cross(2, 3, {.value_dim = 2, .output_shape = 5});
  expect_bf16_matches_float32(cross, {random_tensor({2, 3, 4}, 7), random_tensor({2, 4, 3}, 8)});
}

TEST_F(MixedPrecisionTest, TheGradientComputesInThePrecisionOfItsForwardCall) {
  // The policy changes between the call and the gradient: the backward still runs as the forward did, so the
  // gradient equals the one taken under the call's policy throughout.
  nn::Dense dense(8);
  const Tensor x = random_tensor({6, 10}, 9);
  nn::set_global_policy("mixed_bfloat16");
  const Result same = forward_backward(dense, {x}, false);
  Variable xv(x, true, "x");
  GradientTape tape;
  const Variable out = dense(xv);
  nn::set_global_policy("float32");
  Generator gen(99);
  const Tensor r = init::uniform(out.shape(), gen, -1.0f, 1.0f);
  const std::vector<Tensor> grads = tape.gradient(out, {xv}, r);
  test::expect_near(grads[0], same.tensors[1], 0.0f);
}

TEST_F(MixedPrecisionTest, ACpuWithoutBf16WarnsOnceAtTheFirstLayerCallAndComputesFloat32) {
  nn::Dense dense(8);
  const Tensor x = random_tensor({4, 10}, 10);
  const Tensor f32 = dense(x).value();
  nn::detail::set_cpu_bf16_for_testing(false);
  ::testing::internal::CaptureStderr();
  nn::set_global_policy("mixed_bfloat16");
  nn::set_global_policy("float32");
  nn::set_global_policy("bf16");
  // Setting the policy says nothing: the model may run on a GPU, which computes bf16 whatever the CPU has.
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ::testing::internal::CaptureStderr();
  const Tensor got = dense(x).value();
  (void)dense(x);
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string warning = "strata: warning: mixed precision mixed_bfloat16: this CPU has no bf16 instructions";
  EXPECT_THAT(err, HasSubstr(warning));
  EXPECT_THAT(err, HasSubstr("so layers compute in float32"));
  EXPECT_EQ(err.find(warning), err.rfind(warning)) << "warned more than once:\n" << err;
  EXPECT_EQ(nn::global_policy().name(), "mixed_bfloat16");
  EXPECT_EQ(nn::effective_compute_dtype(), DType::kFloat32);
  test::expect_near(got, f32, 0.0f);  // bit for bit the float32 result
}

TEST_F(MixedPrecisionTest, LayersOnAGpuComputeInBf16WhateverTheCpuHasAndWarnNothing) {
  nn::detail::set_cpu_bf16_for_testing(false);
  ::testing::internal::CaptureStderr();
  nn::set_global_policy("bf16");
  EXPECT_EQ(nn::effective_compute_dtype(Device::cuda(0)), DType::kBFloat16);
  EXPECT_EQ(nn::effective_compute_dtype(Device::cuda(1)), DType::kBFloat16);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  nn::set_global_policy("float32");
  EXPECT_EQ(nn::effective_compute_dtype(Device::cuda(0)), DType::kFloat32);
  nn::detail::set_cpu_bf16_for_testing(true);
  nn::set_global_policy("bf16");
  EXPECT_EQ(nn::effective_compute_dtype(Device::cpu()), DType::kBFloat16);
  EXPECT_EQ(nn::effective_compute_dtype(Device::cuda(0)), DType::kBFloat16);
}

TEST_F(MixedPrecisionTest, GradientDescentUnderMixedBfloat16UpdatesFloat32VariablesAndLowersTheLoss) {
  // Two layers regress a fixed target; 30 plain gradient steps in bf16 compute lower the float32 loss as float32's
  // do, and the variables stay float32 after the updates.
  const Tensor x = random_tensor({32, 8}, 11), target = random_tensor({32, 3}, 12, -0.5f, 0.5f);
  nn::Dense hidden(16, "relu"), head(3);
  (void)head(hidden(Variable(x)));  // builds both
  std::vector<Variable> vars = hidden.trainable_variables();
  for (const Variable& v : head.trainable_variables()) vars.push_back(v);
  std::vector<Tensor> initial;
  for (const Variable& v : vars) initial.push_back(v.value().clone());
  auto train = [&](const std::string& policy) {
    for (size_t i = 0; i < vars.size(); ++i) vars[i].assign(initial[i]);  // both runs start from the same weights
    nn::set_global_policy(policy);
    std::vector<float> losses;
    for (int step = 0; step < 30; ++step) {
      GradientTape tape;
      const Variable loss = mean(square(head(hidden(Variable(x))) - Variable(target)));
      EXPECT_EQ(loss.value().dtype(), DType::kFloat32);
      losses.push_back(loss.value().item<float>());
      const std::vector<Tensor> grads = tape.gradient(loss, vars);
      for (size_t i = 0; i < vars.size(); ++i) {
        EXPECT_EQ(grads[i].dtype(), DType::kFloat32);
        vars[i].assign_sub(grads[i], 0.1f);
        EXPECT_EQ(vars[i].value().dtype(), DType::kFloat32);
      }
    }
    return losses;
  };
  const std::vector<float> f32 = train("float32"), bf16 = train("mixed_bfloat16");
  EXPECT_LT(bf16.back(), 0.7f * bf16.front());
  EXPECT_NEAR(bf16.back(), f32.back(), 0.05f * f32.front());
}

}  // namespace
}  // namespace strata
