// strata.Model's and strata.Sequential's native half: compile, and fit / evaluate / predict on numpy arrays, which become Tensors
// without a copy when they are C-contiguous float32, uint8, int32 or int64 (the Tensor keeps the array alive). The GIL
// is released while strata computes; Python callbacks run between steps with it taken, and there a pending signal
// (Ctrl-C: KeyboardInterrupt) or a callback's exception stops fit after the step and is raised when fit returns.
// Thread-safety: as strata::Model: one thread drives a model at a time.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "arrays.h"
#include "bindings.h"
#include "strata/error.h"
#include "strata/nn/functional.h"
#include "strata/optim/metrics.h"
#include "strata/random.h"
#include "strata/train/model.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace strata::python {
namespace {

nb::dict dict_of(const Logs& logs) {
  nb::dict d;
  for (const auto& [name, value] : logs.items()) d[name.c_str()] = value;
  return d;
}

// fit's and evaluate's bridge to Python: each callback object's on_* method that exists is called (Keras's names and
// arguments, logs as a dict) with the GIL taken. Before each call it checks for signals: a KeyboardInterrupt, or an
// exception a callback raised, is kept, stops training after the step, and is raised by rethrow_pending().
class PythonCallbacks final : public Callback {
 public:
  explicit PythonCallbacks(std::vector<nb::object> targets) : targets_(std::move(targets)) {}
  // REQUIRES: the GIL is held.
  ~PythonCallbacks() override = default;

  void on_train_begin(const Logs& logs) override { call("on_train_begin", logs); }
  void on_train_end(const Logs& logs) override { call("on_train_end", logs); }
  void on_epoch_begin(int64_t epoch, const Logs& logs) override { call("on_epoch_begin", logs, epoch); }
  void on_epoch_end(int64_t epoch, const Logs& logs) override { call("on_epoch_end", logs, epoch); }
  void on_train_batch_begin(int64_t batch, const Logs& logs) override { call("on_train_batch_begin", logs, batch); }
  void on_train_batch_end(int64_t batch, const Logs& logs) override { call("on_train_batch_end", logs, batch); }
  void on_test_begin(const Logs& logs) override { call("on_test_begin", logs); }
  void on_test_end(const Logs& logs) override { call("on_test_end", logs); }
  void on_test_batch_end(int64_t batch, const Logs& logs) override { call("on_test_batch_end", logs, batch); }

  // REQUIRES: the GIL is held. Raises what stopped the run, if anything did.
  void rethrow_pending() {
    if (pending_) {
      nb::python_error error = std::move(*pending_);
      pending_.reset();
      throw error;
    }
  }

 private:
  void call(const char* method, const Logs& logs, std::optional<int64_t> index = {}) {
    nb::gil_scoped_acquire gil;
    if (pending_) return;
    try {
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
      for (const nb::object& target : targets_) {
        if (!nb::hasattr(target, method)) continue;
        if (index) {
          target.attr(method)(*index, dict_of(logs));
        } else {
          target.attr(method)(dict_of(logs));
        }
      }
    } catch (nb::python_error& e) {
      pending_ = std::make_unique<nb::python_error>(std::move(e));
      if (model() != nullptr) model()->stop_training = true;
    }
  }

