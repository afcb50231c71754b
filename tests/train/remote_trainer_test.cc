// Parameter-server training of a Model, everything in this process on 127.0.0.1: 2 ps servers, WorkerServers serving
// RemoteTrainers, a ClusterCoordinator scheduling their steps. One worker with SGD ends with the weights of local
// training on the same batches; two asynchronous workers make the loss fall and the ps applies every step once; a step
// re-run after a lost worker is not applied twice. And the bytes a step returns are checked before they are believed.
#include "strata/train/remote_trainer.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <iostream>
#include <mutex>
#include <numeric>

#include "strata/error.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/ps/cluster_coordinator.h"
#include "strata/random.h"
#include "test_util.h"

namespace strata::ps {
namespace {

using std::chrono::milliseconds;

// Two ps servers and a client of each.
struct PsCluster {
  ParameterServer servers[2];
  std::vector<std::shared_ptr<ParameterServerClient>> clients;
  PsCluster() {
    for (ParameterServer& s : servers) {
      s.start("127.0.0.1:0");
      clients.push_back(std::make_shared<ParameterServerClient>("127.0.0.1:" + std::to_string(s.port())));
    }
  }
  int64_t applied() const { return servers[0].pushes_applied() + servers[1].pushes_applied(); }
  int64_t dropped() const { return servers[0].pushes_dropped() + servers[1].pushes_dropped(); }
};

// Worker `worker`'s input: 64 points of 4 features, labelled by the side of a plane they fall on (separable),
// in batches of 8; each worker draws its own points.
data::Dataset points_of(int64_t worker) {
  constexpr int64_t kRows = 64;
  const Tensor x = test::random_tensor({kRows, 4}, 100 + static_cast<uint64_t>(worker));
  Tensor y = Tensor::empty({kRows}, DType::kInt64);
  for (int64_t i = 0; i < kRows; ++i) {
    const float* row = x.data<float>() + i * 4;
    y.data<int64_t>()[i] = row[0] + row[1] - row[2] > 0 ? 1 : 0;
  }
  return data::Dataset::from_tensor_slices({x, y}).batch(8);
}

// The job's model; each copy starts from its own seed's weights (the workers' copies are overwritten from the ps).
std::shared_ptr<Sequential> classifier(uint64_t seed, float learning_rate = 0.1f) {
  manual_seed(seed);
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(8, "relu"), nn::Dense(2)});
  model->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 optim::SGD(optim::SGDOptions{.learning_rate = learning_rate}), {"accuracy"});
  model->build_for({1, 4});
  return model;
}

const FixedShardsPartitioner kTwoShards(2);

int64_t shards_of(const std::vector<ShardedVariable>& vars) {
  return std::accumulate(vars.begin(), vars.end(), int64_t{0},
                         [](int64_t n, const ShardedVariable& v) { return n + v.num_shards(); });
}

std::string address_of(const WorkerServer& w) { return "127.0.0.1:" + std::to_string(w.port()); }

CoordinatorOptions quick() {
  return {.probe_initial_backoff = milliseconds(20), .probe_max_backoff = milliseconds(200),
          .probe_timeout = milliseconds(200), .first_step_id = 0};
}

std::vector<StepOutput> outputs_of(const std::vector<RemoteValue>& values) {
  std::vector<StepOutput> out;
  for (const RemoteValue& v : values) out.push_back(StepOutput::parse(v.fetch()));
  return out;
}

