// A layer's config as JSON and back (Keras's get_config / from_config): {"class_name": "Dense", "config": {...}},
// with every option of the layer, for saved models (strata/train/saved_model.h lists the layers).
//
// Thread-safety: free functions of their arguments.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "strata/nn/layer.h"

namespace strata::detail {

// REQUIRES: `layer` is of a class that can be saved, configured only by Keras names. Otherwise InvalidArgument
// naming the layer and what cannot be saved.
nlohmann::ordered_json layer_config(const nn::Layer& layer);

// The unbuilt layer a config describes, with the config's name. DataCorrupt naming `where` (the file) for an
// unknown class, a missing or mistyped key, or a value the layer refuses.
std::shared_ptr<nn::Layer> layer_from_config(const nlohmann::ordered_json& config, const std::string& where);

}  // namespace strata::detail
