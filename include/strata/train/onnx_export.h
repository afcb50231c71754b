// ONNX export: a built model as an ONNX file (opset 17) that onnxruntime and other ONNX runtimes run.
//
//   save_onnx(model, "model.onnx", {.input_dtype = DType::kUInt8});   // a Sequential with a first Rescaling layer
//   // python: onnxruntime.InferenceSession("model.onnx").run(None, {"input": images})[0] == model.predict(images)
//
// The file is an onnx.ModelProto built with the ONNX project's own schema (onnx/onnx.proto, compiled by protoc),
// with the weights as initializers. Inputs are as strata takes them (NHWC images, [batch, steps, features]
// sequences, int64 ids); the batch dimension is symbolic ("N"). Inside, convolution and pooling run on NCHW: a
// Transpose goes in before the first of them and another before the first layer that needs NHWC again.
//
// Layers and the ops they become (docs/export.md has the table): Rescaling (Cast, Mul, Add), Dense (Gemm, or MatMul
// and Add past rank 2), Conv2D (Conv), Conv1D (Conv on [batch, channels, steps], between two Transposes),
// MaxPooling2D (MaxPool), AveragePooling2D (AveragePool), GlobalAveragePooling2D (ReduceMean), Flatten (Flatten),
// Reshape (Reshape), Dropout (Dropout, an identity at inference), BatchNormalization (BatchNormalization with the
// moving statistics), Activation and every layer's activation (Relu, Sigmoid, Tanh, Softmax, LogSoftmax, Elu, LeakyRelu, Softplus, Exp, Erf for gelu, Sigmoid and Mul
// for swish/silu), Embedding (Gather), LSTM and GRU (LSTM and GRU: gates reordered from Keras's, GRU's reset_after as
// linear_before_reset) and, in functional models, Concatenate (Concat) and Add (Add).
//
// Thread-safety: a free function of its arguments; the model must not be trained while it is exported.
#pragma once

#include <string>

#include "strata/dtype.h"
#include "strata/train/model.h"

namespace strata {

struct OnnxExportOptions {
  // The dtype of a Sequential model's input (uint8 for raw pixels before a Rescaling layer, int64 for ids); a
  // functional model's inputs carry their own dtypes.
  DType input_dtype = DType::kFloat32;
};

// The opset of the default ("ai.onnx") domain the exported files import.
inline constexpr int kOnnxOpset = 17;

// REQUIRES: `model` is built, a Sequential or a functional model (Model(inputs, output)) of the layers above.
// Writes the ONNX model to `path` atomically. Throws InvalidArgument naming the layer for one that has no ONNX
// form (another class, an activation given as a C++ function, a nested model, an LSTM/GRU activation other than
// tanh, sigmoid or relu), or for a subclassed model; IoError when the file cannot be written.
void save_onnx(const Model& model, const std::string& path, const OnnxExportOptions& options = {});

// The same model as the serialized onnx.ModelProto bytes (what save_onnx writes).
std::string onnx_model_bytes(const Model& model, const OnnxExportOptions& options = {});

}  // namespace strata
