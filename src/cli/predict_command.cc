// `strata predict MODEL INPUT -o OUT`: a saved model's outputs (logits or probabilities, as the model gives them)
// for every example of INPUT, written as float32 [N, ...] to OUT.npy or as CSV rows to OUT.csv. INPUT is IDX, .npy,
// CSV or TFRecord of tf.train.Example (cli/predict_inputs.h reads them). An example of another shape than the
// model's input is an error naming both shapes; IDX's missing channel axis ([N, 28, 28] for a model of [28, 28, 1])
// is added, as the job's IDX reader adds it.
//
// Thread-safety: registration runs once in main; the command runs on the main thread.
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/predict_inputs.h"
#include "io/atomic_file.h"
#include "strata/data/dataset.h"
#include "strata/error.h"
#include "strata/gradient_tape.h"
#include "strata/io/npy.h"
#include "strata/ops.h"
#include "strata/train/callbacks.h"
#include "strata/train/saved_model.h"

namespace strata::cli {

namespace {

struct PredictArgs {
  std::string model;
  std::string input;
  std::string output;
  std::string x_feature;  // TFRecord: the Example feature holding the input ("": the one that fits)
  int64_t batch_size = 32;
  int verbose = 1;
};

std::string extension_of(const std::string& path) { return std::filesystem::path(path).extension().string(); }

// `x` with the model's example shape (IDX's channel axis added), or an InvalidArgument naming both shapes.
Tensor fit_to_model(const Tensor& x, const std::string& path, const SavedModelInfo& model) {
  STRATA_CHECK(x.rank() >= 1 && x.dim(0) > 0, InvalidArgument,
               "input '" << path << "' holds no examples (shape " << x.shape_str() << ")");
  const Shape example(x.shape().begin() + 1, x.shape().end());
  Shape with_channel = example;
  with_channel.push_back(1);
  Shape batch = model.input_shape;
  batch.insert(batch.begin(), x.dim(0));
  if (example == model.input_shape) return x;
  if (with_channel == model.input_shape) return x.reshape(batch);
  STRATA_THROW(ShapeError, "input '" << path << "' holds examples of shape " << shape_str(example) << " ("
                                     << x.dim(0) << " of them, " << dtype_name(x.dtype())
                                     << "), but the model takes examples of shape " << shape_str(model.input_shape)
                                     << " (" << dtype_name(model.input_dtype) << ")");
}

// Integer inputs for a model of float32 inputs are converted (Keras casts them); float inputs cannot be ids.
Tensor fit_dtype(const Tensor& x, const std::string& path, const SavedModelInfo& model) {
  if (x.dtype() == model.input_dtype) return x;
  if (model.input_dtype == DType::kInt64) {
    STRATA_CHECK(x.dtype() != DType::kFloat32, InvalidArgument,
                 "input '" << path << "' holds float32 values, but the model takes int64 ids");
    return x.to(DType::kInt64);
  }
  if (model.input_dtype == DType::kFloat32) return x.to(DType::kFloat32);
  return x;  // a uint8 model (a Rescaling first) takes any number
}

void write_csv(const std::string& path, const Tensor& outputs) {
  const int64_t rows = outputs.dim(0), cols = outputs.numel() / std::max<int64_t>(rows, 1);
  const float* p = outputs.data<float>();
  std::string text;
  for (int64_t c = 0; c < cols; ++c) text += (c ? ",output_" : "output_") + std::to_string(c);
  text += '\n';
  char buf[32];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::snprintf(buf, sizeof buf, "%s%.9g", c ? "," : "", static_cast<double>(p[r * cols + c]));
      text += buf;
    }
    text += '\n';
  }
  io::detail::write_file_atomically(path, text);
}

void run_predict(const PredictArgs& args) {
  const std::string out_ext = extension_of(args.output);
  STRATA_CHECK(out_ext == ".npy" || out_ext == ".csv", InvalidArgument,
               "-o " << args.output << ": unknown output format '" << (out_ext.empty() ? "(no extension)" : out_ext)
                     << "'; supported: .npy (float32 [N, ...]) and .csv (a row per example)");
  check_output_file(args.output, "-o");
  SavedModelInfo info;
  std::shared_ptr<Sequential> model = load_model(args.model, &info);
  const Tensor x = fit_dtype(fit_to_model(read_predict_input(args.input, info, args.x_feature), args.input, info), args.input, info);

  const data::Dataset batches = data::Dataset::from_tensor_slices({x}).batch(args.batch_size);
  const int64_t steps = (x.dim(0) + args.batch_size - 1) / args.batch_size;
  callbacks::ProgressBar progress({.verbose = args.verbose});
  progress.set_mode_evaluate(true);
  progress.set_steps(steps);
  if (args.verbose > 0) progress.on_test_begin({});
  NoGradGuard no_grad;
  std::vector<Variable> outputs;
  int64_t step = 0;
  for (data::Iterator it = batches.make_iterator(); std::optional<data::Element> batch = it.next(); ++step) {
    outputs.push_back(Variable((*model)(Variable((*batch)[0]), /*training=*/false).value()));
    if (args.verbose > 0) progress.on_test_batch_end(step, {});
  }
  if (args.verbose > 0) progress.on_test_end({});
  Tensor predictions = outputs.size() == 1 ? outputs[0].value() : concat(outputs, 0).value();
  if (predictions.dtype() != DType::kFloat32) predictions = predictions.to(DType::kFloat32);
  if (out_ext == ".npy") {
    io::write_npy(args.output, predictions);
  } else {
    write_csv(args.output, predictions);
  }
  std::printf("predicted %lld %s: %s float32 %s to %s\n", static_cast<long long>(predictions.dim(0)),
              predictions.dim(0) == 1 ? "example" : "examples",
              info.from_logits ? "logits" : "outputs", predictions.shape_str().c_str(), args.output.c_str());
  std::fflush(stdout);
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto args = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand(
      "predict", "Run a saved model (from `strata export`) on every example of INPUT and write its outputs "
                 "(logits or probabilities, as the model gives them) to -o OUT.npy (float32 [N, ...]) or OUT.csv.");
  cmd->add_option("model", args->model, "a saved model file (MODEL.safetensors)")->required()->check(CLI::ExistingFile);
  cmd->add_option("input", args->input,
                  "the examples: a .npy array [N, ...] (float32, uint8, int32 or int64), a CSV file (a row per "
                  "example; a header's 'label' column is left out), TFRecord of tf.train.Example (.tfrecord[.gz]) or "
                  "an IDX file (t10k-images-idx3-ubyte[.gz])")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", args->output, "where to write the outputs: OUT.npy or OUT.csv")->required();
  cmd->add_option("--x", args->x_feature,
                  "TFRecord input: the Example feature holding the model's input (default: the one feature of one "
                  "example's size)");
  cmd->add_option("--batch-size", args->batch_size, "examples per batch (default 32)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--verbose", args->verbose, "0 silent, 1 a progress bar (a line when not a terminal)")
      ->check(CLI::Range(0, 1));
  cmd->callback([args] { run_predict(*args); });
}

}  // namespace strata::cli
