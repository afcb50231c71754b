// Strategy mechanics: run/reduce/gather, replica contexts and merge_call, distributed datasets (uneven and
// empty replicas), variable components, loss helpers, failures that must not hang, and bad input.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/device_memory.h"
#include "strata/distribute/strategies.h"
#include "strata/gradient_tape.h"
#include "strata/ops.h"
#include "strata/threading.h"
#include "test_util.h"

namespace strata::distribute {
namespace {

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(StrategyTest, RunGivesEachReplicaItsIdThreadAndShareOfCores) {
  MirroredStrategy strategy(MirroredStrategy::cpu_devices(3), {.threads_per_replica = 1});
  std::mutex mu;
  std::set<std::thread::id> threads;
  const PerReplica<int> ids = strategy.run([&] {
    ReplicaContext* ctx = get_replica_context();
    EXPECT_NE(ctx, nullptr);
    EXPECT_EQ(ctx->num_replicas_in_sync(), 3);
    EXPECT_EQ(num_threads(), 1);
    EXPECT_EQ(&get_strategy(), &strategy);
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
    return ctx->replica_id_in_sync_group();
  });
  EXPECT_EQ(ids.values(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(threads.size(), 3u);
  EXPECT_EQ(get_replica_context(), nullptr);
  EXPECT_TRUE(in_cross_replica_context());
  EXPECT_EQ(&get_strategy(), &default_strategy());
}

TEST(StrategyTest, PerReplicaArgumentsAreUnpackedAndOthersShared) {
  auto strategy = MirroredStrategy::cpu_replicas(2);
  const PerReplica<Tensor> xs({Tensor::full({2}, 1.0), Tensor::full({2}, 3.0)});
  const float scale = 10.0f;
  const PerReplica<Tensor> out =
      strategy->run([](const Tensor& x, float s) { return affine(Variable(x), s).value(); }, xs, scale);
  EXPECT_EQ(values(out[0]), (std::vector<float>{10, 10}));
  EXPECT_EQ(values(out[1]), (std::vector<float>{30, 30}));
  // reduce: element-wise over replicas, or along an axis of the concatenation; gather concatenates.
  EXPECT_EQ(values(strategy->reduce(ReduceOp::kSum, out)), (std::vector<float>{40, 40}));
  EXPECT_EQ(values(strategy->reduce(ReduceOp::kMean, out)), (std::vector<float>{20, 20}));
  EXPECT_EQ(values(strategy->reduce(ReduceOp::kSum, out, 0)), (std::vector<float>{80}));
  EXPECT_EQ(values(strategy->reduce(ReduceOp::kMean, out, 0)), (std::vector<float>{20}));
  EXPECT_EQ(values(strategy->gather(out, 0)), (std::vector<float>{10, 10, 30, 30}));
  EXPECT_DOUBLE_EQ(strategy->reduce(ReduceOp::kMean, PerReplica<double>({1.0, 4.0})), 2.5);
}

TEST(StrategyTest, GatherTakesUnevenRowsAndAnyAxisThroughTheCommunicator) {
  auto strategy = MirroredStrategy::cpu_replicas(3);
  const PerReplica<Tensor> rows({Tensor::from_list({1, 2, 3, 4}, {2, 2}), Tensor::from_list({5, 6}, {1, 2}),
                                 Tensor::empty({0, 2})});
  EXPECT_EQ(strategy->gather(rows, 0).shape(), (Shape{3, 2}));
  EXPECT_EQ(values(strategy->gather(rows, 0)), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(values(strategy->reduce(ReduceOp::kSum, rows, 0)), (std::vector<float>{9, 12}));
  const PerReplica<Tensor> cols({Tensor::from_list({1, 2}, {2, 1}), Tensor::from_list({3, 4, 5, 6}, {2, 2}),
                                 Tensor::from_list({7, 8}, {2, 1})});
  EXPECT_EQ(values(strategy->gather(cols, 1)), (std::vector<float>{1, 3, 4, 7, 2, 5, 6, 8}));
  const PerReplica<Tensor> labels({Tensor::from_vector(std::vector<int64_t>{7}), Tensor::from_vector(std::vector<int64_t>{8, 9}),
                                   Tensor::from_vector(std::vector<int64_t>{-1})});
  EXPECT_EQ(strategy->gather(labels).to_vector<int64_t>(), (std::vector<int64_t>{7, 8, 9, -1}));
}

TEST(StrategyTest, CrossReplicaReduceRefusesReplicaContextAndWrongCountsWithoutBreakingTheStrategy) {
  auto strategy = MirroredStrategy::cpu_replicas(2);
  const std::string inside = test::message_of<InvalidArgument>([&] {
    strategy->run([&] { strategy->reduce(ReduceOp::kSum, PerReplica<double>({1.0, 2.0})); });
  });
  EXPECT_NE(inside.find("cross-replica context"), std::string::npos) << inside;
  strategy = MirroredStrategy::cpu_replicas(2);  // a failed run ends a strategy
  const std::string count = test::message_of<InvalidArgument>(
      [&] { strategy->reduce(ReduceOp::kSum, PerReplica<double>({1.0, 2.0, 3.0})); });
  EXPECT_NE(count.find("3 values for 2 replicas"), std::string::npos) << count;
  EXPECT_THROW(strategy->gather(PerReplica<Tensor>({Tensor::zeros({2, 2}), Tensor::zeros({2, 3})}), 0), ShapeError);
  EXPECT_THROW(strategy->reduce(ReduceOp::kSum, PerReplica<Tensor>({Tensor::zeros({2}, DType::kUInt8),
                                                                    Tensor::zeros({2}, DType::kUInt8)})),
               InvalidArgument);
  // Refused before any replica ran: the strategy still works.
  EXPECT_DOUBLE_EQ(strategy->reduce(ReduceOp::kSum, PerReplica<double>({1.5, 2.25})), 3.75);
}

TEST(StrategyTest, OneReplicaStrategiesRunOnTheCallingThread) {
  OneDeviceStrategy one("/cpu:0");
  const auto caller = std::this_thread::get_id();
  const auto ids = one.run([&] {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    return get_replica_context()->replica_id_in_sync_group();
  });
  EXPECT_EQ(ids.values(), std::vector<int>{0});
  EXPECT_EQ(default_strategy().run([] { return get_replica_context() != nullptr ? 1 : 0; })[0], 1);
}

TEST(StrategyTest, ReplicaContextAllReduceAndMergeCall) {
  auto strategy = MirroredStrategy::cpu_replicas(3);
  std::atomic<int> merges{0};
  const auto out = strategy->run([&] {
    ReplicaContext& ctx = *get_replica_context();
    const int r = ctx.replica_id_in_sync_group();
    const Tensor sum = ctx.all_reduce(ReduceOp::kSum, Tensor::full({2}, r + 1.0));
    const double mean = ctx.all_reduce(ReduceOp::kMean, static_cast<double>(r));
    ctx.merge_call([&](Strategy& s) {
      EXPECT_EQ(&s, strategy.get());
      ++merges;
    });
    return values(sum)[0] * 100 + static_cast<float>(mean);
  });
  for (float v : out) EXPECT_FLOAT_EQ(v, 601.0f);
  EXPECT_EQ(merges.load(), 1);
}

TEST(StrategyTest, SplitBatchGivesUnevenAndEmptyReplicas) {
  const Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4}, {5, 1});
  const Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4}, {5});
  const auto parts = split_batch(data::Element({x, y}), 3);
  ASSERT_EQ(parts.num_replicas(), 3);
  EXPECT_EQ(batch_rows(parts[0]), 2);
  EXPECT_EQ(batch_rows(parts[1]), 2);
  EXPECT_EQ(batch_rows(parts[2]), 1);
  EXPECT_EQ(values(parts[2][0]), std::vector<float>{4});
  const auto tiny = split_batch(data::Element({x.slice(0, 1), y.slice(0, 1)}), 3);
  EXPECT_EQ(batch_rows(tiny[0]), 1);
  EXPECT_EQ(batch_rows(tiny[1]), 0);
  EXPECT_EQ(tiny[2][0].shape(), (Shape{0, 1}));
  const std::string msg =
      test::message_of<ShapeError>([&] { split_batch(data::Element({x, y.slice(0, 4)}), 2); });
  EXPECT_NE(msg.find("component 1"), std::string::npos) << msg;
}

TEST(StrategyTest, DistributedDatasetsSplitGlobalBatchesOrTakeOnePerReplica) {
  auto strategy = MirroredStrategy::cpu_replicas(2);
  const auto global = data::Dataset::range(7).batch(4);  // 4 rows, then 3
  auto it = strategy->experimental_distribute_dataset(global).make_iterator();
  auto first = it.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(it.last_global_batch_size(), 4);
  EXPECT_EQ((*first)[1][0].to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
  auto second = it.next();
  EXPECT_EQ((*second)[0][0].to_vector<int64_t>(), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ((*second)[1][0].to_vector<int64_t>(), (std::vector<int64_t>{6}));
  EXPECT_FALSE(it.next().has_value());

  int calls = 0;
  auto from_fn = strategy->distribute_datasets_from_function([&](const InputContext& ctx) {
    ++calls;
    EXPECT_EQ(ctx.num_replicas_in_sync, 2);
    return data::Dataset::range(5).batch(ctx.get_per_replica_batch_size(4));
  });
  EXPECT_EQ(calls, 1);
  auto it2 = from_fn.make_iterator();
  auto a = it2.next(), b = it2.next();
  EXPECT_EQ((*a)[1][0].to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*b)[0][0].to_vector<int64_t>(), (std::vector<int64_t>{4}));
  EXPECT_EQ((*b)[1][0].numel(), 0);  // the data ran out: an empty batch for replica 1
  EXPECT_FALSE(it2.next().has_value());
  const std::string msg = test::message_of<InvalidArgument>(
      [] { InputContext{.num_replicas_in_sync = 3}.get_per_replica_batch_size(64); });
  EXPECT_NE(msg.find("not divisible"), std::string::npos) << msg;
}

TEST(StrategyTest, MirroredVariablesHaveAComponentPerReplica) {
  auto strategy = MirroredStrategy::cpu_replicas(2);
  Variable v;
  {
    auto scope = strategy->scope();
    EXPECT_EQ(&get_strategy(), strategy.get());
    v = make_variable(Tensor::full({3}, 1.0), {.name = "w"});
  }
  EXPECT_EQ(v.num_components(), 2);
  EXPECT_EQ(v.owner(), strategy->id());
  EXPECT_NE(v.component(0).data<float>(), v.component(1).data<float>());
  // Inside a replica, assign writes the replica's own copy; outside, every copy.
  strategy->run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    v.assign(Tensor::full({3}, 10.0 + r));
  });
  EXPECT_EQ(values(v.component(0))[0], 10.0f);
  EXPECT_EQ(values(v.component(1))[0], 11.0f);
  const auto seen = strategy->run([&] { return values(v.value())[0]; });
  EXPECT_EQ(seen.values(), (std::vector<float>{10.0f, 11.0f}));
  v.assign(Tensor::full({3}, 5.0));
  EXPECT_EQ(values(v.component(1))[0], 5.0f);
}

