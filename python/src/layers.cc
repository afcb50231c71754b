// strata.layers, strata.losses and strata.optimizers: the C++ layers, losses and optimizers under Keras's names, with
// Keras's constructor arguments and defaults (activation=None is linear; kernel_size, strides and pool_size take an
// int or a pair). A layer object is the C++ layer itself; a model takes a copy of it, as Sequential does in C++.
// Optimizers are made by the registry (optim::from_config), as the job file makes them.
// Thread-safety: constructors run under the GIL; the objects follow their C++ classes' rules.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.h"
#include "bindings.h"
#include "strata/error.h"
#include "strata/nn/attention.h"
#include "strata/nn/conv_layers.h"
#include "strata/nn/core_layers.h"
#include "strata/nn/functional.h"
#include "strata/nn/merge_layers.h"
#include "strata/nn/normalization.h"
#include "strata/nn/preprocessing.h"
#include "strata/nn/recurrent.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace strata::python {
namespace {

// Keras's loss reductions by name: "sum_over_batch_size" (also "auto", the default), "sum", "none".
losses::Reduction reduction_of(const std::string& name) {
  if (name == "sum_over_batch_size" || name == "auto") return losses::Reduction::kSumOverBatchSize;
  if (name == "sum") return losses::Reduction::kSum;
  if (name == "none") return losses::Reduction::kNone;
  STRATA_THROW(InvalidArgument, "reduction must be 'sum_over_batch_size', 'sum' or 'none', got '" << name << "'");
}

// Keras's int-or-pair arguments (kernel_size=3, strides=(2, 1)).
nn::Size2 size2(nb::handle value, const char* what) {
  if (nb::isinstance<nb::int_>(value)) return nn::Size2(nb::cast<int>(value));
  if (nb::isinstance<nb::tuple>(value) || nb::isinstance<nb::list>(value)) {
    std::vector<int> pair = nb::cast<std::vector<int>>(value);
    STRATA_CHECK(pair.size() == 2, InvalidArgument, what << " must be an int or a pair of ints, got " << pair.size()
                                                         << " values");
    return nn::Size2(pair[0], pair[1]);
  }
  STRATA_THROW(InvalidArgument, what << " must be an int or a pair of ints, got "
                                     << nb::cast<std::string>(nb::str(value.type())));
}

// Input(dtype=...): the dtypes fit takes from numpy.
DType input_dtype(const std::string& name) {
  for (DType d : {DType::kFloat32, DType::kUInt8, DType::kInt32, DType::kInt64}) {
    if (name == dtype_name(d)) return d;
  }
  STRATA_THROW(InvalidArgument, "Input dtype must be float32, uint8, int32 or int64, got '" << name << "'");
}

// A symbolic tensor's shape as Keras prints it: None for the batch dimension (-1 in C++).
nb::tuple symbolic_shape(const nn::SymbolicTensor& t) {
  nb::list out;
  for (int64_t d : t.shape()) {
    if (d < 0) {
      out.append(nb::none());
    } else {
      out.append(d);
    }
  }
  return nb::tuple(out);
}

// A layer called on symbolic tensors, as Keras's functional API calls it: layer(x), layer([a, b]) or layer(a, b)
// (MultiHeadAttention's query, value). Returns the output node; eager calls on arrays are not bound.
nn::SymbolicTensor call_symbolic(nn::Layer& layer, const nb::args& args) {
  STRATA_CHECK(args.size() >= 1, InvalidArgument, "layer '" << layer.name() << "': called with no inputs");
  if (args.size() == 1 && nb::isinstance<nn::SymbolicTensor>(args[0])) {
    return layer(nb::cast<nn::SymbolicTensor>(args[0]));
  }
  std::vector<nn::SymbolicTensor> inputs;
  nb::handle items = args.size() == 1 ? nb::handle(args[0]) : nb::handle(args);
  if (!nb::try_cast(items, inputs)) {
    STRATA_THROW(InvalidArgument, "layer '" << layer.name()
                                            << "': strata calls layers on strata.Input tensors (the functional API), "
                                               "got "
                                            << nb::cast<std::string>(nb::str(nb::handle(args[0]).type())));
  }
  return layer(inputs);
}

// activation=None is Keras's linear activation.
nn::ActivationSpec activation(const std::optional<std::string>& name) {
  return name ? nn::ActivationSpec(*name) : nn::ActivationSpec();
}

}  // namespace