TEST(RemoteTrainerTest, OneWorkerWithSgdEndsWhereLocalTrainingOnTheSameBatchesDoes) {
  PsCluster ps;
  auto chief = classifier(1);
  const std::vector<ShardedVariable> vars =
      create_model_variables(*chief, kTwoShards, ps.clients, {.name = "sgd", .learning_rate = 0.1});
  auto trainer = std::make_shared<RemoteTrainer>(classifier(2), points_of, 0, kTwoShards, ps.clients);
  WorkerServer worker;
  trainer->register_on(worker);
  worker.start("127.0.0.1:0");

  // 12 steps: the worker's 8 batches, then 4 of its next pass.
  constexpr int kSteps = 12;
  std::vector<RemoteValue> values;
  {
    ClusterCoordinator coordinator({address_of(worker)}, quick());
    for (int i = 0; i < kSteps; ++i) values.push_back(coordinator.schedule(kTrainStep));
    coordinator.join();
  }
  const std::vector<StepOutput> outputs = outputs_of(values);
  EXPECT_EQ(trainer->steps_run(), kSteps);
  EXPECT_EQ(ps.applied(), kSteps * shards_of(vars));
  EXPECT_EQ(ps.dropped(), 0);

  // The same steps locally, from the chief's initial weights (the chief's copy still holds them).
  auto local = classifier(3);
  const std::vector<Variable> initial = chief->trainable_variables(), local_vars = local->trainable_variables();
  for (size_t i = 0; i < local_vars.size(); ++i) Variable(local_vars[i]).assign(initial[i].value());
  FitOptions fit;
  fit.steps_per_epoch = kSteps;
  fit.verbose = 0;
  const History h = local->fit(points_of(0).repeat(), fit);

  pull_model_variables(*chief, vars);
  const std::vector<Variable> trained = chief->trainable_variables();
  for (size_t i = 0; i < trained.size(); ++i) {
    SCOPED_TRACE(trained[i].name());
    test::expect_near(trained[i].value(), local_vars[i].value(), 1e-5f);
  }
  // The steps' metric states, summed on the chief, are fit's epoch logs.
  chief->set_tracker_states(sum_metric_states(outputs));
  const Logs logs = chief->metric_logs();
  EXPECT_NEAR(logs.at("loss"), h.history.at("loss").back(), 1e-5);
  EXPECT_NEAR(logs.at("accuracy"), h.history.at("accuracy").back(), 1e-9);
}

TEST(RemoteTrainerTest, TwoAsynchronousWorkersLowerTheLossAndThePsAppliesEveryStepOnce) {
  PsCluster ps;
  auto chief = classifier(1);
  const std::vector<ShardedVariable> vars =
      create_model_variables(*chief, kTwoShards, ps.clients, {.name = "sgd", .learning_rate = 0.2, .momentum = 0.5});
  std::vector<std::shared_ptr<RemoteTrainer>> trainers;
  WorkerServer workers[2];
  for (int w = 0; w < 2; ++w) {
    trainers.push_back(std::make_shared<RemoteTrainer>(classifier(10 + w), points_of, w, kTwoShards, ps.clients));
    trainers.back()->register_on(workers[w]);
    workers[w].start("127.0.0.1:0");
  }
  constexpr int kSteps = 80;
  std::vector<RemoteValue> values;
  {
    ClusterCoordinator coordinator({address_of(workers[0]), address_of(workers[1])}, quick());
    for (int i = 0; i < kSteps; ++i) values.push_back(coordinator.schedule(kTrainStep));
    coordinator.join();
  }
  const std::vector<StepOutput> outputs = outputs_of(values);
  EXPECT_GT(trainers[0]->steps_run(), 0);
  EXPECT_GT(trainers[1]->steps_run(), 0);
  EXPECT_EQ(trainers[0]->steps_run() + trainers[1]->steps_run(), kSteps);
  EXPECT_EQ(ps.applied(), kSteps * shards_of(vars));  // every step, once
  EXPECT_EQ(ps.dropped(), 0);

  // The mean loss of the first and the last 16 steps.
  const auto mean_loss = [&](int from) {
    double sum = 0;
    for (int i = from; i < from + 16; ++i) sum += outputs[i].loss;
    return sum / 16;
  };
  const double first = mean_loss(0), last = mean_loss(kSteps - 16);
  std::cout << "mean loss of the first 16 steps " << first << ", of the last 16 " << last << "\n";
  EXPECT_LT(last, 0.6 * first);
  std::vector<StepOutput> tail(outputs.end() - 16, outputs.end());
  chief->set_tracker_states(sum_metric_states(tail));
  EXPECT_GT(chief->metric_logs().at("accuracy"), 0.85);
}

