// The parts of the extension module strata._strata, each defined in its own file and called once from module.cc while
// the module is imported.
// Thread-safety: the define_* functions run under the GIL at import; nothing here holds state.
#pragma once

#include <nanobind/nanobind.h>

namespace strata::python {

// Layers (strata.layers), losses (strata.losses) and optimizers (strata.optimizers): the C++ classes with Keras's
// constructor arguments.
void define_layers(nanobind::module_& m);
void define_losses_and_optimizers(nanobind::module_& m);
// Metrics (strata.metrics, the submodule strata._strata.metrics): the C++ metric classes with Keras's constructor
// arguments.
void define_metrics(nanobind::module_& parent);
// strata.data (the submodule strata._strata.data): Dataset over data::Dataset, its iterator of numpy arrays, the
// TFRecord writer and tf.train.Example serialization.
void define_data(nanobind::module_& parent);
// Variables, GradientTape, calling a model on arrays, compute_average_loss: custom training loops.
void define_autograd(nanobind::module_& m);
// Strategies and their scopes (strata.distribute).
void define_strategies(nanobind::module_& m);
// ParameterServerStrategy (from a TF_CONFIG document) and the variable partitioners; after define_strategies.
void define_parameter_server(nanobind::module_& m);
// Model (functional) and Sequential: compile, fit / evaluate / predict on numpy arrays, weights.
void define_model(nanobind::module_& m);
// The strata command line (`python -m strata`, `python -m strata.launch`).
void define_command_line(nanobind::module_& m);

}  // namespace strata::python