TEST(StrategyTest, CentralStorageKeepsOneCopy) {
  CentralStorageStrategy strategy(MirroredStrategy::cpu_devices(2));
  auto scope = strategy.scope();
  Variable v = make_variable(Tensor::full({2}, 1.0), {.name = "w"});
  EXPECT_EQ(v.num_components(), 1);
  EXPECT_EQ(v.owner(), strategy.id());
}

TEST(StrategyTest, ComputeAverageLossDividesByTheGlobalBatch) {
  const Variable per_example(Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4}));
  EXPECT_FLOAT_EQ(compute_average_loss(per_example, 8).value().item<float>(), 10.0f / 8);
  EXPECT_FLOAT_EQ(compute_average_loss(per_example).value().item<float>(), 10.0f / 4);
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 0, 1, 0}, {4});
  EXPECT_FLOAT_EQ(compute_average_loss(per_example, 4, w).value().item<float>(), 4.0f / 4);
  auto strategy = MirroredStrategy::cpu_replicas(2);
  const auto losses = strategy->run([&] {
    return std::make_pair(compute_average_loss(per_example).value().item<float>(),
                          scale_regularization_loss(Variable(Tensor::scalar(6.0f))).value().item<float>());
  });
  EXPECT_FLOAT_EQ(losses[0].first, 10.0f / 8);  // 4 rows per replica x 2 replicas
  EXPECT_FLOAT_EQ(losses[1].second, 3.0f);
}

