// Sparse rows in parameter-server training (strata/ps/remote_trainer.h): a model whose first layer is an Embedding
// pulls and pushes only its batch's rows of the table, counted on the ps, and ends with the same ps values as dense
// pulls and pushes, with SGD and with Adam (whose slots decay on every row: the ps's sparse update is the dense one's),
// in synchronous rounds too.
// Everything in this process on 127.0.0.1: 2 ps servers, the trainers' steps run directly or through WorkerServers and
// a ClusterCoordinator.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "strata/data/ctr.h"
#include "strata/error.h"
#include "strata/nn/nn.h"
#include "strata/optim/losses.h"
#include "strata/optim/optimizers.h"
#include "strata/ps/cluster_coordinator.h"
#include "strata/random.h"
#include "strata/train/model.h"
#include "strata/ps/remote_trainer.h"
#include "test_util.h"
#include "strategies/ps_cluster.h"

namespace strata::ps {
namespace {

constexpr int64_t kVocab = 60, kFeatures = 3, kBatch = 8;
const FixedShardsPartitioner kThreeShards(3);  // the table: rows 0-19, 20-39, 40-59

// 48 examples of kFeatures ids: the first 24 only in [0, 20) (their batches leave two table shards untouched), the
// rest anywhere; the label says whether the ids' sum is even.
data::Dataset ids_of(int64_t worker) {
  constexpr int64_t kRows = 48;
  Generator g(77, static_cast<uint64_t>(worker));
  Tensor x = Tensor::empty({kRows, kFeatures}, DType::kInt64);
  Tensor y = Tensor::empty({kRows}, DType::kInt64);
  for (int64_t i = 0; i < kRows; ++i) {
    int64_t sum = 0;
    for (int64_t f = 0; f < kFeatures; ++f) {
      sum += x.data<int64_t>()[i * kFeatures + f] = static_cast<int64_t>(g.uniform_int(i < 24 ? 20 : kVocab));
    }
    y.data<int64_t>()[i] = sum % 2;
  }
  return data::Dataset::from_tensor_slices({x, y}).batch(kBatch);
}

std::shared_ptr<Sequential> ctr_model(uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Embedding(kVocab, 4), nn::Flatten(),
                                                                      nn::Dense(5, "relu"), nn::Dense(1, "sigmoid")});
  model->compile(losses::BinaryCrossentropy(), optim::SGD(), {"accuracy"});
  model->build_for({1, kFeatures}, DType::kInt64);
  return model;
}

