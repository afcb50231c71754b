// Optimizers: hand-computed steps, four steps against PyTorch, clipping, weight decay, schedules,
// skipped gradients, the parallel path, clone, lookup, and checkpoint state with its errors.
#include "strata/optim/optimizers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "strata/gradient_tape.h"
#include "strata/ops.h"
#include "strata/threading.h"
#include "test_util.h"

namespace strata {
namespace {

using optim::Optimizer;
using test::message_of;

Variable var(std::vector<float> values, const std::string& name = "w") {
  const int64_t n = static_cast<int64_t>(values.size());
  return Variable(Tensor::from_vector(values, {n}), true, name);
}
Tensor grad(std::vector<float> values) { return Tensor::from_vector(values); }

void expect_values(const Variable& v, const std::vector<float>& expected, float tol = 2e-6f) {
  const auto got = v.value().to_vector<float>();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "element " << i;
}

TEST(OptimizersTest, HandComputedFirstSteps) {
  Variable w = var({1, 1});
  optim::SGD sgd({.learning_rate = 0.1});
  sgd.apply_gradients({grad({1, 2})}, {w});
  expect_values(w, {0.9f, 0.8f});
  EXPECT_EQ(sgd.iterations(), 1);

  // Adam, Keras defaults: alpha = 1e-3 * sqrt(1 - 0.999) / (1 - 0.9); m = 0.05, v = 0.00025;
  // w = 1 - alpha * 0.05 / (sqrt(0.00025) + 1e-7) = 1 - 0.000999993675.
  Variable a = var({1});
  optim::Adam adam;
  adam.apply_gradients({{grad({0.5f}), a}});
  expect_values(a, {0.999000006325f}, 1e-7f);
  EXPECT_NEAR(adam.slot(a, "m").item<float>(), 0.05f, 1e-7f);  // 1 - 0.9f is not exactly 0.1 in float
  EXPECT_NEAR(adam.slot(a, "v").item<float>(), 0.00025f, 1e-8f);

  // Adagrad: acc = 0.1 + 0.25; w = 1 - 0.1 * 0.5 / sqrt(0.35 + 1e-7).
  Variable b = var({1});
  optim::Adagrad adagrad({.learning_rate = 0.1});
  adagrad.apply_gradients({grad({0.5f})}, {b});
  expect_values(b, {1.0f - 0.05f / std::sqrt(0.3500001f)});

  // RMSprop: v = 0.1 * 0.25; w = 1 - 0.01 * 0.5 / sqrt(0.025 + 1e-7).
  Variable c = var({1});
  optim::RMSprop rmsprop({.learning_rate = 0.01});
  rmsprop.apply_gradients({grad({0.5f})}, {c});
  expect_values(c, {1.0f - 0.005f / std::sqrt(0.0250001f)});
}

// Four steps from w0 with these gradients; the expected values were made once with PyTorch 1.13 in
// float64 (/usr/bin/python3: torch.optim.X(params, ...), p.grad set by hand, opt.step() per gradient),
// with eps = 0 on both sides where the two libraries place epsilon differently.
const std::vector<float> kW0 = {0.5f, -1.0f, 2.0f, 0.25f};
const std::vector<std::vector<float>> kGrads = {
    {0.1f, -0.2f, 0.3f, 1.0f}, {-0.4f, 0.5f, 0.05f, -0.6f}, {0.2f, 0.7f, -0.9f, 0.3f}, {0.01f, -0.02f, 0.03f, 0.01f}};

std::vector<float> four_steps(Optimizer& opt) {
  Variable w = var(kW0);
  for (const auto& g : kGrads) opt.apply_gradients({grad(g)}, {w});
  EXPECT_EQ(opt.iterations(), 4);
  return w.value().to_vector<float>();
}

void expect_near(const std::vector<float>& got, const std::vector<float>& expected, float tol = 2e-6f) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "element " << i;
}

TEST(OptimizersTest, MatchPyTorchOverFourSteps) {
  {
    optim::SGD o({.learning_rate = 0.1});  // torch.optim.SGD(lr=0.1)
    expect_near(four_steps(o), {0.509f, -1.098f, 2.052f, 0.179f});
  }
  {
    optim::SGD o({.learning_rate = 0.1, .momentum = 0.9});  // torch: momentum=0.9
    expect_near(four_steps(o), {0.53501f, -1.19772f, 2.05128f, 0.0107f});
  }
  {
    optim::SGD o({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});  // torch: nesterov=True
    expect_near(four_steps(o), {0.540509f, -1.275948f, 2.098152f, -0.03637f});
  }
  {
    optim::Adam o({.learning_rate = 0.01, .epsilon = 0});  // torch.optim.Adam(lr=0.01, eps=0)
    expect_near(four_steps(o), {0.497472132f, -1.00729193f, 1.98946858f, 0.232531439f});
  }
  {
    optim::Adam o({.learning_rate = 0.01, .beta_2 = 0.9, .epsilon = 0});  // betas=(0.9, 0.9)
    expect_near(four_steps(o), {0.497357757f, -1.00699635f, 1.98906221f, 0.232244491f});
  }
  {
    optim::Adam o({.learning_rate = 0.01, .beta_2 = 0.9, .epsilon = 0, .amsgrad = true});  // amsgrad=True
    expect_near(four_steps(o), {0.497317323f, -1.00670478f, 1.98919807f, 0.232463973f});
  }
  {
    optim::AdamW o({.learning_rate = 0.01, .weight_decay = 0.1f, .epsilon = 0});  // AdamW(weight_decay=0.1)
    expect_near(four_steps(o), {0.495492814f, -1.00331191f, 1.98152208f, 0.231569762f});
  }
  {
    optim::RMSprop o({.learning_rate = 0.01, .epsilon = 0});  // RMSprop(lr=0.01, alpha=0.9, eps=0)
    expect_near(four_steps(o), {0.483956147f, -1.02277674f, 1.99209377f, 0.226404101f});
  }
  {
    // RMSprop(lr=0.01, alpha=0.9, eps=0, momentum=0.5, centered=True)
    optim::RMSprop o({.learning_rate = 0.01, .momentum = 0.5f, .epsilon = 0, .centered = true});
    expect_near(four_steps(o), {0.470504278f, -1.03056471f, 1.97256377f, 0.203844943f});
  }
  {
    optim::Adagrad o({.learning_rate = 0.1, .epsilon = 0});  // Adagrad(lr=0.1, initial_accumulator_value=0.1, eps=0)
    expect_near(four_steps(o), {0.509112078f, -1.09910056f, 2.00667202f, 0.179410321f});
  }
}

TEST(OptimizersTest, AdamOnALongVariableMatchesTheFormulaInDouble) {
  // Long enough (1003 = 62 * 16 + 11) for the vector loop and its scalar tail, with clipping on.
  const int64_t n = 1003;
  Variable w(test::random_tensor({n}, 40), true, "w");
  const std::vector<float> initial = w.value().to_vector<float>();
  std::vector<double> ref(initial.begin(), initial.end());
  std::vector<double> m(n, 0.0), v(n, 0.0);
  optim::Adam adam({.learning_rate = 0.01, .clipvalue = 0.8f});
  for (int step = 1; step <= 3; ++step) {
    const Tensor g = test::random_tensor({n}, 40 + step, -1.0f, 1.0f);
    adam.apply_gradients({g}, {w});
    const auto gv = g.to_vector<float>();
    const double alpha = 0.01 * std::sqrt(1 - std::pow(0.999, step)) / (1 - std::pow(0.9, step));
    for (int64_t i = 0; i < n; ++i) {
      const double gi = std::clamp<double>(gv[i], -0.8, 0.8);
      m[i] += (gi - m[i]) * 0.1;
      v[i] += (gi * gi - v[i]) * 0.001;
      ref[i] -= alpha * m[i] / (std::sqrt(v[i]) + 1e-7);
    }
  }
  const auto got = w.value().to_vector<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], ref[i], 1e-6 * (1 + std::fabs(ref[i]))) << "element " << i;
}

