// The optimizer registry (optim::from_config, default_config, get): every optimizer, with non-default options, a
// schedule and clipping, round-trips config() -> from_config -> the same config and the same updates over a few
// steps; defaults are Keras's; an unknown name, an unknown hyperparameter, a flag that is not 0 or 1 and a value the
// optimizer refuses are InvalidArgument naming it.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strata/optim/optimizers.h"
#include "test_util.h"

namespace strata {
namespace {

using test::message_of;

// The values of a [3, 2] variable after four steps of `optimizer` on fixed gradients.
std::vector<float> after_steps(optim::Optimizer& optimizer) {
  Variable w(test::random_tensor({3, 2}, 1), true, "w");
  for (uint64_t step = 0; step < 4; ++step) optimizer.apply_gradients({test::random_tensor({3, 2}, 10 + step)}, {w});
  return w.value().to_vector<float>();
}

std::vector<std::shared_ptr<optim::Optimizer>> every_optimizer() {
  const optim::Schedule decay = optim::exponential_decay(0.1f, 2, 0.5f);
  return {
      std::make_shared<optim::SGD>(optim::SGDOptions{.learning_rate = 0.1, .momentum = 0.9f, .nesterov = true}),
      std::make_shared<optim::SGD>(optim::SGDOptions{.learning_rate = decay, .clipnorm = 0.5f}),
      std::make_shared<optim::Adam>(optim::AdamOptions{
          .learning_rate = 0.01, .beta_1 = 0.8, .beta_2 = 0.99, .epsilon = 1e-5f, .amsgrad = true}),
      std::make_shared<optim::Adam>(optim::AdamOptions{.learning_rate = decay, .global_clipnorm = 1.0f}),
      std::make_shared<optim::AdamW>(optim::AdamWOptions{.learning_rate = 0.01, .weight_decay = 0.1f, .beta_1 = 0.85}),
      std::make_shared<optim::RMSprop>(optim::RMSpropOptions{
          .learning_rate = 0.01, .rho = 0.8f, .momentum = 0.5f, .epsilon = 1e-6f, .centered = true}),
      std::make_shared<optim::RMSprop>(optim::RMSpropOptions{.clipvalue = 0.1f}),
      std::make_shared<optim::Adagrad>(
          optim::AdagradOptions{.learning_rate = 0.1, .initial_accumulator_value = 0.5f, .epsilon = 1e-4f}),
      std::make_shared<optim::Adagrad>(optim::AdagradOptions{.weight_decay = 0.01f}),
  };
}

TEST(OptimizerConfigTest, EveryOptimizerRoundTripsThroughItsConfig) {
  for (const auto& original : every_optimizer()) {
    SCOPED_TRACE(original->name());
    const optim::OptimizerConfig& config = original->config();
    EXPECT_EQ(config.name, original->name());
    const std::shared_ptr<optim::Optimizer> made = optim::from_config(config);
    EXPECT_EQ(made->name(), original->name());
    EXPECT_EQ(made->config().hyperparameters, config.hyperparameters);
    EXPECT_EQ(made->config().clipnorm, config.clipnorm);
    EXPECT_EQ(made->config().clipvalue, config.clipvalue);
    EXPECT_EQ(made->config().global_clipnorm, config.global_clipnorm);
    EXPECT_EQ(made->config().weight_decay, config.weight_decay);
    EXPECT_EQ(made->slot_names(), original->slot_names());
    EXPECT_EQ(after_steps(*made), after_steps(*original));  // bit for bit, the schedule's rates too
  }
}

TEST(OptimizerConfigTest, TheConfigNamesEveryHyperparameterByKerasNames) {
  const optim::OptimizerConfig sgd = optim::SGD(optim::SGDOptions{.momentum = 0.9f, .nesterov = true}).config();
  EXPECT_EQ(sgd.hyperparameters, (std::map<std::string, double>{{"momentum", 0.9f}, {"nesterov", 1}}));
  const optim::OptimizerConfig adam = optim::default_config("Adam");
  EXPECT_EQ(adam.name, "adam");
  EXPECT_FLOAT_EQ(adam.learning_rate(0), 0.001f);
  EXPECT_EQ(adam.hyperparameters,
            (std::map<std::string, double>{{"beta_1", 0.9}, {"beta_2", 0.999}, {"epsilon", 1e-7f}, {"amsgrad", 0}}));
  EXPECT_FLOAT_EQ(*optim::default_config("adamw").weight_decay, 0.004f);
  EXPECT_FLOAT_EQ(optim::default_config("sgd").learning_rate(0), 0.01f);
  EXPECT_EQ(optim::default_config("rmsprop").hyperparameters.count("centered"), 1u);
  EXPECT_EQ(optim::default_config("adagrad").hyperparameters.at("initial_accumulator_value"), 0.1f);
}

TEST(OptimizerConfigTest, AMissingHyperparameterTakesItsDefault) {
  const auto adam = optim::from_config({.name = "adam", .learning_rate = 0.01, .hyperparameters = {{"beta_1", 0.5}}});
  EXPECT_FLOAT_EQ(adam->learning_rate(), 0.01f);
  EXPECT_EQ(adam->config().hyperparameters.at("beta_1"), 0.5);
  EXPECT_EQ(adam->config().hyperparameters.at("beta_2"), 0.999);  // as given, as Keras's get_config: not 0.999f
  const auto adamw = optim::from_config({.name = "adamw"});
  EXPECT_FLOAT_EQ(*adamw->config().weight_decay, 0.004f);
  EXPECT_EQ(optim::from_config({.name = "rms_prop"})->name(), "rmsprop");
}

TEST(OptimizerConfigTest, GetIsFromConfigWithDefaults) {
  for (const char* name : {"sgd", "adam", "adamw", "rmsprop", "adagrad"}) {
    SCOPED_TRACE(name);
    const auto got = optim::get(name);
    const auto made = optim::from_config(optim::default_config(name));
    EXPECT_EQ(got->config().hyperparameters, made->config().hyperparameters);
    EXPECT_EQ(after_steps(*got), after_steps(*made));
  }
  EXPECT_FLOAT_EQ(optim::get("sgd", 0.5f)->learning_rate(), 0.5f);
}

TEST(OptimizerConfigTest, WhatTheRegistryCannotMakeIsInvalidArgumentNamingIt) {
  std::string m = message_of<InvalidArgument>([] { optim::from_config({.name = "lamb"}); });
  EXPECT_NE(m.find("optim::from_config: unknown optimizer 'lamb'; known: sgd, adam, adamw, rmsprop, adagrad"),
            std::string::npos)
      << m;
  m = message_of<InvalidArgument>([] { optim::default_config("lars"); });
  EXPECT_NE(m.find("unknown optimizer 'lars'"), std::string::npos) << m;
  m = message_of<InvalidArgument>([] { optim::from_config({.name = "sgd", .hyperparameters = {{"beta_1", 0.9}}}); });
  EXPECT_NE(m.find("sgd has no hyperparameter 'beta_1' (it takes momentum, nesterov)"), std::string::npos) << m;
  m = message_of<InvalidArgument>([] { optim::from_config({.name = "adam", .hyperparameters = {{"amsgrad", 2}}}); });
  EXPECT_NE(m.find("adam's amsgrad is a flag (0 or 1), got 2"), std::string::npos) << m;
  m = message_of<InvalidArgument>([] { optim::from_config({.name = "adam", .hyperparameters = {{"beta_1", 1.5}}}); });
  EXPECT_NE(m.find("beta_1 must be in [0, 1), got 1.5"), std::string::npos) << m;
  m = message_of<InvalidArgument>([] {
    optim::from_config({.name = "adagrad", .hyperparameters = {{"initial_accumulator_value", -1}}});
  });
  EXPECT_NE(m.find("initial_accumulator_value must be >= 0, got -1"), std::string::npos) << m;
}

}  // namespace
}  // namespace strata
