// Recurrent layers in job files (src/cli/job.cc): the `lstm` and `gru` keys, their checks, the committed
// configs/fashion_mnist_lstm.yaml, and `strata train` end to end on a tiny IDX set read row by row.
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

std::string job_with_model(const fs::path& dir, const std::string& model) {
  return "data:\n  format: idx\n  directory: " + dir.string() +
         "\n  shuffle: 512\n  scale: 0.00392156862745098\nmodel:\n" + model +
         "loss: {name: sparse_categorical_crossentropy, from_logits: true}\n"
         "optimizer: {name: adam, learning_rate: 0.01}\nmetrics: [accuracy]\nepochs: 4\nbatch_size: 32\n";
}

TEST(RecurrentJobTest, LSTMAndGRUKeysBuildTheLayersTheySay) {
  Scratch s("recurrent_keys");
  const Job job = load_job(write_job(
      s.dir,
      job_with_model(s.dir,
                     "  - reshape: {target_shape: [28, 28]}\n"
                     "  - lstm: {units: 8, return_sequences: true, unit_forget_bias: false, go_backwards: true}\n"
                     "  - GRU: {units: 6, reset_after: false, recurrent_activation: relu, use_bias: false}\n"
                     "  - dense: {units: 10}\n")));
  auto model = build_model(job);
  EXPECT_EQ((*model)(Tensor::zeros({3, 28, 28, 1})).shape(), (Shape{3, 10}));
  ASSERT_EQ(model->layers().size(), 4u);
  const auto* lstm = dynamic_cast<const nn::LSTM*>(model->layers()[1].get());
  const auto* gru = dynamic_cast<const nn::GRU*>(model->layers()[2].get());
  ASSERT_NE(lstm, nullptr);
  ASSERT_NE(gru, nullptr);
  EXPECT_EQ(lstm->units(), 8);
  EXPECT_TRUE(lstm->options().return_sequences);
  EXPECT_TRUE(lstm->options().go_backwards);
  EXPECT_FALSE(lstm->options().unit_forget_bias);
  EXPECT_EQ(lstm->options().activation.name(), "tanh");  // Keras's defaults where the job says nothing
  EXPECT_EQ(lstm->options().recurrent_initializer.name(), "orthogonal");
  for (float b : lstm->bias().value().to_vector<float>()) EXPECT_EQ(b, 0.0f);
  EXPECT_EQ(gru->units(), 6);
  EXPECT_FALSE(gru->options().return_sequences);
  EXPECT_FALSE(gru->options().reset_after);
  EXPECT_EQ(gru->options().recurrent_activation.name(), "relu");
  EXPECT_FALSE(gru->bias().defined());
}

TEST(RecurrentJobTest, BadRecurrentKeysNameTheKeyAndLine) {
  Scratch s("recurrent_bad_keys");
  auto error_of = [&](const std::string& layer) {
    const std::string path = write_job(s.dir, job_with_model(s.dir, "  - " + layer + "\n  - dense: {units: 10}\n"));
    return test::message_of<InvalidArgument>([&] { load_job(path); });
  };
  EXPECT_NE(error_of("lstm: {units: 0}").find("job.yaml:7: model[0].lstm.units: must be positive"), std::string::npos)
      << error_of("lstm: {units: 0}");
  const std::string state = error_of("lstm: {units: 4, return_state: true}");
  EXPECT_NE(state.find("return_state"), std::string::npos) << state;
  const std::string reset = error_of("gru: {units: 4, reset_after: maybe}");
  EXPECT_NE(reset.find("model[0].gru.reset_after: expected true or false"), std::string::npos) << reset;
  const std::string forget = error_of("gru: {units: 4, unit_forget_bias: true}");  // an LSTM key
  EXPECT_NE(forget.find("unit_forget_bias"), std::string::npos) << forget;
  const std::string act = error_of("lstm: {units: 4, activation: tanhh}");
  EXPECT_NE(act.find("unknown activation 'tanhh'"), std::string::npos) << act;
}

TEST(RecurrentJobTest, TheFashionMnistLSTMJobBuildsFourStackedLSTMs) {
  const Job job = load_job("configs/fashion_mnist_lstm.yaml");
  auto model = build_model(job);
  const Variable logits = (*model)(Tensor::zeros({2, 28, 28, 1}));
  EXPECT_EQ(logits.shape(), (Shape{2, 10}));
  int lstms = 0;
  for (const auto& layer : model->layers()) {
    if (const auto* lstm = dynamic_cast<const nn::LSTM*>(layer.get())) {
      ++lstms;
      EXPECT_EQ(lstm->options().return_sequences, lstms < 4) << lstm->name();
    }
  }
  EXPECT_EQ(lstms, 4);
}

TEST(RecurrentJobTest, StrataTrainsARowByRowLSTMOnTinyData) {
  Scratch s("recurrent_train");
  write_tiny_idx(s.dir, "train", 512, 1);
  write_tiny_idx(s.dir, "t10k", 128, 2);
  const std::string job = write_job(s.dir, job_with_model(s.dir,
                                                          "  - reshape: {target_shape: [28, 28]}\n"
                                                          "  - lstm: {units: 16, return_sequences: true}\n"
                                                          "  - gru: {units: 16}\n"
                                                          "  - dense: {units: 10}\n"));
  const fs::path ckpt = s.dir / "ckpt";
  auto [rc, out] = run(std::string(STRATA_BINARY) + " train " + job + " --threads 1 --checkpoint-dir " + ckpt.string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("lstm (LSTM)"), std::string::npos) << out;
  EXPECT_NE(out.find("gru (GRU)"), std::string::npos) << out;
  // Keras's counts: LSTM 4 * (16 * (28 + 16) + 16), GRU (reset_after) 3 * (16 * (16 + 16) + 2 * 16), Dense 170.
  static_assert(4 * (16 * 44 + 16) + 3 * (16 * 32 + 32) + 170 == 4682);
  EXPECT_NE(out.find("Total params: 4,682"), std::string::npos)
      << out;
  std::smatch m;
  const std::string result = last_line(out);
  ASSERT_TRUE(std::regex_match(result, m, std::regex(R"(test loss ([0-9.]+) - test accuracy ([0-9.]+))"))) << out;
  // Class k lights rows 2k and 2k+1: read row by row, the recurrent model learns it (chance is 0.1).
  EXPECT_GT(std::stod(m[2]), 0.8) << out;
  // The weights saved by name (lstm/kernel, lstm/recurrent_kernel, ...) load back to the same result.
  auto [rc2, evaluated] = run(std::string(STRATA_BINARY) + " evaluate " + job + " --checkpoint " + ckpt.string());
  ASSERT_EQ(rc2, 0) << evaluated;
  EXPECT_EQ(last_line(evaluated), result);
}

}  // namespace
}  // namespace strata::cli
