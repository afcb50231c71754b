// The test that proves a strategy (docs/architecture.md): K steps on N replicas with per-replica batch B give the
// weights of K steps on one replica with batch N*B — for an MLP and a small CNN, SGD and Adam, custom
// loops and Model::fit, an uneven last batch and a replica with no rows; evaluate's metrics match too.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "strata/distribute/strategies.h"
#include "strata/gradient_tape.h"
#include "strata/nn/nn.h"
#include "strata/train/model.h"
#include "test_util.h"

namespace strata {
namespace {

using distribute::CentralStorageStrategy;
using distribute::CrossDeviceOps;
using distribute::MirroredOptions;
using distribute::MirroredStrategy;
using distribute::Strategy;

constexpr float kRelTol = 1e-5f;

struct Data {
  Tensor x, y;
};

Data make_data(bool cnn, int64_t rows, uint64_t seed) {
  Tensor x = cnn ? test::random_tensor({rows, 8, 8, 1}, seed) : test::random_tensor({rows, 12}, seed);
  Tensor y = Tensor::empty({rows}, DType::kInt64);
  for (int64_t i = 0; i < rows; ++i) y.data<int64_t>()[i] = (i * 7 + static_cast<int64_t>(seed)) % 4;
  return {x, y};
}

std::shared_ptr<Sequential> make_model(bool cnn) {
  manual_seed(1234);  // the same initial weights for every strategy
  std::shared_ptr<Sequential> model;
  if (cnn) {
    model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Conv2D(3, 3, "relu"), nn::MaxPool2D(2),
                                                                    nn::Flatten(), nn::Dense(4)});
    model->build_for({1, 8, 8, 1});
  } else {
    model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(16, "relu"), nn::Dense(4)});
    model->build_for({1, 12});
  }
  return model;
}

std::shared_ptr<optim::Optimizer> make_optimizer(const std::string& name) {
  if (name == "sgd") return std::make_shared<optim::SGD>(optim::SGDOptions{.learning_rate = 0.1, .momentum = 0.9f});
  // Clipping by the global norm needs every gradient summed first: MirroredStrategy updates after backward.
  if (name == "adam_clipped")
    return std::make_shared<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01, .global_clipnorm = 0.5f});
  return std::make_shared<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01});
}

// Every weight of `a` equals `b`'s to kRelTol relative (absolute near zero).
void expect_same_weights(const Model& a, const Model& b) {
  const auto wa = a.named_weights(), wb = b.named_weights();
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    ASSERT_EQ(wa[i].first, wb[i].first);
    const auto va = wa[i].second.to_vector<float>(), vb = wb[i].second.to_vector<float>();
    ASSERT_EQ(va.size(), vb.size());
    for (size_t k = 0; k < va.size(); ++k) {
      ASSERT_NEAR(va[k], vb[k], kRelTol * std::max(1.0f, std::fabs(vb[k]))) << wa[i].first << " element " << k;
    }
  }
}

// Every component of every variable of a mirrored model is bit-identical to component 0.
void expect_components_identical(const Model& model) {
  for (const Variable& v : model.variables()) {
    for (int c = 1; c < v.num_components(); ++c) {
      const auto a = v.component(0).to_vector<float>(), b = v.component(c).to_vector<float>();
      ASSERT_EQ(a, b) << v.name() << " component " << c;
    }
  }
}

