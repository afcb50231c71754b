// strata.metrics: the C++ metrics under Keras's class names and arguments, for compile(metrics=[...]) beside the names
// ("accuracy", "mse", ...). compile takes a copy (a fresh state) of each, as strata::Model::compile does: the object
// passed keeps its own state, and the values are read from History and evaluate under the metric's name.
// Thread-safety: constructors run under the GIL; a metric object follows metrics::Metric's rules.
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include "arrays.h"
#include "bindings.h"
#include "strata/optim/metrics.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace strata::python {

void define_metrics(nb::module_& parent) {
  // A submodule: MeanSquaredError is also a loss's name in the parent module.
  nb::module_ m = parent.def_submodule("metrics", "The C++ metrics under Keras's class names (strata.metrics).");
  nb::class_<metrics::Metric>(m, "Metric")
      .def_prop_ro("name", &metrics::Metric::name)
      // Keras's update_state(y_true, y_pred, sample_weight=None) on array-likes; Mean takes update_state(values).
      .def(
          "update_state",
          [](metrics::Metric& metric, nb::handle y_true, nb::handle y_pred, nb::handle sample_weight) {
            const Tensor truth = tensor_from_values(y_true, "update_state y_true");
            const Tensor predicted = y_pred.is_none() ? Tensor() : tensor_from_values(y_pred, "update_state y_pred");
            const Tensor weights =
                sample_weight.is_none() ? Tensor() : tensor_from_values(sample_weight, "update_state sample_weight");
            nb::gil_scoped_release released;
            // The replicas of strategy.run may update one metric together (TF's tutorial does): one at a time.
            static std::mutex updating;
            const std::lock_guard<std::mutex> lock(updating);
            metric.update_state(truth, predicted, weights);
          },
          "y_true"_a, "y_pred"_a = nb::none(), "sample_weight"_a = nb::none())
      .def("result", &metrics::Metric::result)
      .def("reset_state", &metrics::Metric::reset_state)
      .def("__repr__", [](const metrics::Metric& metric) { return "<strata.metrics '" + metric.name() + "'>"; });
  // A metric by Keras's name, as compile resolves a string (InvalidArgument names the known ones).
  m.def(
      "metric_by_name",
      [](const std::string& name, const std::string& loss_name) { return metrics::get(name, loss_name); },
      "name"_a, "loss_name"_a = "");

  using Made = std::shared_ptr<metrics::Metric>;
  m.def("Mean", [](std::string name) -> Made { return std::make_shared<metrics::Mean>(std::move(name)); },
        "name"_a = "mean");
  m.def("Accuracy", [](std::string name) -> Made { return std::make_shared<metrics::Accuracy>(std::move(name)); },
        "name"_a = "accuracy");
  m.def(
      "SparseCategoricalAccuracy",
      [](std::string name) -> Made { return std::make_shared<metrics::SparseCategoricalAccuracy>(std::move(name)); },
      "name"_a = "sparse_categorical_accuracy");
  m.def(
      "CategoricalAccuracy",
      [](std::string name) -> Made { return std::make_shared<metrics::CategoricalAccuracy>(std::move(name)); },
      "name"_a = "categorical_accuracy");
  m.def(
      "BinaryAccuracy",
      [](std::string name, float threshold) -> Made {
        return std::make_shared<metrics::BinaryAccuracy>(std::move(name), threshold);
      },
      "name"_a = "binary_accuracy", "threshold"_a = 0.5f);
  m.def(
      "MeanSquaredError",
      [](std::string name) -> Made { return std::make_shared<metrics::MeanSquaredError>(std::move(name)); },
      "name"_a = "mean_squared_error");
  // Keras's `thresholds` (one value here; None is 0.5).
  m.def(
      "Precision",
      [](std::optional<float> thresholds, std::string name) -> Made {
        return std::make_shared<metrics::Precision>(std::move(name), thresholds.value_or(0.5f));
      },
      "thresholds"_a = nb::none(), "name"_a = "precision");
  m.def(
      "Recall",
      [](std::optional<float> thresholds, std::string name) -> Made {
        return std::make_shared<metrics::Recall>(std::move(name), thresholds.value_or(0.5f));
      },
      "thresholds"_a = nb::none(), "name"_a = "recall");
}

}  // namespace strata::python
