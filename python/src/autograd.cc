// Custom training loops from Python, as TensorFlow writes them: strata.Variable (a strata::Variable: model weights,
// the results of calling a model or a loss, gradients) with .numpy() and numpy's __array__, strata.GradientTape over
// strata::GradientTape, a model called on arrays (Layer::operator()), and tf.nn's compute_average_loss /
// scale_regularization_loss. Every computation is the C++ core's; the binding converts and releases the GIL.
// Thread-safety: a GradientTape records the ops of the thread that entered it (as in C++: one per replica) and is
// dropped on that thread (a step function's local, as TF writes it; one dropped elsewhere is leaked rather than
// unlinked from another thread's tapes). Variables follow strata::Variable's rules. Every call that computes releases
// the GIL, so the replicas of strategy.run (threads that take the GIL to run Python) never wait on each other through
// it while one of them is inside a collective (apply_gradients' all-reduce).
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.h"
#include "bindings.h"
#include "strata/distribute/strategy.h"
#include "strata/error.h"
#include "strata/gradient_tape.h"
#include "strata/nn/layer.h"
#include "strata/ops.h"
#include "strata/variable.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace strata::python {

Variable variable_from(nb::handle value, const char* what) {
  if (nb::isinstance<Variable>(value)) return nb::cast<Variable>(value);
  if (PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr())) {
    return Variable(Tensor::scalar(static_cast<float>(nb::cast<double>(value))));
  }
  return Variable(tensor_from_values(value, what));
}

namespace {

// A tape entered by `with strata.GradientTape() as tape:`; recording stops at the block's end (__exit__), and
// gradient() may be called after it, as in TF.
class PyTape {
 public:
  PyTape(bool persistent, bool watch_accessed_variables)
      : options_{.persistent = persistent, .watch_accessed_variables = watch_accessed_variables} {}
  ~PyTape() {
    pause_.reset();
    // A tape is linked into its thread's list of tapes; unlinking it from another thread would corrupt both lists.
    if (tape_ && owner_ != std::this_thread::get_id()) (void)tape_.release();
  }

  PyTape& enter() {
    STRATA_CHECK(!tape_, InvalidArgument, "GradientTape: a tape is entered once (make a new one for each step)");
    tape_ = std::make_unique<GradientTape>(options_);
    owner_ = std::this_thread::get_id();
    return *this;
  }
  void exit() {
    if (tape_ && !pause_) pause_.emplace(*tape_);
  }
  void watch(const Variable& v) { tape().watch(v); }

  // One entry per source: a Variable, or None where the target does not depend on it (unconnected "none").
  std::vector<std::optional<Variable>> gradient(const Variable& target, const std::vector<Variable>& sources,
                                                const std::string& unconnected) {
    STRATA_CHECK(unconnected == "none" || unconnected == "zero", InvalidArgument,
                 "GradientTape.gradient: unconnected_gradients is 'none' or 'zero', got '" << unconnected << "'");
    std::vector<Tensor> grads;
    {
      nb::gil_scoped_release released;
      grads = tape().gradient(target, sources,
                              unconnected == "zero" ? UnconnectedGradients::kZero : UnconnectedGradients::kNone);
    }
    std::vector<std::optional<Variable>> out;
    for (Tensor& g : grads) {
      if (g.defined()) {
        out.emplace_back(Variable(std::move(g)));
      } else {
        out.emplace_back(std::nullopt);
      }
    }
    return out;
  }

 private:
  GradientTape& tape() {
    STRATA_CHECK(tape_ != nullptr, InvalidArgument,
                 "GradientTape: use it as `with strata.GradientTape() as tape:` before watch or gradient");
    STRATA_CHECK(owner_ == std::this_thread::get_id(), InvalidArgument,
                 "GradientTape: used on another thread than the one that entered it (one tape per replica)");
    return *tape_;
  }

  GradientTapeOptions options_;
  std::unique_ptr<GradientTape> tape_;
  std::optional<GradientTape::Pause> pause_;
  std::thread::id owner_;
};

nb::tuple shape_of(const Variable& v) {
  nb::list dims;
  for (int64_t d : v.shape()) dims.append(d);
  return nb::tuple(dims);
}

template <Variable (*Op)(const Variable&, const Variable&)>
Variable binary(const Variable& a, nb::handle b) {
  const Variable other = variable_from(b, "operand");
  nb::gil_scoped_release released;
  return Op(a, other);
}

template <Variable (*Op)(const Variable&, const Variable&)>
Variable reflected(const Variable& a, nb::handle b) {
  const Variable other = variable_from(b, "operand");
  nb::gil_scoped_release released;
  return Op(other, a);
}

}  // namespace

