// Parameter-server training of a Model, everything in this process on 127.0.0.1: 2 ps servers, WorkerServers serving
// RemoteTrainers, a ClusterCoordinator scheduling their steps. One worker with SGD ends with the weights of local
// training on the same batches; two asynchronous workers make the loss fall and the ps applies every step once; a step
// re-run after a lost worker is not applied twice. And the bytes a step returns are checked before they are believed.
// Synchronous rounds (max_staleness = 0): two workers end with the weights of one model trained on both workers'
// batches together, for Adam and for SGD with momentum; a worker lost mid-round leaves its round to the other, which
// completes it from the values before the round, and the ps applies every step once.
#include "strata/ps/remote_trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <mutex>
#include <numeric>
#include <thread>

#include "kernels/kernels.h"
#include "strata/error.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/ps/cluster_coordinator.h"
#include "strata/random.h"
#include "strata/train/model.h"
#include "test_util.h"
#include "strategies/ps_cluster.h"

namespace strata::ps {
namespace {

using std::chrono::milliseconds;

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

// ---- synchronous rounds (CoordinatorOptions::max_staleness = 0)

// The first `count` batches of worker `worker`'s input, as its RemoteTrainer takes them (restarting at the end).
std::vector<data::Element> batches_of(int64_t worker, int count) {
  data::Iterator it = points_of(worker).repeat().make_iterator();
  std::vector<data::Element> out;
  for (int i = 0; i < count; ++i) out.push_back(*it.next());
  return out;
}

// One batch of the rows of `a` and then of `b`.
data::Element concatenated(const data::Element& a, const data::Element& b) {
  return data::Element({kernels::concat({a[0], b[0]}, 0), kernels::concat({a[1], b[1]}, 0)});
}

// A model holding `chief`'s current weights, trained by hand: one `optimizer` update per batch of `batches` (the
// gradient of the batch's mean loss). Returns each step's loss.
std::vector<double> train_locally(const Model& chief, optim::Optimizer& optimizer,
                                  const std::vector<data::Element>& batches, std::shared_ptr<Sequential>* out) {
  auto local = classifier(99);
  const std::vector<Variable> initial = chief.trainable_variables(), vars = local->trainable_variables();
  for (size_t i = 0; i < vars.size(); ++i) Variable(vars[i]).assign(initial[i].value());
  std::vector<double> losses;
  for (const data::Element& batch : batches) {
    const Model::Gradients step = local->compute_gradients(batch);
    optimizer.apply_gradients(step.gradients, vars);
    losses.push_back(step.loss);
  }
  *out = local;
  return losses;
}

void expect_weights_near(Model& chief, const std::vector<ShardedVariable>& vars, const Model& local, float tolerance) {
  pull_model_variables(chief, vars);
  const std::vector<Variable> trained = chief.trainable_variables(), want = local.trainable_variables();
  for (size_t i = 0; i < trained.size(); ++i) {
    SCOPED_TRACE(trained[i].name());
    test::expect_near(trained[i].value(), want[i].value(), tolerance);
  }
}

TEST(RemoteTrainerTest, SynchronousRoundsEqualOneModelTrainedOnBothWorkersBatchesTogether) {
  struct Case {
    OptimizerSpec spec;
    std::function<std::unique_ptr<optim::Optimizer>()> local_optimizer;  // the same, for a local model
  };
  const std::vector<Case> cases = {
      {{.name = "adam", .learning_rate = 0.01},
       [] { return std::make_unique<optim::Adam>(optim::AdamOptions{.learning_rate = 0.01f}); }},
      {{.name = "sgd", .learning_rate = 0.2, .momentum = 0.9},
       [] { return std::make_unique<optim::SGD>(optim::SGDOptions{.learning_rate = 0.2f, .momentum = 0.9f}); }}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec.name);
    PsCluster ps;
    auto chief = classifier(1);
    const std::vector<ShardedVariable> vars = create_model_variables(*chief, kTwoShards, ps.clients, c.spec);
    std::vector<std::shared_ptr<RemoteTrainer>> trainers;
    WorkerServer workers[2];
    for (int w = 0; w < 2; ++w) {
      trainers.push_back(std::make_shared<RemoteTrainer>(classifier(10 + w), points_of, w, kTwoShards, ps.clients));
      trainers.back()->register_on(workers[w]);
      workers[w].start("127.0.0.1:0");
    }
    constexpr int kRounds = 10;  // past the end of each worker's 8 batches
    std::vector<RemoteValue> values;
    {
      CoordinatorOptions options = quick();
      options.max_staleness = 0;
      ClusterCoordinator coordinator({address_of(workers[0]), address_of(workers[1])}, options);
      for (int i = 0; i < 2 * kRounds; ++i) values.push_back(coordinator.schedule(kTrainStep));
      coordinator.join();
    }
    const std::vector<StepOutput> outputs = outputs_of(values);
    EXPECT_EQ(trainers[0]->steps_run(), kRounds);  // one step per round each
    EXPECT_EQ(trainers[1]->steps_run(), kRounds);
    EXPECT_EQ(ps.applied(), 2 * kRounds * shards_of(vars));
    EXPECT_EQ(ps.dropped(), 0);

    // One model, one update per round, on the round's two batches together (each worker's batch r in round r).
    const std::vector<data::Element> first = batches_of(0, kRounds), second = batches_of(1, kRounds);
    std::vector<data::Element> together;
    for (int r = 0; r < kRounds; ++r) together.push_back(concatenated(first[r], second[r]));
    std::shared_ptr<Sequential> local;
    const std::vector<double> losses = train_locally(*chief, *c.local_optimizer(), together, &local);
    expect_weights_near(*chief, vars, *local, 1e-5f);
    for (int r = 0; r < kRounds; ++r) {  // round r: closures 2r and 2r + 1 (rounds take closures in order)
      EXPECT_NEAR((outputs[2 * r].loss + outputs[2 * r + 1].loss) / 2, losses[r], 1e-5) << "round " << r;
    }
    // Asynchronous updates of the same steps would differ: the comparison can fail.
    std::shared_ptr<Sequential> one_by_one;
    std::vector<data::Element> interleaved;
    for (int r = 0; r < kRounds; ++r) interleaved.insert(interleaved.end(), {first[r], second[r]});
    auto reset = classifier(1);  // the chief's initial weights again
    train_locally(*reset, *c.local_optimizer(), interleaved, &one_by_one);
    const std::vector<float> async_kernel = one_by_one->trainable_variables()[0].value().to_vector<float>(),
                             sync_kernel = local->trainable_variables()[0].value().to_vector<float>();
    float largest_gap = 0;
    for (size_t i = 0; i < sync_kernel.size(); ++i) {
      largest_gap = std::max(largest_gap, std::abs(async_kernel[i] - sync_kernel[i]));
    }
    EXPECT_GT(largest_gap, 1e-3f);
  }
}

// How a worker is lost mid-round: its server stopped (the call cancelled), or hung past function_timeout (alive: it
// answers pings, but is not taken back while the function it was lost in still runs).
enum class Loss { kServerStopped, kHungPastTimeout };

void lose_a_worker_mid_round(Loss loss) {
  PsCluster ps;
  auto chief = classifier(1);
  const OptimizerSpec adam{.name = "adam", .learning_rate = 0.01};
  const std::vector<ShardedVariable> vars = create_model_variables(*chief, kTwoShards, ps.clients, adam);
  RemoteTrainer lost_trainer(classifier(2), points_of, 0, kTwoShards, ps.clients);
  auto healthy_trainer = std::make_shared<RemoteTrainer>(classifier(3), points_of, 1, kTwoShards, ps.clients);

  // The victim's first step hangs before it pulls, until released; meanwhile its server is stopped, which cancels the
  // call, or the call runs past function_timeout: the coordinator re-runs the step (its round kept) on the healthy
  // worker.
  std::mutex mu;
  std::condition_variable cv;
  bool hung = false, released = false;
  StepContext hung_step;
  WorkerServer victim;
  victim.register_function(kTrainStep, [&](const StepContext& step, const std::string&) {
    {
      std::unique_lock lock(mu);
      hung = true;
      hung_step = step;
      cv.notify_all();
      cv.wait_for(lock, std::chrono::seconds(30), [&] { return released; });
    }
    return lost_trainer.run_step(step).serialize();  // late: the ps drops it
  });
  victim.start("127.0.0.1:0");
  std::vector<StepContext> healthy_steps;  // only its dispatcher's calls write it, one at a time
  WorkerServer healthy;
  healthy.register_function(kTrainStep, [&](const StepContext& step, const std::string&) {
    healthy_steps.push_back(step);
    return healthy_trainer->run_step(step).serialize();
  });
  healthy.start("127.0.0.1:0");

  constexpr int kSteps = 8;
  std::vector<RemoteValue> values;
  std::vector<WorkerStatus> status;
  {
    CoordinatorOptions options = quick();
    options.max_staleness = 0;
    if (loss == Loss::kHungPastTimeout) options.function_timeout = milliseconds(1000);  // far beyond a step here
    ClusterCoordinator coordinator({address_of(victim), address_of(healthy)}, options);
    for (int i = 0; i < kSteps; ++i) values.push_back(coordinator.schedule(kTrainStep));
    {
      std::unique_lock lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return hung; })) << "the victim got no step";
    }
    std::thread stopper;
    if (loss == Loss::kServerStopped) stopper = std::thread([&] { victim.stop(milliseconds(100)); });
    coordinator.join();  // the healthy worker finishes the round alone, and every round after
    status = coordinator.worker_status();
    {
      std::lock_guard lock(mu);
      released = true;
    }
    cv.notify_all();
    if (stopper.joinable()) stopper.join();  // returns once the hung function returned
    victim.stop();                           // the same, when it hung past the timeout
  }
  for (const RemoteValue& v : values) EXPECT_NO_THROW(StepOutput::parse(v.fetch()));
  EXPECT_EQ(status[0].times_lost, 1);
  EXPECT_FALSE(status[0].up);
  EXPECT_EQ(ps.applied(), kSteps * shards_of(vars));  // every step once, the lost one included
  EXPECT_EQ(ps.dropped(), shards_of(vars));           // the victim's late pushes of its step, every one
  EXPECT_EQ(healthy_trainer->steps_run(), kSteps);

  // The healthy worker ran its own closure of round 0 and the victim's (same step id, same round of 2), then rounds
  // of 1 alone.
  ASSERT_EQ(healthy_steps.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(hung_step.round.size, 2);
  int64_t reruns = 0;
  for (size_t i = 0; i < healthy_steps.size(); ++i) {
    const StepContext& s = healthy_steps[i];
    if (s.step_id == hung_step.step_id) {
      ++reruns;
      EXPECT_EQ(s.round.id, hung_step.round.id);
      EXPECT_EQ(s.round.size, 2);
    }
    EXPECT_EQ(s.round.size, i < 2 ? 2 : 1) << "call " << i;
  }
  EXPECT_EQ(reruns, 1);
  // So the ps holds one model trained on the healthy worker's first two batches together (both read the values before
  // the round), then on each of its next batches alone.
  const std::vector<data::Element> batches = batches_of(1, kSteps);
  std::vector<data::Element> rounds = {concatenated(batches[0], batches[1])};
  rounds.insert(rounds.end(), batches.begin() + 2, batches.end());
  optim::Adam local_adam(optim::AdamOptions{.learning_rate = 0.01f});
  std::shared_ptr<Sequential> local;
  train_locally(*chief, local_adam, rounds, &local);
  expect_weights_near(*chief, vars, *local, 1e-5f);
  std::cout << "step " << hung_step.step_id << " of round " << hung_step.round.id
            << " was lost with its worker and completed on the other; the lost call: " << status[0].last_error << "\n";
}

TEST(RemoteTrainerTest, AWorkerLostMidRoundLeavesTheRoundToTheOtherAndEveryStepIsAppliedOnce) {
  {
    SCOPED_TRACE("server stopped");
    lose_a_worker_mid_round(Loss::kServerStopped);
  }
  SCOPED_TRACE("hung past function_timeout");
  lose_a_worker_mid_round(Loss::kHungPastTimeout);
}

}  // namespace
}  // namespace strata::ps
