// Model::fit under ParameterServerStrategy, every task of the cluster in this process on 127.0.0.1: 2 ps tasks
// serving, workers as threads whose fit serves the training step, the chief's fit scheduling the steps. One worker
// with SGD ends where local fit on the same batches does, epoch logs included; two asynchronous workers lower the
// loss with every step applied once; two synchronous ones (max_staleness = 0) end where local fit on both workers'
// batches together does; and what the strategy cannot do is a clear error.
#include "strata/ps/parameter_server_strategy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <optional>
#include <thread>

#include "kernels/kernels.h"
#include "ps/worker_client.h"
#include "strata/error.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/random.h"
#include "strata/train/model.h"
#include "strata/ps/remote_trainer.h"
#include "test_util.h"

namespace strata::ps {
namespace {

// A TF_CONFIG cluster of a chief, `workers` workers and 2 ps tasks on free ports of 127.0.0.1.
cluster::ClusterSpec cluster_of(int workers) {
  cluster::ClusterSpec spec;
  const auto address = [] { return "127.0.0.1:" + std::to_string(test::free_port()); };
  spec.jobs["chief"].push_back(address());
  for (int i = 0; i < workers; ++i) spec.jobs["worker"].push_back(address());
  for (int i = 0; i < 2; ++i) spec.jobs["ps"].push_back(address());
  return spec;
}

cluster::TaskInfo task_of(const cluster::ClusterSpec& spec, const std::string& type, int64_t index) {
  return cluster::resolve_tf_config(cluster::make_tf_config(spec, type, index));
}

// 64 separable points of 4 features in batches of 8, drawn from `seed`.
data::Dataset points(uint64_t seed) {
  constexpr int64_t kRows = 64;
  const Tensor x = test::random_tensor({kRows, 4}, seed);
  Tensor y = Tensor::empty({kRows}, DType::kInt64);
  for (int64_t i = 0; i < kRows; ++i) {
    const float* row = x.data<float>() + i * 4;
    y.data<int64_t>()[i] = row[0] + row[1] - row[2] > 0 ? 1 : 0;
  }
  return data::Dataset::from_tensor_slices({x, y}).batch(8);
}

// The job's model, made in `strategy`'s scope (or none) from `seed`'s initial weights.
std::shared_ptr<Sequential> classifier(distribute::Strategy* strategy, uint64_t seed,
                                       const optim::Optimizer& optimizer = optim::SGD(0.1)) {
  if (strategy != nullptr) {
    auto scope = strategy->scope();
    return classifier(nullptr, seed, optimizer);
  }
  manual_seed(seed);
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(8, "relu"), nn::Dense(2)});
  model->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optimizer, {"accuracy"});
  model->build_for({1, 4});
  return model;
}

ParameterServerStrategyOptions quick(std::chrono::milliseconds ps_timeout = std::chrono::seconds(10),
                                     bool replicate_shards = true) {
  ParameterServerStrategyOptions o;
  o.replicate_shards = replicate_shards;
  o.coordinator = {.probe_initial_backoff = std::chrono::milliseconds(20),
                   .probe_max_backoff = std::chrono::milliseconds(200),
                   .probe_timeout = std::chrono::milliseconds(200)};
  o.ps_timeout = ps_timeout;
  return o;
}

