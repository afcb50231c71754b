// Saved models (strata/train/saved_model.h): architecture and weights in one safetensors file; load_model gives a
// model that predicts exactly what the saved one does, for every layer class a saved model holds; what cannot be
// saved or read is a clear error.
#include "strata/train/saved_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "strata/data/convert.h"
#include "strata/io/safetensors.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/random.h"
#include "train/layer_config.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("strata_saved_model_test_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() { fs::remove_all(dir); }
};

// uint8 "images" [n, 8, 8, 1] and labels in [0, 4).
data::Dataset pixel_dataset(int64_t n, uint64_t seed, int64_t batch) {
  Generator gen(seed);
  Tensor x = Tensor::empty({n, 8, 8, 1}, DType::kUInt8);
  Tensor y = Tensor::empty({n}, DType::kInt64);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(gen.uniform_int(256));
  for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(gen.uniform_int(4));
  return data::Dataset::from_tensor_slices({x, y}).batch(batch);
}

void expect_bitwise_equal(const Tensor& want, const Tensor& got) {
  ASSERT_EQ(want.shape(), got.shape());
  ASSERT_EQ(want.dtype(), got.dtype());
  EXPECT_EQ(std::memcmp(want.raw_data(), got.raw_data(), want.nbytes()), 0);
}

TEST(SavedModelTest, ACnnWithRescalingRoundTripsToTheSamePredictions) {
  TempDir tmp;
  manual_seed(3);
  Sequential model({nn::Rescaling(1.0f / 255), nn::Conv2D(4, 3, {.padding = "same", .activation = "relu"}),
                    nn::BatchNormalization(), nn::MaxPooling2D(2), nn::AveragePooling2D(2, {.strides = nn::Size2(1)}),
                    nn::Flatten(), nn::Dropout(0.25f, {.seed = 5}),
                    nn::Dense(8, {.activation = "tanh", .kernel_regularizer = "l2"}), nn::Activation("relu"),
                    nn::Dense(4)});
  model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::Adam(0.01f), {"accuracy"});
  const data::Dataset train = pixel_dataset(64, 1, 16);
  model.fit(train, {.epochs = 1, .verbose = 0});  // moves the weights and BatchNormalization's moving statistics
  const fs::path path = tmp.dir / "cnn.safetensors";
  model.save(path.string());

  std::shared_ptr<Sequential> loaded = load_model(path.string());
  ASSERT_TRUE(loaded->built());
  EXPECT_FALSE(loaded->compiled());
  EXPECT_EQ(loaded->summary(), model.summary());
  const data::Dataset test = pixel_dataset(40, 2, 16);
  expect_bitwise_equal(model.predict(test), loaded->predict(test));
  // The weights themselves, by name and bits.
  const auto want = model.named_weights(), got = loaded->named_weights();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].first, got[i].first);
    expect_bitwise_equal(want[i].second, got[i].second);
  }
}

TEST(SavedModelTest, RecurrentAndEmbeddingLayersRoundTrip) {
  TempDir tmp;
  manual_seed(4);
  Sequential model({nn::Embedding(20, 6), nn::LSTM(5, {.return_sequences = true}),
                    nn::GRU(4, {.go_backwards = true, .reset_after = false}), nn::Reshape({2, 2}), nn::Flatten(),
                    nn::Dense(3, "softmax")});
  Tensor ids = Tensor::empty({7, 9}, DType::kInt64);
  Generator gen(9);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = static_cast<int64_t>(gen.uniform_int(20));
  model.build_for(ids.shape(), DType::kInt64);
  const fs::path path = tmp.dir / "rnn.safetensors";
  save_model(model, path.string(), {.input_dtype = DType::kInt64});

  const SavedModelInfo info = read_saved_model_info(path.string());
  EXPECT_EQ(info.input_shape, (Shape{9}));
  EXPECT_EQ(info.input_dtype, DType::kInt64);
  EXPECT_EQ(info.loss, "");  // saved uncompiled
  std::shared_ptr<Sequential> loaded = load_model(path.string());
  const data::Dataset x = data::Dataset::from_tensor_slices({ids}).batch(4);
  expect_bitwise_equal(model.predict(x), loaded->predict(x));
}