void define_layers(nb::module_& m) {
  nb::class_<nn::Layer>(m, "Layer")
      .def_prop_ro("name", &nn::Layer::name)
      .def_prop_ro("class_name", &nn::Layer::class_name)
      .def("count_params", &nn::Layer::count_params)
      .def("__call__", &call_symbolic)
      .def("__repr__", [](const nn::Layer& l) { return "<strata.layers." + l.class_name() + " '" + l.name() + "'>"; });

  nb::class_<nn::SymbolicTensor>(m, "SymbolicTensor")
      .def_prop_ro("shape", &symbolic_shape)
      .def_prop_ro("dtype", [](const nn::SymbolicTensor& t) { return std::string(dtype_name(t.dtype())); })
      .def("__repr__", [](const nn::SymbolicTensor& t) {
        return "<strata.SymbolicTensor shape=" + nb::cast<std::string>(nb::repr(symbolic_shape(t))) + " dtype=" +
               std::string(dtype_name(t.dtype())) + ">";
      });
  m.def(
      "Input",
      [](const Shape& shape, const std::string& dtype, const std::string& name) {
        return nn::Input(shape, input_dtype(dtype), name);
      },
      "shape"_a, "dtype"_a = "float32", "name"_a = "");

  nb::class_<nn::Rescaling, nn::Layer>(m, "Rescaling")
      .def(nb::init<float, float, std::string>(), "scale"_a, "offset"_a = 0.0f, "name"_a = "");

  nb::class_<nn::Dense, nn::Layer>(m, "Dense")
      .def(
          "__init__",
          [](nn::Dense* self, int64_t units, std::optional<std::string> act, bool use_bias,
             std::string kernel_initializer, std::string bias_initializer, std::string name) {
            new (self) nn::Dense(units, nn::DenseOptions{.activation = activation(act),
                                                         .use_bias = use_bias,
                                                         .kernel_initializer = kernel_initializer,
                                                         .bias_initializer = bias_initializer,
                                                         .name = std::move(name)});
          },
          "units"_a, "activation"_a = nb::none(), "use_bias"_a = true, "kernel_initializer"_a = "glorot_uniform",
          "bias_initializer"_a = "zeros", "name"_a = "")
      .def_prop_ro("units", &nn::Dense::units);

  nb::class_<nn::Conv2D, nn::Layer>(m, "Conv2D")
      .def(
          "__init__",
          [](nn::Conv2D* self, int64_t filters, nb::handle kernel_size, nb::handle strides, std::string padding,
             nb::handle dilation_rate, std::optional<std::string> act, bool use_bias, std::string kernel_initializer,
             std::string bias_initializer, std::string name) {
            nn::Conv2DLayerOptions o{.strides = size2(strides, "Conv2D strides"),
                                     .padding = padding,
                                     .dilation_rate = size2(dilation_rate, "Conv2D dilation_rate"),
                                     .activation = activation(act),
                                     .use_bias = use_bias,
                                     .kernel_initializer = kernel_initializer,
                                     .bias_initializer = bias_initializer,
                                     .name = std::move(name)};
            new (self) nn::Conv2D(filters, size2(kernel_size, "Conv2D kernel_size"), o);
          },
          "filters"_a, "kernel_size"_a, "strides"_a = 1, "padding"_a = "valid", "dilation_rate"_a = 1,
          "activation"_a = nb::none(), "use_bias"_a = true, "kernel_initializer"_a = "glorot_uniform",
          "bias_initializer"_a = "zeros", "name"_a = "")
      .def_prop_ro("filters", &nn::Conv2D::filters);

  auto pooling_options = [](nb::handle strides, std::string padding, std::string name) {
    nn::Pooling2DOptions o{.padding = padding, .name = std::move(name)};
    if (!strides.is_none()) o.strides = size2(strides, "pooling strides");
    return o;
  };
  nb::class_<nn::MaxPooling2D, nn::Layer>(m, "MaxPooling2D")
      .def(
          "__init__",
          [pooling_options](nn::MaxPooling2D* self, nb::handle pool_size, nb::handle strides, std::string padding,
                            std::string name) {
            new (self) nn::MaxPooling2D(size2(pool_size, "MaxPooling2D pool_size"),
                                        pooling_options(strides, padding, std::move(name)));
          },
          "pool_size"_a = 2, "strides"_a = nb::none(), "padding"_a = "valid", "name"_a = "");
  nb::class_<nn::AveragePooling2D, nn::Layer>(m, "AveragePooling2D")
      .def(
          "__init__",
          [pooling_options](nn::AveragePooling2D* self, nb::handle pool_size, nb::handle strides,
                            std::string padding, std::string name) {
            new (self) nn::AveragePooling2D(size2(pool_size, "AveragePooling2D pool_size"),
                                            pooling_options(strides, padding, std::move(name)));
          },
          "pool_size"_a = 2, "strides"_a = nb::none(), "padding"_a = "valid", "name"_a = "");
  nb::class_<nn::GlobalAveragePooling2D, nn::Layer>(m, "GlobalAveragePooling2D")
      .def(
          "__init__",
          [](nn::GlobalAveragePooling2D* self, bool keepdims, std::string name) {
            new (self) nn::GlobalAveragePooling2D({.keepdims = keepdims, .name = std::move(name)});
          },
          "keepdims"_a = false, "name"_a = "");

  nb::class_<nn::Flatten, nn::Layer>(m, "Flatten").def(nb::init<std::string>(), "name"_a = "");
  nb::class_<nn::Reshape, nn::Layer>(m, "Reshape")
      .def(nb::init<Shape, std::string>(), "target_shape"_a, "name"_a = "");
  nb::class_<nn::Activation, nn::Layer>(m, "Activation")
      .def(
          "__init__",
          [](nn::Activation* self, std::string act, std::string name) {
            new (self) nn::Activation(nn::ActivationSpec(act), std::move(name));
          },
          "activation"_a, "name"_a = "");
  nb::class_<nn::Dropout, nn::Layer>(m, "Dropout")
      .def(
          "__init__",
          [](nn::Dropout* self, float rate, std::optional<uint64_t> seed, std::string name) {
            new (self) nn::Dropout(rate, nn::DropoutOptions{.seed = seed, .name = std::move(name)});
          },
          "rate"_a, "seed"_a = nb::none(), "name"_a = "");
  nb::class_<nn::BatchNormalization, nn::Layer>(m, "BatchNormalization")
      .def(
          "__init__",
          [](nn::BatchNormalization* self, int axis, float momentum, float epsilon, bool center, bool scale,
             std::string name) {
            new (self) nn::BatchNormalization(nn::BatchNormalizationOptions{
                .axis = axis, .momentum = momentum, .epsilon = epsilon, .center = center, .scale = scale,
                .name = std::move(name)});
          },
          "axis"_a = -1, "momentum"_a = 0.99f, "epsilon"_a = 1e-3f, "center"_a = true, "scale"_a = true,
          "name"_a = "");
  nb::class_<nn::Embedding, nn::Layer>(m, "Embedding")
      .def(
          "__init__",
          [](nn::Embedding* self, int64_t input_dim, int64_t output_dim, std::string embeddings_initializer,
             std::string name) {
            new (self) nn::Embedding(input_dim, output_dim,
                                     nn::EmbeddingOptions{.embeddings_initializer = embeddings_initializer,
                                                          .name = std::move(name)});
          },
          "input_dim"_a, "output_dim"_a, "embeddings_initializer"_a = "random_uniform", "name"_a = "");
  nb::class_<nn::LSTM, nn::Layer>(m, "LSTM")
      .def(
          "__init__",
          [](nn::LSTM* self, int64_t units, std::optional<std::string> act, std::optional<std::string> recurrent_act,
             bool use_bias, bool unit_forget_bias, bool return_sequences, bool go_backwards, std::string name) {
            nn::LSTMOptions o;
            o.activation = activation(act);
            o.recurrent_activation = activation(recurrent_act);
            o.use_bias = use_bias;
            o.unit_forget_bias = unit_forget_bias;
            o.return_sequences = return_sequences;
            o.go_backwards = go_backwards;
            o.name = std::move(name);
            new (self) nn::LSTM(units, o);
          },
          "units"_a, "activation"_a = "tanh", "recurrent_activation"_a = "sigmoid", "use_bias"_a = true,
          "unit_forget_bias"_a = true, "return_sequences"_a = false, "go_backwards"_a = false, "name"_a = "");
  nb::class_<nn::GRU, nn::Layer>(m, "GRU")
      .def(
          "__init__",
          [](nn::GRU* self, int64_t units, std::optional<std::string> act, std::optional<std::string> recurrent_act,
             bool use_bias, bool reset_after, bool return_sequences, bool go_backwards, std::string name) {
            nn::GRUOptions o;
            o.activation = activation(act);
            o.recurrent_activation = activation(recurrent_act);
            o.use_bias = use_bias;
            o.reset_after = reset_after;
            o.return_sequences = return_sequences;
            o.go_backwards = go_backwards;
            o.name = std::move(name);
            new (self) nn::GRU(units, o);
          },
          "units"_a, "activation"_a = "tanh", "recurrent_activation"_a = "sigmoid", "use_bias"_a = true,
          "reset_after"_a = true, "return_sequences"_a = false, "go_backwards"_a = false, "name"_a = "");

  nb::class_<nn::Conv1D, nn::Layer>(m, "Conv1D")
      .def(
          "__init__",
          [](nn::Conv1D* self, int64_t filters, int kernel_size, int strides, std::string padding, int dilation_rate,
             std::optional<std::string> act, bool use_bias, std::string kernel_initializer,
             std::string bias_initializer, std::string name) {
            nn::Conv1DLayerOptions o{.strides = strides,
                                     .padding = padding,
                                     .dilation_rate = dilation_rate,
                                     .activation = activation(act),
                                     .use_bias = use_bias,
                                     .kernel_initializer = kernel_initializer,
                                     .bias_initializer = bias_initializer,
                                     .name = std::move(name)};
            new (self) nn::Conv1D(filters, kernel_size, o);
          },
          "filters"_a, "kernel_size"_a, "strides"_a = 1, "padding"_a = "valid", "dilation_rate"_a = 1,
          "activation"_a = nb::none(), "use_bias"_a = true, "kernel_initializer"_a = "glorot_uniform",
          "bias_initializer"_a = "zeros", "name"_a = "")
      .def_prop_ro("filters", &nn::Conv1D::filters);
  nb::class_<nn::GlobalAveragePooling1D, nn::Layer>(m, "GlobalAveragePooling1D")
      .def(
          "__init__",
          [](nn::GlobalAveragePooling1D* self, bool keepdims, std::string name) {
            new (self) nn::GlobalAveragePooling1D({.keepdims = keepdims, .name = std::move(name)});
          },
          "keepdims"_a = false, "name"_a = "");
  nb::class_<nn::LayerNormalization, nn::Layer>(m, "LayerNormalization")
      .def(
          "__init__",
          [](nn::LayerNormalization* self, int axis, float epsilon, bool center, bool scale, std::string name) {
            nn::LayerNormalizationOptions o;
            o.axis = axis;
            o.epsilon = epsilon;
            o.center = center;
            o.scale = scale;
            o.name = std::move(name);
            new (self) nn::LayerNormalization(o);
          },
          "axis"_a = -1, "epsilon"_a = 1e-3f, "center"_a = true, "scale"_a = true, "name"_a = "");
  // Called as Keras calls it in a functional model: mha(query, value) or mha(query, value, key).
  nb::class_<nn::MultiHeadAttention, nn::Layer>(m, "MultiHeadAttention")
      .def(
          "__init__",
          [](nn::MultiHeadAttention* self, int64_t num_heads, int64_t key_dim, std::optional<int64_t> value_dim,
             float dropout, bool use_bias, std::optional<int64_t> output_shape, std::string kernel_initializer,
             std::string bias_initializer, std::string name) {
            nn::MultiHeadAttentionOptions o;
            o.value_dim = value_dim.value_or(0);
            o.dropout = dropout;
            o.use_bias = use_bias;
            o.output_shape = output_shape.value_or(0);
            o.kernel_initializer = kernel_initializer;
            o.bias_initializer = bias_initializer;
            o.name = std::move(name);
            new (self) nn::MultiHeadAttention(num_heads, key_dim, o);
          },
          "num_heads"_a, "key_dim"_a, "value_dim"_a = nb::none(), "dropout"_a = 0.0f, "use_bias"_a = true,
          "output_shape"_a = nb::none(), "kernel_initializer"_a = "glorot_uniform", "bias_initializer"_a = "zeros",
          "name"_a = "");

  // Merging layers, for the functional API's branches: layer([a, b]).
  nb::class_<nn::Concatenate, nn::Layer>(m, "Concatenate").def(nb::init<int, std::string>(), "axis"_a = -1,
                                                                 "name"_a = "");
  nb::class_<nn::Add, nn::Layer>(m, "Add").def(nb::init<std::string>(), "name"_a = "");
  nb::class_<nn::Subtract, nn::Layer>(m, "Subtract").def(nb::init<std::string>(), "name"_a = "");
  nb::class_<nn::Multiply, nn::Layer>(m, "Multiply").def(nb::init<std::string>(), "name"_a = "");
}