// The custom loop of the tf.distribute tutorial: compute_average_loss over the global batch, gradients
// through the tape, apply_gradients (or minimize) inside the replica. Batches of `global_rows` rows.
void train_custom(Strategy* strategy, Sequential& model, optim::Optimizer& optimizer, const Data& data,
                  const std::vector<int64_t>& global_rows, bool minimize) {
  losses::SparseCategoricalCrossentropy loss_fn({.from_logits = true, .reduction = losses::Reduction::kNone});
  int64_t start = 0;
  for (int64_t rows : global_rows) {
    data::Element batch({data.x.slice(start, start + rows), data.y.slice(start, start + rows)});
    start += rows;
    auto step = [&](const data::Element& b) {
      const std::vector<Variable> vars = model.trainable_variables();
      GradientTape tape;
      if (b[0].dim(0) == 0) {
        if (minimize) {
          optimizer.minimize(Variable(Tensor::scalar(0.0f)), vars, tape, UnconnectedGradients::kZero);
        } else {
          optimizer.apply_gradients(tape.gradient(Variable(Tensor::scalar(0.0f)), vars, UnconnectedGradients::kZero),
                                    vars);
        }
        return 0.0;
      }
      Variable per_example = loss_fn(b[1], model(Variable(b[0]), true));
      Variable loss = distribute::compute_average_loss(per_example, rows);
      if (minimize) {
        optimizer.minimize(loss, vars, tape);
      } else {
        optimizer.apply_gradients(tape.gradient(loss, vars), vars);
      }
      return static_cast<double>(loss.value().item<float>());
    };
    if (strategy == nullptr) {
      step(batch);
    } else {
      strategy->run(step, distribute::split_batch(batch, strategy->num_replicas_in_sync()));
    }
  }
}

struct Case {
  bool cnn;
  std::string optimizer;
};

class EquivalenceTest : public ::testing::TestWithParam<Case> {};

std::vector<std::unique_ptr<Strategy>> strategies_under_test() {
  std::vector<std::unique_ptr<Strategy>> out;
  for (int n : {1, 2, 3}) out.push_back(MirroredStrategy::cpu_replicas(n));  // reduction_to_one_device
  out.push_back(MirroredStrategy::cpu_replicas(2, {.cross_device_ops = CrossDeviceOps::tree_all_reduce()}));
  out.push_back(MirroredStrategy::cpu_replicas(3, {.cross_device_ops = CrossDeviceOps::ring_all_reduce()}));
  out.push_back(MirroredStrategy::cpu_replicas(2, {.cross_device_ops = CrossDeviceOps::ring_all_reduce()}));
  out.push_back(std::make_unique<CentralStorageStrategy>(MirroredStrategy::cpu_devices(2)));
  out.push_back(std::make_unique<CentralStorageStrategy>(MirroredStrategy::cpu_devices(3)));
  return out;
}

TEST_P(EquivalenceTest, CustomLoopMatchesOneReplicaWithTheGlobalBatch) {
  const Case c = GetParam();
  const Data data = make_data(c.cnn, 64, 7);
  for (bool minimize : {false, true}) {
    for (auto& strategy : strategies_under_test()) {
      const int n = strategy->num_replicas_in_sync();
      SCOPED_TRACE(strategy->name() + " x" + std::to_string(n) + (minimize ? ", minimize" : ", apply_gradients"));
      // K = 3 full steps of per-replica batch 4, then an uneven last batch, then one with fewer rows than replicas.
      const std::vector<int64_t> rows = {4L * n, 4L * n, 4L * n, 4L * n - 1, 1};
      auto reference = make_model(c.cnn);
      auto ref_opt = make_optimizer(c.optimizer);
      train_custom(nullptr, *reference, *ref_opt, data, rows, false);

      std::shared_ptr<Sequential> model;
      {
        auto scope = strategy->scope();
        model = make_model(c.cnn);
      }
      auto opt = make_optimizer(c.optimizer);
      train_custom(strategy.get(), *model, *opt, data, rows, minimize);
      expect_same_weights(*model, *reference);
      expect_components_identical(*model);
      EXPECT_EQ(opt->iterations(), static_cast<int64_t>(rows.size()));
      // One set of slots per variable, whatever the replicas: the checkpoint state matches one replica's.
      const auto state = opt->state(model->trainable_variables());
      const auto ref_state = ref_opt->state(reference->trainable_variables());
      ASSERT_EQ(state.size(), ref_state.size());
      for (size_t i = 0; i < state.size(); ++i) {
        if (state[i].second.dtype() == DType::kFloat32) test::expect_near(state[i].second, ref_state[i].second, 1e-5f);
      }
    }
  }
}

