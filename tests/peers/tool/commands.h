// peers_tool's subcommands (tests/peers/peers_tool.py documents each request and answer). Each takes the parsed JSON
// request and returns the JSON answer; a request it cannot serve throws strata::Error naming the problem.
// Thread-safety: each runs on the calling thread alone (events_fit's Model::fit starts worker threads of its own).
#pragma once

#include "json_values.h"

namespace strata::peers {

// Files (formats.cc).
json tfrecord_write(const json& request);     // records or Examples -> a TFRecord file (plain, GZIP, ZLIB)
json tfrecord_read(const json& request);      // a TFRecord file -> its records, Examples and parsed features
json events_write(const json& request);       // scalars -> a TensorBoard event file
json safetensors_write(const json& request);  // tensors and metadata -> a safetensors file
json safetensors_read(const json& request);   // a safetensors file -> its tensors and metadata

// Training (training.cc).
json events_fit(const json& request);       // a small Model::fit with the TensorBoard callback
json schedule_values(const json& request);  // learning-rate schedules at given steps
json optimizer_steps(const json& request);  // an optimizer's updates over fixed gradients

// ONNX export (onnx_export.cc).
json onnx_functional(const json& request);  // a random functional model -> an .onnx file and its predictions
json onnx_attention(const json& request);   // the same, of MultiHeadAttention with mask inputs

// Cluster (cluster.cc).
json tf_config(const json& request);  // TF_CONFIG values resolved as strata resolves them
json partition(const json& request);  // variable shapes split by the ps partitioners

}  // namespace strata::peers
