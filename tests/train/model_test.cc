// Model: compile/fit/evaluate/predict, functional models, the summary table, weights and checkpoints.
#include "strata/train/model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "strata/error.h"
#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/random.h"
#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Three Gaussian blobs in 4-D, one per class: a linear model separates them.
struct Blobs {
  Tensor x, y;
};
Blobs make_blobs(int64_t n, uint64_t seed) {
  Generator gen(seed);
  Blobs b{Tensor::empty({n, 4}), Tensor::empty({n}, DType::kInt64)};
  float* x = b.x.data<float>();
  int64_t* y = b.y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = static_cast<int64_t>(gen.uniform_int(3));
    y[i] = label;
    for (int j = 0; j < 4; ++j) {
      float noise;
      gen.fill_normal(&noise, 1, 0.0f, 0.5f);
      x[i * 4 + j] = noise + (j == label ? 2.0f : 0.0f);
    }
  }
  return b;
}

data::Dataset blob_dataset(int64_t n, uint64_t seed, int64_t batch) {
  Blobs b = make_blobs(n, seed);
  return data::Dataset::from_tensor_slices({b.x, b.y}).batch(batch);
}

std::shared_ptr<Sequential> small_mlp() {
  manual_seed(7);
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(16, "relu"), nn::Dense(3)});
  model->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::Adam(optim::AdamOptions{.learning_rate = 0.01}),
                 {"accuracy"});
  return model;
}