// An applier that only records calls (one shared by the replicas, as an optimizer is), to drive the
// aggregator without an optimizer.
struct CountingApplier final : GradientApplier {
  bool prepared(const std::vector<Variable>&) const override { return true; }
  void prepare(const std::vector<Variable>&) override {}
  void update(const std::vector<Tensor>& grads, const std::vector<Variable>&) override {
    seen = grads;
    ++updates;
  }
  bool elementwise() const override { return true; }
  void update_summed(const Variable& var, const std::vector<const float*>& parts) override {
    std::vector<float> total(static_cast<size_t>(var.component(0).numel()), 0.0f);
    for (const float* p : parts) {
      for (size_t e = 0; p != nullptr && e < total.size(); ++e) total[e] += p[e];
    }
    std::lock_guard<std::mutex> lock(mutex);  // buckets may be summed on different replicas at once
    summed[var.name()].push_back(total);
  }
  void finish() override { ++finishes; }
  std::vector<Tensor> seen;
  int updates = 0, finishes = 0;
  std::mutex mutex;
  std::map<std::string, std::vector<std::vector<float>>> summed;
};

TEST(StrategyTest, GradientsAreSummedAcrossReplicasThroughTheTapeAndUpdatedOnce) {
  auto strategy = MirroredStrategy::cpu_replicas(2, {.cross_device_ops = {.bucket_bytes = 8}});  // a bucket per variable
  Variable a, b;
  {
    auto scope = strategy->scope();
    a = make_variable(Tensor::full({2}, 1.0), {.name = "a"});
    b = make_variable(Tensor::full({3}, 1.0), {.name = "b"});
  }
  CountingApplier applier;
  strategy->run([&] {
    const float r = static_cast<float>(get_replica_context()->replica_id_in_sync_group() + 1);
    GradientTape tape;
    Variable loss = sum(affine(a, r)) + sum(affine(b, 2 * r));
    const auto grads = tape.gradient(loss, {a, b});
    EXPECT_EQ(values(grads[0])[0], r);  // the tape returns this replica's own gradients
    current_gradient_aggregator()->apply_gradients(grads, {a, b}, applier);
  });
  EXPECT_EQ(applier.updates, 1);  // one update writes every replica's copy
  EXPECT_EQ(applier.finishes, 1);
  EXPECT_TRUE(applier.summed.empty());  // apply_gradients was not announced: nothing ran during backward
  EXPECT_EQ(values(applier.seen[0]), (std::vector<float>{3, 3}));     // 1 + 2
  EXPECT_EQ(values(applier.seen[1]), (std::vector<float>{6, 6, 6}));  // 2 + 4
}