TEST_P(EquivalenceTest, FitAndEvaluateMatchOneReplica) {
  const Case c = GetParam();
  const Data data = make_data(c.cnn, 30, 11);  // 30 rows: batches of 8 end with an uneven 6
  const auto dataset = data::Dataset::from_tensor_slices({data.x, data.y}).batch(8);
  auto reference = make_model(c.cnn);
  reference->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), *make_optimizer(c.optimizer),
                     {"accuracy"});
  const History ref_history = reference->fit(dataset, {.epochs = 2, .verbose = 0});
  const Logs ref_eval = reference->evaluate(dataset);
  const Tensor ref_pred = reference->predict(dataset);

  for (auto& strategy : strategies_under_test()) {
    SCOPED_TRACE(strategy->name() + " x" + std::to_string(strategy->num_replicas_in_sync()));
    auto scope = strategy->scope();
    auto model = make_model(c.cnn);
    model->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), *make_optimizer(c.optimizer),
                   {"accuracy"});
    const History history = model->fit(dataset, {.epochs = 2, .verbose = 0});
    expect_same_weights(*model, *reference);
    expect_components_identical(*model);
    for (const char* key : {"loss", "accuracy"}) {
      ASSERT_EQ(history.history.at(key).size(), 2u);
      for (size_t e = 0; e < 2; ++e) EXPECT_NEAR(history.history.at(key)[e], ref_history.history.at(key)[e], 1e-5) << key;
    }
    const Logs eval = model->evaluate(dataset);
    EXPECT_NEAR(*eval.get("loss"), *ref_eval.get("loss"), 1e-5);
    EXPECT_DOUBLE_EQ(*eval.get("accuracy"), *ref_eval.get("accuracy"));
    test::expect_near(model->predict(dataset), ref_pred, 1e-4f);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EquivalenceTest,
                         ::testing::Values(Case{false, "sgd"}, Case{false, "adam"}, Case{false, "adam_clipped"},
                                           Case{true, "sgd"}, Case{true, "adam"}),
                         [](const auto& info) {
                           return std::string(info.param.cnn ? "Cnn" : "Mlp") + "_" + info.param.optimizer;
                         });

// Notes the step indices fit hands to the batch callbacks.
class BatchIndexRecorder : public Callback {
 public:
  void on_train_batch_begin(int64_t batch, const Logs&) override { begins.push_back(batch); }
  void on_train_batch_end(int64_t batch, const Logs&) override { ends.push_back(batch); }
  std::vector<int64_t> begins, ends;
};

TEST(DistributedTrainingTest, StepsPerExecutionGivesTheSameWeightsUnderEveryStrategy) {
  const Data data = make_data(true, 30, 17);  // batches of 8: 4 steps an epoch, the last one uneven
  const auto dataset = data::Dataset::from_tensor_slices({data.x, data.y}).batch(8);
  auto strategies = strategies_under_test();
  strategies.push_back(nullptr);  // the default strategy
  for (auto& strategy : strategies) {
    SCOPED_TRACE(strategy ? strategy->name() + " x" + std::to_string(strategy->num_replicas_in_sync()) : "default");
    std::vector<std::vector<std::pair<std::string, Tensor>>> weights;
    std::vector<double> losses;
    for (int64_t per_run : {1, 4}) {  // a group of 4 holds the uneven batch
      const auto train = [&] {
        auto model = make_model(true);
        model->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), *make_optimizer("adam"),
                       {"accuracy"});
        const History h = model->fit(dataset, {.epochs = 2, .verbose = 0, .steps_per_execution = per_run});
        weights.push_back(model->named_weights());
        losses.push_back(h.history.at("loss").back());
      };
      if (strategy) {
        auto scope = strategy->scope();
        train();
      } else {
        train();
      }
    }
    ASSERT_EQ(weights[0].size(), weights[1].size());
    for (size_t i = 0; i < weights[0].size(); ++i) {  // the same steps in the same order: the same bits
      EXPECT_EQ(weights[0][i].second.to_vector<float>(), weights[1][i].second.to_vector<float>()) << weights[0][i].first;
    }
    EXPECT_NEAR(losses[0], losses[1], 1e-9 * std::fabs(losses[0]));
  }
}