TEST(SavedModelTest, TransformerLayersRoundTrip) {
  TempDir tmp;
  manual_seed(5);
  Sequential model({nn::Dense(8), nn::PositionEmbedding(6),
                    nn::MultiHeadAttention(2, 3, {.value_dim = 5, .output_shape = 8, .use_causal_mask = true}),
                    nn::LayerNormalization({.epsilon = 1e-6f, .center = false}),
                    nn::TransformerEncoder(12, 2, {.dropout = 0.1f, .activation = "gelu", .normalize_first = false}),
                    nn::GlobalAveragePooling1D(), nn::Dense(3)});
  model.build_for({1, 6, 4});
  const fs::path path = tmp.dir / "transformer.safetensors";
  save_model(model, path.string());
  std::shared_ptr<Sequential> loaded = load_model(path.string());
  ASSERT_EQ(loaded->layers().size(), model.layers().size());
  const auto* mha = dynamic_cast<const nn::MultiHeadAttention*>(loaded->layers()[2].get());
  ASSERT_NE(mha, nullptr);
  EXPECT_EQ(mha->value_dim(), 5);
  EXPECT_TRUE(mha->options().use_causal_mask);
  const auto* block = dynamic_cast<const nn::TransformerEncoder*>(loaded->layers()[4].get());
  ASSERT_NE(block, nullptr);
  EXPECT_FALSE(block->options().normalize_first);
  EXPECT_EQ(block->options().activation.name(), "gelu");
  EXPECT_EQ(loaded->count_params(), model.count_params());
  Generator gen(3);
  const data::Dataset x = data::Dataset::from_tensor_slices({init::uniform({5, 6, 4}, gen, -1.0f, 1.0f)}).batch(2);
  expect_bitwise_equal(model.predict(x), loaded->predict(x));
}

TEST(SavedModelTest, Conv1DRoundTripsWithKerasListSizes) {
  TempDir tmp;
  manual_seed(6);
  Sequential model({nn::Conv1D(5, 3, {.padding = "causal", .dilation_rate = 2, .activation = "gelu"}),
                    nn::Conv1D(4, 2, {.strides = 2, .padding = "same", .use_bias = false, .kernel_regularizer = "l2"}),
                    nn::GlobalAveragePooling1D(), nn::Dense(2)});
  model.build_for({1, 7, 3});
  const fs::path path = tmp.dir / "conv1d.safetensors";
  save_model(model, path.string());
  const nlohmann::json config = detail::layer_config(*model.layers()[0]).at("config");
  EXPECT_EQ(config.at("kernel_size"), nlohmann::json::array({3}));  // Keras's tuples of one
  EXPECT_EQ(config.at("dilation_rate"), nlohmann::json::array({2}));
  EXPECT_EQ(config.at("padding"), "causal");
  std::shared_ptr<Sequential> loaded = load_model(path.string());
  const auto* causal = dynamic_cast<const nn::Conv1D*>(loaded->layers()[0].get());
  const auto* strided = dynamic_cast<const nn::Conv1D*>(loaded->layers()[1].get());
  ASSERT_NE(causal, nullptr);
  ASSERT_NE(strided, nullptr);
  EXPECT_EQ(causal->kernel_size(), 3);
  EXPECT_TRUE(causal->options().padding.is_causal());
  EXPECT_EQ(causal->options().dilation_rate, 2);
  EXPECT_EQ(causal->options().activation.name(), "gelu");
  EXPECT_EQ(strided->options().strides, 2);
  EXPECT_EQ(strided->options().padding.value(), Padding::kSame);
  EXPECT_FALSE(strided->options().use_bias);
  EXPECT_EQ(strided->options().kernel_regularizer.name(), "l2");
  EXPECT_EQ(loaded->count_params(), model.count_params());
  Generator gen(4);
  const data::Dataset x = data::Dataset::from_tensor_slices({init::uniform({5, 7, 3}, gen, -1.0f, 1.0f)}).batch(2);
  expect_bitwise_equal(model.predict(x), loaded->predict(x));
  // A bare integer (as a hand-written config might have) reads too.
  nlohmann::ordered_json bare = detail::layer_config(*model.layers()[0]);
  bare["config"]["kernel_size"] = 3;
  EXPECT_EQ(dynamic_cast<const nn::Conv1D&>(*detail::layer_from_config(bare, "test")).kernel_size(), 3);
}

