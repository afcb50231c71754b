// Loading and checking job YAML files, and building the model, optimizer and datasets they describe
// (see job.h). Every value is checked where it is read (Section, job_section.h): its type, its range, the names it
// refers to (layers, activations, losses, metrics, optimizers), and that no mapping repeats a key.
//
// Thread-safety: free functions of their arguments; no shared state.
#include "cli/job.h"
#include "cli/job_section.h"

#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "strata/error.h"
#include "strata/data/convert.h"
#include "strata/data/autoshard.h"
#include "strata/data/image_folder.h"
#include "strata/data/tfrecord_dataset.h"
#include "strata/io/npy.h"
#include "strata/io/npz.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/metrics.h"
#include "strata/optim/optimizers.h"

namespace strata::cli {

namespace fs = std::filesystem;

namespace {

using detail::check_unique_keys;
using detail::kFraction;
using detail::kNonNegative;
using detail::kPositive;
using detail::kUnit;
using detail::Range;
using detail::Section;
using detail::without_location;


std::vector<std::string> expand_globs(const std::vector<std::string>& patterns, const std::string& where) {
  std::vector<std::string> files;
  for (const auto& pattern : patterns) {
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
    STRATA_CHECK(rc == 0, IoError, where << "no file matches '" << pattern << "'");
  }
  return files;
}

// "MaxPooling2D", "max_pool2d", "maxpooling2d" -> one canonical snake name.
std::string canonical_layer_type(const std::string& type) {
  std::string t = nn::to_snake_case(type);
  if (t == "max_pool2d" || t == "maxpooling2d" || t == "max_pool_2d") return "max_pooling2d";
  if (t == "avg_pool2d" || t == "average_pool2d" || t == "averagepooling2d") return "average_pooling2d";
  if (t == "global_avg_pool2d" || t == "global_average_pool2d") return "global_average_pooling2d";
  if (t == "batch_norm" || t == "batchnormalization") return "batch_normalization";
  if (t == "layer_norm" || t == "layernormalization") return "layer_normalization";
  if (t == "global_avg_pool1d" || t == "global_average_pool1d") return "global_average_pooling1d";
  if (t == "mha" || t == "multihead_attention") return "multi_head_attention";
  if (t == "transformer_encoder_block") return "transformer_encoder";
  if (t == "convolution1d" || t == "conv_1d") return "conv1d";
  return t;
}

nn::RegularizerSpec regularizer_spec(const std::string& name) { return nn::RegularizerSpec(name); }

nn::Size2 size2(Section& s, const std::string& key, nn::Size2 fallback) {
  std::vector<int64_t> v = s.integers(key, {fallback.h, fallback.w});
  STRATA_CHECK(v.size() == 1 || v.size() == 2, InvalidArgument,
               s.where(s.get(key)) << s.key_path(key) << ": expected one integer or [height, width]");
  for (int64_t x : v) {
    STRATA_CHECK(x > 0 && x <= std::numeric_limits<int>::max(), InvalidArgument,
                 s.where(s.get(key)) << s.key_path(key) << ": must be positive, got " << x);
  }
  return v.size() == 1 ? nn::Size2(static_cast<int>(v[0])) : nn::Size2(static_cast<int>(v[0]), static_cast<int>(v[1]));
}

// A 1-D size: one integer or a list of one, as Keras's Conv1D takes them.
int size1(Section& s, const std::string& key, int fallback) {
  std::vector<int64_t> v = s.integers(key, {fallback});
  STRATA_CHECK(v.size() == 1, InvalidArgument, s.where(s.get(key)) << s.key_path(key) << ": expected one integer");
  STRATA_CHECK(v[0] > 0 && v[0] <= std::numeric_limits<int>::max(), InvalidArgument,
               s.where(s.get(key)) << s.key_path(key) << ": must be positive, got " << v[0]);
  return static_cast<int>(v[0]);
}

// The keys LSTM and GRU share (Keras's names and defaults). Keras's return_state has no place in a
// layer list (a layer passes one output on), so it is an unknown key here.
template <class RecurrentOptions>
void read_recurrent_keys(Section& s, RecurrentOptions& o) {
  o.activation = s.named("activation", "tanh", [](const std::string& v) { return nn::ActivationSpec(v); });
  o.recurrent_activation =
      s.named("recurrent_activation", "sigmoid", [](const std::string& v) { return nn::ActivationSpec(v); });
  o.use_bias = s.flag("use_bias", true);
  o.kernel_initializer =
      s.named("kernel_initializer", "glorot_uniform", [](const std::string& v) { return nn::InitializerSpec(v); });
  o.recurrent_initializer =
      s.named("recurrent_initializer", "orthogonal", [](const std::string& v) { return nn::InitializerSpec(v); });
  o.kernel_regularizer = s.named("kernel_regularizer", "", regularizer_spec);
  o.recurrent_regularizer = s.named("recurrent_regularizer", "", regularizer_spec);
  o.return_sequences = s.flag("return_sequences", false);
  o.go_backwards = s.flag("go_backwards", false);
}

// The keys Dense, Conv2D and Conv1D share (Keras's names and defaults): the activation, the bias, and the kernel's and
// bias's initializers and regularizers.
template <class KernelOptions>
void read_kernel_keys(Section& s, KernelOptions& o) {
  o.activation = s.named("activation", "linear", [](const std::string& v) { return nn::ActivationSpec(v); });
  o.use_bias = s.flag("use_bias", true);
  o.kernel_initializer =
      s.named("kernel_initializer", "glorot_uniform", [](const std::string& v) { return nn::InitializerSpec(v); });
  o.bias_initializer = s.named("bias_initializer", "zeros", [](const std::string& v) { return nn::InitializerSpec(v); });
  o.kernel_regularizer = s.named("kernel_regularizer", "", regularizer_spec);
  o.bias_regularizer = s.named("bias_regularizer", "", regularizer_spec);
}

// Reads the layer's keys from `s` and returns what makes the layer; the caller checks the keys (finish)
// before calling it, so a layer constructor never sees a value the job file got wrong. Null: unknown type.
using LayerFactory = std::function<std::shared_ptr<nn::Layer>()>;
LayerFactory make_layer(const std::string& type, Section& s) {
  const std::string name = s.string("name");
  LayerFactory layer;
  if (type == "dense") {
    nn::DenseOptions o;
    const int64_t units = s.positive("units", 0);
    read_kernel_keys(s, o);
    o.name = name;
    layer = [=] { return std::make_shared<nn::Dense>(units, o); };
  } else if (type == "conv2d") {
    nn::Conv2D::Options o;
    const int64_t filters = s.positive("filters", 0);
    const nn::Size2 kernel = size2(s, "kernel_size", nn::Size2(0));
    o.strides = size2(s, "strides", 1);
    o.padding = s.named("padding", "valid", [](const std::string& v) { return nn::PaddingSpec(v); });
    read_kernel_keys(s, o);
    o.name = name;
    layer = [=] { return std::make_shared<nn::Conv2D>(filters, kernel, o); };
  } else if (type == "conv1d") {
    nn::Conv1D::Options o;
    const int64_t filters = s.positive("filters", 0);
    const int kernel = size1(s, "kernel_size", 0);
    o.strides = size1(s, "strides", 1);
    o.padding = s.named("padding", "valid", [](const std::string& v) { return nn::Conv1DPaddingSpec(v); });
    o.dilation_rate = size1(s, "dilation_rate", 1);
    read_kernel_keys(s, o);
    o.name = name;
    layer = [=] { return std::make_shared<nn::Conv1D>(filters, kernel, o); };
  } else if (type == "max_pooling2d" || type == "average_pooling2d") {
    nn::Pooling2DOptions o;
    const nn::Size2 pool = size2(s, "pool_size", 2);
    if (s.has("strides")) o.strides = size2(s, "strides", pool);
    o.padding = s.named("padding", "valid", [](const std::string& v) { return nn::PaddingSpec(v); });
    o.name = name;
    if (type == "max_pooling2d") {
      layer = [=] { return std::make_shared<nn::MaxPooling2D>(pool, o); };
    } else {
      layer = [=] { return std::make_shared<nn::AveragePooling2D>(pool, o); };
    }
  } else if (type == "global_average_pooling2d") {
    nn::GlobalPoolingOptions o;
    o.keepdims = s.flag("keepdims", false);
    o.name = name;
    layer = [=] { return std::make_shared<nn::GlobalAveragePooling2D>(o); };
  } else if (type == "global_average_pooling1d") {
    nn::GlobalPoolingOptions o;
    o.keepdims = s.flag("keepdims", false);
    o.name = name;
    layer = [=] { return std::make_shared<nn::GlobalAveragePooling1D>(o); };
  } else if (type == "flatten") {
    layer = [=] { return std::make_shared<nn::Flatten>(name); };
  } else if (type == "reshape") {
    const Shape target = s.integers("target_shape", {});
    layer = [=] { return std::make_shared<nn::Reshape>(target, name); };
  } else if (type == "dropout") {
    nn::DropoutOptions o;
    const double rate = s.number("rate", 0.5, kFraction);
    if (s.has("seed")) o.seed = s.seed("seed", 0);
    o.name = name;
    layer = [=] { return std::make_shared<nn::Dropout>(static_cast<float>(rate), o); };
  } else if (type == "batch_normalization") {
    nn::BatchNormalizationOptions o;
    o.momentum = static_cast<float>(s.number("momentum", 0.99, kUnit));
    o.epsilon = static_cast<float>(s.number("epsilon", 1e-3, kPositive));
    o.center = s.flag("center", true);
    o.scale = s.flag("scale", true);
    o.name = name;
    layer = [=] { return std::make_shared<nn::BatchNormalization>(o); };
  } else if (type == "layer_normalization") {
    nn::LayerNormalizationOptions o;
    o.axis = static_cast<int>(s.integer("axis", -1));
    o.epsilon = static_cast<float>(s.number("epsilon", 1e-3, kPositive));
    o.center = s.flag("center", true);
    o.scale = s.flag("scale", true);
    o.name = name;
    layer = [=] { return std::make_shared<nn::LayerNormalization>(o); };
  } else if (type == "multi_head_attention") {
    // Self-attention in a layer list: query = value = key = the previous layer's output.
    nn::MultiHeadAttentionOptions o;
    const int64_t num_heads = s.positive("num_heads", 0), key_dim = s.positive("key_dim", 0);
    o.value_dim = s.has("value_dim") ? s.positive("value_dim", 1) : 0;
    o.dropout = static_cast<float>(s.number("dropout", 0.0, kFraction));
    o.use_bias = s.flag("use_bias", true);
    o.output_shape = s.has("output_shape") ? s.positive("output_shape", 1) : 0;
    o.kernel_initializer =
        s.named("kernel_initializer", "glorot_uniform", [](const std::string& v) { return nn::InitializerSpec(v); });
    o.bias_initializer =
        s.named("bias_initializer", "zeros", [](const std::string& v) { return nn::InitializerSpec(v); });
    o.use_causal_mask = s.flag("use_causal_mask", false);
    o.name = name;
    layer = [=] { return std::make_shared<nn::MultiHeadAttention>(num_heads, key_dim, o); };
  } else if (type == "position_embedding") {
    nn::PositionEmbeddingOptions o;
    const int64_t sequence_length = s.positive("sequence_length", 0);
    o.initializer =
        s.named("initializer", "glorot_uniform", [](const std::string& v) { return nn::InitializerSpec(v); });
    o.name = name;
    layer = [=] { return std::make_shared<nn::PositionEmbedding>(sequence_length, o); };
  } else if (type == "transformer_encoder") {
    nn::TransformerEncoderOptions o;
    const int64_t intermediate_dim = s.positive("intermediate_dim", 0), num_heads = s.positive("num_heads", 0);
    o.dropout = static_cast<float>(s.number("dropout", 0.0, kFraction));
    o.activation = s.named("activation", "relu", [](const std::string& v) { return nn::ActivationSpec(v); });
    o.layer_norm_epsilon = static_cast<float>(s.number("layer_norm_epsilon", 1e-5, kPositive));
    o.kernel_initializer =
        s.named("kernel_initializer", "glorot_uniform", [](const std::string& v) { return nn::InitializerSpec(v); });
    o.bias_initializer =
        s.named("bias_initializer", "zeros", [](const std::string& v) { return nn::InitializerSpec(v); });
    o.normalize_first = s.flag("normalize_first", true);
    o.name = name;
    layer = [=] { return std::make_shared<nn::TransformerEncoder>(intermediate_dim, num_heads, o); };
  } else if (type == "activation") {
    s.required_string("activation");  // a missing one is reported by finish()
    const nn::ActivationSpec fn =
        s.named("activation", "linear", [](const std::string& v) { return nn::ActivationSpec(v); });
    layer = [=] { return std::make_shared<nn::Activation>(fn, name); };
  } else if (type == "lstm") {
    nn::LSTMOptions o;
    const int64_t units = s.positive("units", 0);
    read_recurrent_keys(s, o);
    o.unit_forget_bias = s.flag("unit_forget_bias", true);
    o.name = name;
    layer = [=] { return std::make_shared<nn::LSTM>(units, o); };
  } else if (type == "gru") {
    nn::GRUOptions o;
    const int64_t units = s.positive("units", 0);
    read_recurrent_keys(s, o);
    o.reset_after = s.flag("reset_after", true);
    o.name = name;
    layer = [=] { return std::make_shared<nn::GRU>(units, o); };
  } else if (type == "embedding") {
    nn::EmbeddingOptions o;
    o.name = name;
    const int64_t input_dim = s.positive("input_dim", 0), output_dim = s.positive("output_dim", 0);
    layer = [=] { return std::make_shared<nn::Embedding>(input_dim, output_dim, o); };
  } else {
    return nullptr;
  }
  return layer;
}

// optimizer.schedule (see LrScheduleSpec); make_optimizer reads the rest of the optimizer section.
LrScheduleSpec read_schedule(const Job& job) {
  LrScheduleSpec spec;
  if (!job.optimizer.IsMap() || !job.optimizer["schedule"]) return spec;
  const YAML::Node node = job.optimizer["schedule"];
  Section s(node, "optimizer.schedule", job.file);
  spec.name = s.required_string("name");
  spec.warmup_epochs = s.number("warmup_epochs", 0, kNonNegative);
  spec.alpha = s.number("alpha", 0, kUnit);
  s.finish();  // a missing name first
  STRATA_CHECK(spec.name == "cosine_decay", InvalidArgument,
               s.where(s.get("name")) << "optimizer.schedule.name: unknown schedule '" << spec.name
                                      << "'; known: cosine_decay");
  STRATA_CHECK(spec.warmup_epochs < static_cast<double>(job.epochs), InvalidArgument,
               s.where(s.get("warmup_epochs")) << "optimizer.schedule.warmup_epochs: " << spec.warmup_epochs
                                               << " leaves nothing of the job's " << job.epochs
                                               << " epochs to decay over");
  STRATA_CHECK(job.lr_scaling.warmup_epochs == 0, InvalidArgument,
               s.where(node) << "optimizer.schedule: give the warmup here (warmup_epochs), not also lr_scaling's "
                                "warmup_epochs");
  return spec;
}

// A YAML node on one line (flow style), so that two tasks' values compare as text.
std::string one_line(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

}  // namespace

Job load_job(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    STRATA_THROW(IoError, "cannot read job file '" << path << "'");
  } catch (const YAML::Exception& e) {
    STRATA_THROW(InvalidArgument, path << ":" << e.mark.line + 1 << ": not valid YAML: " << e.msg);
  }
  check_unique_keys(root, path, "");
  Job job;
  job.file = path;
  Section top(root, "", path);
  job.epochs = top.positive("epochs", 1);
  job.batch_size = top.positive("batch_size", 32);
  job.steps_per_execution = top.positive("steps_per_execution", 1);
  job.seed = top.seed("seed", 0);
  job.checkpoint_dir = top.string("checkpoint_dir");
  job.metrics = top.strings("metrics");
  for (size_t i = 0; i < job.metrics.size(); ++i) {  // compile() would name neither the file nor the line
    const YAML::Node list = top.get("metrics");
    const YAML::Node item = list.IsSequence() ? list[i] : list;
    try {
      metrics::get(job.metrics[i]);
    } catch (const InvalidArgument& e) {
      STRATA_THROW(InvalidArgument, top.where(item) << "metrics[" << i << "]: " << without_location(e.what()));
    }
  }