TEST(StrategyTest, AnnouncedGradientsUpdateEachVariableOnceAsItsBucketIsSummed) {
  auto strategy = MirroredStrategy::cpu_replicas(3, {.cross_device_ops = {.bucket_bytes = 8}});
  Variable a, b, unused;
  {
    auto scope = strategy->scope();
    a = make_variable(Tensor::full({2}, 1.0), {.name = "a"});
    b = make_variable(Tensor::full({3}, 1.0), {.name = "b"});
    unused = make_variable(Tensor::full({1}, 1.0), {.name = "unused"});
  }
  CountingApplier applier;
  for (int step = 0; step < 2; ++step) {
    strategy->run([&] {
      const int id = get_replica_context()->replica_id_in_sync_group();
      const float r = static_cast<float>(id + 1);
      current_gradient_aggregator()->expect_apply(applier, {a, b, unused});
      GradientTape tape;
      // Replica 2 gives `a` no gradient: it counts as zeros in the sum.
      Variable loss = id == 2 ? sum(affine(b, 2 * r)) : sum(affine(a, r)) + sum(affine(b, 2 * r));
      const auto grads = tape.gradient(loss, {a, b, unused});
      EXPECT_EQ(applier.updates, 0);
      current_gradient_aggregator()->apply_gradients(grads, {a, b, unused}, applier);
    });
  }
  EXPECT_EQ(applier.updates, 0);  // every variable was updated as its bucket was summed
  EXPECT_EQ(applier.finishes, 2);
  using Steps = std::vector<std::vector<float>>;
  EXPECT_EQ(applier.summed["a"], Steps(2, {3, 3}));         // 1 + 2 + nothing
  EXPECT_EQ(applier.summed["b"], Steps(2, {12, 12, 12}));  // 2 + 4 + 6
  EXPECT_EQ(applier.summed.count("unused"), 0u);  // no replica has a gradient: not updated (as in Keras)
}