fs::path scratch_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("strata_model_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(ModelTest, FitLearnsSeparableClassesAndReportsHistory) {
  auto model = small_mlp();
  History h = model->fit(blob_dataset(512, 1, 32), {.epochs = 5, .validation_data = blob_dataset(256, 2, 64), .verbose = 0});
  ASSERT_EQ(h.epochs, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  ASSERT_EQ(h.history.at("loss").size(), 5u);
  EXPECT_LT(h.history.at("loss").back(), h.history.at("loss").front());
  EXPECT_GT(h.history.at("accuracy").back(), 0.9);
  EXPECT_GT(h.history.at("val_accuracy").back(), 0.9);
  ASSERT_EQ(h.input_wait_fraction.size(), 5u);
  EXPECT_GE(h.input_wait_fraction[0], 0.0);
  EXPECT_LE(h.input_wait_fraction[0], 1.0);
  Logs logs = model->evaluate(blob_dataset(256, 2, 64));
  EXPECT_NEAR(logs.at("accuracy"), h.history.at("val_accuracy").back(), 1e-9);
  EXPECT_NEAR(logs.at("loss"), h.history.at("val_loss").back(), 1e-6);
}

TEST(ModelTest, CompileTakesKerasOrderByNameOrTypeAndRefusesNamesOfTheWrongKind) {
  Sequential keras_order({nn::Dense(3)});
  keras_order.compile("adam", "sparse_categorical_crossentropy", {"accuracy"});
  EXPECT_EQ(keras_order.optimizer().name(), "adam");
  EXPECT_EQ(keras_order.loss().name(), "sparse_categorical_crossentropy");
  EXPECT_EQ(keras_order.metric_logs().items().size(), 2u) << "loss and accuracy";

  Sequential loss_first({nn::Dense(3)});
  loss_first.compile("mse", "sgd");
  EXPECT_EQ(loss_first.optimizer().name(), "sgd");
  EXPECT_EQ(loss_first.loss().name(), "mean_squared_error");

  Sequential typed({nn::Dense(3)});
  typed.compile(optim::RMSprop(), losses::MeanSquaredError(), {"mse"});
  EXPECT_EQ(typed.optimizer().name(), "rmsprop");
  EXPECT_EQ(typed.loss().name(), "mean_squared_error");

  auto message = [](const std::string& first, const std::string& second) {
    Sequential model({nn::Dense(3)});
    try {
      model.compile(first, second);
    } catch (const InvalidArgument& e) {
      EXPECT_FALSE(model.compiled()) << "nothing half-compiled";
      return std::string(e.what());
    }
    return std::string("(compiled)");
  };
  const std::string two_losses = message("sparse_categorical_crossentropy", "categorical_crossentropy");
  EXPECT_NE(two_losses.find("'sparse_categorical_crossentropy' is a loss and 'categorical_crossentropy' is a loss"),
            std::string::npos)
      << two_losses;
  EXPECT_NE(two_losses.find("compile(optimizer, loss, metrics)"), std::string::npos) << two_losses;
  const std::string unknown = message("adam", "crossentropyy");
  EXPECT_NE(unknown.find("'adam' is an optimizer and 'crossentropyy' is neither an optimizer nor a loss"),
            std::string::npos)
      << unknown;
}

// The warning is once per process, and other tests here compile logits models: it is checked in a process of its own
// (a death test in the "threadsafe" style runs this test alone in a fresh process), which exits 0 when all holds.
TEST(ModelTest, OneWarningWhenLogitsFeedALossThatExpectsProbabilities) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto compile_and_capture = [](std::vector<nn::LayerRef> layers, std::shared_ptr<losses::Loss> loss) {
    Sequential model(std::move(layers));
    testing::internal::CaptureStderr();
    model.compile(std::move(loss), std::make_shared<optim::SGD>());
    return testing::internal::GetCapturedStderr();
  };
  auto checks = [&] {
    using SCCE = losses::SparseCategoricalCrossentropy;
    bool ok = compile_and_capture({nn::Dense(3, "softmax")}, std::make_shared<SCCE>()).empty();  // probabilities
    // a dropout after the sigmoid still gives probabilities
    ok = ok && compile_and_capture({nn::Dense(1, "sigmoid"), nn::Dropout(0.5)},
                                   std::make_shared<losses::BinaryCrossentropy>()).empty();
    ok = ok && compile_and_capture({nn::Dense(3)}, std::make_shared<SCCE>(SCCE::Options{.from_logits = true})).empty();
    ok = ok && compile_and_capture({nn::Dense(3)}, std::make_shared<losses::MeanSquaredError>()).empty();
    const std::string warned = compile_and_capture({nn::Dense(3)}, std::make_shared<SCCE>());
    std::fprintf(stderr, "%s", warned.c_str());  // shown should the test fail
    ok = ok && warned.find("warning") != std::string::npos && warned.find("activation linear") != std::string::npos &&
         warned.find("from_logits true") != std::string::npos;
    ok = ok && compile_and_capture({nn::Dense(3)}, std::make_shared<SCCE>()).empty();  // once per process
    return ok;
  };
  EXPECT_EXIT(std::exit(checks() ? 0 : 1), testing::ExitedWithCode(0), "loss sparse_categorical_crossentropy has "
                                                                        "from_logits false");
}

// The same for a functional model: its output node is followed back past a dropout to the layer that makes it.
TEST(ModelTest, OneWarningWhenAFunctionalModelsLogitsFeedALossThatExpectsProbabilities) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto compile_and_capture = [](const std::string& activation) {
    nn::SymbolicTensor in = nn::Input({4});
    nn::SymbolicTensor out = nn::Dropout(0.5)(nn::Dense(3, {.activation = activation, .name = "head"})(nn::Dense(8, "relu")(in)));
    Model model({in}, out);
    testing::internal::CaptureStderr();
    model.compile(std::make_shared<losses::SparseCategoricalCrossentropy>(), std::make_shared<optim::SGD>());
    return testing::internal::GetCapturedStderr();
  };
  auto checks = [&] {
    bool ok = compile_and_capture("softmax").empty();
    const std::string warned = compile_and_capture("linear");
    std::fprintf(stderr, "%s", warned.c_str());
    return ok && warned.find("ends in layer 'head' with activation linear") != std::string::npos;
  };
  EXPECT_EXIT(std::exit(checks() ? 0 : 1), testing::ExitedWithCode(0), "ends in layer 'head'");
}