// The unique ids of a batch.
std::vector<int64_t> unique_ids(const Tensor& x) {
  std::vector<int64_t> ids = x.to_vector<int64_t>();
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

TEST(RemoteTrainerSparseTest, AnEmbeddingThatReadsTheInputIsFound) {
  EXPECT_EQ(input_embedding_tables(*ctr_model(1)), std::vector<int64_t>{0});
  manual_seed(1);
  Sequential dense_first({nn::Dense(4), nn::Dense(1)});
  dense_first.build_for({1, 3});
  EXPECT_TRUE(input_embedding_tables(dense_first).empty());
  // An Embedding after another layer does not read the input's ids.
  Sequential later({nn::Dense(3), nn::Embedding(10, 2)});
  EXPECT_TRUE(input_embedding_tables(later).empty());
  // In a Sequential that is the first layer.
  auto inner = std::make_shared<Sequential>(std::vector<nn::LayerRef>{nn::Embedding(10, 2), nn::Flatten()});
  Sequential outer({inner, nn::Dense(1)});
  outer.build_for({1, 3}, DType::kInt64);
  EXPECT_EQ(input_embedding_tables(outer), std::vector<int64_t>{0});
  // A frozen table is not on the ps.
  auto frozen = ctr_model(2);
  frozen->layers().front()->set_trainable(false);
  EXPECT_TRUE(input_embedding_tables(*frozen).empty());
  // A functional model's wiring is not read: its variables move whole.
  auto in = nn::Input({3}, DType::kInt64);
  Model functional({in}, nn::Dense(1)(nn::Flatten()(nn::Embedding(10, 2)(in))));
  EXPECT_TRUE(input_embedding_tables(functional).empty());
}

// The ps values after `steps` steps of one worker, sparse or dense, from the same initial values.
std::vector<Tensor> train(bool sparse, const OptimizerSpec& optimizer, int steps, PsCluster& ps,
                          std::vector<int64_t>* pulled = nullptr, std::vector<int64_t>* pushed = nullptr) {
  auto chief = ctr_model(1);
  const std::vector<ShardedVariable> vars = create_model_variables(*chief, kThreeShards, ps.clients, optimizer);
  RemoteTrainer trainer(ctr_model(2), ids_of, 0, kThreeShards, ps.clients, {.sparse_embeddings = sparse});
  for (int i = 0; i < steps; ++i) {
    const int64_t before_pull = ps.rows_pulled(), before_push = ps.rows_pushed();
    trainer.run_step(i);
    if (pulled) pulled->push_back(ps.rows_pulled() - before_pull);
    if (pushed) pushed->push_back(ps.rows_pushed() - before_push);
  }
  return pull_all(vars);
}

void expect_same_values(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("variable " + std::to_string(i));
    EXPECT_EQ(a[i].to_vector<float>(), b[i].to_vector<float>());  // bit for bit: the same sums on the ps
  }
}

TEST(RemoteTrainerSparseTest, SparseStepsGiveTheDenseStepsPsValuesWithSgd) {
  PsCluster sparse_ps, dense_ps;
  const OptimizerSpec sgd{.name = "sgd", .learning_rate = 0.5, .momentum = 0.9};
  const std::vector<Tensor> sparse = train(true, sgd, 9, sparse_ps), dense = train(false, sgd, 9, dense_ps);
  expect_same_values(sparse, dense);
  // And training moved the table.
  EXPECT_NE(sparse[0].to_vector<float>(), ctr_model(1)->trainable_variables()[0].value().to_vector<float>());
}

TEST(RemoteTrainerSparseTest, SparseStepsGiveTheDenseStepsPsValuesWithAdamWhoseSlotsDecayOnEveryRow) {
  PsCluster sparse_ps, dense_ps;
  const OptimizerSpec adam{.name = "adam", .learning_rate = 0.05};
  // 9 steps: the first 3 batches leave table shards 1 and 2 untouched, so their slots decay with no row of theirs.
  const std::vector<Tensor> sparse = train(true, adam, 9, sparse_ps), dense = train(false, adam, 9, dense_ps);
  expect_same_values(sparse, dense);
}

TEST(RemoteTrainerSparseTest, AStepPullsAndPushesOnlyItsBatchsRowsOfTheTable) {
  PsCluster sparse_ps, dense_ps;
  std::vector<int64_t> pulled, pushed, dense_pulled, dense_pushed;
  const OptimizerSpec sgd{.name = "sgd", .learning_rate = 0.1};
  train(true, sgd, 6, sparse_ps, &pulled, &pushed);
  train(false, sgd, 6, dense_ps, &dense_pulled, &dense_pushed);
  // Rows of the other variables: Dense kernels [12, 5] and [5, 1], biases [5] and [1].
  const int64_t other_rows = 12 + 5 + 5 + 1;
  data::Iterator batches = ids_of(0).make_iterator();
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<int64_t> ids = unique_ids((*batches.next())[0]);
    ASSERT_LT(static_cast<int64_t>(ids.size()), kVocab);
    int64_t untouched = 0;
    for (int64_t shard = 0; shard < 3; ++shard) {
      untouched += std::none_of(ids.begin(), ids.end(), [&](int64_t id) { return id / 20 == shard; });
    }
    EXPECT_EQ(untouched, step < 3 ? 2 : 0);
    EXPECT_EQ(pulled[static_cast<size_t>(step)], static_cast<int64_t>(ids.size()) + other_rows);
    // One zero row for each table shard the batch leaves untouched, so that it takes its step.
    EXPECT_EQ(pushed[static_cast<size_t>(step)], static_cast<int64_t>(ids.size()) + untouched + other_rows);
    EXPECT_EQ(dense_pulled[static_cast<size_t>(step)], kVocab + other_rows);
    EXPECT_EQ(dense_pushed[static_cast<size_t>(step)], kVocab + other_rows);
  }
}