TEST(StrategyTest, AFailingReplicaStopsTheOthersAndRunRethrowsItsError) {
  auto strategy = MirroredStrategy::cpu_replicas(2);
  Variable a;
  {
    auto scope = strategy->scope();
    a = make_variable(Tensor::full({2}, 1.0), {.name = "a"});
  }
  const std::string msg = test::message_of<InvalidArgument>([&] {
    strategy->run([&] {
      if (get_replica_context()->replica_id_in_sync_group() == 1) STRATA_THROW(InvalidArgument, "replica one broke");
      GradientTape tape;
      const auto grads = tape.gradient(sum(a), {a});  // replica 0 starts an all-reduce replica 1 never joins
      CountingApplier applier;
      current_gradient_aggregator()->apply_gradients(grads, {a}, applier);
    });
  });
  EXPECT_NE(msg.find("replica one broke"), std::string::npos) << msg;
  const std::string again = test::message_of<Error>([&] { strategy->run([] {}); });
  EXPECT_NE(again.find("make a new strategy"), std::string::npos) << again;
}

TEST(StrategyTest, BadUseIsAClearError) {
  if (strata::detail::cuda_device_count() == 0) {
    EXPECT_THROW(MirroredStrategy({"/gpu:0"}), Unavailable);
    EXPECT_THROW(OneDeviceStrategy("/gpu:0"), Unavailable);
  }
  EXPECT_THROW(MirroredStrategy({"/cpu:0", "/cpu:0"}), InvalidArgument);
  EXPECT_THROW(MirroredStrategy({"/tpu:0"}), InvalidArgument);
  EXPECT_THROW(MirroredStrategy({"/cpu:0", "/cpu:1"}, {.cross_device_ops = CrossDeviceOps::from_name("nccl")}),
               InvalidArgument);  // (gpu_devices_test.cc: the messages)
  EXPECT_THROW(CrossDeviceOps::from_name("butterfly"), InvalidArgument);
  const std::string unknown = test::message_of<InvalidArgument>([] { make_strategy("parameter_server", 2); });
  EXPECT_NE(unknown.find("one_device, mirrored, central_storage"), std::string::npos) << unknown;
  EXPECT_EQ(make_strategy("mirrored", 3)->num_replicas_in_sync(), 3);

  auto a = MirroredStrategy::cpu_replicas(2);
  auto b = MirroredStrategy::cpu_replicas(2);
  auto scope = a->scope();
  EXPECT_THROW(b->scope(), InvalidArgument);
  const std::string nested = test::message_of<InvalidArgument>([&] { a->run([&] { a->run([] {}); }); });
  EXPECT_NE(nested.find("inside a replica"), std::string::npos) << nested;
}

}  // namespace
}  // namespace strata::distribute

namespace strata::distribute {
namespace {
// TensorFlow's MirroredStrategy() takes every device; strata's, every core this thread may use, as the CLI does.
TEST(MirroredDefaultTest, NoDevicesMeansOneReplicaPerCore) {
  for (int cores : {1, 3}) {
    ScopedNumThreads threads(cores);
    EXPECT_EQ(MirroredStrategy::default_cpu_replicas(), cores);
    EXPECT_EQ(MirroredStrategy().num_replicas_in_sync(), cores);
  }
  EXPECT_EQ(MirroredStrategy({"/cpu:0"}).num_replicas_in_sync(), 1) << "a device list is kept as given";
}
}  // namespace
}  // namespace strata::distribute