TEST(ModelTest, FitWithValidationCountsTheTrainingExamplesAndLogsValidation) {
  auto model = small_mlp();
  History h = model->fit(blob_dataset(96, 1, 32),
                         {.epochs = 2, .validation_data = blob_dataset(40, 2, 16), .verbose = 0});
  EXPECT_EQ(h.examples, (std::vector<int64_t>{96, 96})) << "the validation set's 40 are not training examples";
  EXPECT_EQ(h.history.at("val_loss").size(), 2u);
  EXPECT_EQ(h.history.at("val_accuracy").size(), 2u);
}

TEST(ModelTest, FitStepEqualsACustomTrainingLoop) {
  // The same initial weights, the same batch: fit's step and a GradientTape loop give the same weights.
  Blobs b = make_blobs(32, 3);
  auto fitted = small_mlp();
  fitted->build_for({32, 4});
  auto manual = small_mlp();  // re-seeds, so it builds the same initial weights
  manual->build_for({32, 4});
  for (size_t i = 0; i < fitted->variables().size(); ++i) {
    ASSERT_EQ(fitted->variables()[i].value().to_vector<float>(), manual->variables()[i].value().to_vector<float>());
  }
  fitted->fit(data::Dataset::from_tensor_slices({b.x, b.y}).batch(32), {.epochs = 1, .verbose = 0});

  losses::SparseCategoricalCrossentropy loss_fn({.from_logits = true});
  optim::Adam optimizer(optim::AdamOptions{.learning_rate = 0.01});
  GradientTape tape;
  Variable loss = loss_fn(b.y, (*manual)(b.x, true));
  auto vars = manual->trainable_variables();
  optimizer.apply_gradients(tape.gradient(loss, vars), vars);
  for (size_t i = 0; i < vars.size(); ++i) {
    const auto a = fitted->variables()[i].value().to_vector<float>();
    const auto m = vars[i].value().to_vector<float>();
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], m[k], 1e-6) << vars[i].name();
  }
}

TEST(ModelTest, PredictConcatenatesBatches) {
  auto model = small_mlp();
  Blobs b = make_blobs(70, 4);
  Tensor out = model->predict(data::Dataset::from_tensor_slices({b.x}).batch(32));
  EXPECT_EQ(out.shape(), (Shape{70, 3}));
  Tensor direct = (*model)(b.x, false).value();
  const auto p = out.to_vector<float>(), d = direct.to_vector<float>();
  for (size_t i = 0; i < p.size(); ++i) ASSERT_NEAR(p[i], d[i], 1e-5);
}

TEST(ModelTest, SummaryOfTheKerasTutorialCnn) {
  Sequential model({nn::Conv2D(32, 3, "relu"), nn::MaxPool2D(2), nn::Flatten(), nn::Dense(64, "relu"), nn::Dense(10)});
  EXPECT_THROW(model.summary(), InvalidArgument);
  model.build_for({1, 28, 28, 1});
  const std::string s = model.summary();
  EXPECT_NE(s.find("conv2d (Conv2D)"), std::string::npos) << s;
  EXPECT_NE(s.find("(None, 26, 26, 32)"), std::string::npos) << s;
  EXPECT_NE(s.find("max_pooling2d (MaxPooling2D)"), std::string::npos) << s;
  EXPECT_NE(s.find("dense_1 (Dense)"), std::string::npos) << s;
  EXPECT_NE(s.find("Total params: 347,146"), std::string::npos) << s;
  EXPECT_NE(s.find("Non-trainable params: 0"), std::string::npos) << s;
  std::vector<std::string> names;
  for (const auto& [name, t] : model.named_weights()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv2d/kernel", "conv2d/bias", "dense/kernel", "dense/bias",
                                             "dense_1/kernel", "dense_1/bias"}));
}