void define_losses_and_optimizers(nb::module_& m) {
  // A loss called as Keras calls it: loss(y_true, y_pred, sample_weight=None) -> a Variable (per example with
  // reduction="none"), recorded by any tape of this thread.
  nb::class_<losses::Loss>(m, "Loss")
      .def_prop_ro("name", &losses::Loss::name)
      .def_prop_ro("reduction", [](const losses::Loss& l) { return std::string(losses::reduction_name(l.reduction())); })
      .def(
          "__call__",
          [](const losses::Loss& loss, nb::handle y_true, nb::handle y_pred, nb::handle sample_weight) {
            const Variable truth = variable_from(y_true, "loss y_true");
            const Variable predicted = variable_from(y_pred, "loss y_pred");
            const Tensor weights =
                sample_weight.is_none() ? Tensor() : tensor_from_values(sample_weight, "loss sample_weight");
            nb::gil_scoped_release released;
            return loss(truth, predicted, weights);
          },
          "y_true"_a, "y_pred"_a, "sample_weight"_a = nb::none());
  // A loss by Keras's name ("sparse_categorical_crossentropy", "mse", ...): InvalidArgument for an unknown one.
  m.def("loss_by_name", [](const std::string& name) { return losses::get(name); }, "name"_a);
  m.def(
      "SparseCategoricalCrossentropy",
      [](bool from_logits, const std::string& reduction) -> std::shared_ptr<losses::Loss> {
        return std::make_shared<losses::SparseCategoricalCrossentropy>(losses::SparseCategoricalCrossentropyOptions{
            .from_logits = from_logits, .reduction = reduction_of(reduction)});
      },
      "from_logits"_a = false, "reduction"_a = "sum_over_batch_size");
  m.def(
      "CategoricalCrossentropy",
      [](bool from_logits, float label_smoothing, const std::string& reduction) -> std::shared_ptr<losses::Loss> {
        return std::make_shared<losses::CategoricalCrossentropy>(losses::CategoricalCrossentropyOptions{
            .from_logits = from_logits, .label_smoothing = label_smoothing, .reduction = reduction_of(reduction)});
      },
      "from_logits"_a = false, "label_smoothing"_a = 0.0f, "reduction"_a = "sum_over_batch_size");
  m.def(
      "BinaryCrossentropy",
      [](bool from_logits, float label_smoothing, const std::string& reduction) -> std::shared_ptr<losses::Loss> {
        return std::make_shared<losses::BinaryCrossentropy>(losses::BinaryCrossentropyOptions{
            .from_logits = from_logits, .label_smoothing = label_smoothing, .reduction = reduction_of(reduction)});
      },
      "from_logits"_a = false, "label_smoothing"_a = 0.0f, "reduction"_a = "sum_over_batch_size");
  m.def(
      "MeanSquaredError",
      [](const std::string& reduction) -> std::shared_ptr<losses::Loss> {
        return std::make_shared<losses::MeanSquaredError>(
            losses::MeanSquaredErrorOptions{.reduction = reduction_of(reduction)});
      },
      "reduction"_a = "sum_over_batch_size");
  m.def(
      "MeanAbsoluteError",
      [](const std::string& reduction) -> std::shared_ptr<losses::Loss> {
        return std::make_shared<losses::MeanAbsoluteError>(
            losses::MeanAbsoluteErrorOptions{.reduction = reduction_of(reduction)});
      },
      "reduction"_a = "sum_over_batch_size");

  nb::class_<optim::Optimizer>(m, "Optimizer")
      .def_prop_ro("name", &optim::Optimizer::name)
      .def_prop_ro("learning_rate", &optim::Optimizer::learning_rate)
      .def_prop_ro("iterations", &optim::Optimizer::iterations)
      // Keras's apply_gradients(zip(grads, vars)): pairs of (gradient or None, Variable); a None gradient is skipped,
      // as Keras does. In a replica of strategy.run the gradients are all-reduced first (without the GIL).
      .def(
          "apply_gradients",
          [](optim::Optimizer& optimizer, nb::iterable grads_and_vars) {
            std::vector<std::pair<Tensor, Variable>> pairs;
            for (nb::handle item : grads_and_vars) {
              const nb::tuple pair = nb::cast<nb::tuple>(item);
              STRATA_CHECK(pair.size() == 2, InvalidArgument,
                           "apply_gradients: expected (gradient, variable) pairs, got a tuple of " << pair.size());
              STRATA_CHECK(nb::isinstance<Variable>(pair[1]), InvalidArgument,
                           "apply_gradients: the second of each pair must be a strata.Variable (a weight), got "
                               << nb::cast<std::string>(nb::str(nb::handle(pair[1]).type())));
              Tensor grad;
              if (!nb::handle(pair[0]).is_none()) grad = variable_from(pair[0], "apply_gradients gradient").value();
              pairs.emplace_back(std::move(grad), nb::cast<Variable>(pair[1]));
            }
            nb::gil_scoped_release released;
            optimizer.apply_gradients(pairs);
          },
          "grads_and_vars"_a);
  // An optimizer through the registry, as the job file makes one: `name` ("adam", "sgd", ...), the learning rate
  // (None: the optimizer's default), its own hyperparameters by Keras's names, and the shared clipping options.
  m.def(
      "make_optimizer",
      [](const std::string& name, std::optional<double> learning_rate, std::map<std::string, double> hyperparameters,
         std::optional<float> clipnorm, std::optional<float> clipvalue, std::optional<float> global_clipnorm,
         std::optional<float> weight_decay) {
        optim::OptimizerConfig config = optim::default_config(name);
        if (learning_rate) config.learning_rate = *learning_rate;
        for (const auto& [key, value] : hyperparameters) config.hyperparameters[key] = value;
        config.clipnorm = clipnorm;
        config.clipvalue = clipvalue;
        config.global_clipnorm = global_clipnorm;
        if (weight_decay) config.weight_decay = weight_decay;
        return optim::from_config(config);
      },
      "name"_a, "learning_rate"_a = nb::none(), "hyperparameters"_a = std::map<std::string, double>{},
      "clipnorm"_a = nb::none(), "clipvalue"_a = nb::none(), "global_clipnorm"_a = nb::none(),
      "weight_decay"_a = nb::none());
}

}  // namespace strata::python