TEST(DistributedTrainingTest, StepsPerExecutionCallsBatchCallbacksOncePerGroup) {
  auto strategy = MirroredStrategy::cpu_replicas(2);
  auto scope = strategy->scope();
  auto model = make_model(false);
  model->compile("sparse_categorical_crossentropy", "sgd");
  const Data data = make_data(false, 40, 9);  // 5 batches of 8
  const auto dataset = data::Dataset::from_tensor_slices({data.x, data.y}).batch(8);
  auto recorder = std::make_shared<BatchIndexRecorder>();
  model->fit(dataset, {.epochs = 1, .callbacks = {recorder}, .verbose = 0, .steps_per_execution = 2});
  EXPECT_EQ(recorder->begins, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(recorder->ends, (std::vector<int64_t>{1, 3, 4}));
  // steps_per_epoch cuts a group short: 3 steps in groups of 2 are 2 + 1.
  auto per_epoch = std::make_shared<BatchIndexRecorder>();
  model->fit(dataset.repeat(), {.epochs = 2, .steps_per_epoch = 3, .callbacks = {per_epoch}, .verbose = 0,
                                .steps_per_execution = 2});
  EXPECT_EQ(per_epoch->ends, (std::vector<int64_t>{1, 2, 1, 2}));
  const std::string msg = test::message_of<InvalidArgument>(
      [&] { model->fit(dataset, {.verbose = 0, .steps_per_execution = 0}); });
  EXPECT_NE(msg.find("steps_per_execution"), std::string::npos) << msg;
}

TEST(DistributedTrainingTest, FitOutsideTheScopeUsesTheStrategyThatMadeTheModel) {
  auto strategy = MirroredStrategy::cpu_replicas(2);
  std::shared_ptr<Sequential> model;
  {
    auto scope = strategy->scope();
    model = make_model(false);
  }
  model->compile("sparse_categorical_crossentropy", "sgd");
  const Data data = make_data(false, 16, 3);
  model->fit(data::Dataset::from_tensor_slices({data.x, data.y}).batch(8), {.epochs = 1, .verbose = 0});
  expect_components_identical(*model);
  for (const Variable& v : model->variables()) EXPECT_EQ(v.num_components(), 2);
}

TEST(DistributedTrainingTest, AModelMadeOutsideTheScopeIsAClearError) {
  auto model = make_model(false);  // plain variables
  model->compile("sparse_categorical_crossentropy", "sgd");
  const Data data = make_data(false, 16, 3);
  auto strategy = MirroredStrategy::cpu_replicas(2);
  auto scope = strategy->scope();
  const std::string msg = test::message_of<InvalidArgument>(
      [&] { model->fit(data::Dataset::from_tensor_slices({data.x, data.y}).batch(8), {.verbose = 0}); });
  EXPECT_NE(msg.find("outside MirroredStrategy.scope()"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dense/kernel"), std::string::npos) << msg;
}

TEST(DistributedTrainingTest, ReadingAForeignVariableInsideRunNamesIt) {
  auto model = make_model(false);
  auto strategy = MirroredStrategy::cpu_replicas(2);
  const std::string msg = test::message_of<InvalidArgument>([&] {
    strategy->run([&] { (*model)(Variable(Tensor::zeros({2, 12})), false); });
  });
  EXPECT_NE(msg.find("dense/kernel"), std::string::npos) << msg;
  EXPECT_NE(msg.find("strategy.scope()"), std::string::npos) << msg;
}

TEST(DistributedTrainingTest, ALazilyBuiltModelIsBuiltInsideTheStrategy) {
  auto strategy = MirroredStrategy::cpu_replicas(2);
  auto scope = strategy->scope();
  Sequential model({nn::Dense(8, "relu"), nn::Dense(4)});  // not built: fit builds it from the first batch
  model.compile("sparse_categorical_crossentropy", "adam", {"accuracy"});
  const Data data = make_data(false, 20, 5);
  model.fit(data::Dataset::from_tensor_slices({data.x, data.y}).batch(8), {.epochs = 1, .verbose = 0});
  for (const Variable& v : model.variables()) {
    EXPECT_EQ(v.owner(), strategy->id());
    EXPECT_EQ(v.num_components(), 2);
  }
}

}  // namespace
}  // namespace strata