TEST(RemoteTrainerTest, AStepReRunAfterALostWorkerIsAppliedOnce) {
  PsCluster ps;
  auto chief = classifier(1);
  const std::vector<ShardedVariable> vars =
      create_model_variables(*chief, kTwoShards, ps.clients, {.name = "sgd", .learning_rate = 0.1});
  RemoteTrainer lost_trainer(classifier(2), points_of, 0, kTwoShards, ps.clients);
  auto healthy_trainer = std::make_shared<RemoteTrainer>(classifier(3), points_of, 1, kTwoShards, ps.clients);

  // The victim's first step pushes, then hangs until released: past function_timeout, the coordinator counts the
  // worker lost and runs the step (the same step id) on the healthy worker.
  std::mutex mu;
  std::condition_variable cv;
  bool hung = false, released = false;
  int64_t hung_step = -1;
  WorkerServer victim;
  victim.register_function(kTrainStep, [&](int64_t step_id, const std::string&) {
    const std::string out = lost_trainer.run_step(step_id).serialize();
    std::unique_lock lock(mu);
    if (!hung) {
      hung = true;
      hung_step = step_id;
      cv.notify_all();
      cv.wait_for(lock, std::chrono::seconds(30), [&] { return released; });
    }
    return out;
  });
  victim.start("127.0.0.1:0");
  WorkerServer healthy;
  healthy_trainer->register_on(healthy);
  healthy.start("127.0.0.1:0");

  constexpr int kSteps = 10;
  std::vector<RemoteValue> values;
  std::vector<WorkerStatus> status;
  {
    CoordinatorOptions options = quick();
    options.function_timeout = milliseconds(2000);  // far beyond a step here, even under load
    ClusterCoordinator coordinator({address_of(victim), address_of(healthy)}, options);
    for (int i = 0; i < kSteps; ++i) values.push_back(coordinator.schedule(kTrainStep));
    coordinator.join();
    status = coordinator.worker_status();
  }
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  victim.stop(milliseconds(100));

  ASSERT_TRUE(hung) << "the victim got no step";
  for (const RemoteValue& v : values) EXPECT_NO_THROW(StepOutput::parse(v.fetch()));
  EXPECT_GE(status[0].times_lost, 1);
  EXPECT_EQ(ps.applied(), kSteps * shards_of(vars));  // every step once, the hung one included
  EXPECT_EQ(ps.dropped(), shards_of(vars));           // its re-run's pushes, every one
  EXPECT_GE(healthy_trainer->steps_run(), 1);
  std::cout << "step " << hung_step << " ran on the lost worker and again on the healthy one; the lost call: "
            << status[0].last_error << "\n";
}

TEST(RemoteTrainerTest, StepOutputBytesAreCheckedBeforeTheyAreBelieved) {
  const StepOutput out{.loss = 0.25, .metric_states = {{1.5, 4}, {3, 4}}};
  const std::string bytes = out.serialize();
  const StepOutput back = StepOutput::parse(bytes);
  EXPECT_EQ(back.loss, 0.25);
  EXPECT_EQ(back.metric_states, out.metric_states);
  EXPECT_THROW(StepOutput::parse(bytes.substr(0, bytes.size() - 1)), DataCorrupt);  // cut inside a value
  std::string lying = bytes;
  lying[10] = '\x7f';  // the first tracker's length: far more bytes than the message has
  EXPECT_NE(test::message_of<DataCorrupt>([&] { StepOutput::parse(lying); }).find("not a step output"),
            std::string::npos);
  EXPECT_THROW(sum_metric_states({out, StepOutput{.metric_states = {{1}}}}), InvalidArgument);
}

TEST(RemoteTrainerTest, AModelThatIsNotTheChiefsIsAClearError) {
  PsCluster ps;
  const std::vector<ShardedVariable> vars = create_model_variables(*classifier(1), kTwoShards, ps.clients, {});
  manual_seed(4);
  auto other = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(5), nn::Dense(2)});
  other->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::SGD());
  other->build_for({1, 4});
  EXPECT_NE(test::message_of<InvalidArgument>([&] { pull_model_variables(*other, vars); }).find("variable 0"),
            std::string::npos);
  RemoteTrainer trainer(other, points_of, 0, kTwoShards, ps.clients);
  EXPECT_NE(test::message_of<DataCorrupt>([&] { trainer.run_step(1); }).find("model/var_0"), std::string::npos);
  EXPECT_EQ(ps.applied(), 0);
  auto unbuilt = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Dense(2)});
  unbuilt->compile(losses::SparseCategoricalCrossentropy({.from_logits = true}), optim::SGD());
  EXPECT_NE(test::message_of<InvalidArgument>([&] { RemoteTrainer(unbuilt, points_of, 0, kTwoShards, ps.clients); })
                .find("build_for"),
            std::string::npos);
}

}  // namespace
}  // namespace strata::ps