// The ps tasks and the worker threads of a cluster; the workers' fit is ended on every path.
class Tasks {
 public:
  using ModelFn = std::function<std::shared_ptr<Sequential>(distribute::Strategy*)>;
  explicit Tasks(const cluster::ClusterSpec& spec, std::chrono::milliseconds ps_timeout = std::chrono::seconds(10),
                 ModelFn model_fn = nullptr, bool replicate_shards = true)
      : spec_(spec) {
    for (int i = 0; i < 2; ++i) {
      ps_.push_back(std::make_unique<ParameterServerStrategy>(task_of(spec, "ps", i),
                                                              quick(std::chrono::seconds(10), replicate_shards)));
    }
    for (int w = 0; w < spec.num_tasks("worker"); ++w) {
      workers_.emplace_back([this, w, ps_timeout, model_fn, replicate_shards] {
        ParameterServerStrategy strategy(task_of(spec_, "worker", w), quick(ps_timeout, replicate_shards));
        // Its own weights: the ps's replace them.
        auto model = model_fn ? model_fn(&strategy) : classifier(&strategy, 50 + w);
        try {
          const History h = model->fit(points(100 + w), {.verbose = 0});
          EXPECT_TRUE(h.epochs.empty());  // a worker has no epochs of its own
        } catch (const std::exception& e) {
          ADD_FAILURE() << "worker " << w << ": " << e.what();
        }
        ++workers_done_;
      });
    }
  }
  ~Tasks() {
    ParameterServerStrategy ender(task_of(spec_, "chief", 0), quick());
    for (int i = 0; i < 50 && !finished(); ++i) {  // a chief that failed before ending the workers' fit
      ender.run_on_every_worker(kEndFit, std::chrono::milliseconds(500));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (std::thread& t : workers_) t.join();
  }
  // Stops ps task `index` for good (its server goes away).
  void stop_ps(int index) { ps_[static_cast<size_t>(index)].reset(); }
  int64_t applied() const { return ps_[0]->server()->pushes_applied() + ps_[1]->server()->pushes_applied(); }
  const ParameterServer& server(int index) const { return *ps_[static_cast<size_t>(index)]->server(); }
  int64_t dropped() const { return ps_[0]->server()->pushes_dropped() + ps_[1]->server()->pushes_dropped(); }

 private:
  bool finished() const { return workers_done_.load() == static_cast<int>(workers_.size()); }
  cluster::ClusterSpec spec_;
  std::vector<std::unique_ptr<ParameterServerStrategy>> ps_;
  std::vector<std::thread> workers_;
  std::atomic<int> workers_done_{0};
};

// The strategy's partitioner when none is given, for 2 ps tasks.
const MinSizePartitioner kDefaultPartitioner({.min_shard_bytes = 256 << 10, .max_shards = 2});

int64_t shards_of(const Model& model, const Partitioner& partitioner) {
  int64_t n = 0;
  for (const Variable& v : model.trainable_variables()) n += partitioner.num_shards(v.shape(), DType::kFloat32);
  return n;
}

TEST(ParameterServerFitTest, OneWorkerWithSgdEndsWhereLocalFitOnTheSameBatchesDoes) {
  const cluster::ClusterSpec spec = cluster_of(1);
  History history;
  std::shared_ptr<Sequential> chief_model;
  int64_t applied = 0;
  {
    Tasks tasks(spec);
    ParameterServerStrategy chief(task_of(spec, "chief", 0), quick());
    chief_model = classifier(&chief, 1);
    // 8 steps per epoch (the cardinality of the chief's dataset), 2 epochs: the worker's input twice.
    history = chief_model->fit(points(100), {.epochs = 2, .verbose = 0});
    applied = tasks.applied();
    EXPECT_EQ(tasks.dropped(), 0);
  }
  EXPECT_EQ(applied, 16 * shards_of(*chief_model, kDefaultPartitioner));

  auto local = classifier(nullptr, 1);  // the chief's initial weights
  const History expected = local->fit(points(100), {.epochs = 2, .verbose = 0});
  const std::vector<Variable> trained = chief_model->trainable_variables(), want = local->trainable_variables();
  for (size_t i = 0; i < trained.size(); ++i) {
    SCOPED_TRACE(trained[i].name());
    test::expect_near(trained[i].value(), want[i].value(), 1e-5f);
  }
  ASSERT_EQ(history.epochs, (std::vector<int64_t>{0, 1}));
  for (const std::string key : {"loss", "accuracy"}) {
    for (size_t e = 0; e < 2; ++e) {
      EXPECT_NEAR(history.history.at(key)[e], expected.history.at(key)[e], 1e-5) << key << " epoch " << e;
    }
  }
}

TEST(ParameterServerFitTest, MovingStatisticsLiveOnThePsAndEndWhereLocalFitPutsThem) {
  const cluster::ClusterSpec spec = cluster_of(1);
  const auto with_batch_norm = [](distribute::Strategy* strategy) {
    const auto make = [] {
      manual_seed(7);
      auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{
          nn::Dense(8), nn::BatchNormalization(), nn::Activation("relu"), nn::Dense(2)});
      model->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::SGD(0.1), {"accuracy"});
      model->build_for({1, 4});
      return model;
    };
    if (strategy == nullptr) return make();
    auto scope = strategy->scope();
    return make();
  };
  std::shared_ptr<Sequential> chief_model;
  std::vector<Tensor> trained;
  {
    Tasks tasks(spec, std::chrono::seconds(10), with_batch_norm);
    ParameterServerStrategy chief(task_of(spec, "chief", 0), quick());
    chief_model = with_batch_norm(&chief);
    chief_model->fit(points(100), {.epochs = 2, .verbose = 0});
    for (const Variable& v : chief_model->variables()) trained.push_back(v.value().clone());
  }
  auto local = with_batch_norm(nullptr);
  local->fit(points(100), {.epochs = 2, .verbose = 0});
  const std::vector<Variable> want = local->variables();
  ASSERT_EQ(want.size(), trained.size());
  ASSERT_EQ(local->non_trainable_variables().size(), 2u);  // the moving mean and variance
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].name());
    test::expect_near(trained[i], want[i].value(), 1e-5f);
  }
}