TEST(OptimizersTest, Clipping) {
  {  // clipnorm: [3, 4] has norm 5, scaled to norm 1.
    Variable w = var({0, 0});
    optim::SGD o({.learning_rate = 1.0, .clipnorm = 1.0f});
    o.apply_gradients({grad({3, 4})}, {w});
    expect_values(w, {-0.6f, -0.8f});
  }
  {  // clipnorm leaves small gradients alone and applies per variable.
    Variable a = var({0}), b = var({0}, "b");
    optim::SGD o({.learning_rate = 1.0, .clipnorm = 2.0f});
    o.apply_gradients({grad({1}), grad({-4})}, {a, b});
    expect_values(a, {-1.0f});
    expect_values(b, {2.0f});
  }
  {  // global_clipnorm: [3] and [4] have global norm 5; scaled by 2.5 / 5.
    Variable a = var({0}), b = var({0}, "b");
    optim::SGD o({.learning_rate = 1.0, .global_clipnorm = 2.5f});
    o.apply_gradients({grad({3}), grad({4})}, {a, b});
    expect_values(a, {-1.5f});
    expect_values(b, {-2.0f});
  }
  {  // clipvalue clamps each element.
    Variable w = var({0, 0, 0});
    optim::SGD o({.learning_rate = 1.0, .clipvalue = 0.5f});
    o.apply_gradients({grad({-2, 0.1f, 7})}, {w});
    expect_values(w, {0.5f, -0.1f, -0.5f});
  }
  const std::string m = message_of<InvalidArgument>([] { optim::Adam({.clipnorm = 1.0f, .global_clipnorm = 1.0f}); });
  EXPECT_NE(m.find("only one of clipnorm, clipvalue and global_clipnorm"), std::string::npos) << m;
  EXPECT_NE(message_of<InvalidArgument>([] { optim::SGD({.clipnorm = -1.0f}); }).find("clipnorm must be > 0"),
            std::string::npos);

  // The free functions.
  float norm = 0;
  const std::vector<Tensor> clipped = optim::clip_by_global_norm({grad({3}), Tensor(), grad({4})}, 2.5f, &norm);
  EXPECT_FLOAT_EQ(norm, 5.0f);
  EXPECT_FLOAT_EQ(clipped[0].item<float>(), 1.5f);
  EXPECT_FALSE(clipped[1].defined());
  EXPECT_FLOAT_EQ(clipped[2].item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(optim::clip_by_global_norm({grad({3})}, 10.0f)[0].item<float>(), 3.0f);  // under the norm
  EXPECT_FLOAT_EQ(optim::global_norm({grad({3, 4}), grad({12})}), 13.0f);
  const auto by_norm = optim::clip_by_norm(grad({3, 4}), 1.0f).to_vector<float>();
  EXPECT_FLOAT_EQ(by_norm[0], 0.6f);
  EXPECT_FLOAT_EQ(by_norm[1], 0.8f);
}

TEST(OptimizersTest, WeightDecay) {
  // Keras: var -= var * weight_decay * lr, then the update: 2 - 2 * 0.5 * 0.1 - 0.1 * 1.
  Variable w = var({2});
  optim::SGD o({.learning_rate = 0.1, .weight_decay = 0.5f});
  o.apply_gradients({grad({1})}, {w});
  expect_values(w, {1.8f});
  // AdamW defaults to Keras's 0.004.
  EXPECT_FLOAT_EQ(*optim::AdamW().config().weight_decay, 0.004f);
  EXPECT_FALSE(optim::Adam().config().weight_decay.has_value());
}

TEST(OptimizersTest, LearningRateSchedulesAndOverrides) {
  // lr 0.1 for steps 0 and 1 (step <= 1), 0.01 after.
  Variable w = var({0});
  optim::SGD o({.learning_rate = optim::piecewise_constant({1}, {0.1f, 0.01f})});
  EXPECT_FLOAT_EQ(o.learning_rate(), 0.1f);
  for (int i = 0; i < 3; ++i) o.apply_gradients({grad({1})}, {w});
  expect_values(w, {-0.21f});
  EXPECT_FLOAT_EQ(o.learning_rate(), 0.01f);
  o.set_learning_rate(0.5f);  // what a LearningRateScheduler callback does
  EXPECT_FLOAT_EQ(o.learning_rate(), 0.5f);
  o.apply_gradients({grad({1})}, {w});
  expect_values(w, {-0.71f});
  // Any callable of the step works as a schedule.
  optim::Adam a({.learning_rate = [](int64_t step) { return 1.0f / static_cast<float>(step + 1); }});
  EXPECT_FLOAT_EQ(a.learning_rate(), 1.0f);
  optim::Adam b(optim::scale_lr(1e-3f, 256, 64));
  EXPECT_FLOAT_EQ(b.learning_rate(), 4e-3f);
}

TEST(OptimizersTest, UndefinedGradientsAreSkipped) {
  Variable a = var({1}), b = var({1}, "b");
  optim::SGD o({.learning_rate = 1.0});
  o.apply_gradients({Tensor(), grad({1})}, {a, b});
  expect_values(a, {1.0f});
  expect_values(b, {0.0f});
  std::string m = message_of<InvalidArgument>([&] { o.apply_gradients({Tensor()}, {a}); });
  EXPECT_NE(m.find("no gradients provided"), std::string::npos) << m;
  m = message_of<ShapeError>([&] { o.apply_gradients({grad({1, 2})}, {var({0}, "dense/bias")}); });
  EXPECT_NE(m.find("gradient [2] does not match variable 'dense/bias' [1]"), std::string::npos) << m;
  m = message_of<InvalidArgument>([&] { o.apply_gradients({grad({1})}, {a, b}); });
  EXPECT_NE(m.find("1 gradients for 2 variables"), std::string::npos) << m;
}

TEST(OptimizersTest, ParallelUpdateEqualsSerial) {
  const int64_t n = 300000;
  Tensor w0 = test::random_tensor({n}, 1);
  Tensor g = test::random_tensor({n}, 2);
  auto run = [&](int threads) {
    ScopedNumThreads scope(threads);
    Variable w(w0.clone(), true, "big");
    optim::Adam o({.learning_rate = 0.01, .global_clipnorm = 10.0f});
    for (int i = 0; i < 3; ++i) o.apply_gradients({g}, {w});
    return w.value().to_vector<float>();
  };
  EXPECT_EQ(run(1), run(2));
}

// The update of a variable with several components (a mirrored variable) writes every copy, with one
// set of slots; minimize is tape.gradient + apply_gradients.
TEST(OptimizersTest, MirroredComponentsAreUpdatedTogetherAndMinimizeEqualsApply) {
  const int64_t n = 10000;  // more than one span of the update (copied to the other copies span by span)
  const Tensor w0 = test::random_tensor({n}, 3), x = test::random_tensor({n}, 4);
  Variable mirrored = make_distributed_variable({w0.clone(), w0.clone(), w0.clone()}, {.name = "w"}, /*owner=*/ 1);
  Variable single(w0.clone(), true, "w");
  optim::Adam a({.learning_rate = 0.01}), b({.learning_rate = 0.01});
  for (int step = 0; step < 3; ++step) {
    GradientTape ta, tb;
    a.minimize(sum(mul(mirrored, Variable(x))), {mirrored}, ta);
    b.apply_gradients(tb.gradient(sum(mul(single, Variable(x))), {single}), {single});
  }
  for (int c = 0; c < 3; ++c) EXPECT_EQ(mirrored.component(c).to_vector<float>(), single.value().to_vector<float>());
  EXPECT_EQ(a.iterations(), 3);
  const auto state = a.state({mirrored});
  ASSERT_EQ(state.size(), 3u);  // m, v, iterations: one set of slots for the three copies
  EXPECT_EQ(state[0].second.to_vector<float>(), b.slot(single, "m").to_vector<float>());
}

TEST(OptimizersTest, CloneAndLookup) {
  optim::RMSprop original({.learning_rate = 0.05, .momentum = 0.5f, .centered = true});
  Variable w = var({1, 2});
  original.apply_gradients({grad({0.3f, -0.1f})}, {w});
  const auto copy = original.clone();
  EXPECT_EQ(copy->iterations(), 0);
  EXPECT_EQ(copy->name(), "rmsprop");
  EXPECT_FLOAT_EQ(copy->learning_rate(), 0.05f);
  EXPECT_EQ(copy->slot_names(), (std::vector<std::string>{"velocity", "momentum", "average_gradient"}));
  Variable fresh = var({1, 2});
  copy->apply_gradients({grad({0.3f, -0.1f})}, {fresh});
  EXPECT_EQ(fresh.value().to_vector<float>(), w.value().to_vector<float>());

  EXPECT_EQ(optim::get("Adam", 0.01f)->name(), "adam");
  EXPECT_FLOAT_EQ(optim::get("adam", 0.01f)->learning_rate(), 0.01f);
  EXPECT_FLOAT_EQ(optim::get("sgd")->learning_rate(), 0.01f);
  EXPECT_FLOAT_EQ(optim::get("RMSprop")->learning_rate(), 0.001f);
  EXPECT_EQ(optim::get("adamw")->name(), "adamw");
  EXPECT_EQ(optim::get("adagrad")->slot_names(), std::vector<std::string>{"accumulator"});
  EXPECT_TRUE(optim::get("sgd")->slot_names().empty());
  const std::string m = message_of<InvalidArgument>([] { optim::get("lamb"); });
  EXPECT_NE(m.find("unknown optimizer 'lamb'; known: sgd, adam"), std::string::npos) << m;
}

TEST(OptimizersTest, StateRoundTrip) {
  auto make_vars = [] { return std::vector<Variable>{var({1, 2, 3}, "dense/kernel"), var({0.5f}, "dense/bias")}; };
  const std::vector<Tensor> g = {grad({0.1f, -0.3f, 0.2f}), grad({1.0f})};
  std::vector<Variable> vars = make_vars();
  optim::Adam adam({.learning_rate = 0.01, .amsgrad = true});
  // A fresh optimizer already lists every slot (zeros).
  EXPECT_EQ(adam.state(vars).size(), 2u * 3u + 1u);
  for (int i = 0; i < 3; ++i) adam.apply_gradients(g, vars);
  const auto state = adam.state(vars);
  std::vector<std::string> names;
  for (const auto& [name, t] : state) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"dense/kernel/m", "dense/kernel/v", "dense/kernel/vhat", "dense/bias/m",
                                             "dense/bias/v", "dense/bias/vhat", "iterations"}));
  EXPECT_EQ(state.back().second.dtype(), DType::kInt64);
  EXPECT_EQ(state.back().second.item<int64_t>(), 3);

  // Restore into a new optimizer and new variables with the same values: the next step agrees.
  std::vector<Variable> vars2 = make_vars();
  for (size_t i = 0; i < vars.size(); ++i) vars2[i].assign(vars[i].value());
  optim::Adam restored({.learning_rate = 0.01, .amsgrad = true});
  restored.load_state(state, vars2);
  EXPECT_EQ(restored.iterations(), 3);
  adam.apply_gradients(g, vars);
  restored.apply_gradients(g, vars2);
  for (size_t i = 0; i < vars.size(); ++i) {
    EXPECT_EQ(vars[i].value().to_vector<float>(), vars2[i].value().to_vector<float>()) << vars[i].name();
  }
  // state() hands out copies, not the live slots.
  EXPECT_NE(adam.state(vars)[0].second.to_vector<float>(), state[0].second.to_vector<float>());
}