TEST(RemoteTrainerSparseTest, AnIdOutsideTheTableIsAnErrorNamingIt) {
  PsCluster ps;
  auto chief = ctr_model(1);
  create_model_variables(*chief, kThreeShards, ps.clients, {.name = "sgd"});
  const auto bad = [](int64_t) {
    Tensor x = Tensor::from_vector(std::vector<int64_t>{1, 2, kVocab + 5}, {1, kFeatures});
    return data::Dataset::from_tensor_slices({x, Tensor::from_vector(std::vector<int64_t>{1})}).batch(1);
  };
  RemoteTrainer trainer(ctr_model(2), bad, 0, kThreeShards, ps.clients);
  const std::string message = test::message_of<InvalidArgument>([&] { trainer.run_step(1); });
  EXPECT_NE(message.find("id 65"), std::string::npos) << message;
  EXPECT_NE(message.find("model/var_0"), std::string::npos) << message;
  EXPECT_EQ(ps.servers[0].pushes_applied() + ps.servers[1].pushes_applied(), 0);
}

TEST(RemoteTrainerSparseTest, TwoWorkersLearnTheCtrDataThroughTheCoordinator) {
  PsCluster ps;
  constexpr int64_t kCtrVocab = 200, kCtrFeatures = 4;
  const data::CtrOptions ctr{.features = kCtrFeatures, .vocab = kCtrVocab, .seed = 4};
  const auto ctr_data = [ctr](int64_t worker) {
    const data::CtrGenerator gen(ctr);
    constexpr int64_t kRows = 512;
    Tensor x = Tensor::empty({kRows, kCtrFeatures}, DType::kInt64), y = Tensor::empty({kRows}, DType::kInt64);
    for (int64_t i = 0; i < kRows; ++i) {
      y.data<int64_t>()[i] =
          gen.example(data::CtrSplit::kTrain, worker * kRows + i, x.data<int64_t>() + i * kCtrFeatures);
    }
    return data::Dataset::from_tensor_slices({x, y}).batch(32);
  };
  const auto model = [&](uint64_t seed) {
    manual_seed(seed);
    auto m = std::make_shared<Sequential>(
        std::vector<nn::LayerRef>{nn::Embedding(kCtrVocab, 8), nn::Flatten(), nn::Dense(1, "sigmoid")});
    m->compile(losses::BinaryCrossentropy(), optim::SGD(), {"accuracy"});
    m->build_for({1, kCtrFeatures}, DType::kInt64);
    return m;
  };
  auto chief = model(1);
  create_model_variables(*chief, FixedShardsPartitioner(2), ps.clients, {.name = "adagrad", .learning_rate = 0.2});
  std::vector<std::shared_ptr<RemoteTrainer>> trainers;
  WorkerServer workers[2];
  std::vector<std::string> addresses;
  for (int w = 0; w < 2; ++w) {
    trainers.push_back(
        std::make_shared<RemoteTrainer>(model(10 + w), ctr_data, w, FixedShardsPartitioner(2), ps.clients));
    trainers.back()->register_on(workers[w]);
    workers[w].start("127.0.0.1:0");
    addresses.push_back("127.0.0.1:" + std::to_string(workers[w].port()));
  }
  constexpr int kSteps = 96;  // 3 passes over each worker's 16 batches
  std::vector<RemoteValue> values;
  {
    ClusterCoordinator coordinator(addresses, {.first_step_id = 0});
    for (int i = 0; i < kSteps; ++i) values.push_back(coordinator.schedule(kTrainStep));
    coordinator.join();
  }
  std::vector<StepOutput> first, last;
  for (int i = 0; i < 16; ++i) first.push_back(StepOutput::parse(values[static_cast<size_t>(i)].fetch()));
  for (int i = kSteps - 16; i < kSteps; ++i) last.push_back(StepOutput::parse(values[static_cast<size_t>(i)].fetch()));
  chief->set_tracker_states(sum_metric_states(first));
  const Logs before = chief->metric_logs();
  chief->set_tracker_states(sum_metric_states(last));
  const Logs after = chief->metric_logs();
  std::cout << "first 16 steps: loss " << before.at("loss") << " accuracy " << before.at("accuracy")
            << "; last 16: loss " << after.at("loss") << " accuracy " << after.at("accuracy") << "\n";
  EXPECT_LT(after.at("loss"), 0.9 * before.at("loss"));
  EXPECT_GT(after.at("accuracy"), before.at("accuracy") + 0.05);
  // Every table push went in as rows: at most a batch's ids (32 x 4) and one row per table shard, beside the Dense
  // layer's 33 rows, where a dense step pushes all 200 rows of the table.
  EXPECT_LE(ps.servers[0].rows_pushed() + ps.servers[1].rows_pushed(), kSteps * (32 * kCtrFeatures + 2 + 33));
}