TEST(ModelTest, FunctionalModelWithConcatenatedInputsAndAResidualAdd) {
  manual_seed(3);
  auto a = nn::Input({4}, DType::kFloat32, "a");
  auto b = nn::Input({2}, DType::kFloat32, "b");
  auto h = nn::Dense(8, "relu")(nn::Concatenate()({a, b}));
  auto r = nn::Add()({h, nn::Dense(8)(h)});
  Model model({a, b}, nn::Dense(3)(r));
  EXPECT_TRUE(model.built());
  EXPECT_EQ(model.trainable_variables().size(), 6u);
  Variable out = model({Variable(test::random_tensor({5, 4}, 1)), Variable(test::random_tensor({5, 2}, 2))});
  EXPECT_EQ(out.shape(), (Shape{5, 3}));
  EXPECT_THROW(model(Variable(test::random_tensor({5, 4}, 1))), InvalidArgument);
  EXPECT_NE(model.summary().find("(InputLayer)"), std::string::npos);
}

TEST(ModelTest, SaveAndLoadWeightsRoundTripAndMismatchNamesTheVariable) {
  fs::path dir = scratch_dir("weights");
  auto model = small_mlp();
  model->fit(blob_dataset(64, 5, 32), {.epochs = 1, .verbose = 0});
  model->save_weights((dir / "w.safetensors").string());
  auto other = small_mlp();
  EXPECT_THROW(other->load_weights((dir / "w.safetensors").string()), InvalidArgument);  // not built
  other->build_for({1, 4});
  other->load_weights((dir / "w.safetensors").string());
  for (size_t i = 0; i < model->variables().size(); ++i) {
    EXPECT_EQ(model->variables()[i].value().to_vector<float>(), other->variables()[i].value().to_vector<float>());
  }
  Sequential wider({nn::Dense(17, "relu"), nn::Dense(3)});
  wider.build_for({1, 4});
  const std::string msg = test::message_of<InvalidArgument>([&] { wider.load_weights((dir / "w.safetensors").string()); });
  EXPECT_NE(msg.find("dense/kernel"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(ModelTest, BackupAndRestoreResumesFromTheLastEpoch) {
  fs::path dir = scratch_dir("backup");
  auto ds = blob_dataset(128, 6, 32);
  // Uninterrupted: 3 epochs.
  auto full = small_mlp();
  full->fit(ds, {.epochs = 3, .verbose = 0});
  // Interrupted after 2 epochs, then resumed in a fresh model.
  auto first = small_mlp();
  auto backup = std::make_shared<callbacks::BackupAndRestore>(
      dir.string(), callbacks::BackupAndRestore::Options{.delete_checkpoint = false});
  first->fit(ds, {.epochs = 2, .callbacks = {backup}, .verbose = 0});
  auto resumed = small_mlp();
  resumed->build_for({1, 4});
  History h = resumed->fit(ds, {.epochs = 3, .callbacks = {backup}, .verbose = 0});
  EXPECT_EQ(h.epochs, (std::vector<int64_t>{2}));
  EXPECT_EQ(resumed->step(), full->step());
  for (size_t i = 0; i < full->variables().size(); ++i) {
    const auto f = full->variables()[i].value().to_vector<float>();
    const auto r = resumed->variables()[i].value().to_vector<float>();
    for (size_t k = 0; k < f.size(); ++k) ASSERT_NEAR(f[k], r[k], 1e-6);
  }
  fs::remove_all(dir);
}

TEST(ModelTest, ClearErrors) {
  Sequential model({nn::Dense(3)});
  EXPECT_NE(test::message_of<InvalidArgument>([&] { model.fit(blob_dataset(8, 1, 4)); }).find("compile"),
            std::string::npos);
  model.compile("sparse_categorical_crossentropy", "sgd", {"accuracy"});
  auto forever = blob_dataset(8, 1, 4).repeat();
  EXPECT_NE(test::message_of<InvalidArgument>([&] { model.fit(forever); }).find("steps_per_epoch"), std::string::npos);
  History h = model.fit(forever, {.epochs = 2, .steps_per_epoch = 3, .verbose = 0});
  EXPECT_EQ(model.step(), 6);
  EXPECT_EQ(h.epochs.size(), 2u);
  auto only_x = data::Dataset::from_tensor_slices({make_blobs(8, 1).x}).batch(4);
  EXPECT_NE(test::message_of<InvalidArgument>([&] { model.fit(only_x, {.verbose = 0}); }).find("(x, y)"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
