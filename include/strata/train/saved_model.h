// A saved model: the architecture and the weights in one safetensors file that other tools can read
// (Keras's `model.save` / `keras.models.load_model`, with safetensors as the container).
//
//   save_model(model, "model.safetensors", {.input_dtype = DType::kUInt8});
//   std::shared_ptr<Sequential> loaded = load_model("model.safetensors");   // built, with the weights
//   Tensor logits = loaded->predict(images);                                  // what `model` predicts
//
// The file is safetensors (strata/io/safetensors.h): its tensors are the model's variables by name
// ("conv2d/kernel", ...), and its "__metadata__" holds
//   "format":       "strata.saved_model"
//   "model_config": the model's config as JSON, Keras's get_config layer by layer:
//     {"class_name": "Sequential", "config": {"name": ..., "layers": [
//        {"class_name": "Rescaling", "config": {"name": "rescaling", "scale": 0.0039..., "offset": 0}},
//        {"class_name": "Conv2D", "config": {"name": "conv2d", "filters": 32, "kernel_size": [3, 3], ...}}, ...]},
//      "build_input_shape": [null, 28, 28, 1], "input_dtype": "uint8",
//      "loss": {"class_name": "SparseCategoricalCrossentropy", "config": {"name": ..., "from_logits": true, ...}}}
// so that a reader needs nothing but the file. A job's input preprocessing is the model's first layer
// (nn::Rescaling), so a saved model takes raw inputs.
//
// Layers that can be saved: Rescaling, Dense, Conv2D, Conv1D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D,
// GlobalAveragePooling1D, Flatten, Reshape, Dropout, BatchNormalization, LayerNormalization, Activation, Embedding,
// LSTM, GRU, MultiHeadAttention, PositionEmbedding and TransformerEncoder, in a Sequential model. A
// layer configured with a C++ function (an activation, initializer or regularizer that has no Keras name), a
// layer of another class, or a functional or subclassed model is an InvalidArgument naming it.
//
// Thread-safety: the functions share no state; a model must not be trained while it is saved.
#pragma once

#include <memory>
#include <string>

#include "strata/tensor.h"
#include "strata/train/model.h"

namespace strata {

struct SaveModelOptions {
  // The dtype of the inputs the model is meant to take (uint8 for raw pixels before a Rescaling layer): recorded
  // in the config for readers such as `strata predict`.
  DType input_dtype = DType::kFloat32;
};

// REQUIRES: `model` is a built Sequential. Writes its config and every variable to `path` atomically. Throws
// InvalidArgument for what cannot be saved (above), IoError when the file cannot be written.
void save_model(const Model& model, const std::string& path, const SaveModelOptions& options = {});

// What a saved model's config says about the model's inputs and loss, read without building the model.
struct SavedModelInfo {
  Shape input_shape;  // without the batch dimension: [28, 28, 1]
  DType input_dtype = DType::kFloat32;
  std::string loss;   // the loss's Keras name, "" when the model was saved uncompiled
  bool from_logits = false;
  std::string config_json;  // the whole "model_config" text
};
// Throws InvalidArgument when `path` is a safetensors file but not a saved model (e.g. weights or a checkpoint),
// DataCorrupt for a malformed config, IoError when it cannot be read.
SavedModelInfo read_saved_model_info(const std::string& path);

// The model a saved model file describes, built for its input shape, with its weights; not compiled (the file
// records no optimizer). Fills `*info` (when given) as read_saved_model_info would, from the same read. Errors as
// read_saved_model_info, and InvalidArgument naming the tensor when the weights do not fit the architecture.
std::shared_ptr<Sequential> load_model(const std::string& path, SavedModelInfo* info = nullptr);

}  // namespace strata