TEST(SavedModelTest, TheConfigHoldsEveryLayersOptionsTheInputAndTheLoss) {
  TempDir tmp;
  Sequential model({nn::Rescaling(0.5f, -1.0f), nn::Conv2D(3, {3, 2}, {.strides = nn::Size2(1, 2)}), nn::Flatten(),
                    nn::Dense(2)});
  model.build_for({1, 8, 8, 1}, DType::kUInt8);
  model.compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::SGD(), {});
  const fs::path path = tmp.dir / "config.safetensors";
  save_model(model, path.string(), {.input_dtype = DType::kUInt8});

  std::map<std::string, std::string> metadata;
  io::load_safetensors(path.string(), &metadata);
  EXPECT_EQ(metadata.at("format"), "strata.saved_model");
  const nlohmann::json config = nlohmann::json::parse(metadata.at("model_config"));
  EXPECT_EQ(config.at("build_input_shape"), nlohmann::json::parse("[null, 8, 8, 1]"));
  EXPECT_EQ(config.at("input_dtype"), "uint8");
  EXPECT_EQ(config.at("loss").at("config").at("from_logits"), true);
  const nlohmann::json& layers = config.at("config").at("layers");
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers[0].at("class_name"), "Rescaling");
  EXPECT_EQ(layers[0].at("config").at("scale"), 0.5);
  EXPECT_EQ(layers[0].at("config").at("offset"), -1.0);
  EXPECT_EQ(layers[1].at("class_name"), "Conv2D");
  EXPECT_EQ(layers[1].at("config").at("kernel_size"), nlohmann::json::parse("[3, 2]"));
  EXPECT_EQ(layers[1].at("config").at("strides"), nlohmann::json::parse("[1, 2]"));
  EXPECT_EQ(layers[1].at("config").at("padding"), "valid");
  EXPECT_EQ(layers[1].at("config").at("kernel_initializer"), "glorot_uniform");
  EXPECT_TRUE(layers[1].at("config").at("kernel_regularizer").is_null());
  EXPECT_EQ(layers[3].at("config").at("units"), 2);

  const SavedModelInfo info = read_saved_model_info(path.string());
  EXPECT_EQ(info.input_shape, (Shape{8, 8, 1}));
  EXPECT_EQ(info.loss, "sparse_categorical_crossentropy");
  EXPECT_TRUE(info.from_logits);
}

TEST(SavedModelTest, RescalingGivesTheBitsOfTheInputPipelinesToFloat) {
  Tensor pixels = Tensor::empty({256}, DType::kUInt8);
  for (int i = 0; i < 256; ++i) pixels.data<uint8_t>()[i] = static_cast<uint8_t>(i);
  const float scale = static_cast<float>(0.00392156862745098);
  nn::Rescaling rescale(scale);
  expect_bitwise_equal(data::to_float(pixels, scale), rescale(Variable(pixels)).value());
}

TEST(SavedModelTest, WhatCannotBeSavedOrReadIsAClearError) {
  TempDir tmp;
  const std::string path = (tmp.dir / "m.safetensors").string();
  Sequential custom({nn::Dense(2, [](const Variable& x) { return x * 2.0f; })});
  custom.build_for({1, 3});
  try {
    save_model(custom, path);
    FAIL() << "saved a C++ activation";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("cannot save Dense 'dense': its activation is a C++ function"),
              std::string::npos)
        << e.what();
  }
  Sequential unbuilt({nn::Dense(2)});
  EXPECT_THROW(save_model(unbuilt, path), InvalidArgument);

  Sequential plain({nn::Dense(2)});
  plain.build_for({1, 3});
  plain.save_weights(path);  // weights without an architecture
  try {
    load_model(path);
    FAIL() << "loaded a weights file";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("not a saved model"), std::string::npos) << e.what();
  }

  // A config naming a class this strata does not know is DataCorrupt naming it.
  plain.save(path);
  std::map<std::string, std::string> metadata;
  io::NamedTensors weights = io::load_safetensors(path, &metadata);
  std::string text = metadata.at("model_config");
  text.replace(text.find("\"Dense\""), 7, "\"Dense9\"");
  io::save_safetensors(path, weights, {{"format", "strata.saved_model"}, {"model_config", text}});
  try {
    load_model(path);
    FAIL() << "loaded an unknown layer class";
  } catch (const DataCorrupt& e) {
    EXPECT_NE(std::string(e.what()).find("unknown layer class 'Dense9'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_model((tmp.dir / "missing.safetensors").string()), IoError);
}

}  // namespace
}  // namespace strata