  std::vector<nb::object> targets_;
  std::unique_ptr<nb::python_error> pending_;
};

// The strategy's scope (when given) held on this thread while fit / evaluate / predict run, so that a model made in
// `with strategy.scope():` and first built by its first batch builds its variables under that strategy, as in Keras.
std::unique_ptr<distribute::Strategy::Scope> scope_of(distribute::Strategy* strategy) {
  if (strategy == nullptr) return nullptr;
  return std::unique_ptr<distribute::Strategy::Scope>(new distribute::Strategy::Scope(strategy->scope()));
}

data::Dataset batches(const Tensor& x, const std::optional<Tensor>& y, int64_t batch_size, bool shuffle,
                      std::optional<uint64_t> seed) {
  STRATA_CHECK(batch_size >= 1, InvalidArgument, "batch_size must be at least 1, got " << batch_size);
  if (y) {
    STRATA_CHECK(y->dim(0) == x.dim(0), InvalidArgument,
                 "x and y must have the same number of rows, got " << x.dim(0) << " and " << y->dim(0));
  }
  data::Dataset d = y ? data::Dataset::from_tensor_slices({x, *y}) : data::Dataset::from_tensor_slices({x});
  if (shuffle) d = d.shuffle(x.dim(0), seed);
  return d.batch(batch_size).prefetch(data::kAutotune);
}

// fit / evaluate / predict on a strata.data.Dataset: its elements are (x, y[, sample_weight]) batches by position,
// as strata::Model::fit reads them (a dict's values in key order).
nb::dict fit_dataset(Model& model, const data::Dataset& train, int64_t epochs, std::optional<data::Dataset> validation,
                     int64_t steps_per_epoch, int64_t validation_steps, int verbose, std::vector<nb::object> callbacks,
                     distribute::Strategy* strategy) {
  FitOptions options{.epochs = epochs, .steps_per_epoch = steps_per_epoch, .validation_data = std::move(validation),
                     .validation_steps = validation_steps, .verbose = verbose};
  auto bridge = std::make_shared<PythonCallbacks>(std::move(callbacks));
  options.callbacks.push_back(bridge);
  History history;
  {
    nb::gil_scoped_release released;
    auto scope = scope_of(strategy);
    history = model.fit(train, options);
  }
  bridge->rethrow_pending();
  nb::dict out;
  for (const auto& [name, values] : history.history) out[name.c_str()] = nb::cast(values);
  return out;
}

std::vector<std::pair<std::string, double>> evaluate_dataset(Model& model, const data::Dataset& test, int64_t steps,
                                                             int verbose, std::vector<nb::object> callbacks,
                                                             distribute::Strategy* strategy) {
  auto bridge = std::make_shared<PythonCallbacks>(std::move(callbacks));
  EvaluateOptions options{.steps = steps, .callbacks = {bridge}, .verbose = verbose};
  Logs logs;
  {
    nb::gil_scoped_release released;
    auto scope = scope_of(strategy);
    logs = model.evaluate(test, options);
  }
  bridge->rethrow_pending();
  return logs.items();
}

nb::object predict_dataset(Model& model, const data::Dataset& inputs, int64_t steps, distribute::Strategy* strategy) {
  Tensor out;
  {
    nb::gil_scoped_release released;
    auto scope = scope_of(strategy);
    out = model.predict(inputs, steps);
  }
  return numpy_from_tensor(std::move(out));
}

// fit / evaluate / predict on numpy arrays: the arrays become a batched Dataset (shuffled for fit), then as above.
nb::dict fit(Model& model, nb::handle x_array, nb::handle y_array, int64_t epochs, int64_t batch_size,
             nb::handle validation_x, nb::handle validation_y, bool shuffle, std::optional<uint64_t> seed,
             int verbose, std::vector<nb::object> callbacks, distribute::Strategy* strategy) {
  const Tensor x = tensor_from_numpy(x_array, "fit x");
  const Tensor y = tensor_from_numpy(y_array, "fit y");
  std::optional<data::Dataset> validation;
  if (!validation_x.is_none()) {
    validation = batches(tensor_from_numpy(validation_x, "fit validation x"),
                         tensor_from_numpy(validation_y, "fit validation y"), batch_size, false, {});
  }
  return fit_dataset(model, batches(x, y, batch_size, shuffle, seed), epochs, std::move(validation), 0, 0, verbose,
                     std::move(callbacks), strategy);
}

std::vector<std::pair<std::string, double>> evaluate(Model& model, nb::handle x_array, nb::handle y_array,
                                                     int64_t batch_size, int verbose,
                                                     std::vector<nb::object> callbacks,
                                                     distribute::Strategy* strategy) {
  const data::Dataset test = batches(tensor_from_numpy(x_array, "evaluate x"),
                                     tensor_from_numpy(y_array, "evaluate y"), batch_size, false, {});
  return evaluate_dataset(model, test, 0, verbose, std::move(callbacks), strategy);
}

nb::object predict(Model& model, nb::handle x_array, int64_t batch_size, distribute::Strategy* strategy) {
  return predict_dataset(model, batches(tensor_from_numpy(x_array, "predict x"), std::nullopt, batch_size, false, {}),
                         0, strategy);
}

}  // namespace