TEST(OptimizersTest, LoadStateErrorsNameTheEntry) {
  std::vector<Variable> vars = {var({1, 2}, "dense/kernel")};
  optim::SGD sgd({.momentum = 0.9f});
  const auto good = sgd.state(vars);  // "dense/kernel/momentum", "iterations"
  auto without = [&](const std::string& name) {
    std::vector<std::pair<std::string, Tensor>> s;
    for (const auto& e : good) {
      if (e.first != name) s.push_back(e);
    }
    return s;
  };
  optim::SGD target({.momentum = 0.9f});
  std::string m = message_of<InvalidArgument>([&] { target.load_state(without("dense/kernel/momentum"), vars); });
  EXPECT_NE(m.find("missing 'dense/kernel/momentum'"), std::string::npos) << m;
  m = message_of<InvalidArgument>([&] { target.load_state(without("iterations"), vars); });
  EXPECT_NE(m.find("missing 'iterations'"), std::string::npos) << m;

  auto extra = good;
  extra.emplace_back("dense/kernel/velocity", Tensor::zeros({2}));
  m = message_of<InvalidArgument>([&] { target.load_state(extra, vars); });
  EXPECT_NE(m.find("unexpected 'dense/kernel/velocity'"), std::string::npos) << m;

  auto wrong_shape = good;
  wrong_shape[0].second = Tensor::zeros({3});
  m = message_of<InvalidArgument>([&] { target.load_state(wrong_shape, vars); });
  EXPECT_NE(m.find("'dense/kernel/momentum' has shape [3], expected [2]"), std::string::npos) << m;

  auto wrong_dtype = good;
  wrong_dtype[1].second = Tensor::zeros({}, DType::kInt32);
  m = message_of<InvalidArgument>([&] { target.load_state(wrong_dtype, vars); });
  EXPECT_NE(m.find("'iterations' has dtype int32, expected int64"), std::string::npos) << m;
  EXPECT_EQ(target.iterations(), 0);  // nothing changed by a failed load

  m = message_of<InvalidArgument>([&] { target.state({var({1}, "x"), var({2}, "x")}); });
  EXPECT_NE(m.find("two variables are named 'x'"), std::string::npos) << m;
  // Unnamed variables are numbered.
  EXPECT_EQ(target.state({var({1}, "")})[0].first, "variable_0/momentum");
}

}  // namespace
}  // namespace strata