  // Distribution (see distribution.h): checked here so a bad value names the file and line.
  job.strategy.name = top.string("strategy", "one_device");
  check_strategy_name(job.strategy.name, top.where(top.get("strategy")) + "strategy");
  job.strategy.device = top.string("device", "cpu");
  check_device_name(job.strategy.device, top.where(top.get("device")) + "device");
  check_strategy_device(job.strategy.device, job.strategy.name, top.where(top.get("device")) + "device: ");
  if (top.has("replicas")) job.strategy.replicas = static_cast<int>(top.positive("replicas", 1));
  STRATA_CHECK(job.strategy.name != "one_device" || job.strategy.replicas <= 1, InvalidArgument,
               top.where(top.get("replicas")) << "replicas: " << job.strategy.replicas
                                              << " needs strategy: mirrored or central_storage (one_device has one)");
  for (const char* key : {"stages", "micro_batches", "schedule", "chunks", "recompute"}) {
    STRATA_CHECK(!top.has(key) || job.strategy.name == "pipeline", InvalidArgument,
                 top.where(top.get(key)) << key << ": only strategy: pipeline cuts the model into stages (this job's "
                                                   "strategy is "
                                         << job.strategy.name << ")");
  }
  job.strategy.pipeline_stages = static_cast<int>(top.positive("stages", job.strategy.pipeline_stages));
  job.strategy.pipeline_micro_batches =
      static_cast<int>(top.positive("micro_batches", job.strategy.pipeline_micro_batches));
  job.strategy.pipeline_schedule = top.string("schedule", job.strategy.pipeline_schedule);
  check_pipeline_schedule(job.strategy.pipeline_schedule, top.where(top.get("schedule")) + "schedule");
  if (top.has("chunks")) job.strategy.pipeline_chunks = static_cast<int>(top.positive("chunks", 2));
  job.strategy.pipeline_recompute = top.flag("recompute", false);
  STRATA_CHECK(!top.has("tp") || job.strategy.name == "tensor_parallel", InvalidArgument,
               top.where(top.get("tp")) << "tp: only strategy: tensor_parallel splits layers over ranks (this job's "
                                           "strategy is "
                                        << job.strategy.name << ")");
  job.strategy.tensor_parallel = static_cast<int>(top.positive("tp", job.strategy.tensor_parallel));
  for (const char* key : {"sync_every", "outer_step"}) {
    STRATA_CHECK(!top.has(key) || job.strategy.name == "local_sgd", InvalidArgument,
                 top.where(top.get(key)) << key << ": only strategy: local_sgd averages weights between local steps "
                                                   "(this job's strategy is "
                                         << job.strategy.name << ")");
  }
  job.strategy.sync_every = static_cast<int>(top.positive("sync_every", job.strategy.sync_every));
  job.strategy.outer_step = top.string("outer_step", job.strategy.outer_step);
  check_outer_step(job.strategy.outer_step, top.where(top.get("outer_step")) + "outer_step");
  job.strategy.cross_device_ops = top.string("cross_device_ops", distribute::kDefaultCrossDeviceOps);
  check_cross_device_ops(job.strategy.cross_device_ops, top.where(top.get("cross_device_ops")) + "cross_device_ops");
  STRATA_CHECK(!top.has("cross_device_ops") || job.strategy.name == "mirrored", InvalidArgument,
               top.where(top.get("cross_device_ops")) << "cross_device_ops: only strategy: mirrored all-reduces "
                                                         "gradients (this job's strategy is "
                                                      << job.strategy.name << ")");
  job.lr_scaling.rule = top.string("lr_scaling", "none");
  check_lr_scaling(job.lr_scaling.rule, top.where(top.get("lr_scaling")) + "lr_scaling");
  job.lr_scaling.base_batch_size = top.positive("base_batch_size", 64);
  job.lr_scaling.warmup_epochs = top.number("warmup_epochs", 0, kNonNegative);
  STRATA_CHECK(job.lr_scaling.warmup_epochs == 0 || job.lr_scaling.rule == "linear", InvalidArgument,
               top.where(top.get("warmup_epochs"))
                   << "warmup_epochs: needs lr_scaling: linear (the warmup ramps from the optimizer's "
                      "learning_rate to the scaled one)");
  STRATA_CHECK(!top.has("base_batch_size") || job.lr_scaling.rule == "linear", InvalidArgument,
               top.where(top.get("base_batch_size")) << "base_batch_size: needs lr_scaling: linear");

