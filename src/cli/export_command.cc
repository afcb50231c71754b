// `strata export JOB --checkpoint D -o OUT`: a trained job's model, as a file that needs neither the job nor
// strata's checkpoints to run (see strata/train/saved_model.h). The format follows OUT's extension: .safetensors is a
// saved model (architecture, the job's input scaling as a first Rescaling layer, weights); .onnx is the same model as
// an ONNX file (strata/train/onnx_export.h) for onnxruntime and other ONNX runtimes. Every checkpoint
// `strata train` writes exports: one device, mirrored, multi-worker, pipeline (a ckpt-N of the whole model) and
// parameter server (the shards reassembled), read as `strata evaluate` reads them (checkpoint_loading.h).
//
// Thread-safety: registration runs once in main; the command runs on the main thread.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/checkpoint_loading.h"
#include "cli/commands.h"
#include "cli/job.h"
#include "cli/output_paths.h"
#include "strata/error.h"
#include "strata/nn/preprocessing.h"
#include "strata/train/onnx_export.h"
#include "strata/train/saved_model.h"

namespace strata::cli {

namespace {

struct ExportArgs {
  std::string job;
  std::string checkpoint;
  std::string output;
};

// ".safetensors" of "model.safetensors"; "" when the name has none.
std::string extension_of(const std::string& path) { return std::filesystem::path(path).extension().string(); }

// The formats `-o` may name, checked before any work.
void check_export_format(const std::string& output) {
  const std::string ext = extension_of(output);
  STRATA_CHECK(ext == ".safetensors" || ext == ".onnx", InvalidArgument,
               "-o " << output << ": unknown model format '" << (ext.empty() ? "(no extension)" : ext)
                     << "'; supported: .safetensors (a saved model: architecture and weights) and .onnx (ONNX, opset "
                     << kOnnxOpset << ")");
}

// The job's model with the checkpoint's weights, behind a Rescaling of the job's input scaling when the job scales
// uint8 pixels (not for float32 arrays or int64 ids): what the job's evaluate computes from raw inputs.
void run_export(const ExportArgs& args) {
  check_export_format(args.output);
  check_output_file(args.output, "-o");
  Job job = load_job(args.job);
  std::shared_ptr<Sequential> trained = build_model(job);
  compile_model(job, *trained);
  trained->build_for(input_shape(job));
  load_job_checkpoint(*trained, args.checkpoint);

  // uint8 pixels are scaled as the job scales them; float32 values and int64 ids go in as they are.
  const DType input_dtype = cli::input_dtype(job);
  auto exported = std::make_shared<Sequential>();
  if (input_dtype == DType::kUInt8) exported->add(nn::Rescaling(static_cast<float>(job.data.scale)));
  for (const auto& layer : trained->layers()) exported->add(layer->clone());  // shares the trained weights
  exported->compile(trained->loss(), trained->optimizer());                   // the loss is recorded
  exported->build_for(input_shape(job), input_dtype);
  if (extension_of(args.output) == ".onnx") {
    save_onnx(*exported, args.output, {.input_dtype = input_dtype});
  } else {
    save_model(*exported, args.output, {.input_dtype = input_dtype});
  }

  Shape example = input_shape(job);
  example.erase(example.begin());
  std::printf("exported %s: %zu layers, %lld parameters, input %s %s -> output %s\n", args.output.c_str(),
              exported->layers().size(), static_cast<long long>(exported->count_params()),
              shape_str(example).c_str(), dtype_name(input_dtype), shape_str(exported->output_shape()).c_str());
  std::fflush(stdout);
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a trained job's model to one file that runs without the job: -o MODEL.safetensors is a saved "
                "model (its architecture as Keras-style JSON in the metadata, the job's input scaling as a first "
                "Rescaling layer, the weights), which `strata predict` and load_model read; -o MODEL.onnx is the same "
                "model as ONNX (opset 17), for onnxruntime.");
  cmd->add_option("job", args->job, "job YAML file the model was trained with")->required()->check(CLI::ExistingFile);
  cmd->add_option("--checkpoint", args->checkpoint,
                  "a checkpoint directory (its latest ckpt-N; a parameter-server job's --checkpoint-dir, its shards "
                  "reassembled), one ckpt-N directory, or a .safetensors weights file")
      ->required();
  cmd->add_option("-o,--output", args->output,
                  "the file to write; its extension names the format: .safetensors or .onnx")
      ->required();
  cmd->callback([args] { run_export(*args); });
}

}  // namespace strata::cli
