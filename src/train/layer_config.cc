// Layer configs as JSON, Keras's get_config / from_config (see layer_config.h). Each layer class has one writer
// and one reader below, with Keras's key names; a value made from a C++ function has no name to write and is
// refused at save time, so every saved config can be read back.
//
// Thread-safety: free functions of their arguments; no shared state.
#include "train/layer_config.h"

#include <functional>
#include <string>
#include <vector>

#include "strata/error.h"
#include "strata/nn/nn.h"

namespace strata::detail {

namespace {

using json = nlohmann::ordered_json;

std::string describe(const nn::Layer& layer) { return layer.class_name() + " '" + layer.name() + "'"; }

// A Keras name of an option, or an InvalidArgument: a C++ function cannot be written to a file.
std::string named(const std::string& name, const nn::Layer& layer, const char* option) {
  STRATA_CHECK(name != "custom", InvalidArgument,
               "cannot save " << describe(layer) << ": its " << option
                              << " is a C++ function, which a saved model cannot hold; give it by Keras name");
  return name;
}
json activation(const nn::ActivationSpec& spec, const nn::Layer& layer, const char* option) {
  return named(spec.name(), layer, option);
}
json initializer(const nn::InitializerSpec& spec, const nn::Layer& layer, const char* option) {
  return named(spec.name(), layer, option);
}
json regularizer(const nn::RegularizerSpec& spec, const nn::Layer& layer, const char* option) {
  const std::string name = named(spec.name(), layer, option);
  return name.empty() ? json(nullptr) : json(name);
}
json size2(nn::Size2 s) { return json::array({s.h, s.w}); }

// Readers. A missing key or a value of the wrong type throws nlohmann's exceptions, which layer_from_config turns
// into DataCorrupt naming the file and the layer.
std::string name_or_empty(const json& value) { return value.is_null() ? std::string() : value.get<std::string>(); }
nn::Size2 read_size2(const json& value) {
  const std::vector<int> v = value.get<std::vector<int>>();
  STRATA_CHECK(v.size() == 2, InvalidArgument, "expected [height, width], got " << value.dump());
  return nn::Size2(v[0], v[1]);
}
// Keras writes Conv1D's sizes as lists of one ([3]); a bare integer is read too.
int read_size1(const json& value) {
  if (value.is_number_integer()) return value.get<int>();
  const std::vector<int> v = value.get<std::vector<int>>();
  STRATA_CHECK(v.size() == 1, InvalidArgument, "expected [size], got " << value.dump());
  return v[0];
}
nn::RegularizerSpec read_regularizer(const json& value) { return nn::RegularizerSpec(name_or_empty(value)); }

}  // namespace

// The keys Dense, Conv2D and Conv1D end with (Keras's order), from their options `o`.
template <class Options>
void kernel_layer_config(const Options& o, const nn::Layer& layer, json& c) {
  c["activation"] = activation(o.activation, layer, "activation");
  c["use_bias"] = o.use_bias;
  c["kernel_initializer"] = initializer(o.kernel_initializer, layer, "kernel_initializer");
  c["bias_initializer"] = initializer(o.bias_initializer, layer, "bias_initializer");
  c["kernel_regularizer"] = regularizer(o.kernel_regularizer, layer, "kernel_regularizer");
  c["bias_regularizer"] = regularizer(o.bias_regularizer, layer, "bias_regularizer");
}

// LSTM's and GRU's shared keys (Keras's order), from their options `o`.
template <class Options>
void recurrent_config(int64_t units, const Options& o, const nn::Layer& layer, json& c) {
  c["units"] = units;
  c["activation"] = activation(o.activation, layer, "activation");
  c["recurrent_activation"] = activation(o.recurrent_activation, layer, "recurrent_activation");
  c["use_bias"] = o.use_bias;
  c["kernel_initializer"] = initializer(o.kernel_initializer, layer, "kernel_initializer");
  c["recurrent_initializer"] = initializer(o.recurrent_initializer, layer, "recurrent_initializer");
  c["bias_initializer"] = initializer(o.bias_initializer, layer, "bias_initializer");
  c["kernel_regularizer"] = regularizer(o.kernel_regularizer, layer, "kernel_regularizer");
  c["recurrent_regularizer"] = regularizer(o.recurrent_regularizer, layer, "recurrent_regularizer");
  c["bias_regularizer"] = regularizer(o.bias_regularizer, layer, "bias_regularizer");
  c["return_sequences"] = o.return_sequences;
  c["go_backwards"] = o.go_backwards;
}

json layer_config(const nn::Layer& layer) {
  json c;
  c["name"] = layer.name();
  c["trainable"] = layer.trainable();
  if (const auto* l = dynamic_cast<const nn::Rescaling*>(&layer)) {
    c["scale"] = l->scale();
    c["offset"] = l->offset();
  } else if (const auto* l = dynamic_cast<const nn::Dense*>(&layer)) {
    const nn::DenseOptions& o = l->options();
    c["units"] = l->units();
    kernel_layer_config(o, layer, c);
  } else if (const auto* l = dynamic_cast<const nn::Conv2D*>(&layer)) {
    const nn::Conv2DLayerOptions& o = l->options();
    c["filters"] = l->filters();
    c["kernel_size"] = size2(l->kernel_size());
    c["strides"] = size2(o.strides);
    c["padding"] = o.padding.name();
    c["dilation_rate"] = size2(o.dilation_rate);
    kernel_layer_config(o, layer, c);
  } else if (const auto* l = dynamic_cast<const nn::Conv1D*>(&layer)) {
    const nn::Conv1DLayerOptions& o = l->options();  // sizes as Keras writes them: lists of one
    c["filters"] = l->filters();
    c["kernel_size"] = json::array({l->kernel_size()});
    c["strides"] = json::array({o.strides});
    c["padding"] = o.padding.name();
    c["dilation_rate"] = json::array({o.dilation_rate});
    kernel_layer_config(o, layer, c);
  } else if (const auto* l = dynamic_cast<const nn::detail::Pooling2D*>(&layer)) {
    c["pool_size"] = size2(l->pool_size());
    c["strides"] = size2(l->strides());
    c["padding"] = nn::PaddingSpec(l->padding()).name();
  } else if (const auto* l = dynamic_cast<const nn::GlobalAveragePooling2D*>(&layer)) {
    c["keepdims"] = l->keepdims();
  } else if (dynamic_cast<const nn::Flatten*>(&layer) != nullptr) {
    // no options
  } else if (const auto* l = dynamic_cast<const nn::Reshape*>(&layer)) {
    c["target_shape"] = l->target_shape();
  } else if (const auto* l = dynamic_cast<const nn::Dropout*>(&layer)) {
    c["rate"] = l->rate();
    c["seed"] = l->options().seed ? json(*l->options().seed) : json(nullptr);
  } else if (const auto* l = dynamic_cast<const nn::BatchNormalization*>(&layer)) {
    const nn::BatchNormalizationOptions& o = l->options();
    c["axis"] = o.axis;
    c["momentum"] = o.momentum;
    c["epsilon"] = o.epsilon;
    c["center"] = o.center;
    c["scale"] = o.scale;
    c["beta_initializer"] = initializer(o.beta_initializer, layer, "beta_initializer");
    c["gamma_initializer"] = initializer(o.gamma_initializer, layer, "gamma_initializer");
    c["moving_mean_initializer"] = initializer(o.moving_mean_initializer, layer, "moving_mean_initializer");
    c["moving_variance_initializer"] =
        initializer(o.moving_variance_initializer, layer, "moving_variance_initializer");
    c["beta_regularizer"] = regularizer(o.beta_regularizer, layer, "beta_regularizer");
    c["gamma_regularizer"] = regularizer(o.gamma_regularizer, layer, "gamma_regularizer");
  } else if (const auto* l = dynamic_cast<const nn::LayerNormalization*>(&layer)) {
    const nn::LayerNormalizationOptions& o = l->options();
    c["axis"] = o.axis;
    c["epsilon"] = o.epsilon;
    c["center"] = o.center;
    c["scale"] = o.scale;
    c["beta_initializer"] = initializer(o.beta_initializer, layer, "beta_initializer");
    c["gamma_initializer"] = initializer(o.gamma_initializer, layer, "gamma_initializer");
    c["beta_regularizer"] = regularizer(o.beta_regularizer, layer, "beta_regularizer");
    c["gamma_regularizer"] = regularizer(o.gamma_regularizer, layer, "gamma_regularizer");
  } else if (const auto* l = dynamic_cast<const nn::GlobalAveragePooling1D*>(&layer)) {
    c["keepdims"] = l->keepdims();
  } else if (const auto* l = dynamic_cast<const nn::MultiHeadAttention*>(&layer)) {
    const nn::MultiHeadAttentionOptions& o = l->options();
    c["num_heads"] = l->num_heads();
    c["key_dim"] = l->key_dim();
    c["value_dim"] = l->value_dim();
    c["dropout"] = o.dropout;
    c["use_bias"] = o.use_bias;
    c["output_shape"] = o.output_shape > 0 ? json(o.output_shape) : json(nullptr);
    c["kernel_initializer"] = initializer(o.kernel_initializer, layer, "kernel_initializer");
    c["bias_initializer"] = initializer(o.bias_initializer, layer, "bias_initializer");
    c["kernel_regularizer"] = regularizer(o.kernel_regularizer, layer, "kernel_regularizer");
    c["bias_regularizer"] = regularizer(o.bias_regularizer, layer, "bias_regularizer");
    c["use_causal_mask"] = o.use_causal_mask;  // strata's: the causal mask of layer calls (Keras's call argument)
  } else if (const auto* l = dynamic_cast<const nn::PositionEmbedding*>(&layer)) {
    c["sequence_length"] = l->sequence_length();
    c["initializer"] = initializer(l->options().initializer, layer, "initializer");
  } else if (const auto* l = dynamic_cast<const nn::TransformerEncoder*>(&layer)) {
    const nn::TransformerEncoderOptions& o = l->options();
    c["intermediate_dim"] = l->intermediate_dim();
    c["num_heads"] = l->num_heads();
    c["dropout"] = o.dropout;
    c["activation"] = activation(o.activation, layer, "activation");
    c["layer_norm_epsilon"] = o.layer_norm_epsilon;
    c["kernel_initializer"] = initializer(o.kernel_initializer, layer, "kernel_initializer");
    c["bias_initializer"] = initializer(o.bias_initializer, layer, "bias_initializer");
    c["normalize_first"] = o.normalize_first;
  } else if (const auto* l = dynamic_cast<const nn::Activation*>(&layer)) {
    c["activation"] = activation(l->activation(), layer, "activation");
  } else if (const auto* l = dynamic_cast<const nn::Embedding*>(&layer)) {
    c["input_dim"] = l->input_dim();
    c["output_dim"] = l->output_dim();
    c["embeddings_initializer"] = initializer(l->options().embeddings_initializer, layer, "embeddings_initializer");
    c["embeddings_regularizer"] = regularizer(l->options().embeddings_regularizer, layer, "embeddings_regularizer");
  } else if (const auto* lstm = dynamic_cast<const nn::LSTM*>(&layer)) {
    recurrent_config(lstm->units(), lstm->options(), layer, c);
    c["unit_forget_bias"] = lstm->options().unit_forget_bias;
  } else if (const auto* gru = dynamic_cast<const nn::GRU*>(&layer)) {
    const nn::GRUOptions& o = gru->options();
    recurrent_config(gru->units(), o, layer, c);
    c["reset_after"] = o.reset_after;
  } else {
    STRATA_THROW(InvalidArgument, "cannot save "
                                      << describe(layer)
                                      << ": a saved model holds Rescaling, Dense, Conv2D, Conv1D, MaxPooling2D, "
                                         "AveragePooling2D, GlobalAveragePooling2D, GlobalAveragePooling1D, "
                                         "Flatten, Reshape, Dropout, BatchNormalization, "
                                         "LayerNormalization, Activation, Embedding, LSTM, GRU, "
                                         "MultiHeadAttention, PositionEmbedding and TransformerEncoder "
                                         "layers");
  }
  return json{{"class_name", layer.class_name()}, {"config", c}};
}

namespace {

// The config keys Dense, Conv2D and Conv1D share: the activation, the bias, the kernel's and bias's initializers and
// regularizers, and the name.
template <class KernelOptions>
KernelOptions read_kernel_config(const json& c, const std::string& name) {
  KernelOptions o;
  o.activation = c.at("activation").get<std::string>();
  o.use_bias = c.at("use_bias").get<bool>();
  o.kernel_initializer = c.at("kernel_initializer").get<std::string>();
  o.bias_initializer = c.at("bias_initializer").get<std::string>();
  o.kernel_regularizer = read_regularizer(c.at("kernel_regularizer"));
  o.bias_regularizer = read_regularizer(c.at("bias_regularizer"));
  o.name = name;
  return o;
}

std::shared_ptr<nn::Layer> make_from(const std::string& type, const json& c) {
  const std::string name = c.at("name").get<std::string>();
  if (type == "Rescaling") return std::make_shared<nn::Rescaling>(c.at("scale").get<float>(), c.at("offset").get<float>(), name);
  if (type == "Dense") {
    const auto o = read_kernel_config<nn::DenseOptions>(c, name);
    return std::make_shared<nn::Dense>(c.at("units").get<int64_t>(), o);
  }
  if (type == "Conv2D") {
    auto o = read_kernel_config<nn::Conv2DLayerOptions>(c, name);
    o.strides = read_size2(c.at("strides"));
    o.padding = c.at("padding").get<std::string>();
    o.dilation_rate = read_size2(c.at("dilation_rate"));
    return std::make_shared<nn::Conv2D>(c.at("filters").get<int64_t>(), read_size2(c.at("kernel_size")), o);
  }
  if (type == "Conv1D") {
    auto o = read_kernel_config<nn::Conv1DLayerOptions>(c, name);
    o.strides = read_size1(c.at("strides"));
    o.padding = c.at("padding").get<std::string>();
    o.dilation_rate = read_size1(c.at("dilation_rate"));
    return std::make_shared<nn::Conv1D>(c.at("filters").get<int64_t>(), read_size1(c.at("kernel_size")), o);
  }
  if (type == "MaxPooling2D" || type == "AveragePooling2D") {
    nn::Pooling2DOptions o;
    o.strides = read_size2(c.at("strides"));
    o.padding = c.at("padding").get<std::string>();
    o.name = name;
    const nn::Size2 pool = read_size2(c.at("pool_size"));
    if (type == "MaxPooling2D") return std::make_shared<nn::MaxPooling2D>(pool, o);
    return std::make_shared<nn::AveragePooling2D>(pool, o);
  }
  if (type == "GlobalAveragePooling2D") {
    return std::make_shared<nn::GlobalAveragePooling2D>(
        nn::GlobalPoolingOptions{.keepdims = c.at("keepdims").get<bool>(), .name = name});
  }
  if (type == "Flatten") return std::make_shared<nn::Flatten>(name);
  if (type == "Reshape") return std::make_shared<nn::Reshape>(c.at("target_shape").get<Shape>(), name);
  if (type == "Dropout") {
    nn::DropoutOptions o;
    if (!c.at("seed").is_null()) o.seed = c.at("seed").get<uint64_t>();
    o.name = name;
    return std::make_shared<nn::Dropout>(c.at("rate").get<float>(), o);
  }
  if (type == "BatchNormalization") {
    nn::BatchNormalizationOptions o;
    o.axis = c.at("axis").get<int>();
    o.momentum = c.at("momentum").get<float>();
    o.epsilon = c.at("epsilon").get<float>();
    o.center = c.at("center").get<bool>();
    o.scale = c.at("scale").get<bool>();
    o.beta_initializer = c.at("beta_initializer").get<std::string>();
    o.gamma_initializer = c.at("gamma_initializer").get<std::string>();
    o.moving_mean_initializer = c.at("moving_mean_initializer").get<std::string>();
    o.moving_variance_initializer = c.at("moving_variance_initializer").get<std::string>();
    o.beta_regularizer = read_regularizer(c.at("beta_regularizer"));
    o.gamma_regularizer = read_regularizer(c.at("gamma_regularizer"));
    o.name = name;
    return std::make_shared<nn::BatchNormalization>(o);
  }
  if (type == "LayerNormalization") {
    nn::LayerNormalizationOptions o;
    o.axis = c.at("axis").get<int>();
    o.epsilon = c.at("epsilon").get<float>();
    o.center = c.at("center").get<bool>();
    o.scale = c.at("scale").get<bool>();
    o.beta_initializer = c.at("beta_initializer").get<std::string>();
    o.gamma_initializer = c.at("gamma_initializer").get<std::string>();
    o.beta_regularizer = read_regularizer(c.at("beta_regularizer"));
    o.gamma_regularizer = read_regularizer(c.at("gamma_regularizer"));
    o.name = name;
    return std::make_shared<nn::LayerNormalization>(o);
  }
  if (type == "GlobalAveragePooling1D") {
    return std::make_shared<nn::GlobalAveragePooling1D>(
        nn::GlobalPoolingOptions{.keepdims = c.at("keepdims").get<bool>(), .name = name});
  }
  if (type == "MultiHeadAttention") {
    nn::MultiHeadAttentionOptions o;
    o.value_dim = c.at("value_dim").is_null() ? 0 : c.at("value_dim").get<int64_t>();
    o.dropout = c.at("dropout").get<float>();
    o.use_bias = c.at("use_bias").get<bool>();
    o.output_shape = c.at("output_shape").is_null() ? 0 : c.at("output_shape").get<int64_t>();
    o.kernel_initializer = c.at("kernel_initializer").get<std::string>();
    o.bias_initializer = c.at("bias_initializer").get<std::string>();
    o.kernel_regularizer = read_regularizer(c.at("kernel_regularizer"));
    o.bias_regularizer = read_regularizer(c.at("bias_regularizer"));
    o.use_causal_mask = c.value("use_causal_mask", false);
    o.name = name;
    return std::make_shared<nn::MultiHeadAttention>(c.at("num_heads").get<int64_t>(), c.at("key_dim").get<int64_t>(),
                                                    o);
  }
  if (type == "PositionEmbedding") {
    nn::PositionEmbeddingOptions o;
    o.initializer = c.at("initializer").get<std::string>();
    o.name = name;
    return std::make_shared<nn::PositionEmbedding>(c.at("sequence_length").get<int64_t>(), o);
  }
  if (type == "TransformerEncoder") {
    nn::TransformerEncoderOptions o;
    o.dropout = c.at("dropout").get<float>();
    o.activation = c.at("activation").get<std::string>();
    o.layer_norm_epsilon = c.at("layer_norm_epsilon").get<float>();
    o.kernel_initializer = c.at("kernel_initializer").get<std::string>();
    o.bias_initializer = c.at("bias_initializer").get<std::string>();
    o.normalize_first = c.at("normalize_first").get<bool>();
    o.name = name;
    return std::make_shared<nn::TransformerEncoder>(c.at("intermediate_dim").get<int64_t>(),
                                                    c.at("num_heads").get<int64_t>(), o);
  }
  if (type == "Activation") return std::make_shared<nn::Activation>(c.at("activation").get<std::string>(), name);
  if (type == "Embedding") {
    nn::EmbeddingOptions o;
    o.embeddings_initializer = c.at("embeddings_initializer").get<std::string>();
    o.embeddings_regularizer = read_regularizer(c.at("embeddings_regularizer"));
    o.name = name;
    return std::make_shared<nn::Embedding>(c.at("input_dim").get<int64_t>(), c.at("output_dim").get<int64_t>(), o);
  }
  // LSTM and GRU share their keys but unit_forget_bias and reset_after.
  auto recurrent = [&c, &name](auto& o) {
    o.activation = c.at("activation").template get<std::string>();
    o.recurrent_activation = c.at("recurrent_activation").template get<std::string>();
    o.use_bias = c.at("use_bias").template get<bool>();
    o.kernel_initializer = c.at("kernel_initializer").template get<std::string>();
    o.recurrent_initializer = c.at("recurrent_initializer").template get<std::string>();
    o.bias_initializer = c.at("bias_initializer").template get<std::string>();
    o.kernel_regularizer = read_regularizer(c.at("kernel_regularizer"));
    o.recurrent_regularizer = read_regularizer(c.at("recurrent_regularizer"));
    o.bias_regularizer = read_regularizer(c.at("bias_regularizer"));
    o.return_sequences = c.at("return_sequences").template get<bool>();
    o.go_backwards = c.at("go_backwards").template get<bool>();
    o.name = name;
  };
  if (type == "LSTM") {
    nn::LSTMOptions o;
    recurrent(o);
    o.unit_forget_bias = c.at("unit_forget_bias").get<bool>();
    return std::make_shared<nn::LSTM>(c.at("units").get<int64_t>(), o);
  }
  if (type == "GRU") {
    nn::GRUOptions o;
    recurrent(o);
    o.reset_after = c.at("reset_after").get<bool>();
    return std::make_shared<nn::GRU>(c.at("units").get<int64_t>(), o);
  }
  return nullptr;
}

}  // namespace

std::shared_ptr<nn::Layer> layer_from_config(const json& config, const std::string& where) {
  std::string type = "?";
  try {
    type = config.at("class_name").get<std::string>();
    const json& c = config.at("config");
    std::shared_ptr<nn::Layer> layer = make_from(type, c);
    STRATA_CHECK(layer != nullptr, DataCorrupt,
                 where << ": unknown layer class '" << type << "' (this strata reads Rescaling, Dense, Conv2D, Conv1D, "
                       << "MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, GlobalAveragePooling1D, Flatten, "
                       << "Reshape, Dropout, BatchNormalization, LayerNormalization, Activation, Embedding, LSTM, GRU, "
                       << "MultiHeadAttention, PositionEmbedding and TransformerEncoder)");
    if (c.contains("trainable")) layer->set_trainable(c.at("trainable").get<bool>());
    return layer;
  } catch (const nlohmann::json::exception& e) {
    STRATA_THROW(DataCorrupt, where << ": layer " << type << ": " << e.what() << " in " << config.dump());
  } catch (const InvalidArgument& e) {  // a value the layer refuses (an unknown activation name, units 0, ...)
    STRATA_THROW(DataCorrupt, where << ": layer " << type << ": " << e.what());
  }
}

}  // namespace strata::detail
