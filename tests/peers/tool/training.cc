// peers_tool's training subcommands: a small Model::fit with the TensorBoard callback, learning-rate schedules at
// given steps, and optimizers applying fixed gradients, each through strata's own classes. Schedules and optimizers
// are named as Keras names them ({"class": "CosineDecay", "config": {...}}, {"class": "Adam", "config": {...}}), so
// that the test hands the same description to Keras. See commands.h. Thread-safety: see commands.h.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "strata/error.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/optim/schedules.h"
#include "strata/random.h"
#include "strata/train/callbacks.h"
#include "strata/train/model.h"

namespace strata::peers {

namespace {

// Keras's LearningRateSchedule classes, by their config (keras.optimizers.schedules.*.get_config()).
optim::Schedule schedule_from_json(const json& s) {
  const std::string name = member(s, "class").get<std::string>();
  const json& c = member(s, "config");
  const auto f = [&c](const char* key) { return member(c, key).get<float>(); };
  const auto steps = [&c](const char* key) { return member(c, key).get<int64_t>(); };
  if (name == "PiecewiseConstantDecay") {
    return optim::piecewise_constant(member(c, "boundaries").get<std::vector<int64_t>>(),
                                     member(c, "values").get<std::vector<float>>());
  }
  if (name == "ExponentialDecay") {
    return optim::exponential_decay(f("initial_learning_rate"), steps("decay_steps"), f("decay_rate"),
                                    c.value("staircase", false));
  }
  if (name == "InverseTimeDecay") {
    return optim::inverse_time_decay(f("initial_learning_rate"), steps("decay_steps"), f("decay_rate"),
                                     c.value("staircase", false));
  }
  if (name == "PolynomialDecay") {
    STRATA_CHECK(!c.value("cycle", false), InvalidArgument, "strata's polynomial_decay has no cycle");
    return optim::polynomial_decay(f("initial_learning_rate"), steps("decay_steps"), f("end_learning_rate"),
                                   f("power"));
  }
  if (name == "CosineDecay") {
    // Keras's warmup: from initial_learning_rate up to warmup_target over warmup_steps, then the cosine from there.
    if (c.contains("warmup_target") && !c["warmup_target"].is_null()) {
      return optim::linear_warmup(optim::cosine_decay(f("warmup_target"), steps("decay_steps"), f("alpha")),
                                  steps("warmup_steps"), f("initial_learning_rate"));
    }
    return optim::cosine_decay(f("initial_learning_rate"), steps("decay_steps"), f("alpha"));
  }
  STRATA_THROW(InvalidArgument, "unknown schedule class '" << name << "'");
}

optim::LearningRate learning_rate_from_json(const json& lr) {
  if (lr.is_number()) return lr.get<double>();
  return schedule_from_json(lr);
}

// {"class": "SGD" | "Adam" | "Adagrad" | ..., "config": Keras's constructor arguments} -> strata's optimizer, made
// through the optimizer registry (the job file's path).
std::shared_ptr<optim::Optimizer> optimizer_from_json(const json& o) {
  optim::OptimizerConfig config = optim::default_config(member(o, "class").get<std::string>());
  for (const auto& [key, value] : member(o, "config").items()) {
    if (key == "learning_rate") {
      config.learning_rate = learning_rate_from_json(value);
    } else if (value.is_boolean()) {
      config.hyperparameters[key] = value.get<bool>() ? 1.0 : 0.0;
    } else {
      config.hyperparameters[key] = value.get<double>();
    }
  }
  return optim::from_config(config);
}

// What fit hands the callbacks: each batch's logs with the global step then, and the learning rate and global step at
// each epoch's end.
struct FitRecorder : Callback {
  json batches = json::array();
  json learning_rates = json::array();
  json epoch_end_steps = json::array();
  void on_train_batch_end(int64_t, const Logs& logs) override {
    json values = json::object();
    for (const auto& [name, value] : logs.items()) values[name] = value;
    batches.push_back({{"step", model()->step()}, {"logs", values}});
  }
  void on_epoch_end(int64_t, const Logs&) override {
    learning_rates.push_back(bits_of(model()->optimizer().learning_rate()));
    epoch_end_steps.push_back(model()->step());
  }
};

}  // namespace

json events_fit(const json& request) {
  const int64_t batch_size = member(request, "batch_size").get<int64_t>();
  const auto data = [&](const char* x, const char* y) {
    return data::Dataset::from_tensor_slices(
               {tensor_from_json(member(request, x)), tensor_from_json(member(request, y))})
        .batch(batch_size);
  };
  manual_seed(member(request, "seed").get<uint64_t>());
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(1)});
  model->compile(losses::MeanSquaredError(), optim::SGD(optim::SGDOptions{.learning_rate = 0.01}), {"mse"});
  // The learning rate of each epoch, as the test's keras.callbacks.LearningRateScheduler sets it.
  const std::vector<double> rates = member(request, "epoch_learning_rates").get<std::vector<double>>();
  auto scheduler = std::make_shared<callbacks::LearningRateScheduler>(
      [rates](int64_t epoch, double) { return rates.at(static_cast<size_t>(epoch)); });
  auto board = std::make_shared<callbacks::TensorBoard>(member(request, "log_dir").get<std::string>(),
                                                        callbacks::TensorBoard::Options{.update_freq = 1});
  auto recorder = std::make_shared<FitRecorder>();
  const History history = model->fit(data("x", "y"), {.epochs = static_cast<int64_t>(rates.size()),
                                                      .validation_data = data("val_x", "val_y"),
                                                      .callbacks = {scheduler, recorder, board},
                                                      .verbose = 0});
  return {{"train_file", board->train_file()},
          {"validation_file", board->validation_file()},
          {"history", history.history},
          {"input_wait_fraction", history.input_wait_fraction},
          {"batches", recorder->batches},
          {"learning_rates", recorder->learning_rates},
          {"epoch_end_steps", recorder->epoch_end_steps}};
}

json schedule_values(const json& request) {
  json answers = json::array();
  for (const json& c : member(request, "cases")) {
    const optim::Schedule schedule = schedule_from_json(member(c, "schedule"));
    json values = json::array();
    for (const json& step : member(c, "steps")) values.push_back(bits_of(schedule(step.get<int64_t>())));
    answers.push_back(values);
  }
  return answers;
}

json optimizer_steps(const json& request) {
  json answers = json::array();
  for (const json& c : member(request, "cases")) {
    std::shared_ptr<optim::Optimizer> optimizer = optimizer_from_json(member(c, "optimizer"));
    Variable var(tensor_from_json(member(c, "initial")), /*trainable=*/true, "var");
    json values = json::array(), rates = json::array();
    for (const json& g : member(c, "gradients")) {
      rates.push_back(bits_of(optimizer->learning_rate()));
      optimizer->apply_gradients({tensor_from_json(g)}, {var});
      values.push_back(tensor_to_json(var.value())["values"]);
    }
    json slots = json::object();
    for (const std::string& name : optimizer->slot_names())
      slots[name] = tensor_to_json(optimizer->slot(var, name))["values"];
    answers.push_back(
        {{"values", values}, {"learning_rates", rates}, {"slots", slots}, {"iterations", optimizer->iterations()}});
  }
  return answers;
}

}  // namespace strata::peers