  Section data(top.get("data"), "data", path);
  STRATA_CHECK(top.has("data"), InvalidArgument, path << ": the job needs a 'data' section");
  DataSpec& d = job.data;
  d.format = data.string("format", "idx");
  if (d.format == "idx") {
    d.directory = data.required_string("directory");
  } else if (d.format == "tfrecord") {
    d.train_files = data.strings("train");
    d.test_files = data.strings("test");
    STRATA_CHECK(!d.train_files.empty() && !d.test_files.empty(), InvalidArgument,
                 data.where(data.get("format")) << "data.train and data.test: list the TFRecord files (globs allowed)");
    d.compression = data.string("compression", "");
    try {
      data::parse_compression(d.compression);
    } catch (const InvalidArgument&) {
      STRATA_THROW(InvalidArgument, data.where(data.get("compression")) << "data.compression: expected none, gzip or zlib, got '"
                                                                        << d.compression << "'");
    }
    d.x_feature = data.string("x", "image");
    d.y_feature = data.string("y", "label");
    d.x_dtype = data.string("x_dtype", "uint8");
    STRATA_CHECK(d.x_dtype == "uint8" || d.x_dtype == "int64", InvalidArgument,
                 data.where(data.get("x_dtype")) << "data.x_dtype: expected uint8 (raw image bytes) or int64 (an int64 "
                                                    "list, e.g. ids for an embedding), got '"
                                                 << d.x_dtype << "'");
    STRATA_CHECK(!(data.has("image_shape") && data.has("x_shape")), InvalidArgument,
                 data.where(data.get("x_shape")) << "data.x_shape: give image_shape or x_shape, not both");
    const std::string shape_key = data.has("x_shape") ? "x_shape" : "image_shape";
    d.image_shape = data.integers(shape_key, {28, 28, 1});
    STRATA_CHECK(d.x_dtype == "uint8" || data.has(shape_key), InvalidArgument,
                 data.where(data.get("x_dtype")) << "data.x_shape: x_dtype " << d.x_dtype
                                                 << " needs the shape of x (e.g. x_shape: [26] for 26 ids)");
    for (int64_t dim : d.image_shape) {
      STRATA_CHECK(dim > 0, InvalidArgument,
                   data.where(data.get(shape_key)) << "data." << shape_key << ": dimensions must be positive, got "
                                                   << dim);
    }
    STRATA_CHECK(d.x_dtype == "uint8" || !data.has("scale"), InvalidArgument,
                 data.where(data.get("scale")) << "data.scale: scales uint8 pixels; x_dtype " << d.x_dtype
                                               << " is used as it is");
  } else if (d.format == "npy") {
    d.x_array = data.required_string("x");
    d.y_array = data.required_string("y");
    d.test_x_array = data.required_string("test_x");
    d.test_y_array = data.required_string("test_y");
  } else if (d.format == "npz") {
    d.file = data.required_string("file");
    d.x_array = data.string("x", "x_train");
    d.y_array = data.string("y", "y_train");
    d.test_x_array = data.string("test_x", "x_test");
    d.test_y_array = data.string("test_y", "y_test");
  } else if (d.format == "image_folder") {
    d.train_files = {data.required_string("train")};
    d.test_files = {data.required_string("test")};
    const std::vector<int64_t> size = data.integers("image_size", {256, 256});
    STRATA_CHECK(size.size() == 2 && size[0] > 0 && size[1] > 0, InvalidArgument,
                 data.where(data.get("image_size")) << "data.image_size: expected [height, width], both positive");
    d.color_mode = data.string("color_mode", "rgb");
    STRATA_CHECK(d.color_mode == "rgb" || d.color_mode == "grayscale", InvalidArgument,
                 data.where(data.get("color_mode")) << "data.color_mode: expected rgb or grayscale, got '"
                                                    << d.color_mode << "'");
    d.image_shape = {size[0], size[1], data::channels_of(data::parse_color_mode(d.color_mode))};
  } else {
    STRATA_THROW(InvalidArgument, data.where(data.get("format"))
                                      << "data.format: expected idx, tfrecord, npy, npz or image_folder, got '"
                                      << d.format << "'");
  }
  d.scale = data.number("scale", 1.0 / 255.0, kPositive);
  d.shuffle = data.integer_at_least("shuffle", 10000, 0);
  if (data.has("seed")) d.seed = data.seed("seed", 0);
  const std::string auto_shard = data.string("auto_shard", "auto");
  try {
    d.auto_shard = data::parse_auto_shard_policy(auto_shard);
  } catch (const InvalidArgument&) {
    STRATA_THROW(InvalidArgument, data.where(data.get("auto_shard"))
                                      << "data.auto_shard: expected auto, file, data or off, got '" << auto_shard << "'");
  }
  data.finish();
  STRATA_CHECK(!(top.has("validation") && d.auto_shard == data::AutoShardPolicy::kFile), InvalidArgument,
               top.where(top.get("validation")) << "validation: needs data.auto_shard auto, data or off (a split is "
                                                   "of records, which workers cannot share out by file)");
  job.validation = read_validation(top, d.format);
  job.callbacks = read_callbacks(top, job.metrics, job.validation.enabled());
  if (top.has("validation")) job.validation_text = one_line(top.get("validation"));
  for (const char* key : {"early_stopping", "model_checkpoint", "reduce_lr_on_plateau"}) {
    if (top.has(key)) job.callbacks_text += std::string(key) + ": " + one_line(top.get(key)) + "; ";
  }

