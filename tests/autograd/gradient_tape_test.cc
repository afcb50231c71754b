// GradientTape semantics: what is watched, persistence, unconnected sources, pausing, accumulation,
// and the variable-creator hook.
#include "strata/gradient_tape.h"

#include <gtest/gtest.h>

#include "strata/ops.h"

namespace strata {
namespace {

Variable trainable(std::vector<float> v, Shape s, const char* name = "v") {
  return Variable(Tensor::from_vector(v, s), true, name);
}

TEST(GradientTapeTest, GradientOfSquareAccumulatesBothUses) {
  Variable x = trainable({1, -2, 3}, {3});
  GradientTape tape;
  Variable y = sum(x * x);
  EXPECT_EQ(tape.gradient(y, {x})[0].to_vector<float>(), (std::vector<float>{2, -4, 6}));
}

TEST(GradientTapeTest, NonScalarTargetIsDifferentiatedAsItsSum) {
  Variable x = trainable({1, 2}, {2});
  GradientTape tape;
  Variable y = x * 3.0f;
  EXPECT_EQ(tape.gradient(y, {x})[0].to_vector<float>(), (std::vector<float>{3, 3}));
}

TEST(GradientTapeTest, ConstantsAreNotWatchedUnlessAsked) {
  Variable c(Tensor::from_list({2}, {1}));
  {
    GradientTape tape;
    Variable y = c * c;
    EXPECT_FALSE(y.has_grad_fn());
    EXPECT_FALSE(tape.gradient(y, {c})[0].defined());
  }
  {
    GradientTape tape;
    tape.watch(c);
    Variable y = c * c;
    EXPECT_EQ(tape.gradient(y, {c})[0].item<float>(), 4.0f);
  }
}

TEST(GradientTapeTest, WatchAccessedVariablesOffIgnoresTrainables) {
  Variable w = trainable({2}, {1});
  GradientTape tape({.watch_accessed_variables = false});
  Variable y = w * w;
  EXPECT_FALSE(y.has_grad_fn());
}

TEST(GradientTapeTest, NonPersistentTapeAnswersOnce) {
  Variable x = trainable({1}, {1});
  GradientTape tape;
  Variable y = x * x;
  tape.gradient(y, {x});
  EXPECT_THROW(tape.gradient(y, {x}), Error);
  GradientTape persistent({.persistent = true});
  Variable z = x * x;
  persistent.gradient(z, {x});
  EXPECT_NO_THROW(persistent.gradient(z, {x}));
}

TEST(GradientTapeTest, UnconnectedSourcesAreUndefinedOrZero) {
  Variable x = trainable({1}, {1}), unused = trainable({1, 2}, {2});
  GradientTape tape({.persistent = true});
  Variable y = x * x;
  auto none = tape.gradient(y, {x, unused});
  EXPECT_TRUE(none[0].defined());
  EXPECT_FALSE(none[1].defined());
  auto zero = tape.gradient(y, {unused}, UnconnectedGradients::kZero);
  EXPECT_EQ(zero[0].to_vector<float>(), (std::vector<float>{0, 0}));
}

TEST(GradientTapeTest, NothingIsRecordedWithoutATapeOrWhilePaused) {
  Variable x = trainable({1}, {1});
  EXPECT_FALSE((x * x).has_grad_fn());
  GradientTape tape;
  {
    auto pause = tape.stop_recording();
    EXPECT_FALSE((x * x).has_grad_fn());
  }
  {
    NoGradGuard no_grad;
    EXPECT_FALSE((x * x).has_grad_fn());
  }
  EXPECT_TRUE((x * x).has_grad_fn());
}

TEST(GradientTapeTest, StopGradientBlocksFlow) {
  Variable x = trainable({3}, {1});
  GradientTape tape;
  Variable y = x * stop_gradient(x);
  EXPECT_EQ(tape.gradient(y, {x})[0].item<float>(), 3.0f);
}

TEST(GradientTapeTest, GradientWithRespectToAnIntermediate) {
  Variable x = trainable({2}, {1});
  GradientTape tape;
  Variable h = x * 3.0f;
  Variable y = h * h;
  EXPECT_EQ(tape.gradient(y, {h})[0].item<float>(), 12.0f);
}

TEST(GradientTapeTest, SeedShapeMustMatchTarget) {
  Variable x = trainable({1, 2}, {2});
  GradientTape tape;
  Variable y = x * 2.0f;
  EXPECT_THROW(tape.gradient(y, {x}, Tensor::ones({3})), ShapeError);
}

TEST(VariableTest, AssignChecksShapeAndUpdatesInPlace) {
  Variable w = trainable({1, 2}, {2}, "dense/kernel");
  w.assign_sub(Tensor::from_list({1, 1}, {2}), 0.5f);
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{0.5f, 1.5f}));
  try {
    w.assign(Tensor::zeros({3}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("dense/kernel"), std::string::npos);
  }
}

TEST(VariableTest, CreatorHooksNestAndCanDelegate) {
  std::vector<std::string> seen;
  ScopedVariableCreator outer([&](const Tensor& t, const VariableOptions& o, const auto& next) {
    seen.push_back("outer:" + o.name);
    return next(t, o);
  });
  ScopedVariableCreator inner([&](const Tensor& t, const VariableOptions& o, const auto& next) {
    seen.push_back("inner:" + o.name);
    VariableOptions renamed = o;
    renamed.name = "replica0/" + o.name;
    return next(t, renamed);
  });
  Variable v = make_variable(Tensor::zeros({2}), {.name = "w"});
  EXPECT_EQ(v.name(), "replica0/w");
  EXPECT_TRUE(v.trainable());
  EXPECT_EQ(seen, (std::vector<std::string>{"inner:w", "outer:replica0/w"}));
}

}  // namespace
}  // namespace strata