// The ps values after `rounds` synchronous rounds (max_staleness = 0) of two workers, sparse or dense: each round's
// steps run one after the other here, the second reading the values before the round as the first did.
// `shards`: how many shards the variables have.
std::vector<Tensor> train_in_rounds(bool sparse, const OptimizerSpec& optimizer, int rounds, PsCluster& ps,
                                    int64_t* shards) {
  auto chief = ctr_model(1);
  const std::vector<ShardedVariable> vars = create_model_variables(*chief, kThreeShards, ps.clients, optimizer);
  *shards = 0;
  for (const ShardedVariable& v : vars) *shards += v.num_shards();
  RemoteTrainer first(ctr_model(2), ids_of, 0, kThreeShards, ps.clients, {.sparse_embeddings = sparse});
  RemoteTrainer second(ctr_model(3), ids_of, 1, kThreeShards, ps.clients, {.sparse_embeddings = sparse});
  for (int64_t r = 0; r < rounds; ++r) {
    const SyncRound round{.id = 2 * r, .size = 2};
    first.run_step(StepContext{.step_id = 2 * r, .round = round});
    second.run_step(StepContext{.step_id = 2 * r + 1, .round = round});
  }
  return pull_all(vars);
}

TEST(RemoteTrainerSparseTest, SparseStepsInSynchronousRoundsGiveTheDenseStepsPsValues) {
  PsCluster sparse_ps, dense_ps;
  const OptimizerSpec adam{.name = "adam", .learning_rate = 0.05};
  // The first 3 rounds' batches leave table shards 1 and 2 untouched: their zero rows complete the rounds there.
  constexpr int kRounds = 5;
  int64_t shards = 0;
  const std::vector<Tensor> sparse = train_in_rounds(true, adam, kRounds, sparse_ps, &shards),
                            dense = train_in_rounds(false, adam, kRounds, dense_ps, &shards);
  expect_same_values(sparse, dense);
  for (const PsCluster* ps : {&sparse_ps, &dense_ps}) {  // every round complete, and applied, on every shard
    EXPECT_EQ(ps->servers[0].pushes_applied() + ps->servers[1].pushes_applied(), 2 * kRounds * shards);
  }
  EXPECT_NE(sparse[0].to_vector<float>(), ctr_model(1)->trainable_variables()[0].value().to_vector<float>());
}

}  // namespace
}  // namespace strata::ps