void define_model(nb::module_& m) {
  m.def("set_random_seed", &manual_seed, "seed"_a,
        "Seeds this thread's generator (weights' initializers, dropout), as keras.utils.set_random_seed.");

  // The model methods both kinds share; Sequential adds add() and build().
  nb::class_<Model, nn::Layer>(m, "Model")
      .def(
          "__init__",
          [](Model* self, std::vector<nn::SymbolicTensor> inputs, nn::SymbolicTensor output, std::string name,
             distribute::Strategy* strategy) {
            auto scope = scope_of(strategy);
            new (self) Model(std::move(inputs), std::move(output), std::move(name));
          },
          "inputs"_a, "output"_a, "name"_a = "", "strategy"_a = nb::none())
      .def_prop_ro("built", &Model::built)
      .def_prop_ro("input_count",
                   [](const Model& model) { return model.graph() ? model.graph()->inputs().size() : size_t{1}; })
      .def_prop_rw(
          "stop_training", [](const Model& model) { return model.stop_training; },
          [](Model& model, bool stop) { model.stop_training = stop; })
      .def(
          "compile",
          [](Model& model, std::shared_ptr<losses::Loss> loss, std::shared_ptr<optim::Optimizer> optimizer,
             const std::vector<std::variant<std::string, std::shared_ptr<metrics::Metric>>>& metrics) {
            std::vector<MetricSpec> specs;
            for (const auto& metric : metrics) {
              if (const auto* name = std::get_if<std::string>(&metric)) {
                specs.emplace_back(*name);
              } else {
                specs.emplace_back(std::get<std::shared_ptr<metrics::Metric>>(metric));
              }
            }
            model.compile(std::move(loss), std::move(optimizer), std::move(specs));
          },
          "loss"_a, "optimizer"_a, "metrics"_a = std::vector<std::string>{})
      .def("fit", &fit, "x"_a, "y"_a, "epochs"_a, "batch_size"_a, "validation_x"_a.none(), "validation_y"_a.none(),
           "shuffle"_a, "seed"_a.none(), "verbose"_a, "callbacks"_a, "strategy"_a.none())
      .def("evaluate", &evaluate, "x"_a, "y"_a, "batch_size"_a, "verbose"_a, "callbacks"_a, "strategy"_a.none())
      .def("predict", &predict, "x"_a, "batch_size"_a, "strategy"_a.none())
      .def("fit_dataset", &fit_dataset, "dataset"_a, "epochs"_a, "validation"_a.none(), "steps_per_epoch"_a,
           "validation_steps"_a, "verbose"_a, "callbacks"_a, "strategy"_a.none())
      .def("evaluate_dataset", &evaluate_dataset, "dataset"_a, "steps"_a, "verbose"_a, "callbacks"_a,
           "strategy"_a.none())
      .def("predict_dataset", &predict_dataset, "dataset"_a, "steps"_a, "strategy"_a.none())
      .def("summary", &Model::summary)
      .def("save", &Model::save, "path"_a)
      .def("save_weights", &Model::save_weights, "path"_a)
      .def("load_weights", &Model::load_weights, "path"_a)
      .def("named_weights", [](const Model& model) {
        std::vector<std::pair<std::string, nb::object>> out;
        for (const auto& [name, tensor] : model.named_weights()) {
          out.emplace_back(name, numpy_from_tensor(tensor.clone()));
        }
        return out;
      });

  nb::class_<Sequential, Model>(m, "Sequential")
      .def(
          "__init__",
          [](Sequential* self, const std::vector<std::shared_ptr<nn::Layer>>& layers, std::string name) {
            new (self) Sequential({}, std::move(name));
            for (const auto& layer : layers) self->add(nn::LayerRef(*layer));
          },
          "layers"_a = std::vector<std::shared_ptr<nn::Layer>>{}, "name"_a = "")
      .def("add", [](Sequential& s, const nn::Layer& layer) { s.add(nn::LayerRef(layer)); }, "layer"_a)
      .def(
          "build",
          [](Sequential& s, const Shape& input_shape, distribute::Strategy* strategy) {
            auto scope = scope_of(strategy);
            s.build_for(input_shape);
          },
          "input_shape"_a, "strategy"_a = nb::none());
}

}  // namespace strata::python