TEST(ParameterServerFitTest, TwoAsynchronousWorkersLowerTheLossAndEveryStepIsAppliedOnce) {
  const cluster::ClusterSpec spec = cluster_of(2);
  History history;
  int64_t applied = 0, dropped = 0;
  std::shared_ptr<Sequential> chief_model;
  {
    Tasks tasks(spec);
    ParameterServerStrategy chief(task_of(spec, "chief", 0), quick());
    chief_model = classifier(&chief, 1, optim::Adam(0.02));
    history = chief_model->fit(points(100), {.epochs = 4, .steps_per_epoch = 10, .verbose = 0});
    applied = tasks.applied();
    dropped = tasks.dropped();
    // The chief's model holds the ps's values: evaluated locally it has learned the plane.
    EXPECT_GT(chief_model->evaluate(points(100)).at("accuracy"), 0.8);
  }
  EXPECT_EQ(applied, 40 * shards_of(*chief_model, kDefaultPartitioner));
  EXPECT_EQ(dropped, 0);
  const std::vector<double>& loss = history.history.at("loss");
  ASSERT_EQ(loss.size(), 4u);
  EXPECT_LT(loss.back(), 0.7 * loss.front());
}

// The batches of `first` and `second`, pairwise one after the other, as one dataset in batches of both together.
data::Dataset batches_together(const data::Dataset& first, const data::Dataset& second) {
  std::vector<Tensor> xs, ys;
  data::Iterator a = first.make_iterator(), b = second.make_iterator();
  for (auto x = a.next(), y = b.next(); x && y; x = a.next(), y = b.next()) {
    xs.insert(xs.end(), {(*x)[0], (*y)[0]});
    ys.insert(ys.end(), {(*x)[1], (*y)[1]});
  }
  return data::Dataset::from_tensor_slices({kernels::concat(xs, 0), kernels::concat(ys, 0)}).batch(16);
}

// A worker of the cluster that never came up: the chief trains without it, saying so, and at the end says it could not
// tell it that training ended, naming it, its address and why, in that order.
TEST(ParameterServerFitTest, AWorkerThatNeverCameIsNamedWhenTheChiefCannotTellItThatTrainingEnded) {
  const cluster::ClusterSpec spec = cluster_of(1);
  cluster::ClusterSpec chiefs = spec;  // the chief's cluster also lists worker:1, which never starts
  chiefs.jobs["worker"].push_back("127.0.0.1:" + std::to_string(test::free_port()));
  std::string err;
  {
    Tasks tasks(spec);
    ParameterServerStrategyOptions options = quick();
    options.coordinator.unavailable_timeout = std::chrono::seconds(2);
    ParameterServerStrategy chief(task_of(chiefs, "chief", 0), options);
    auto model = classifier(&chief, 1);
    ::testing::internal::CaptureStderr();
    model->fit(points(100), {.epochs = 1, .steps_per_epoch = 4, .verbose = 0});
    err = ::testing::internal::GetCapturedStderr();
  }
  const std::string worker1 = "worker:1 (" + chiefs.jobs.at("worker")[1] + ")";
  EXPECT_NE(err.find("fit: training without " + worker1), std::string::npos) << err;
  EXPECT_NE(err.find("fit: could not tell " + worker1 + " that training ended: "), std::string::npos) << err;
}

