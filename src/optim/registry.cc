// The optimizer registry (strata/optim/optimizers.h): from_config, default_config and get, the one place an
// optimizer is made from a name and its hyperparameters (Keras's from_config / get_config).
// Thread-safety: pure functions.
#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/error.h"
#include "strata/optim/optimizers.h"

namespace strata::optim {
namespace {

constexpr const char* kKnown = "sgd, adam, adamw, rmsprop, adagrad";

// `name` lower-cased without underscores ("RMSprop" -> "rmsprop"); InvalidArgument as `who` when it names no
// optimizer.
std::string canonical(const std::string& name, const char* who) {
  std::string key;
  for (char c : name) {
    if (c != '_') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (key == "sgd" || key == "adam" || key == "adamw" || key == "rmsprop" || key == "adagrad") return key;
  STRATA_THROW(InvalidArgument, who << ": unknown optimizer '" << name << "'; known: " << kKnown);
}

// Reads one optimizer's hyperparameters from a config, each by name, and refuses the ones it was not asked for.
class Hyperparameters {
 public:
  Hyperparameters(const OptimizerConfig& config, std::string optimizer)
      : given_(config.hyperparameters), optimizer_(std::move(optimizer)) {}

  // As given (a double); the option it fills may round it to float.
  double number(const std::string& key, double fallback) {
    asked_.push_back(key);
    const auto it = given_.find(key);
    return it == given_.end() ? fallback : it->second;
  }
  bool flag(const std::string& key, bool fallback) {
    asked_.push_back(key);
    const auto it = given_.find(key);
    if (it == given_.end()) return fallback;
    STRATA_CHECK(it->second == 0.0 || it->second == 1.0, InvalidArgument,
                 "optim::from_config: " << optimizer_ << "'s " << key << " is a flag (0 or 1), got " << it->second);
    return it->second == 1.0;
  }
  // InvalidArgument naming the first hyperparameter given that was not read.
  void finish() const {
    for (const auto& [key, value] : given_) {
      if (std::find(asked_.begin(), asked_.end(), key) != asked_.end()) continue;
      std::ostringstream takes;
      for (size_t i = 0; i < asked_.size(); ++i) takes << (i ? ", " : "") << asked_[i];
      STRATA_THROW(InvalidArgument, "optim::from_config: " << optimizer_ << " has no hyperparameter '" << key
                                                           << "' (it takes " << takes.str() << ")");
    }
  }

 private:
  const std::map<std::string, double>& given_;
  const std::string optimizer_;
  std::vector<std::string> asked_;
};

// The options every optimizer shares, from `config` into `o`.
template <class O>
void fill_common(const OptimizerConfig& config, O& o) {
  o.learning_rate = config.learning_rate;
  o.clipnorm = config.clipnorm;
  o.clipvalue = config.clipvalue;
  o.global_clipnorm = config.global_clipnorm;
  if constexpr (std::is_same_v<decltype(o.weight_decay), float>) {  // AdamW's own: its default when not given
    if (config.weight_decay) o.weight_decay = *config.weight_decay;
  } else {
    o.weight_decay = config.weight_decay;
  }
}

}  // namespace

std::shared_ptr<Optimizer> from_config(const OptimizerConfig& config) {
  const std::string name = canonical(config.name, "optim::from_config");
  Hyperparameters h(config, name);
  std::shared_ptr<Optimizer> out;
  if (name == "sgd") {
    SGDOptions o;
    fill_common(config, o);
    o.momentum = h.number("momentum", o.momentum);
    o.nesterov = h.flag("nesterov", o.nesterov);
    h.finish();
    out = std::make_shared<SGD>(std::move(o));
  } else if (name == "adam" || name == "adamw") {
    auto read = [&](auto& o) {
      fill_common(config, o);
      o.beta_1 = h.number("beta_1", o.beta_1);
      o.beta_2 = h.number("beta_2", o.beta_2);
      o.epsilon = h.number("epsilon", o.epsilon);
      o.amsgrad = h.flag("amsgrad", o.amsgrad);
      h.finish();
    };
    if (name == "adam") {
      AdamOptions o;
      read(o);
      out = std::make_shared<Adam>(std::move(o));
    } else {
      AdamWOptions o;
      read(o);
      out = std::make_shared<AdamW>(std::move(o));
    }
  } else if (name == "rmsprop") {
    RMSpropOptions o;
    fill_common(config, o);
    o.rho = h.number("rho", o.rho);
    o.momentum = h.number("momentum", o.momentum);
    o.epsilon = h.number("epsilon", o.epsilon);
    o.centered = h.flag("centered", o.centered);
    h.finish();
    out = std::make_shared<RMSprop>(std::move(o));
  } else {
    AdagradOptions o;
    fill_common(config, o);
    o.initial_accumulator_value = h.number("initial_accumulator_value", o.initial_accumulator_value);
    o.epsilon = h.number("epsilon", o.epsilon);
    h.finish();
    out = std::make_shared<Adagrad>(std::move(o));
  }
  return out;
}

OptimizerConfig default_config(const std::string& name) {
  const std::string key = canonical(name, "optim::default_config");
  if (key == "sgd") return SGD().config();
  if (key == "adam") return Adam().config();
  if (key == "adamw") return AdamW().config();
  if (key == "rmsprop") return RMSprop().config();
  return Adagrad().config();
}

std::shared_ptr<Optimizer> get(const std::string& name, float lr) {
  OptimizerConfig config = default_config(canonical(name, "optim::get"));
  if (lr > 0.0f) config.learning_rate = LearningRate(lr);
  return from_config(config);
}

}  // namespace strata::optim