  // Checked before they are assigned: a missing key is an invalid node, which YAML::Node's assignment throws on.
  const YAML::Node layers = top.get("model"), loss = top.get("loss"), optimizer = top.get("optimizer");
  STRATA_CHECK(layers && layers.IsSequence() && layers.size() > 0, InvalidArgument,
               path << ": 'model' must be a non-empty list of layers");
  STRATA_CHECK(loss, InvalidArgument, path << ": the job needs a 'loss'");
  STRATA_CHECK(optimizer, InvalidArgument, path << ": the job needs an 'optimizer'");
  job.model = layers;
  job.loss = loss;
  job.optimizer = optimizer;
  top.finish();
  job.schedule = read_schedule(job);

  // Build everything once now, so that every layer, loss and optimizer key is checked at load time.
  auto model = build_model(job);
  compile_model(job, *model);
  return job;
}

std::shared_ptr<Sequential> build_model(const Job& job) {
  auto model = std::make_shared<Sequential>();
  for (size_t i = 0; i < job.model.size(); ++i) {
    const YAML::Node item = job.model[i];
    const std::string where = "model[" + std::to_string(i) + "]";
    std::string type;
    YAML::Node args;
    if (item.IsScalar()) {
      type = item.as<std::string>();
    } else if (item.IsMap() && item.size() == 1) {
      const YAML::Node key = item.begin()->first;  // any node ("? [dense]: ..."); not a name: an unknown layer
      type = key.IsScalar() ? key.Scalar() : YAML::Dump(key);
      args = item.begin()->second;
    } else {
      Section probe(item, where, job.file);
      STRATA_THROW(InvalidArgument, probe.where(item) << where
                                                      << ": a layer is written `- dense: {units: 10}` or `- flatten`");
    }
    Section s(args, where + "." + type, job.file);
    LayerFactory factory = make_layer(canonical_layer_type(type), s);
    STRATA_CHECK(factory != nullptr, InvalidArgument,
                 s.where(item) << where << ": unknown layer type '" << type
                               << "'; known: dense, conv2d, conv1d, max_pooling2d, average_pooling2d, "
                                  "global_average_pooling2d, global_average_pooling1d, flatten, reshape, dropout, "
                                  "batch_normalization, layer_normalization, activation, embedding, lstm, gru, "
                                  "multi_head_attention, position_embedding, transformer_encoder");
    s.finish();
    try {
      model->add(factory());
    } catch (const InvalidArgument& e) {
      STRATA_THROW(InvalidArgument, s.where(item) << where << "." << type << ": " << e.what());
    }
  }
  return model;
}

void compile_model(const Job& job, Model& model, int64_t steps_per_epoch) {
  // loss: a name, or {name, from_logits, reduction}
  std::shared_ptr<losses::Loss> loss;
  if (job.loss.IsScalar()) {
    Section top(YAML::Node(), "", job.file);
    try {
      loss = losses::get(job.loss.as<std::string>());
    } catch (const InvalidArgument& e) {
      STRATA_THROW(InvalidArgument, top.where(job.loss) << "loss: " << without_location(e.what()));
    }
  } else {
    Section s(job.loss, "loss", job.file);
    const std::string name = s.required_string("name");
    const bool from_logits = s.flag("from_logits", false);
    const std::string canonical =
        s.named("name", "", [](const std::string& v) { return losses::get(v); })->name();
    if (canonical == "sparse_categorical_crossentropy") {
      loss = std::make_shared<losses::SparseCategoricalCrossentropy>(
          losses::SparseCategoricalCrossentropyOptions{.from_logits = from_logits});
    } else if (canonical == "categorical_crossentropy") {
      loss = std::make_shared<losses::CategoricalCrossentropy>(
          losses::CategoricalCrossentropyOptions{.from_logits = from_logits});
    } else if (canonical == "binary_crossentropy") {
      loss = std::make_shared<losses::BinaryCrossentropy>(losses::BinaryCrossentropyOptions{.from_logits = from_logits});
    } else {
      STRATA_CHECK(!from_logits, InvalidArgument, s.where(s.get("from_logits")) << "loss.from_logits: '" << name
                                                                                << "' takes no from_logits");
      loss = losses::get(name);
    }
    s.finish();
  }
  std::shared_ptr<optim::Optimizer> optimizer = make_optimizer(job);
  // lr_scaling: the configured (or the optimizer's default) rate is the base the global batch scales.
  optim::LearningRate lr =
      scaled_learning_rate(job.lr_scaling, optimizer->learning_rate(), job.batch_size, steps_per_epoch);
  if (!job.schedule.name.empty() && steps_per_epoch > 0) lr = scheduled_learning_rate(job, lr(0), steps_per_epoch);
  optimizer->set_learning_rate(lr);
  std::vector<MetricSpec> metrics(job.metrics.begin(), job.metrics.end());
  model.compile(loss, optimizer, metrics);
}

optim::LearningRate scheduled_learning_rate(const Job& job, float peak, int64_t steps_per_epoch) {
  const LrScheduleSpec& spec = job.schedule;
  const auto steps = static_cast<double>(steps_per_epoch);
  const auto warmup = static_cast<int64_t>(std::ceil(spec.warmup_epochs * steps - 1e-9));
  const int64_t decay = std::max<int64_t>(job.epochs * steps_per_epoch - warmup, 1);
  optim::Schedule schedule = optim::cosine_decay(peak, decay, static_cast<float>(spec.alpha));
  if (warmup > 0) schedule = optim::linear_warmup(std::move(schedule), warmup, 0.0f);
  return schedule;
}

std::shared_ptr<optim::Optimizer> make_optimizer(const Job& job) {
  // optimizer: a name, or {name, learning_rate, momentum, nesterov, beta_1, ...}
  std::shared_ptr<optim::Optimizer> optimizer;
  if (job.optimizer.IsScalar()) {
    Section top(YAML::Node(), "", job.file);
    try {
      optimizer = optim::get(job.optimizer.as<std::string>());
    } catch (const InvalidArgument& e) {
      STRATA_THROW(InvalidArgument, top.where(job.optimizer) << "optimizer: " << without_location(e.what()));
    }
  } else {
    Section s(job.optimizer, "optimizer", job.file);
    std::string name = s.required_string("name");
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    optim::OptimizerConfig common;
    // Each optimizer's own default rate when the key is absent; a present one must be usable.
    const bool has_lr = s.has("learning_rate");
    const double lr = s.number("learning_rate", 0, kPositive);
    s.get("schedule");  // read by read_schedule at load time
    if (s.has("clipnorm")) common.clipnorm = static_cast<float>(s.number("clipnorm", 0, kPositive));
    if (s.has("clipvalue")) common.clipvalue = static_cast<float>(s.number("clipvalue", 0, kPositive));
    if (s.has("global_clipnorm")) {
      common.global_clipnorm = static_cast<float>(s.number("global_clipnorm", 0, kPositive));
    }
    if (name != "sgd" && name != "adam" && name != "adamw" && name != "rmsprop" && name != "adagrad") {
      STRATA_THROW(InvalidArgument, s.where(s.get("name")) << "optimizer.name: unknown optimizer '" << name
                                                           << "'; known: sgd, adam, adamw, rmsprop, adagrad");
    }
    // The optimizer's config (optim's registry): its defaults, then the keys the section gives.
    optim::OptimizerConfig config = optim::default_config(name);
    if (has_lr) config.learning_rate = static_cast<float>(lr);
    config.clipnorm = common.clipnorm;
    config.clipvalue = common.clipvalue;
    config.global_clipnorm = common.global_clipnorm;
    auto& h = config.hyperparameters;
    if (name == "sgd") {
      h["momentum"] = s.number("momentum", 0, kFraction);
      h["nesterov"] = s.flag("nesterov", false);
    } else if (name == "adam" || name == "adamw") {
      h["beta_1"] = s.number("beta_1", 0.9, kFraction);
      h["beta_2"] = s.number("beta_2", 0.999, kFraction);
      h["epsilon"] = s.number("epsilon", 1e-7, kPositive);
      h["amsgrad"] = s.flag("amsgrad", false);
      if (name == "adamw") config.weight_decay = static_cast<float>(s.number("weight_decay", 0.004, kNonNegative));
    } else if (name == "rmsprop") {
      h["rho"] = s.number("rho", 0.9, kFraction);
      h["momentum"] = s.number("momentum", 0, kFraction);
      h["centered"] = s.flag("centered", false);
    } else {
      h["initial_accumulator_value"] = s.number("initial_accumulator_value", 0.1, kNonNegative);
    }
    optimizer = optim::from_config(config);
    s.finish();
  }
  return optimizer;
}

namespace {
// The training x array's dtype and shape (npy, npz), from its header.
io::NpyInfo x_info(const Job& job) {
  const DataSpec& d = job.data;
  try {
    if (d.format == "npy") return io::read_npy_info(d.x_array);
    io::NpzFile npz(d.file);
    return npz.info(d.x_array);
  } catch (const Error& e) {  // the same class, its message naming the job file and key
    STRATA_THROW_CODE(e.code(), job.file << ": data.x: " << without_location(e.what()));
  }
}

// x of an npy or npz job: uint8 pixels (scaled) or float32 values (as they are), one row per record.
void check_x(const Job& job, const io::NpyInfo& info, const std::string& name) {
  STRATA_CHECK(info.dtype == DType::kUInt8 || info.dtype == DType::kFloat32, InvalidArgument,
               job.file << ": data: x " << name << " holds " << dtype_name(info.dtype)
                        << "; a job takes uint8 pixels (scaled by data.scale) or float32 (used as they are)");
  STRATA_CHECK(!info.shape.empty(), InvalidArgument, job.file << ": data: x " << name << " holds a scalar");
}
}  // namespace

Shape input_shape(const Job& job) {
  Shape s = job.data.image_shape;
  if (job.data.format == "idx") s = {28, 28, 1};
  if (job.data.format == "npy" || job.data.format == "npz") {
    const io::NpyInfo info = x_info(job);
    check_x(job, info, job.data.format == "npy" ? job.data.x_array : job.data.file + ":" + job.data.x_array);
    s.assign(info.shape.begin() + 1, info.shape.end());
  }
  s.insert(s.begin(), job.batch_size);
  return s;
}

DType input_dtype(const Job& job) {
  const DataSpec& d = job.data;
  if (d.format == "tfrecord" && d.x_dtype == "int64") return DType::kInt64;
  if (d.format == "npy" || d.format == "npz") return x_info(job).dtype;
  return DType::kUInt8;
}

namespace {
// x: uint8 pixels [b, ...] -> float32 * scale; float32 values and int64 ids as they are (Keras rescales nothing
// itself). y: int64 labels, float32 targets as they are, other integers -> int64.
data::Element normalize_batch(const data::Element& e, float scale) {
  Tensor x = e[0].dtype() == DType::kUInt8 ? data::to_float(e[0], scale) : e[0];
  Tensor y = e[1].dtype() == DType::kInt64 || e[1].dtype() == DType::kFloat32 ? e[1] : e[1].to(DType::kInt64);
  return data::Element({x, y});
}

data::Dataset pipeline(const Job& job, data::Dataset source, bool training) {
  const float scale = static_cast<float>(job.data.scale);
  // (An image folder's source shuffles its file order itself, before decoding: image_folder_source.)
  const bool shuffle = training && job.data.shuffle > 0 && job.data.format != "image_folder";
  if (shuffle) source = source.shuffle(job.data.shuffle, job.data.seed.value_or(job.seed));
  return source.batch(job.batch_size)
      .map([scale](const data::Element& e) { return normalize_batch(e, scale); })
      .prefetch(data::kAutotune)
      .with_options({.auto_shard_policy = job.data.auto_shard});
}

// NumPy arrays: (x, y) from two .npy files, or from two arrays of an .npz archive (`file` non-empty).
data::Dataset arrays_source(const Job& job, const std::string& file, const std::string& x, const std::string& y) {
  if (file.empty()) {
    check_x(job, io::read_npy_info(x), x);
    return data::Dataset::from_npy(x, y);
  }
  io::NpzFile npz(file);
  check_x(job, npz.info(x), file + ":" + x);
  return data::Dataset::from_npz(file, x, y);
}

// Images of `directory` as the job's data section says; `subset` is "" or Keras's training / validation of a
// validation split. Labels follow the training folder's classes (a test folder must have the same ones).
data::Dataset image_folder_source(const Job& job, const std::string& directory, bool training,
                                  const std::string& subset = "") {
  const DataSpec& d = job.data;
  data::ImageFolderOptions o;
  o.height = d.image_shape[0];
  o.width = d.image_shape[1];
  o.color_mode = data::parse_color_mode(d.color_mode);
  if (directory != d.train_files[0]) o.class_names = data::list_image_folder(d.train_files[0]).class_names;
  o.shuffle = training && d.shuffle > 0;
  o.seed = d.seed.value_or(job.seed);
  if (!subset.empty()) {
    o.validation_split = job.validation.split;
    o.subset = subset;
  }
  return data::Dataset::from_image_folder(directory, o);
}

// TFRecord shards of Examples (as `strata data convert` or `strata data ctr` writes them): x = raw uint8 bytes
// decoded to image_shape, or an int64 list of that shape; y = an int64 label; elements become (x, y) in that order
// whatever the feature names.
data::Dataset tfrecord_source(const Job& job, const std::vector<std::string>& patterns, bool training) {
  const DataSpec& d = job.data;
  STRATA_CHECK(!patterns.empty(), InvalidArgument, job.file << ": data." << (training ? "train" : "test")
                                                            << " lists no TFRecord files");
  std::vector<std::string> files = expand_globs(patterns, job.file + ": data." + (training ? "train" : "test") + ": ");
  const data::FeatureSpec x_spec = d.x_dtype == "int64"
                                       ? data::FixedLenFeature(data::FeatureType::kInt64, d.image_shape)
                                       : data::RawBytesFeature(DType::kUInt8, d.image_shape);
  data::ExampleSpec spec{{d.x_feature, x_spec},
                         {d.y_feature, data::FixedLenFeature(data::FeatureType::kInt64)}};
  data::TFRecordDatasetOptions options{.compression = data::parse_compression(d.compression),
                                       .num_parallel_reads = std::min<int64_t>(2, static_cast<int64_t>(files.size()))};
  const std::string x = d.x_feature, y = d.y_feature;
  return data::make_example_dataset(std::move(files), std::move(spec), options)
      .map([x, y](const data::Element& e) { return data::Element({e[x], e[y]}); });
}
// The test set's (x, y) elements before batching.
data::Dataset test_source(const Job& job) {
  const DataSpec& d = job.data;
  if (d.format == "idx") return data::Dataset::from_idx(d.directory, data::Split::kTest);
  if (d.format == "npy" || d.format == "npz") return arrays_source(job, d.file, d.test_x_array, d.test_y_array);
  if (d.format == "image_folder") return image_folder_source(job, d.test_files[0], false);
  return tfrecord_source(job, d.test_files, false);
}
}  // namespace

namespace {
// The training records, before any split.
data::Dataset train_source(const Job& job) {
  const DataSpec& d = job.data;
  if (d.format == "idx") return data::Dataset::from_idx(d.directory, data::Split::kTrain);
  if (d.format == "npy" || d.format == "npz") return arrays_source(job, d.file, d.x_array, d.y_array);
  if (d.format == "image_folder") return image_folder_source(job, d.train_files[0], true);
  return tfrecord_source(job, d.train_files, true);
}

// With `validation: {split: f}`: how many of the training records train (Keras: floor(n * (1 - f))), and n.
std::pair<int64_t, int64_t> split_point(const Job& job, const data::Dataset& source) {
  int64_t records = source.cardinality();
  if (records < 0) {
    records = 0;
    for (data::Iterator it = source.make_iterator(); it.next();) ++records;
  }
  const auto kept = static_cast<int64_t>(std::floor(static_cast<double>(records) * (1.0 - job.validation.split)));
  STRATA_CHECK(kept > 0 && kept < records, InvalidArgument,
               job.file << ": validation.split " << job.validation.split << " of " << records
                        << " training records leaves " << kept << " to train on and " << records - kept
                        << " to validate: both need at least one");
  return {kept, records};
}

// Splits of records to be shared out across workers record by record (a take/skip is not a file's contents).
data::Dataset with_split_sharding(const Job& job, data::Dataset batched) {
  if (job.data.auto_shard != data::AutoShardPolicy::kAuto) return batched;
  return batched.with_options({.auto_shard_policy = data::AutoShardPolicy::kData});
}
}  // namespace

data::Dataset train_dataset(const Job& job) {
  if (job.validation.split > 0 && job.data.format == "image_folder") {  // Keras's subset of a seeded permutation
    return with_split_sharding(job, pipeline(job, image_folder_source(job, job.data.train_files[0], true, "training"),
                                             true));
  }
  data::Dataset source = train_source(job);
  if (job.validation.split == 0) return pipeline(job, std::move(source), true);
  const int64_t kept = split_point(job, source).first;
  return with_split_sharding(job, pipeline(job, source.take(kept), true));
}

std::optional<data::Dataset> validation_dataset(const Job& job) {
  const ValidationSpec& v = job.validation;
  if (!v.enabled()) return std::nullopt;
  if (v.split > 0 && job.data.format == "image_folder") {
    return with_split_sharding(
        job, pipeline(job, image_folder_source(job, job.data.train_files[0], false, "validation"), false));
  }
  if (v.split > 0) {
    data::Dataset source = train_source(job);
    const int64_t kept = split_point(job, source).first;
    return with_split_sharding(job, pipeline(job, source.skip(kept), false));
  }
  if (v.format == "idx") return pipeline(job, data::Dataset::from_idx(v.directory, data::Split::kTest), false);
  if (v.format == "npy" || v.format == "npz") return pipeline(job, arrays_source(job, v.file, v.x, v.y), false);
  if (v.format == "image_folder") return pipeline(job, image_folder_source(job, v.directory, false), false);
  return pipeline(job, tfrecord_source(job, v.files, false), false);
}

data::Dataset test_dataset(const Job& job) {
  return pipeline(job, test_source(job), false);
}

int64_t check_test_data(const Job& job) {
  const std::string where = job.file + ": data.test: ";
  int64_t records = 0;
  try {
    for (data::Iterator it = test_source(job).make_iterator(); it.next();) ++records;
  } catch (const Error& e) {  // the same class, its message naming the job file and section
    STRATA_THROW_CODE(e.code(), where << without_location(e.what()));
  }
  return records;
}

std::map<std::string, std::string> job_fingerprint(const Job& job) {
  std::map<std::string, std::string> f;
  f["model"] = one_line(job.model);
  f["loss"] = one_line(job.loss);
  f["optimizer"] = one_line(job.optimizer);
  std::string metrics;
  for (const std::string& m : job.metrics) metrics += (metrics.empty() ? "" : ",") + m;
  f["metrics"] = metrics;
  f["batch_size"] = std::to_string(job.batch_size);
  f["epochs"] = std::to_string(job.epochs);
  f["steps_per_execution"] = std::to_string(job.steps_per_execution);
  f["lr_scaling"] = job.lr_scaling.rule + " base " + std::to_string(job.lr_scaling.base_batch_size) + " warmup " +
                    std::to_string(job.lr_scaling.warmup_epochs);
  const StrategySpec& s = job.strategy;
  f["strategy"] = s.name + " replicas " + std::to_string(s.replicas) + " compression " + s.gradient_compression +
                  " bytes_per_pack " + std::to_string(s.bytes_per_pack) + " stages " +
                  std::to_string(s.pipeline_stages) + " micro_batches " + std::to_string(s.pipeline_micro_batches) +
                  " schedule " + s.pipeline_schedule + " sync_every " + std::to_string(s.sync_every) + " outer_step " +
                  s.outer_step + " tp " + std::to_string(s.tensor_parallel);
  const DataSpec& d = job.data;
  f["validation"] = job.validation_text;
  f["callbacks"] = job.callbacks_text;
  f["data"] = d.format + " compression " + d.compression + " x " + d.x_feature + " (" + d.x_dtype + ") y " +
              d.y_feature + " shuffle " + std::to_string(d.shuffle) + " auto_shard " +
              data::auto_shard_policy_name(d.auto_shard);
  if (d.format == "npy" || d.format == "npz") {  // which arrays (npy: the files' names, not where they are kept)
    auto name = [&d](const std::string& a) { return d.format == "npy" ? fs::path(a).filename().string() : a; };
    f["data"] += " arrays " + name(d.x_array) + " " + name(d.y_array) + " " + name(d.test_x_array) + " " +
                 name(d.test_y_array) + " scale " + std::to_string(d.scale);
  } else if (d.format == "image_folder") {
    f["data"] += " image_size " + std::to_string(d.image_shape[0]) + "x" + std::to_string(d.image_shape[1]) +
                 " color_mode " + d.color_mode + " scale " + std::to_string(d.scale);
  }
  return f;
}

}  // namespace strata::cli
