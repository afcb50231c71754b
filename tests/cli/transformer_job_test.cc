// Transformer layers in job files (src/cli/job.cc): the layer_normalization, multi_head_attention,
// position_embedding, transformer_encoder, global_average_pooling1d and conv1d keys, their checks, the committed
// configs/fashion_mnist_transformer.yaml (a Conv1D stem and a cosine schedule), and `strata train` end to end on a
// tiny IDX set read as 28 tokens.
// Thread-safety: each test runs on one thread, in its own scratch directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

#include "cli/cli_test_util.h"
#include "cli/job.h"
#include "strata/error.h"
#include "strata/nn/nn.h"
#include "test_util.h"

namespace strata::cli {
namespace {

std::string job_with_model(const fs::path& dir, const std::string& model, int epochs = 10) {
  return "data:\n  format: idx\n  directory: " + dir.string() +
         "\n  shuffle: 512\n  scale: 0.00392156862745098\nmodel:\n" + model +
         "loss: {name: sparse_categorical_crossentropy, from_logits: true}\n"
         "optimizer: {name: adam, learning_rate: 0.005}\nmetrics: [accuracy]\nepochs: " +
         std::to_string(epochs) + "\nbatch_size: 32\nseed: 1\n";
}

const std::string kTinyTransformer =
    "  - reshape: {target_shape: [28, 28]}\n"
    "  - dense: {units: 16}\n"
    "  - position_embedding: {sequence_length: 28}\n"
    "  - multi_head_attention: {num_heads: 2, key_dim: 8}\n"
    "  - transformer_encoder: {num_heads: 2, intermediate_dim: 32, activation: gelu}\n"
    "  - layer_normalization: {epsilon: 1e-6}\n"
    "  - global_average_pooling1d\n"
    "  - dense: {units: 10}\n";

TEST(TransformerJobTest, TransformerKeysBuildTheLayersTheySay) {
  Scratch s("transformer_keys");
  const Job job = load_job(write_job(
      s.dir, job_with_model(s.dir,
                            "  - reshape: {target_shape: [28, 28]}\n"
                            "  - position_embedding: {sequence_length: 30, initializer: zeros}\n"
                            "  - MultiHeadAttention: {num_heads: 4, key_dim: 5, value_dim: 3, output_shape: 28, "
                            "dropout: 0.1, use_bias: false, use_causal_mask: true}\n"
                            "  - LayerNormalization: {epsilon: 1e-6, center: false}\n"
                            "  - transformer_encoder: {num_heads: 4, intermediate_dim: 12, dropout: 0.2, "
                            "normalize_first: false, layer_norm_epsilon: 1e-4}\n"
                            "  - GlobalAveragePooling1D\n"
                            "  - dense: {units: 10}\n")));
  auto model = build_model(job);
  EXPECT_EQ((*model)(Tensor::zeros({3, 28, 28, 1})).shape(), (Shape{3, 10}));
  ASSERT_EQ(model->layers().size(), 7u);
  const auto* pe = dynamic_cast<const nn::PositionEmbedding*>(model->layers()[1].get());
  const auto* mha = dynamic_cast<const nn::MultiHeadAttention*>(model->layers()[2].get());
  const auto* ln = dynamic_cast<const nn::LayerNormalization*>(model->layers()[3].get());
  const auto* block = dynamic_cast<const nn::TransformerEncoder*>(model->layers()[4].get());
  ASSERT_NE(pe, nullptr);
  ASSERT_NE(mha, nullptr);
  ASSERT_NE(ln, nullptr);
  ASSERT_NE(block, nullptr);
  ASSERT_NE(dynamic_cast<const nn::GlobalAveragePooling1D*>(model->layers()[5].get()), nullptr);
  EXPECT_EQ(pe->sequence_length(), 30);
  EXPECT_EQ(pe->embeddings().shape(), (Shape{30, 28}));
  EXPECT_EQ(mha->num_heads(), 4);
  EXPECT_EQ(mha->key_dim(), 5);
  EXPECT_EQ(mha->value_dim(), 3);
  EXPECT_EQ(mha->options().output_shape, 28);
  EXPECT_FLOAT_EQ(mha->options().dropout, 0.1f);
  EXPECT_FALSE(mha->options().use_bias);
  EXPECT_TRUE(mha->options().use_causal_mask);
  EXPECT_FLOAT_EQ(ln->options().epsilon, 1e-6f);
  EXPECT_FALSE(ln->options().center);
  EXPECT_TRUE(ln->options().scale);
  EXPECT_EQ(block->intermediate_dim(), 12);
  EXPECT_EQ(block->num_heads(), 4);
  EXPECT_FALSE(block->options().normalize_first);
  EXPECT_FLOAT_EQ(block->options().layer_norm_epsilon, 1e-4f);
  EXPECT_EQ(block->options().activation.name(), "relu");  // keras_hub's default where the job says nothing
  EXPECT_EQ(block->attention()->key_dim(), 7);            // 28 features / 4 heads
}

TEST(TransformerJobTest, BadTransformerKeysNameTheKeyAndLine) {
  Scratch s("transformer_bad_keys");
  auto error_of = [&](const std::string& layer) {
    const std::string path = write_job(s.dir, job_with_model(s.dir, "  - reshape: {target_shape: [28, 28]}\n  - " +
                                                                        layer + "\n  - dense: {units: 10}\n"));
    return test::message_of<InvalidArgument>([&] { load_job(path); });
  };
  const std::string heads = error_of("multi_head_attention: {key_dim: 4}");
  EXPECT_NE(heads.find("job.yaml:8: model[1].multi_head_attention.num_heads is required"), std::string::npos) << heads;
  const std::string dropout = error_of("transformer_encoder: {num_heads: 2, intermediate_dim: 8, dropout: 1}");
  EXPECT_NE(dropout.find("model[1].transformer_encoder.dropout"), std::string::npos) << dropout;
  const std::string act = error_of("transformer_encoder: {num_heads: 2, intermediate_dim: 8, activation: gelly}");
  EXPECT_NE(act.find("unknown activation 'gelly'"), std::string::npos) << act;
  const std::string eps = error_of("layer_normalization: {epsilon: 0}");
  EXPECT_NE(eps.find("model[1].layer_normalization.epsilon"), std::string::npos) << eps;
  const std::string unknown = error_of("position_embedding: {sequence_length: 28, max_wavelength: 10000}");
  EXPECT_NE(unknown.find("max_wavelength"), std::string::npos) << unknown;
  const std::string unknown_type = error_of("transformer_decoder: {num_heads: 2}");
  EXPECT_NE(unknown_type.find("transformer_encoder"), std::string::npos) << unknown_type;  // the known list
}

TEST(TransformerJobTest, Conv1DKeysBuildTheLayerTheySay) {
  Scratch s("conv1d_keys");
  const Job job = load_job(
      write_job(s.dir, job_with_model(s.dir,
                                      "  - reshape: {target_shape: [28, 28]}\n"
                                      "  - conv1d: {filters: 8, kernel_size: 3, padding: causal, dilation_rate: [2], "
                                      "activation: gelu, use_bias: false, kernel_initializer: he_normal, "
                                      "kernel_regularizer: l2}\n"
                                      "  - Conv1D: {filters: 6, kernel_size: [4], strides: 2, padding: same, "
                                      "bias_initializer: ones, name: stem}\n"
                                      "  - global_average_pooling1d\n"
                                      "  - dense: {units: 10}\n")));
  auto model = build_model(job);
  EXPECT_EQ((*model)(Tensor::zeros({3, 28, 28, 1})).shape(), (Shape{3, 10}));
  const auto* causal = dynamic_cast<const nn::Conv1D*>(model->layers()[1].get());
  const auto* stem = dynamic_cast<const nn::Conv1D*>(model->layers()[2].get());
  ASSERT_NE(causal, nullptr);
  ASSERT_NE(stem, nullptr);
  EXPECT_EQ(causal->filters(), 8);
  EXPECT_EQ(causal->kernel_size(), 3);
  EXPECT_TRUE(causal->options().padding.is_causal());
  EXPECT_EQ(causal->options().dilation_rate, 2);
  EXPECT_EQ(causal->options().activation.name(), "gelu");
  EXPECT_FALSE(causal->options().use_bias);
  EXPECT_EQ(causal->options().kernel_initializer.name(), "he_normal");
  EXPECT_EQ(causal->options().kernel_regularizer.name(), "l2");
  EXPECT_EQ(causal->output_shape(), (Shape{-1, 28, 8}));
  EXPECT_EQ(stem->name(), "stem");
  EXPECT_EQ(stem->kernel_size(), 4);
  EXPECT_EQ(stem->options().strides, 2);
  EXPECT_EQ(stem->options().padding.value(), Padding::kSame);
  EXPECT_EQ(stem->output_shape(), (Shape{-1, 14, 6}));
  EXPECT_EQ(stem->kernel().shape(), (Shape{4, 8, 6}));
}

TEST(TransformerJobTest, BadConv1DKeysNameTheKeyAndLine) {
  Scratch s("conv1d_bad_keys");
  auto error_of = [&](const std::string& layer) {
    const std::string path =
        write_job(s.dir, job_with_model(s.dir, "  - reshape: {target_shape: [28, 28]}\n  - " + layer +
                                                   "\n  - flatten\n  - dense: {units: 10}\n"));
    return test::message_of<InvalidArgument>([&] { load_job(path); });
  };
  const std::string filters = error_of("conv1d: {kernel_size: 3}");
  EXPECT_NE(filters.find("job.yaml:8: model[1].conv1d.filters is required"), std::string::npos) << filters;
  const std::string kernel = error_of("conv1d: {filters: 2, kernel_size: [3, 3]}");
  EXPECT_NE(kernel.find("model[1].conv1d.kernel_size: expected one integer"), std::string::npos) << kernel;
  const std::string strides = error_of("conv1d: {filters: 2, kernel_size: 3, strides: 0}");
  EXPECT_NE(strides.find("model[1].conv1d.strides: must be positive, got 0"), std::string::npos) << strides;
  const std::string padding = error_of("conv1d: {filters: 2, kernel_size: 3, padding: full}");
  EXPECT_NE(padding.find("unknown Conv1D padding 'full'; known: valid, same, causal"), std::string::npos) << padding;
  const std::string both = error_of("conv1d: {filters: 2, kernel_size: 3, strides: 2, dilation_rate: 2}");
  EXPECT_NE(both.find("model[1].conv1d: Conv1D: strides above 1 cannot be combined"), std::string::npos) << both;
  const std::string unknown = error_of("conv1d: {filters: 2, kernel_size: 3, groups: 2}");
  EXPECT_NE(unknown.find("groups"), std::string::npos) << unknown;
}

TEST(TransformerJobTest, TheFashionMnistTransformerJobBuildsTwoEncoderBlocks) {
  const Job job = load_job("configs/fashion_mnist_transformer.yaml");
  auto model = build_model(job);
  EXPECT_EQ((*model)(Tensor::zeros({2, 28, 28, 1})).shape(), (Shape{2, 10}));
  // 28 row tokens embedded by a Conv1D stem; a warmup and cosine decay over the 5 epochs.
  const auto* stem = dynamic_cast<const nn::Conv1D*>(model->layers()[1].get());
  ASSERT_NE(stem, nullptr);
  EXPECT_EQ(stem->output_shape(), (Shape{-1, 28, 64}));
  EXPECT_EQ(job.schedule.name, "cosine_decay");
  EXPECT_EQ(job.epochs, 5);
  int blocks = 0;
  for (const auto& layer : model->layers()) {
    if (const auto* block = dynamic_cast<const nn::TransformerEncoder*>(layer.get())) {
      ++blocks;
      EXPECT_TRUE(block->options().normalize_first) << block->name();
      EXPECT_EQ(block->attention()->key_dim(), 16) << block->name();  // 64 features / 4 heads
    }
  }
  EXPECT_EQ(blocks, 2);
}

TEST(TransformerJobTest, StrataTrainsATinyTransformerOnRowsAsTokens) {
  Scratch s("transformer_train");
  write_tiny_idx(s.dir, "train", 512, 1);
  write_tiny_idx(s.dir, "t10k", 128, 2);
  const std::string job = write_job(s.dir, job_with_model(s.dir, kTinyTransformer));
  const fs::path ckpt = s.dir / "ckpt";
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + job + " --threads 1 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("position_embedding (PositionEmbedding)"), std::string::npos) << out;
  EXPECT_NE(out.find("multi_head_attention (MultiHeadAttention)"), std::string::npos) << out;
  EXPECT_NE(out.find("transformer_encoder (TransformerEncoder)"), std::string::npos) << out;
  // Keras's counts: Dense 28*16+16, PositionEmbedding 28*16, MultiHeadAttention 4 * (16*2*8 + 16) (query, key,
  // value and output: 16 * 16 kernels, 16 biases), the block's two LayerNormalizations 2 * 32, its attention 1088,
  // its Dense layers 16*32+32 and 32*16+16, the last LayerNormalization 32, the classifier 16*10+10.
  static_assert(464 + 448 + 1088 + (64 + 1088 + 544 + 528) + 32 + 170 == 4426);
  EXPECT_NE(out.find("Total params: 4,426"), std::string::npos) << out;
  std::smatch m;
  const std::string result = last_line(out);
  ASSERT_TRUE(std::regex_match(result, m, std::regex(R"(test loss ([0-9.]+) - test accuracy ([0-9.]+))"))) << out;
  // Class k lights rows 2k and 2k+1: attention over the row tokens with their positions learns it (chance 0.1;
  // about 7 epochs at this learning rate, since a mean over tokens sees position only through the nonlinear parts).
  EXPECT_GT(std::stod(m[2]), 0.8) << out;
  // The weights saved by name (transformer_encoder/self_attention_layer/query/kernel, ...) load back to the same
  // result.
  auto [rc2, evaluated] = run(std::string(STRATA_BINARY) + " evaluate " + job + " --checkpoint " + ckpt.string());
  ASSERT_EQ(rc2, 0) << evaluated;
  EXPECT_EQ(last_line(evaluated), result);
  // `strata export` writes a saved model that `strata predict` runs, and the ONNX file (onnxruntime's agreement with
  // `strata predict` is tests/peers/test_onnx_export.py's).
  const fs::path model = s.dir / "model.safetensors", logits = s.dir / "logits.npy";
  auto [rc3, exported] =
      run(std::string(STRATA_BINARY) + " export " + job + " --checkpoint " + ckpt.string() + " -o " + model.string());
  ASSERT_EQ(rc3, 0) << exported;
  EXPECT_NE(exported.find("input [28, 28, 1] uint8 -> output [-1, 10]"), std::string::npos) << exported;
  auto [rc4, predicted] = run(std::string(STRATA_BINARY) + " predict " + model.string() + " " +
                              (s.dir / "t10k-images-idx3-ubyte").string() + " -o " + logits.string());
  ASSERT_EQ(rc4, 0) << predicted;
  EXPECT_NE(predicted.find("predicted 128 examples"), std::string::npos) << predicted;
  const fs::path onnx_model = s.dir / "model.onnx";
  auto [rc5, onnx] = run(std::string(STRATA_BINARY) + " export " + job + " --checkpoint " + ckpt.string() + " -o " +
                         onnx_model.string());
  ASSERT_EQ(rc5, 0) << onnx;
  EXPECT_NE(onnx.find("exported " + onnx_model.string()), std::string::npos) << onnx;
  EXPECT_GT(fs::file_size(onnx_model), 4426u * sizeof(float));  // every weight, as float32 initializers
}

}  // namespace
}  // namespace strata::cli