TEST(ParameterServerFitTest, ZeroStalenessTrainsAsOneModelOnBothWorkersBatchesTogether) {
  const cluster::ClusterSpec spec = cluster_of(2);
  History history;
  std::shared_ptr<Sequential> chief_model;
  int64_t applied = 0;
  {
    Tasks tasks(spec);
    ParameterServerStrategyOptions options = quick();
    options.coordinator.max_staleness = 0;
    ParameterServerStrategy chief(task_of(spec, "chief", 0), options);
    chief_model = classifier(&chief, 1, optim::Adam(0.01));
    // Both workers serving before the first round (one still starting would be lost, and the other would run its
    // closure too: a synchronous round all the same, but not of these batches).
    for (const std::string& address : spec.jobs.at("worker")) {
      std::string why;
      ASSERT_TRUE(detail::WorkerClient(address, std::chrono::seconds(10), std::chrono::milliseconds(100))
                      .ping(std::chrono::seconds(10), &why))
          << address << ": " << why;
    }
    // 8 steps: 4 rounds, in each of which worker w trains on its next batch of points(100 + w).
    history = chief_model->fit(points(100), {.epochs = 1, .steps_per_epoch = 8, .verbose = 0});
    applied = tasks.applied();
    EXPECT_EQ(tasks.dropped(), 0);
    for (const WorkerStatus& w : chief.coordinator().worker_status()) {
      EXPECT_EQ(w.times_lost, 0) << w.address << ": " << w.last_error;
      EXPECT_EQ(w.closures_run, 4) << w.address;  // one per round
    }
  }
  EXPECT_EQ(applied, 8 * shards_of(*chief_model, kDefaultPartitioner));

  auto local = classifier(nullptr, 1, optim::Adam(0.01));  // the chief's initial weights
  const History expected =
      local->fit(batches_together(points(100), points(101)), {.epochs = 1, .steps_per_epoch = 4, .verbose = 0});
  const std::vector<Variable> trained = chief_model->trainable_variables(), want = local->trainable_variables();
  for (size_t i = 0; i < trained.size(); ++i) {
    SCOPED_TRACE(trained[i].name());
    test::expect_near(trained[i].value(), want[i].value(), 1e-5f);
  }
  EXPECT_NEAR(history.history.at("loss")[0], expected.history.at("loss")[0], 1e-5);
  EXPECT_NEAR(history.history.at("accuracy")[0], expected.history.at("accuracy")[0], 1e-9);
}

// Stops a ps task once the chief has seen `at` batches.
struct StopPsAt : Callback {
  Tasks& tasks;
  int64_t at;
  StopPsAt(Tasks& t, int64_t a) : tasks(t), at(a) {}
  void on_train_batch_end(int64_t batch, const Logs&) override {
    if (batch + 1 == at) tasks.stop_ps(1);
  }
};

// Without backups (replicate_shards off), a ps that stays away fails the fit, naming it.
TEST(ParameterServerFitTest, WithoutBackupsAPsThatStaysAwayFailsTheFitNamingItsTask) {
  const cluster::ClusterSpec spec = cluster_of(1);
  Tasks tasks(spec, std::chrono::milliseconds(500), nullptr, /*replicate_shards=*/false);
  ParameterServerStrategy chief(task_of(spec, "chief", 0), quick(std::chrono::seconds(10), false));
  auto model = classifier(&chief, 1);
  const auto started = std::chrono::steady_clock::now();
  const std::string message = test::message_of<Unavailable>([&] {
    model->fit(points(100), {.epochs = 1, .callbacks = {std::make_shared<StopPsAt>(tasks, 3)}, .verbose = 0});
  });
  EXPECT_NE(message.find("fit: ps:1 (" + spec.jobs.at("ps")[1] + ") is unavailable"), std::string::npos) << message;
  // Within the workers' ps timeout (0.5 s), not the default 30 s.
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
}