void define_autograd(nb::module_& m) {
  nb::class_<Variable>(m, "Variable")
      // tf.Variable(initial_value, trainable, name): made through the innermost creator, so inside a strategy's
      // scope it is mirrored over the replicas.
      .def(
          "__init__",
          [](Variable* self, nb::handle initial_value, bool trainable, std::string name) {
            const Tensor value = tensor_from_values(initial_value, "Variable initial_value").clone();
            new (self) Variable(make_variable(value, {.name = std::move(name), .trainable = trainable}));
          },
          "initial_value"_a, "trainable"_a = true, "name"_a = "")
      .def("numpy", [](const Variable& v) { return numpy_from_tensor(v.value().clone()); })
      .def(
          "__array__",
          [](const Variable& v, nb::handle dtype, nb::handle copy) {
            (void)copy;
            nb::object array = numpy_from_tensor(v.value().clone());
            return dtype.is_none() ? array : array.attr("astype")(dtype);
          },
          "dtype"_a = nb::none(), "copy"_a = nb::none())
      .def("__float__", [](const Variable& v) { return v.value().item<double>(); })
      .def("__len__", [](const Variable& v) {
        STRATA_CHECK(!v.shape().empty(), InvalidArgument, "len() of a scalar Variable");
        return v.shape()[0];
      })
      .def_prop_ro("shape", &shape_of)
      .def_prop_ro("dtype", [](const Variable& v) { return std::string(dtype_name(v.dtype())); })
      .def_prop_ro("name", &Variable::name)
      .def_prop_ro("trainable", &Variable::trainable)
      .def("assign",
           [](Variable& v, nb::handle value) {
             const Tensor t = variable_from(value, "assign value").value();
             nb::gil_scoped_release released;
             v.assign(t);
           })
      .def("assign_add",
           [](Variable& v, nb::handle value) {
             const Tensor t = variable_from(value, "assign_add value").value();
             nb::gil_scoped_release released;
             v.assign_add(t);
           })
      .def("assign_sub",
           [](Variable& v, nb::handle value) {
             const Tensor t = variable_from(value, "assign_sub value").value();
             nb::gil_scoped_release released;
             v.assign_sub(t);
           })
      .def("__add__", &binary<&add>)
      .def("__radd__", &reflected<&add>)
      .def("__sub__", &binary<&sub>)
      .def("__rsub__", &reflected<&sub>)
      .def("__mul__", &binary<&mul>)
      .def("__rmul__", &reflected<&mul>)
      .def("__truediv__", &binary<&div>)
      .def("__rtruediv__", &reflected<&div>)
      .def("__repr__", [](const Variable& v) {
        return "<strata.Variable '" + v.name() + "' " + v.value().str() + ">";
      });

  nb::class_<PyTape>(m, "GradientTape")
      .def(nb::init<bool, bool>(), "persistent"_a = false, "watch_accessed_variables"_a = true)
      .def("__enter__", &PyTape::enter, nb::rv_policy::reference)
      .def("__exit__", [](PyTape& t, nb::args) { t.exit(); })
      .def("watch", &PyTape::watch, "variable"_a)
      .def("gradient", &PyTape::gradient, "target"_a, "sources"_a, "unconnected_gradients"_a = "none");

  // A layer or model called on arrays or Variables (Keras's eager call): its output Variable, recorded by any tape
  // of this thread.
  m.def(
      "call_layer",
      [](nn::Layer& layer, nb::handle inputs, bool training) {
        const Variable x = variable_from(inputs, "model input");
        nb::gil_scoped_release released;
        return layer(x, training);
      },
      "layer"_a, "inputs"_a, "training"_a = false);
  m.def(
      "trainable_variables", [](const nn::Layer& layer) { return layer.trainable_variables(); }, "layer"_a);
  m.def(
      "non_trainable_variables", [](const nn::Layer& layer) { return layer.non_trainable_variables(); }, "layer"_a);

  // tf.nn.compute_average_loss and tf.nn.scale_regularization_loss (distribute::).
  m.def(
      "compute_average_loss",
      [](nb::handle per_example_loss, std::optional<int64_t> global_batch_size, nb::handle sample_weight) {
        const Variable losses = variable_from(per_example_loss, "compute_average_loss per_example_loss");
        const Tensor weights =
            sample_weight.is_none() ? Tensor() : tensor_from_values(sample_weight, "compute_average_loss sample_weight");
        nb::gil_scoped_release released;
        return distribute::compute_average_loss(losses, global_batch_size.value_or(0), weights);
      },
      "per_example_loss"_a, "global_batch_size"_a = nb::none(), "sample_weight"_a = nb::none());
  m.def(
      "scale_regularization_loss",
      [](nb::handle loss) {
        const Variable value = variable_from(loss, "scale_regularization_loss");
        nb::gil_scoped_release released;
        return distribute::scale_regularization_loss(value);
      },
      "regularization_loss"_a);
}

}  // namespace strata::python
