// Saved models: a Sequential's config (layer_config.h) and its weights in one safetensors file (see
// strata/train/saved_model.h). The weights go through io's safetensors writer and reader, checksums included.
//
// Thread-safety: free functions of their arguments; no shared state.
#include "strata/train/saved_model.h"

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/error.h"
#include "strata/io/safetensors.h"
#include "strata/optim/losses.h"
#include "train/layer_config.h"

namespace strata {

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kFormatKey = "format";
constexpr const char* kFormat = "strata.saved_model";
constexpr const char* kConfigKey = "model_config";

DType dtype_by_name(const std::string& name, const std::string& where) {
  for (DType t : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8, DType::kBFloat16}) {
    if (name == dtype_name(t)) return t;
  }
  STRATA_THROW(DataCorrupt, where << ": model_config.input_dtype: unknown dtype '" << name << "'");
}

// {"class_name": ..., "config": {"name", "from_logits", ...}} of the compiled loss; null when uncompiled.
json loss_config(const Model& model) {
  if (!model.compiled()) return nullptr;
  const losses::Loss& loss = model.loss();
  json c{{"name", loss.name()}};
  if (const auto* l = dynamic_cast<const losses::SparseCategoricalCrossentropy*>(&loss)) {
    c["from_logits"] = l->options().from_logits;
  } else if (const auto* l = dynamic_cast<const losses::CategoricalCrossentropy*>(&loss)) {
    c["from_logits"] = l->options().from_logits;
    c["label_smoothing"] = l->options().label_smoothing;
  } else if (const auto* l = dynamic_cast<const losses::BinaryCrossentropy*>(&loss)) {
    c["from_logits"] = l->options().from_logits;
    c["label_smoothing"] = l->options().label_smoothing;
  }
  return json{{"class_name", loss.name()}, {"config", c}};
}

// The file's metadata and parsed config, checked to be a saved model's.
struct ReadConfig {
  json config;
  std::string text;
};
ReadConfig read_config(const std::string& path, io::NamedTensors* tensors) {
  std::map<std::string, std::string> metadata;
  io::NamedTensors loaded = io::load_safetensors(path, &metadata);
  const auto format = metadata.find(kFormatKey);
  const auto text = metadata.find(kConfigKey);
  STRATA_CHECK(format != metadata.end() && format->second == kFormat && text != metadata.end(), InvalidArgument,
               path << ": not a saved model (its safetensors metadata has no \"format\": \"" << kFormat
                    << "\" and \"model_config\"); a checkpoint or weights file holds no architecture: export one with "
                       "`strata export JOB --checkpoint D -o MODEL.safetensors`");
  ReadConfig out;
  out.text = text->second;
  try {
    out.config = json::parse(out.text);
  } catch (const json::exception& e) {
    STRATA_THROW(DataCorrupt, path << ": model_config is not valid JSON: " << e.what());
  }
  if (tensors != nullptr) *tensors = std::move(loaded);
  return out;
}

SavedModelInfo info_of(const ReadConfig& read, const std::string& path) {
  SavedModelInfo info;
  info.config_json = read.text;
  try {
    const json& c = read.config;
    STRATA_CHECK(c.at("class_name").get<std::string>() == "Sequential", DataCorrupt,
                 path << ": model_config.class_name: this strata reads Sequential models, got "
                      << c.at("class_name").dump());
    const json& shape = c.at("build_input_shape");
    STRATA_CHECK(shape.is_array() && shape.size() >= 2 && shape[0].is_null(), DataCorrupt,
                 path << ": model_config.build_input_shape: expected [null, d1, ...], got " << shape.dump());
    for (size_t i = 1; i < shape.size(); ++i) {
      const int64_t d = shape[i].get<int64_t>();
      STRATA_CHECK(d > 0, DataCorrupt, path << ": model_config.build_input_shape: dimensions must be positive, got "
                                            << shape.dump());
      info.input_shape.push_back(d);
    }
    info.input_dtype = dtype_by_name(c.at("input_dtype").get<std::string>(), path);
    const json& loss = c.at("loss");
    if (!loss.is_null()) {
      info.loss = loss.at("config").at("name").get<std::string>();
      info.from_logits = loss.at("config").value("from_logits", false);
    }
  } catch (const json::exception& e) {
    STRATA_THROW(DataCorrupt, path << ": model_config: " << e.what());
  }
  return info;
}

}  // namespace

void save_model(const Model& model, const std::string& path, const SaveModelOptions& options) {
  STRATA_CHECK(model.class_name() == "Sequential", InvalidArgument,
               "save_model: only Sequential models can be saved for now; model '" << model.name() << "' is "
                                                                                  << model.class_name());
  STRATA_CHECK(model.built() && !model.input_shapes().empty(), InvalidArgument,
               "save_model: model '" << model.name() << "' is not built; call build_for(input_shape) or train it first");
  json layers = json::array();
  for (const auto& layer : model.layers()) layers.push_back(detail::layer_config(*layer));
  json input_shape = json::array({nullptr});
  const Shape& built_for = model.input_shapes()[0];
  for (size_t i = 1; i < built_for.size(); ++i) input_shape.push_back(built_for[i]);
  const json config{{"class_name", "Sequential"},
                    {"config", {{"name", model.name()}, {"layers", layers}}},
                    {"build_input_shape", input_shape},
                    {"input_dtype", dtype_name(options.input_dtype)},
                    {"loss", loss_config(model)}};
  io::NamedTensors weights = model.named_weights();
  for (auto& [name, t] : weights) {
    if (!t.device().is_cpu()) t = t.to(Device::cpu());
  }
  io::save_safetensors(path, weights, {{kFormatKey, kFormat}, {kConfigKey, config.dump()}});
}

void Model::save(const std::string& path) const { save_model(*this, path); }

SavedModelInfo read_saved_model_info(const std::string& path) { return info_of(read_config(path, nullptr), path); }

std::shared_ptr<Sequential> load_model(const std::string& path, SavedModelInfo* info_out) {
  io::NamedTensors weights;
  const ReadConfig read = read_config(path, &weights);
  const SavedModelInfo info = info_of(read, path);
  if (info_out != nullptr) *info_out = info;
  std::string name;
  json layers;
  try {
    name = read.config.at("config").at("name").get<std::string>();
    layers = read.config.at("config").at("layers");
    STRATA_CHECK(layers.is_array() && !layers.empty(), DataCorrupt,
                 path << ": model_config.config.layers: expected a non-empty list of layers");
  } catch (const json::exception& e) {
    STRATA_THROW(DataCorrupt, path << ": model_config: " << e.what());
  }
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{}, name);
  for (const json& layer : layers) model->add(detail::layer_from_config(layer, path));
  Shape batch_shape = info.input_shape;
  batch_shape.insert(batch_shape.begin(), 1);
  model->build_for(batch_shape, info.input_dtype);
  const io::NamedTensors expected = model->named_weights();
  io::check_matches(expected, weights, path);
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [tensor_name, tensor] : weights) by_name[tensor_name] = &tensor;
  for (Variable v : model->variables()) v.assign(*by_name.at(v.name()));
  return model;
}

}  // namespace strata