// With backups (the default with 2 ps), a ps stopped mid-fit has its shards taken over by the other, and every step's
// push to every shard is applied exactly once: as a primary, or as a backup before the takeover.
TEST(ParameterServerFitTest, WithBackupsAPsStoppedMidFitIsTakenOverAndEveryStepIsAppliedOnce) {
  const cluster::ClusterSpec spec = cluster_of(2);
  Tasks tasks(spec);
  ParameterServerStrategy chief(task_of(spec, "chief", 0), quick());
  auto model = classifier(&chief, 1, optim::Adam(0.02));
  const History history = model->fit(
      points(100), {.epochs = 4, .steps_per_epoch = 10, .callbacks = {std::make_shared<StopPsAt>(tasks, 5)}, .verbose = 0});
  ASSERT_EQ(history.epochs.size(), 4u);
  const ParameterServer& survivor = tasks.server(0);
  EXPECT_EQ(survivor.pushes_applied() + survivor.pushes_replicated(), 40 * shards_of(*model, kDefaultPartitioner));
  EXPECT_GE(survivor.takeovers(), 1);
  EXPECT_GT(model->evaluate(points(100)).at("accuracy"), 0.8);
}

TEST(ParameterServerFitTest, WhatThePsCannotApplyIsAClearError) {
  EXPECT_NE(test::message_of<InvalidArgument>([] { optimizer_spec_of(optim::RMSprop()); }).find("not 'rmsprop'"),
            std::string::npos);
  EXPECT_NE(test::message_of<InvalidArgument>([] {
              optimizer_spec_of(optim::SGD(optim::SGDOptions{.learning_rate = 0.1, .clipnorm = 1.0f}));
            }).find("clip"),
            std::string::npos);
  EXPECT_NE(test::message_of<InvalidArgument>([] {
              optimizer_spec_of(optim::Adam(optim::LearningRate([](int64_t) { return 0.1f; })));
            }).find("schedule"),
            std::string::npos);
  const OptimizerSpec adam = optimizer_spec_of(optim::Adam(optim::AdamOptions{.learning_rate = 0.01, .beta_1 = 0.8f}));
  EXPECT_EQ(adam.name, "adam");
  EXPECT_NEAR(adam.learning_rate, 0.01, 1e-9);
  EXPECT_NEAR(adam.beta_1, 0.8, 1e-7);
  EXPECT_NEAR(optimizer_spec_of(optim::SGD(optim::SGDOptions{.momentum = 0.9f})).momentum, 0.9, 1e-7);
}

TEST(ParameterServerFitTest, AClusterWithoutChiefWorkerOrPsIsRefused) {
  cluster::ClusterSpec no_ps;
  no_ps.jobs["chief"] = {"127.0.0.1:1"};
  no_ps.jobs["worker"] = {"127.0.0.1:2"};
  EXPECT_NE(test::message_of<InvalidArgument>([&] { ParameterServerStrategy s(task_of(no_ps, "chief", 0)); })
                .find("at least one ps task"),
            std::string::npos);
  cluster::ClusterSpec no_chief;
  no_chief.jobs["worker"] = {"127.0.0.1:2"};
  no_chief.jobs["ps"] = {"127.0.0.1:3"};
  EXPECT_NE(test::message_of<InvalidArgument>([&] { ParameterServerStrategy s(task_of(no_chief, "worker", 0)); })
                .find("with a chief"),
            std::string::npos);
}

TEST(ParameterServerFitTest, TheChiefNeedsABuiltModelAndAStepCount) {
  const cluster::ClusterSpec spec = cluster_of(1);
  ParameterServerStrategy chief(task_of(spec, "chief", 0), quick());
  auto scope = chief.scope();
  Sequential unbuilt({nn::Dense(2)});
  unbuilt.compile("sparse_categorical_crossentropy", "sgd");
  EXPECT_NE(test::message_of<InvalidArgument>([&] { unbuilt.fit(points(1), {.verbose = 0}); }).find("build_for"),
            std::string::npos);
  unbuilt.build_for({1, 4});
  EXPECT_NE(test::message_of<InvalidArgument>([&] { unbuilt.fit(points(1).repeat(), {.verbose = 0}); })
                .find("give steps_per_epoch"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::ps
